"""Timed regions that know whether JAX traced or compiled inside them.

A time that includes a trace or an XLA compile measures the compiler, not the method: every
timing claim (``lab.runs.verdict.Declaration.timing``) times calls that were compiled and run
once before. ``watch()`` checks that this held: while it is open it counts JAX's own
monitoring events (``jax.monitoring``), from every thread, as ``Compiled``: traces, lowerings
to MLIR and XLA compiles. A lowering without a compile is a program loaded from the
persistent compilation cache, which is also a first call. The experiments' timing code
(notebooks 11, 12 and 13, GA3C's runs in 06) opens one around its timed calls and records
what it saw beside the seconds (``compiled_while_timed``); a region that compiled says so in
one warning line.

    with compile_watch.watch() as seen:
        begin = time.perf_counter(); jax.block_until_ready(f(x)); seconds = ...
    seen.as_dict()  # {"traces": 0, "lowerings": 0, "compiles": 0, "seconds": 0.0}
"""

import dataclasses
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import jax

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "traces",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowerings",
          "/jax/core/compile/backend_compile_duration": "compiles"}


@dataclasses.dataclass(eq=False)  # watches are told apart by identity
class Compiled:
    """What JAX did while a ``watch`` was open: counts, and the seconds they took."""

    traces: int = 0
    lowerings: int = 0
    compiles: int = 0
    seconds: float = 0.0  # tracing, lowering and compiling together

    def __bool__(self) -> bool:
        return bool(self.traces or self.lowerings or self.compiles)

    def add(self, other: "Compiled") -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self) | {"seconds": round(self.seconds, 4)}


_lock = threading.Lock()
_open: list[Compiled] = []
_registered = False


def _on_duration(event: str, duration: float, **_) -> None:
    name = EVENTS.get(event)
    if name is None or not _open:
        return
    with _lock:
        for seen in _open:
            setattr(seen, name, getattr(seen, name) + 1)
            seen.seconds += duration


def _register() -> None:
    global _registered
    with _lock:
        if not _registered:
            jax.monitoring.register_event_duration_secs_listener(_on_duration)
            _registered = True


@contextmanager
def watch(what: str = "", warn: bool = True) -> Iterator[Compiled]:
    """Count JAX's traces, lowerings and compiles, in any thread, until the block ends;
    with ``warn``, one warning naming ``what`` when there were any."""
    _register()
    seen = Compiled()
    with _lock:
        _open.append(seen)
    try:
        yield seen
    finally:
        with _lock:
            _open.remove(seen)
        if warn and seen:
            warnings.warn(f"{what or 'a timed region'} traced or compiled while timed "
                          f"({seen.traces} traces, {seen.compiles} compiles, "
                          f"{seen.seconds:.2f} s): its time includes them; call it once "
                          "before timing it", stacklevel=3)


def total(records) -> dict[str, float] | None:
    """The sum of ``Compiled.as_dict()`` records (e.g. one per timed row of a notebook); None
    when there are none or one is None (a row measured before its timing was watched)."""
    records = list(records)
    if not records or any(r is None for r in records):
        return None
    out = Compiled()
    for r in records:
        out.add(Compiled(**r))
    return out.as_dict()
