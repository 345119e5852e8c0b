"""A discrete-event model of depthwise model parallelism under global, local and n-wise
interlocking training (``lab.train.interlocking``).

One component per device. For each batch, component ``k``'s device runs, in order:

1. ``forward``: once the previous component's activations of this batch have arrived
   (``transfer`` seconds after they were computed) and the device has finished the previous
   batch (its ``update``);
2. ``head``: its head's loss and the cotangent on ``h_k`` (input detached), if some
   component is trained on that head; on the last device, the true loss's cotangent;
3. ``grad`` passes, one per loss whose cotangent crosses ``f_k``, nearest loss first: the
   loss ``t`` crosses ``f_k`` when some component ``j <= k <= t`` is trained on it. Each waits
   for its cotangent (its own head's, or the message of loss ``t`` from component
   ``k + 1``), pulls it back to the input (``input``: a message for ``k - 1``), to the
   parameters (``params``, when ``t`` trains ``k``: its target, and under the modes ``sum``
   and ``mean`` its own loss too), or to both (``full``);
4. ``update``: the optimizer step; then the next batch.

Local learning has no messages (every device runs ``forward, head, params, update``
back to back: the devices only wait for activations); global learning passes one cotangent
from the last device to the first, so each device waits for all the devices ahead; n-wise
waits for the ``n - 1`` devices ahead. ``simulate`` plays a schedule for given op times
(per component, or per op instance to replay a measured run) and returns every op's start
and end, the time per batch and each device's utilisation.
"""

import dataclasses
from collections.abc import Mapping, Sequence

from lab.models.interlocking_rule import trained_on

OPS = ("forward", "head", "input", "params", "full", "update")


@dataclasses.dataclass(frozen=True)
class Op:
    """One op of a component in a batch: ``kind`` is one of ``OPS``; ``loss`` (zero-based,
    ``K - 1`` the true loss) is the loss a head or grad op works on."""

    component: int
    kind: str
    loss: int | None = None

    @property
    def label(self) -> str:
        return self.kind if self.loss is None else f"{self.kind}:{self.loss}"


def plan(components: int, n: int, mode: str = "only") -> list[list[Op]]:
    """Each device's ops for one batch, in order, under rule ``n`` in ``mode``."""
    users: dict[int, list[int]] = {}
    for j, losses in enumerate(trained_on(components, n, mode)):
        for t in losses:
            users.setdefault(t, []).append(j)
    ops = []
    for k in range(components):
        device = [Op(k, "forward")]
        if k in users:  # some component is trained on loss k (the last one always)
            device.append(Op(k, "head", k))
        for t in sorted(users):
            if not min(users[t]) <= k <= t:
                continue
            to_input, to_params = min(users[t]) < k, k in users[t]
            kind = "full" if to_input and to_params else "input" if to_input else "params"
            device.append(Op(k, kind, t))
        device.append(Op(k, "update"))
        ops.append(device)
    return ops


@dataclasses.dataclass(frozen=True)
class Times:
    """Seconds per op and component (sequences of length ``K``): ``head`` is the head's
    loss and cotangents (the true loss's on the last component), ``input`` / ``params`` /
    ``full`` a pull-back to the input / parameters / both; ``transfer`` per message."""

    forward: Sequence[float]
    head: Sequence[float]
    input: Sequence[float]
    params: Sequence[float]
    full: Sequence[float]
    update: Sequence[float]
    transfer: float = 0.0

    def of(self, op: Op) -> float:
        return getattr(self, op.kind)[op.component]


@dataclasses.dataclass(frozen=True)
class Event:
    batch: int
    op: Op
    start: float
    end: float


@dataclasses.dataclass(frozen=True)
class Timeline:
    events: list[Event]
    components: int
    batches: int

    @property
    def makespan(self) -> float:
        return max(e.end for e in self.events)

    def finish(self, batch: int) -> float:
        """When the last device finished ``batch`` (its last update)."""
        return max(e.end for e in self.events if e.batch == batch)

    @property
    def time_per_batch(self) -> float:
        """Steady state: the time between finishing batch ``B/2`` and the last batch, per
        batch (the pipeline is full by then); the makespan with fewer than 4 batches."""
        if self.batches < 4:
            return self.makespan / self.batches
        first = self.batches // 2
        return (self.finish(self.batches - 1) - self.finish(first - 1)) / (self.batches - first)

    def utilisation(self) -> list[float]:
        """Each device's busy time over the makespan."""
        busy = [0.0] * self.components
        for e in self.events:
            busy[e.op.component] += e.end - e.start
        return [b / self.makespan for b in busy]

    def starts(self) -> dict[tuple[int, int, str], float]:
        """``(batch, component, op label) -> start``."""
        return {(e.batch, e.op.component, e.op.label): e.start for e in self.events}


def simulate(components: int, n: int, times: Times, batches: int,
             durations: Mapping[tuple[int, int, str], float] | None = None,
             mode: str = "only") -> Timeline:
    """Play ``batches`` batches of rule ``n`` (in ``mode``) on ``components`` devices.
    ``durations`` (``(batch, component, op label) -> seconds``) overrides ``times`` op by op:
    a measured run replayed through the model."""
    ops = plan(components, n, mode)
    free = [0.0] * components  # when each device finished its previous batch
    events: list[Event] = []

    def duration(batch, op):
        if durations is not None and (batch, op.component, op.label) in durations:
            return durations[batch, op.component, op.label]
        return times.of(op)

    for b in range(batches):
        clock = list(free)
        arrived = 0.0  # the previous component's activations of this batch
        # forward sweep: forward and head need only the activations from behind
        for k in range(components):
            for op in ops[k]:
                if op.kind not in ("forward", "head"):
                    continue
                start = max(clock[k], arrived) if op.kind == "forward" else clock[k]
                clock[k] = start + duration(b, op)
                events.append(Event(b, op, start, clock[k]))
                if op.kind == "forward":
                    arrived = clock[k] + times.transfer
        # backward sweep: grad passes need the messages from the device ahead
        message: dict[int, float] = {}  # loss -> when its cotangent reached this device
        for k in reversed(range(components)):
            sent: dict[int, float] = {}
            for op in ops[k]:
                if op.kind in ("forward", "head"):
                    continue
                start = clock[k]
                if op.kind != "update" and op.loss != k:
                    start = max(start, message[op.loss])
                clock[k] = start + duration(b, op)
                events.append(Event(b, op, start, clock[k]))
                if op.kind in ("input", "full"):
                    sent[op.loss] = clock[k] + times.transfer
            message = sent
            free[k] = clock[k]
    return Timeline(events, components, batches)


def summary(components: int, n: int, times: Times, batches: int = 16,
            mode: str = "only") -> dict:
    """Time per batch, utilisation and the serial compute of one batch under rule ``n`` in
    ``mode``."""
    timeline = simulate(components, n, times, batches, mode=mode)
    serial = sum(times.of(op) for device in plan(components, n, mode) for op in device)
    return {"time_per_batch": timeline.time_per_batch, "serial": serial,
            "utilisation": timeline.utilisation(),
            "mean_utilisation": sum(timeline.utilisation()) / components}
