"""Interlocking training run as a pipeline: one component per device, one thread each.

``ComponentOps`` jits each component's ops once (``forward`` returning the VJP as a
pytree, ``head``, the three pull-backs ``input`` / ``params`` / ``full``, and ``update``, one
optax state per component and its head); ``run_pipeline`` places component ``k`` on device
``k`` and starts one thread per device that plays ``lab.parallel.interlocking.plan``'s ops
batch after batch, passing activations forward and cotangent messages back through
``queue.Queue``s. Component ``k`` starts the next batch as soon as its own update is done,
so a device never waits for more than the rule says. Every op is timed on its own thread
(dispatch to ``block_until_ready``), which gives the measured timeline that
``lab.parallel.interlocking.simulate`` replays as a check of the schedule model.

The run trains the network exactly as ``lab.train.interlocking.make_step`` does batch after
batch (the same gradients at the same parameters): a test compares the parameters.
``op_times`` times each op on its own (median of repeats) for the schedule model.

On simulated CPU devices the threads share this machine's cores: the timeline shows the
schedule's waits, not a speed-up.
"""

import dataclasses
import functools
import queue
import threading
import time
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import numpy as np
import optax

from lab import compile_watch
from lab.models.interlocking import Stack
from lab.models.interlocking_rule import Loss, combine, head_gradients
from lab.parallel.interlocking import Event, Timeline, Times, plan


class Stopped(Exception):
    """Another thread failed; this one stops."""


def _vjp_forward(component, h):
    return eqx.filter_vjp(lambda f, v: jax.vmap(f)(v), component, h)


@dataclasses.dataclass
class ComponentOps:
    """Component ``k``'s jitted ops; ``last`` marks the component that reads the true
    loss."""

    loss: Loss
    head_loss: Loss
    optimizer: optax.GradientTransformation

    def __post_init__(self):
        loss, head_loss, optimizer = self.loss, self.head_loss, self.optimizer
        self.forward = eqx.filter_jit(_vjp_forward)

        self.head = eqx.filter_jit(functools.partial(head_gradients, head_loss))
        self.true_loss = eqx.filter_jit(jax.value_and_grad(loss))
        self.input = eqx.filter_jit(lambda vjp, c: vjp(c)[1])
        self.params = eqx.filter_jit(lambda vjp, c: vjp(c)[0])
        self.full = eqx.filter_jit(lambda vjp, c: vjp(c))

        @eqx.filter_jit
        def update(pair, state, grads):
            params = eqx.filter(pair, eqx.is_inexact_array)
            updates, state = optimizer.update(grads, state, params)
            return eqx.apply_updates(pair, updates), state

        self.update = update


def _zeros_like(tree):
    """Zero gradients for ``tree``'s parameters (``eqx.filter``'s structure)."""
    return jax.tree.map(np.zeros_like, eqx.filter(tree, eqx.is_inexact_array))


