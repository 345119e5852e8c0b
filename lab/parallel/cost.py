"""What a compiled JAX program costs per device: memory, collectives and flops.

Read from ``jax.jit(f).lower(*args).compile()`` (or ``eqx.filter_jit(f).lower(...).compile()``)
without running it, so a sequence-parallel layout or a partitioner's candidate is priced
before any device time is spent. Three measures, each per device:

- ``memory(compiled)``: bytes of arguments, outputs and temporaries from XLA's buffer
  assignment. For an SPMD program (a sharded ``jit`` or a ``shard_map`` over several
  devices) these are one device's shards: an (8, 1024) float32 argument split over 8
  devices counts 1024 * 4 bytes (checked on 8 simulated CPU devices, jax 0.10).
- ``collectives(compiled)``: every collective of the optimised, SPMD-partitioned HLO
  (``compiled.as_text()``) with the bytes each device puts into it and how many times it
  runs (trip counts of enclosing while loops multiplied in). ``summary`` totals them by
  kind: the beta (bandwidth) term of an alpha-beta time model, with ``count`` its alpha
  (latency) term. ``groups(c.replica_groups, devices)`` says which devices each group
  joins, so a collective can be told to be on one mesh axis or another.
- ``flops(compiled)``: XLA's cost analysis, per device. It counts a while loop's body once,
  whatever its trip count (7 matmuls in a ``fori_loop`` count as one).

The HLO text read here, as jax 0.10 prints it: one instruction a line,
``[ROOT] %name = TYPE opcode(%operand, ...), attribute=value, ...``, operands by name only
(their types looked up in the computation) or with their type in front; ``/*index=5*/``
comments inside long tuples; a ``while`` with ``backend_config={..."known_trip_count":
{"n":"7"}}`` when XLA knows its trip count. Asynchronous collectives (GPU) appear as an
``X-start``/``X-done`` pair, or as ``async-start`` calling a computation that holds ``X``;
each is counted once, at its start.
"""

import math
import re
from collections import defaultdict
from typing import NamedTuple

import numpy as np

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
         "collective-broadcast")
_CALLS = ("calls", "to_apply", "body", "condition", "branch_computations", "true_computation",
          "false_computation")
