"""``lab.compile_watch``: a timed region knows whether JAX traced or compiled inside it."""

import threading
import warnings

import jax
import jax.numpy as jnp
import pytest

from lab import compile_watch


def test_a_first_call_is_seen_and_a_second_is_not():
    f = jax.jit(lambda x: jnp.sin(x) * 3.0 + 1.0)
    x = jnp.arange(7.0)
    with pytest.warns(UserWarning, match="the first call traced or compiled while timed"):
        with compile_watch.watch("the first call") as first:
            f(x).block_until_ready()
    # a compile, or a load from a persistent cache the user kept: a lowering either way
    assert first.traces >= 1 and first.lowerings == 1 and first.compiles <= 1
    assert first.seconds > 0 and first
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with compile_watch.watch("the second call") as second:
            f(x).block_until_ready()
    assert not second and second.as_dict() == {"traces": 0, "lowerings": 0, "compiles": 0,
                                               "seconds": 0.0}


def test_other_threads_and_nested_watches_count():
    f, x = jax.jit(lambda x: jnp.cos(x) - 2.0), jnp.ones(5)
    with compile_watch.watch(warn=False) as outer:
        with compile_watch.watch(warn=False) as inner:
            worker = threading.Thread(target=lambda: f(x).block_until_ready())
            worker.start()
            worker.join()
    assert inner.lowerings == outer.lowerings == 1 and inner.as_dict() == outer.as_dict()


def test_total_sums_records_and_is_none_for_an_unwatched_one():
    one = {"traces": 1, "lowerings": 1, "compiles": 1, "seconds": 0.25}
    none = compile_watch.Compiled().as_dict()
    assert compile_watch.total([one, none, one]) == {"traces": 2, "lowerings": 2,
                                                     "compiles": 2, "seconds": 0.5}
    assert compile_watch.total([one, None]) is None
    assert compile_watch.total([]) is None