def run_pipeline(stack: Stack, n: int, batches: Sequence[tuple[np.ndarray, np.ndarray]],
                 loss: Loss, head_loss: Loss | None, optimizer: optax.GradientTransformation,
                 devices: Sequence | None = None, timeout: float = 600.0,
                 ops: ComponentOps | None = None, mode: str = "only"
                 ) -> tuple[Stack, Timeline]:
    """Train ``stack`` with rule ``n`` in ``mode`` on ``batches``, component ``k`` on
    ``devices[k]``
    (the first ``K`` devices by default), one thread per device. Returns the trained stack
    and the measured timeline (seconds from the start). A thread's exception is raised here
    after every thread has stopped. Pass ``ops`` to reuse compiled ops across runs."""
    head_loss = loss if head_loss is None else head_loss
    count = len(stack.components)
    devices = list(jax.devices()[:count] if devices is None else devices)
    if len(devices) < count:
        raise ValueError(f"{count} components need {count} devices, got {len(devices)}")
    ops = ComponentOps(loss, head_loss, optimizer) if ops is None else ops
    schedule = plan(count, n, mode)
    heads = list(stack.heads) + [None]
    pairs = [jax.device_put((c, h), d)
             for c, h, d in zip(stack.components, heads, devices[:count], strict=True)]
    states = [jax.device_put(optimizer.init(eqx.filter(p, eqx.is_inexact_array)), d)
              for p, d in zip(pairs, devices, strict=False)]
    forward_q = [queue.Queue() for _ in range(count + 1)]  # forward_q[k]: into component k
    back_q = [queue.Queue() for _ in range(count + 1)]  # back_q[k]: cotangents into k
    stop = threading.Event()
    events: list[Event] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start_time = time.perf_counter()
    deadline = start_time + timeout

    def get(q):
        while True:
            try:
                return q.get(timeout=0.05)
            except queue.Empty:
                if stop.is_set():
                    raise Stopped from None
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"the pipeline did not finish within {timeout:.0f} s"
                                       ) from None

    def timed(b, op, fn, *args):
        begin = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        end = time.perf_counter()
        with lock:
            events.append(Event(b, op, begin - start_time, end - start_time))
        return out

    def worker(k):
        try:
            device, pair, state = devices[k], pairs[k], states[k]
            for b, (x, y) in enumerate(batches):
                y = jax.device_put(y, device)
                h_in = jax.device_put(x if k == 0 else get(forward_q[k]), device)
                component, head = pair
                cotangent, head_grads = {}, None
                parts = []  # the parameters' gradient of each loss that trains k, in order
                for op in schedule[k]:
                    if op.kind == "forward":
                        h, vjp = timed(b, op, ops.forward, component, h_in)
                        if k + 1 < count:
                            forward_q[k + 1].put(h)
                    elif op.kind == "head" and k == count - 1:
                        _, cotangent[k] = timed(b, op, ops.true_loss, h, y)
                    elif op.kind == "head":
                        _, head_grads, cotangent[k] = timed(b, op, ops.head, head, h, y)
                    elif op.kind == "update":
                        grads = combine(parts, mode) if parts else _zeros_like(component)
                        if head is not None and head_grads is None:
                            head_grads = _zeros_like(head)
                        pair, state = timed(b, op, ops.update, pair, state, (grads, head_grads))
                    else:
                        if op.loss not in cotangent:
                            loss_index, message = get(back_q[k])
                            assert loss_index == op.loss, (loss_index, op.loss)
                            cotangent[op.loss] = jax.device_put(message, device)
                        out = timed(b, op, getattr(ops, op.kind), vjp, cotangent[op.loss])
                        if op.kind == "params":
                            parts.append(out)
                        elif op.kind == "input":
                            back_q[k - 1].put((op.loss, out))
                        else:
                            parts.append(out[0])
                            back_q[k - 1].put((op.loss, out[1]))
            pairs[k] = pair
        except Stopped:
            pass
        except BaseException as error:  # noqa: BLE001 (handed to the caller)
            with lock:
                errors.append(error)
            stop.set()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(count)]
    try:
        for t in threads:
            t.start()
    finally:
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    trained = Stack([p[0] for p in pairs], [p[1] for p in pairs[:-1]])
    events.sort(key=lambda e: e.start)
    return jax.device_get(trained), Timeline(events, count, len(batches))


def op_times(stack: Stack, x: np.ndarray, y: np.ndarray, loss: Loss, head_loss: Loss | None,
             optimizer: optax.GradientTransformation, repeats: int = 5,
             clock: Callable[[], float] = time.perf_counter,
             seen: compile_watch.Compiled | None = None) -> Times:
    """Each op of each component timed on its own on the default device (median of
    ``repeats`` after one warm-up call), for ``lab.parallel.interlocking.simulate``. What
    JAX traced or compiled during the timed calls is added to ``seen``
    (``lab.compile_watch``)."""
    head_loss = loss if head_loss is None else head_loss
    ops = ComponentOps(loss, head_loss, optimizer)
    count = len(stack.components)
    table = {kind: [0.0] * count for kind in ("forward", "head", "input", "params", "full",
                                               "update")}

    def median(fn, *args):
        jax.block_until_ready(fn(*args))
        samples = []
        with compile_watch.watch("an interlocking op's timing") as watched:
            for _ in range(repeats):
                begin = clock()
                jax.block_until_ready(fn(*args))
                samples.append(clock() - begin)
        if seen is not None:
            seen.add(watched)
        return float(np.median(samples))

    h = x
    for k, component in enumerate(stack.components):
        h_in = h
        table["forward"][k] = median(ops.forward, component, h_in)
        h, vjp = ops.forward(component, h_in)
        if k == count - 1:
            table["head"][k] = median(ops.true_loss, h, y)
            _, c = ops.true_loss(h, y)
            head = None
        else:
            head = stack.heads[k]
            table["head"][k] = median(ops.head, head, h, y)
            c = ops.head(head, h, y)[2]
        if k > 0:  # the first component's input is the data: no one pulls back into it
            table["input"][k] = median(ops.input, vjp, c)
            table["full"][k] = median(ops.full, vjp, c)
        else:
            table["full"][k] = median(ops.params, vjp, c)
        table["params"][k] = median(ops.params, vjp, c)
        pair = (component, head)
        state = optimizer.init(eqx.filter(pair, eqx.is_inexact_array))
        grads = (ops.params(vjp, c), None if head is None else _zeros_like(head))
        table["update"][k] = median(ops.update, pair, state, grads)
    return Times(**table)