_INSTRUCTION = re.compile(r"\s+(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)")
_HEADER = re.compile(r"(ENTRY\s+)?%?([\w.\-]+)\s*[({]")
_ARRAY = re.compile(r"([a-z]+)(\d*)[a-z0-9]*\[([^\]]*)\]")
_TRIP_COUNT = re.compile(r"known_trip_count\W+n\W+(\d+)")
_IOTA = re.compile(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH = re.compile(r"mesh\[((?:'[\w.\-]+'=\d+,?)+)\]\s*\{((?:'[\w.\-]+',?)+)\}")


class Memory(NamedTuple):
    """Bytes per device of one compiled program (``memory_analysis``). ``aliases`` are
    outputs written into donated arguments, counted in both and so subtracted once."""

    arguments: int
    outputs: int
    temporaries: int
    aliases: int

    @property
    def total(self) -> int:
        """What the program holds while it runs: arguments, outputs and the temporaries
        XLA's buffer assignment packs, less outputs written over donated arguments. XLA's
        own ``peak_memory_in_bytes`` on CPU is arguments plus outputs only (256 KiB + 4
        bytes for a 256 KiB argument, a scalar output and 512 KiB of temporaries), hence
        this sum."""
        return self.arguments + self.outputs + self.temporaries - self.aliases


class Collective(NamedTuple):
    """One collective instruction of an HLO module.

    ``bytes`` is what each device puts into one execution (its operands), ``count`` how
    many times it executes: 1 times the trip counts of the while loops around it, summed
    over the call sites of its computation (a conditional's branch counts as taken).
    ``exact`` is False when one of those loops has no known trip count (then counted as
    one iteration). ``replica_groups`` is the attribute's text (``{{0,1,2,3}}`` or
    ``mesh['x'=8] {'x'}``), empty for a collective-permute, which has its parsed
    ``source_target_pairs`` instead."""

    kind: str
    bytes: int
    count: int
    computation: str
    name: str
    replica_groups: str = ""
    source_target_pairs: tuple[tuple[int, int], ...] = ()
    exact: bool = True


def _unwrap(compiled):
    """The ``jax.stages.Compiled`` inside ``eqx.filter_jit(f).lower(...).compile()``."""
    return getattr(compiled, "compiled", compiled)


def memory(compiled) -> Memory:
    """Per-device bytes of a compiled program, from ``compiled.memory_analysis()``."""
    stats = _unwrap(compiled).memory_analysis()
    return Memory(stats.argument_size_in_bytes, stats.output_size_in_bytes,
                  stats.temp_size_in_bytes, stats.alias_size_in_bytes)


def flops(compiled) -> float:
    """Per-device flops from ``compiled.cost_analysis()`` (a dict, or a list of dicts in
    some jax versions; 0 where XLA reports none). Loop bodies count once."""
    analysis = _unwrap(compiled).cost_analysis() or {}
    parts = analysis if isinstance(analysis, list | tuple) else [analysis]
    return float(sum(part.get("flops", 0.0) for part in parts))


def type_bytes(hlo_type: str) -> int:
    """Bytes of an HLO type such as ``f32[8,16]{1,0}``, ``bf16[<=4]`` or a tuple
    ``(f32[8], s32[])`` (its elements summed). Bits per element from the type's name
    (``pred`` one byte, ``token[]`` none)."""
    total = 0
    for letters, digits, dims in _ARRAY.findall(hlo_type):
        bits = 8 if letters == "pred" else int(digits or 0)
        elements = 1
        for size in re.findall(r"\d+", dims):
            elements *= int(size)
        total += (elements * bits + 7) // 8
    return total


def _split(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, char in enumerate(text):
        if char == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and char in "([{":
            depth += 1
        elif not quoted and char in ")]}":
            depth -= 1
        elif not quoted and char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _closing(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``text[start]``."""
    depth = 0
    for i in range(start, len(text)):
        depth += text[i] in "([{"
        depth -= text[i] in ")]}"
        if depth == 0:
            return i
    raise ValueError(f"unbalanced brackets in HLO: {text[start:start + 80]}")


def _instruction(rest: str) -> tuple[str, str, list[str], dict[str, str]]:
    """``TYPE opcode(operands), attributes`` as (type, opcode, operands, attributes)."""
    end = _closing(rest, 0) + 1 if rest.startswith("(") else rest.index(" ")
    hlo_type, rest = rest[:end], rest[end:].lstrip()
    opcode = rest[:rest.index("(")]
    close = _closing(rest, len(opcode))
    attributes = dict(part.partition("=")[::2] for part in _split(rest[close + 1:]))
    return hlo_type, opcode, _split(rest[len(opcode) + 1:close]), attributes


def collectives(compiled_or_text) -> list[Collective]:
    """Every collective that a compiled program (or its ``as_text()``) runs, in the order
    of the text, each with its per-device operand bytes and its execution count."""
    text = compiled_or_text
    if not isinstance(text, str):
        text = _unwrap(compiled_or_text).as_text()
    text = re.sub(r"/\*.*?\*/", "", text)
    found, calls, entry, computation, types = [], defaultdict(list), None, None, {}
    for line in text.splitlines():
        header = _HEADER.match(line) if line.rstrip().endswith("{") else None
        if header and not line.startswith("HloModule"):
            computation, types = header[2], {}
            entry = computation if header[1] else entry
            continue
        match = _INSTRUCTION.match(line) if computation else None
        if not match:
            continue
        name, (hlo_type, opcode, operands, attributes) = match[1], _instruction(match[2])
        types[name] = hlo_type
        if opcode.endswith(("-done", "-update")):
            continue
        loop = opcode == "while"
        trip = _TRIP_COUNT.search(attributes.get("backend_config", "")) if loop else None
        factor, known = (int(trip[1]), True) if trip else (1, not loop)
        for key in _CALLS:
            for callee in re.findall(r"[\w.\-]+", attributes.get(key, "")):
                calls[computation].append((callee, factor, known))
        kind = opcode.removesuffix("-start")
        if kind in KINDS:
            size = sum(type_bytes(op.rpartition(" ")[0] or types[op.lstrip("%")])
                       for op in operands)
            pairs = tuple((int(a), int(b)) for a, b in re.findall(
                r"\{(\d+),(\d+)\}", attributes.get("source_target_pairs", "")))
            found.append(Collective(kind, size, 1, computation, name,
                                    attributes.get("replica_groups", ""), pairs))
    if entry is None:
        raise ValueError("no ENTRY computation in the HLO text")
    runs = _runs(entry, calls)
    return [c._replace(count=runs[c.computation][0], exact=runs[c.computation][1])
            for c in found if c.computation in runs]


def _runs(entry: str, calls: dict) -> dict[str, tuple[int, bool]]:
    """How many times each computation reachable from ``entry`` runs, summed over its
    call sites, and whether every loop on the way had a known trip count."""
    runs: dict[str, tuple[int, bool]] = {}
    stack = [(entry, 1, True)]
    while stack:
        name, count, exact = stack.pop()
        before, known = runs.get(name, (0, True))
        runs[name] = (before + count, known and exact)
        stack.extend((callee, count * factor, exact and trip_known)
                     for callee, factor, trip_known in calls[name])
    return runs


def groups(replica_groups: str, devices: int) -> tuple[tuple[int, ...], ...]:
    """The device groups of a collective's ``replica_groups`` text, each a tuple of device
    (SPMD partition) numbers, as jax 0.10's XLA prints them: explicit ``{{0,1},{2,3}}``
    (``{}``: all ``devices`` in one group); iota ``[2,4]<=[8]`` or ``[4,2]<=[2,4]T(1,0)``
    (``arange`` reshaped to the bracket on the right, transposed, its rows the groups); or
    a mesh ``mesh['axis_0'=2,'axis_1'=4] {'axis_0'}`` (devices numbered row-major over the
    axes; a group varies the axes in braces and holds the others). A ValueError for any
    other form (a mesh with device ids or sub-axes)."""
    text = replica_groups.strip()
    if text == "{}":
        return (tuple(range(devices)),)
    if re.fullmatch(r"\{(\{[\d,\s]*\},?\s*)+\}", text):
        return tuple(tuple(int(d) for d in re.findall(r"\d+", group))
                     for group in re.findall(r"\{([^{}]*)\}", text[1:-1]))
    if iota := _IOTA.fullmatch(text):
        ids = np.arange(math.prod(int(d) for d in iota[3].split(","))).reshape(
            [int(d) for d in iota[3].split(",")])
        if iota[4]:
            ids = ids.transpose([int(a) for a in iota[4].split(",")])
        return tuple(tuple(int(i) for i in row) for row in ids.reshape(int(iota[1]), -1))
    if mesh := _MESH.fullmatch(text):
        axes = [(name, int(size)) for name, size in re.findall(r"'([^']+)'=(\d+)", mesh[1])]
        names, sizes = [name for name, _ in axes], [size for _, size in axes]
        grouped = re.findall(r"'([^']+)'", mesh[2])
        if not set(grouped) <= set(names):
            raise ValueError(f"replica groups over axes not in the mesh: {replica_groups}")
        held = [i for i, name in enumerate(names) if name not in grouped]
        varied = [names.index(name) for name in grouped]
        ids = np.arange(math.prod(sizes)).reshape(sizes).transpose(held + varied)
        return tuple(tuple(int(i) for i in row)
                     for row in ids.reshape(-1, math.prod(sizes[i] for i in varied)))
    raise ValueError(f"unknown replica groups {replica_groups!r}: expected {{{{0,1}},...}}, "
                     f"[2,4]<=[8] or mesh['a'=2,...] {{'a'}}")


def summary(found: list[Collective]) -> dict[str, dict[str, int]]:
    """Per kind: ``count`` (executions) and ``bytes`` (per device, summed over them)."""
    totals: dict[str, dict[str, int]] = {}
    for c in found:
        entry = totals.setdefault(c.kind, {"count": 0, "bytes": 0})
        entry["count"] += c.count
        entry["bytes"] += c.bytes * c.count
    return totals
