"""Sequence parallelism (Li et al., arXiv 2105.13120) measured on simulated devices.

The studies of notebook 09, each a function of plain sizes:

1. ``exactness``: Ring Self-Attention and blockwise ring attention against
   ``full_attention``, outputs and gradients, for each number of devices.
2. ``train``: a Transformer trained on key-value retrieval (``lab.data.retrieval``) on one
   device and sequence-parallel over N devices (same batches, same initial model), and the
   ablation that attends only within each device's chunk.
3. ``memory_model``: per-device bytes of one block's train step (Adam included) under
   Megatron's tensor parallelism and under sequence parallelism, over B x L, beside the
   paper's formulas for the MLP block.
4. ``max_sizes``: the largest batch (fixed L) and the largest L (fixed batch) whose compiled
   train step fits a per-device budget, for tensor parallelism at its cap (N = heads) and
   sequence parallelism at N = 1 ... devices.
5. ``communication``: bytes each device sends in the compiled RSA train step against the
   paper's 8 (N - 1) B Z (L / N) A, and the all-reduces of Megatron's.
6. ``longest_one_device``: one device's longest sequence with full against blockwise
   attention (the ``gpu`` preset's question, at a small budget on CPU).

Every per-device byte count is read from a compiled program (``lab.parallel.cost``), never
run: simulated devices share this machine's cores, so they show memory and communication,
not speed. On the CPU those programs compile at LLVM's optimisation level 0 (``measuring``),
which leaves the bytes and collectives as they are and takes a third less time.

With ``checkpoint`` (on in the ``claim`` and ``gpu`` presets) every training run and every
compiled program's bytes are kept as they are made (``kept``: a folder named by jax's
version, the devices and the source of the code that makes them), so a run stopped at a
deadline and resumed reads back what it finished and makes only the rest, to the same
figures.

The paper's claims are declared once in ``CLAIMS`` and decided by the shared rule
(``lab.runs.verdict``): deterministic checks against declared tolerances, and the ablation
per seed.
"""

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from lab.data import retrieval as retrieval_module
from lab.data.retrieval import Retrieval
from lab.models import transformer as transformer_module
from lab.models.transformer import Block, Transformer, full_attention
from lab.parallel import SIMULATE, _backends_started, compiled, cost, first_devices, megatron, ring
from lab.parallel.compiled import FAST, abstract, compile_program, shapes
from lab.parallel.megatron import check_heads, megatron_specs
from lab.parallel.ring import blockwise_attention, ring_attention, ring_self_attention
from lab.runs.claims import (
    CHECK,
    GREATER,
    LESS,
    THRESHOLD,
    Declaration,
    declarations,
    judge,
    plural,
    said,
)
from lab.runs.claims import summary as claims_summary
from lab.runs.params import with_preset
from lab.runs.records import spread_curve
from lab.train import checkpoint as checkpoints
from lab.train import sequence_parallel as sp

PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    # 3 seeds of longer training, a finer search and a longer B x L grid: about 30 minutes
    # on the 2-core CPU
    "claim": {"steps": 600, "seeds": 3, "search_precision": 8,
              "memory_bl": [256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
              "checkpoint": True},
    # the lent GPU machine: sweeps at larger sizes on its 16 cores' simulated CPU devices,
    # and one GPU's longest sequence with full against blockwise attention
    "gpu": {"memory_hidden": 256, "memory_bl": [1024, 2048, 4096, 8192, 16384, 32768, 65536],
            "search_hidden": 256, "search_length": 1024, "budget_mib": 256,
            "one_device_budget_mib": 60_000, "one_device_hidden": 512, "checkpoint": True},
}
PARAMETERS = ("preset", "devices", "length", "keys", "values", "hidden", "heads", "layers",
              "batch", "steps", "learning_rate", "seeds", "seed", "exact_devices",
              "tensor_devices", "memory_hidden", "memory_batch", "memory_bl", "search_hidden",
              "search_layers", "search_length", "search_batch", "search_precision", "budget_mib",
              "one_device_hidden", "one_device_budget_mib", "checkpoint")
ATTENTIONS = ("rsa", "ring")


@dataclasses.dataclass(frozen=True)
class Setup:
    """The notebook's parameters, validated."""

    devices: int  # simulated CPU devices (the largest N)
    task: Retrieval
    hidden: int
    heads: int
    layers: int
    batch: int
    steps: int
    learning_rate: float
    seeds: int
    seed: int
    exact_devices: tuple[int, ...]
    tensor_devices: int  # Megatron's devices: at most the heads (whole heads per device)
    memory_hidden: int
    memory_batch: int
    memory_bl: tuple[int, ...]
    search_hidden: int
    search_layers: int
    search_length: int
    search_batch: int
    search_precision: int  # searches stop within 1 / search_precision of the largest size
    budget_mib: float
    one_device_hidden: int
    one_device_budget_mib: float
    checkpoint: bool = False  # keep every run and program's bytes: a resumed run reads them

    @property
    def sequence_devices(self) -> list[int]:
        """N = 1, 2, 4, ... up to ``devices``."""
        return [2 ** k for k in range(self.devices.bit_length()) if 2 ** k <= self.devices]


def configure(**params: Any) -> Setup:
    """The notebook's parameters (``PARAMETERS``) as a ``Setup``; a one-line ValueError
    naming a bad value, before any compilation."""
    p = with_preset(params, PRESETS)
    for name in ("devices", "hidden", "heads", "layers", "batch", "steps", "seeds",
                 "tensor_devices", "memory_hidden", "memory_batch", "search_hidden",
                 "search_layers", "search_length", "search_batch", "search_precision",
                 "one_device_hidden"):
        if p[name] < 1:
            raise ValueError(f"{name} must be at least 1, got {p[name]}")
    if p["devices"] & (p["devices"] - 1):
        raise ValueError(f"devices must be a power of two (the sweeps halve it), got "
                         f"{p['devices']}")
    for n in list(p["exact_devices"]) + [p["devices"]]:
        if n < 1 or n > p["devices"]:
            raise ValueError(f"exact_devices {n} is outside 1 to devices ({p['devices']})")
    for name, length in (("length", p["length"]), ("search_length", p["search_length"])):
        for n in (p["devices"], *p["exact_devices"]):
            if length % n:
                raise ValueError(f"{name} {length} does not divide over {n} devices; use a "
                                 f"multiple of {n}")
    for bl in p["memory_bl"]:
        if bl % (p["memory_batch"] * p["devices"]):
            raise ValueError(f"memory_bl {bl} is not memory_batch ({p['memory_batch']}) "
                             f"times a multiple of {p['devices']} devices")
    check_heads(p["heads"], p["tensor_devices"])
    if p["tensor_devices"] > p["devices"]:
        raise ValueError(f"tensor_devices {p['tensor_devices']} is more than devices "
                         f"({p['devices']})")
    for name in ("hidden", "memory_hidden", "search_hidden", "one_device_hidden"):
        if p[name] % p["heads"]:
            raise ValueError(f"{name} {p[name]} does not divide into {p['heads']} heads")
    if p["learning_rate"] <= 0 or p["budget_mib"] <= 0 or p["one_device_budget_mib"] < 0:
        raise ValueError("learning_rate and budget_mib must be positive and "
                         "one_device_budget_mib at least 0 (0 skips that study)")
    task = Retrieval(length=p["length"], keys=p["keys"], values=p["values"])
    return Setup(p["devices"], task, p["hidden"], p["heads"], p["layers"], p["batch"],
                 p["steps"], float(p["learning_rate"]), p["seeds"], p["seed"],
                 tuple(p["exact_devices"]), p["tensor_devices"], p["memory_hidden"],
                 p["memory_batch"], tuple(p["memory_bl"]), p["search_hidden"],
                 p["search_layers"], p["search_length"], p["search_batch"],
                 p["search_precision"], float(p["budget_mib"]), p["one_device_hidden"],
                 float(p["one_device_budget_mib"]), bool(p.get("checkpoint", False)))


def simulate_devices(n: int) -> None:
    """Ask XLA for ``n`` CPU devices: the flag is read when jax's backend starts, so this
    must run before anything touches a device (the notebook's first cell). A one-line
    RuntimeError when jax already runs with fewer (restart the kernel)."""
    if _backends_started():
        have = len(jax.devices("cpu"))
        if have < n:
            raise RuntimeError(f"jax already started with {have} CPU devices and {n} are "
                               f"needed; restart the kernel (or export {SIMULATE} first)")
        return
    flag = f"--xla_force_host_platform_device_count={n}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()


# 1. exactness ----------------------------------------------------------------------------

def exactness(devices: list[int], *, length: int = 256, heads: int = 4, head_dim: int = 16,
              seed: int = 0) -> list[dict[str, Any]]:
    """Max absolute error of each sequence-parallel attention against ``full_attention``
    (outputs, and gradients of a random projection of the output w.r.t. q, k, v), float32."""
    q, k, v, w = (jax.random.normal(key, (length, heads, head_dim))
                  for key in jax.random.split(jax.random.key(seed), 4))
    rows = []
    for causal in (False, True):
        def projected(attend, q, k, v, causal=causal):
            return jnp.sum(attend(q, k, v, causal) * w)

        ref = full_attention(q, k, v, causal)
        ref_grads = jax.grad(lambda *a: projected(full_attention, *a), argnums=(0, 1, 2))(q, k, v)
        for n in devices:
            mesh = sp.sequence_mesh(n, platform="cpu")
            for name, make in (("rsa", ring_self_attention), ("ring", ring_attention)):
                attend = jax.shard_map(partial(_apply, make("seq"), causal=causal), mesh=mesh,
                                       in_specs=P("seq"), out_specs=P("seq"))
                out = jax.jit(attend)(q, k, v)
                grads = jax.jit(jax.grad(lambda *a, f=attend: jnp.sum(f(*a) * w),
                                         argnums=(0, 1, 2)))(q, k, v)
                rows.append({"devices": n, "attention": name, "causal": causal,
                             "output_error": float(jnp.abs(out - ref).max()),
                             "gradient_error": max(float(jnp.abs(g - r).max())
                                                   for g, r in zip(grads, ref_grads,
                                                                   strict=True))})
    return rows


def _apply(attend, q, k, v, *, causal):
    return attend(q, k, v, causal)


# 2. the same training ----------------------------------------------------------------------

def train(setup: Setup, devices: int, attention: str, *, seed: int = 0, perturb: bool = False,
          on_chunk: Callable[[int, dict[str, np.ndarray]], bool] | None = None,
          chunk: int = 50) -> dict[str, np.ndarray]:
    """Loss and accuracy per step of the retrieval Transformer: one device (``devices ==
    1``, full attention) or sequence-parallel over ``devices`` with ``attention``. The model
    and the batches depend on ``seed`` only; with ``perturb`` every initial weight is scaled
    by 1 + 2^-23 (one float32 rounding step), the size of the differences that another
    order of summation makes. ``on_chunk(steps_done, curves)`` after every ``chunk`` steps;
    False stops."""
    optimizer = optax.adam(setup.learning_rate)
    mesh = None if devices == 1 else sp.sequence_mesh(devices, platform="cpu")
    model, opt_state = sp.init(setup.task, optimizer, hidden=setup.hidden, heads=setup.heads,
                               layers=setup.layers, key=jax.random.key(seed))
    if perturb:
        eps = float(jnp.finfo(jnp.float32).eps)
        model = jax.tree.map(lambda x: x * (1 + eps) if eqx.is_inexact_array(x) else x, model)
    run = sp.make_train(sp.make_step(optimizer, mesh, attention), setup.task, setup.batch)
    key = jax.random.fold_in(jax.random.key(seed), 1)
    loss, accuracy, start = [], [], time.perf_counter()
    for first in range(0, setup.steps, chunk):
        model, opt_state, m = run(model, opt_state, key, min(chunk, setup.steps - first),
                                  first=first)
        loss.extend(np.asarray(m.loss).tolist())
        accuracy.extend(np.asarray(m.accuracy).tolist())
        curves = {"loss": np.array(loss), "accuracy": np.array(accuracy)}
        if on_chunk is not None and on_chunk(len(loss), curves) is False:
            break
    return {"loss": np.array(loss), "accuracy": np.array(accuracy),
            "seconds": time.perf_counter() - start}


ONE, CONTROL = "one device", "one device, perturbed"


def runs(setup: Setup, kept: checkpoints.Kept | None = None
         ) -> dict[str, list[dict[str, np.ndarray]]]:
    """Each seed's training: one device, RSA over ``devices``, the local ablation, and the
    rounding control (one device from a perturbed start: how far float32 rounding alone
    moves the curve). A run ``kept`` earlier is read back (with the seconds it took)."""
    kept = kept or checkpoints.Kept(None)
    n = setup.devices
    plan = {ONE: (1, "rsa", False), f"RSA, N={n}": (n, "rsa", False),
            f"local only, N={n}": (n, "local", False), CONTROL: (1, "rsa", True)}
    sizes = [dataclasses.asdict(setup.task), setup.hidden, setup.heads, setup.layers,
             setup.batch, setup.steps, setup.learning_rate]

    def run(devices, attention, seed, perturb):
        made = kept(["train", sizes, devices, attention, seed, perturb], lambda: {
            k: np.asarray(v).tolist() for k, v in train(setup, devices, attention, seed=seed,
                                                        perturb=perturb).items()})
        return {k: np.asarray(v) if k != "seconds" else v for k, v in made.items()}

    return {name: [run(d, a, setup.seed + s, p) for s in range(setup.seeds)]
            for name, (d, a, p) in plan.items()}


def divergence_step(a: np.ndarray, b: np.ndarray, tolerance: float) -> int:
    """The first step (1-based) where two loss curves differ by more than ``tolerance``;
    one past the end if they never do."""
    apart = np.flatnonzero(np.abs(a - b) > tolerance)
    return int(apart[0]) + 1 if apart.size else len(a) + 1


def kept(setup: Setup) -> checkpoints.Kept:
    """Where this notebook keeps what it makes (``setup.checkpoint``; otherwise a ``Kept``
    that keeps nothing): training runs and compiled programs' bytes, each under a key of
    its own sizes, in a folder named by what else defines them: jax's version, XLA's flags,
    the CPU's and the default device's kind, and the source of the code that builds, trains
    and measures the programs (an edit there makes them again)."""
    if not setup.checkpoint:
        return checkpoints.Kept(None)
    return checkpoints.Kept(checkpoints.folder(
        "sequence_parallel", jax.devices("cpu")[0].device_kind,
        checkpoints.sources(sp, transformer_module, retrieval_module, ring, megatron, compiled,
                            cost, sys.modules[__name__])))


# compiled programs, never run --------------------------------------------------------------

def measuring(platform: str) -> dict | None:
    """How the programs below compile: on the CPU with LLVM's optimisation level 0
    (``lab.parallel.compiled.FAST``: the same HLO passes and buffer assignment, so the same
    bytes and collectives, a test checks; only the machine code, never run here, is slower
    and quicker to make); elsewhere as by default, where that is not checked."""
    return FAST if platform == "cpu" else None


def _tensor_mesh(n: int):
    return jax.make_mesh((1, n), ("data", "model"), devices=first_devices(n, "cpu"),
                         axis_types=(AxisType.Auto, AxisType.Auto))


def model_step(layout: str, n: int, *, batch: int, length: int, hidden: int, heads: int,
               layers: int, attention: str = "rsa", causal: bool = False,
               platform: str = "cpu"):
    """The compiled train step (Adam) of a retrieval-shaped Transformer under ``layout``:
    ``"sequence"`` (``attention`` over ``n`` sequence devices; ``n = 1`` is one device) or
    ``"tensor"`` (Megatron over ``n`` model devices). Compiled for its bytes
    (``measuring``)."""
    compiler_options = measuring(platform)
    optimizer = optax.adam(1e-3)
    model, opt_state = shapes(lambda: Transformer(64, 8, hidden, heads, layers, length,
                                                   causal=causal, key=jax.random.key(0)),
                               optimizer)
    tokens = jax.ShapeDtypeStruct((batch, length), jnp.int32)
    if layout == "sequence":
        mesh = sp.sequence_mesh(n, platform=platform)
        fn = sp.step_function(optimizer, None if n == 1 else mesh, attention)
        data, rep = P(*sp.AXES), P()
        return compile_program(fn, abstract(model, mesh, rep), abstract(opt_state, mesh, rep),
                               abstract(tokens, mesh, data), abstract(tokens, mesh, data),
                               compiler_options=compiler_options)
    check_heads(heads, n)
    mesh = _tensor_mesh(n)
    fn = sp.step_function(optimizer, None)
    return compile_program(fn, abstract(model, mesh, megatron_specs(model)),
                           abstract(opt_state, mesh, megatron_specs(opt_state)),
                           abstract(tokens, mesh, P()), abstract(tokens, mesh, P()),
                           compiler_options=compiler_options)


def block_step(part: str, layout: str, n: int, *, batch: int, length: int, hidden: int,
               heads: int):
    """The compiled train step (Adam) of one block's ``part`` (``"mlp"`` or ``"attention"``,
    with its LayerNorm and residual) on inputs ``(batch, length, hidden)``, loss the mean
    square of the outputs, under ``"tensor"`` (Megatron, inputs replicated) or
    ``"sequence"`` (RSA, inputs split along the sequence). Compiled for its bytes
    (``measuring``)."""
    compiler_options = measuring("cpu")
    optimizer = optax.adam(1e-3)
    block, opt_state = shapes(lambda: Block(hidden, heads, key=jax.random.key(0)), optimizer)
    x = jax.ShapeDtypeStruct((batch, length, hidden), jnp.float32)
    sequence = layout == "sequence" and n > 1
    attend = ring_self_attention("seq") if sequence else full_attention
    def total(s):
        return jax.lax.psum(s, sp.AXES) if sequence else s

    def step(block, opt_state, x):
        def loss(block):
            half = (block.mlp_half if part == "mlp"
                    else (lambda h: block.attention_half(h, attend, False)))
            return total(jnp.sum(jax.vmap(half)(x) ** 2)) / (batch * length * hidden)

        grads = eqx.filter_grad(loss)(block)
        updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(block, eqx.is_array))
        return eqx.apply_updates(block, updates), opt_state

    if layout == "sequence":
        mesh = sp.sequence_mesh(n, platform="cpu")
        if sequence:
            step = jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P(*sp.AXES)),
                                 out_specs=(P(), P()))
        return compile_program(step, abstract(block, mesh, P()),
                               abstract(opt_state, mesh, P()),
                               abstract(x, mesh, P(*sp.AXES)),
                               compiler_options=compiler_options)
    mesh = _tensor_mesh(n)
    return compile_program(step, abstract(block, mesh, megatron_specs(block)),
                           abstract(opt_state, mesh, megatron_specs(opt_state)),
                           abstract(x, mesh, P()),
                           compiler_options=compiler_options)


# 3. the memory model -----------------------------------------------------------------------

def paper_mlp_bytes(layout: str, n: int, bl: int, hidden: int) -> float:
    """The paper's MLP-block memory per device, in float32 bytes: tensor parallelism
    32H^2/N + 4BLH/N + BLH, sequence parallelism 32H^2 + 5BLH/N elements (weights,
    gradients and Adam's two moments, 8H^2 each; activations)."""
    h = hidden
    elements = (32 * h * h / n + 4 * bl * h / n + bl * h if layout == "tensor"
                else 32 * h * h + 5 * bl * h / n)
    return 4 * elements


def crossover(bls, tensor, sequence) -> float | None:
    """The B x L where sequence parallelism's bytes first drop below tensor parallelism's
    (geometric interpolation between the two grid points around the sign change); None
    if they never cross on the grid."""
    d = np.log(np.asarray(sequence, float)) - np.log(np.asarray(tensor, float))
    for i in range(1, len(d)):
        if d[i - 1] > 0 >= d[i]:
            t = d[i - 1] / (d[i - 1] - d[i])
            return float(np.exp(np.log(bls[i - 1]) + t * (np.log(bls[i]) - np.log(bls[i - 1]))))
    return None


def memory_model(bls: list[int], *, n: int, batch: int, hidden: int, heads: int,
                 kept: checkpoints.Kept | None = None) -> dict[str, Any]:
    """Per-device bytes of each block part's train step at ``n`` devices over ``bls``
    (B x L with B = ``batch``), measured for both layouts, with the paper's MLP formula and
    the measured crossovers (the paper: MLP at BL = 32H, attention at BL = 16AZ = 16H).
    Bytes ``kept`` earlier are read back instead of compiled."""
    kept = kept or checkpoints.Kept(None)
    sizes = dict(batch=batch, hidden=hidden, heads=heads)

    def bytes_at(part, layout, bl):
        return kept(["block_step", part, layout, n, bl, sizes], lambda: cost.memory(
            block_step(part, layout, n, length=bl // batch, **sizes)).total)

    out: dict[str, Any] = {"bl": list(bls), "devices": n, "hidden": hidden}
    for part in ("mlp", "attention"):
        for layout in ("tensor", "sequence"):
            out[f"{part}_{layout}_bytes"] = [bytes_at(part, layout, bl) for bl in bls]
        out[f"{part}_crossover"] = crossover(bls, out[f"{part}_tensor_bytes"],
                                             out[f"{part}_sequence_bytes"])
    for layout in ("tensor", "sequence"):
        out[f"mlp_{layout}_paper_bytes"] = [paper_mlp_bytes(layout, n, bl, hidden) for bl in bls]
    out["mlp_paper_crossover"], out["attention_paper_crossover"] = 32 * hidden, 16 * hidden
    return out


# 4. the largest batch and sequence under a budget -------------------------------------------

def largest(fits: Callable[[int], bool], unit: int, start: int = 1, precision: int = 8
            ) -> tuple[int, int]:
    """The largest multiple of ``unit`` for which ``fits`` holds (``fits`` monotone: true,
    then false), to within ``1 / precision``: from a guess of ``start`` units, doubling or
    halving until the answer is bracketed, then bisection; 0 when one unit does not fit.
    Also returns the number of ``fits`` calls."""
    calls = 0

    def check(units: int) -> bool:
        nonlocal calls
        calls += 1
        return fits(units * unit)

    lo, hi = 0, max(1, start)  # lo fits (0 trivially), hi: the next to try, then a failure
    if check(hi):
        lo, hi = hi, hi * 2
        while check(hi):
            lo, hi = hi, hi * 2
    else:
        while hi > 1 and not check(hi // 2):
            hi //= 2
        lo = hi // 2
    while hi - lo > max(1, lo // precision):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if check(mid) else (lo, mid)
    return lo * unit, calls


def max_sizes(setup: Setup, kept: checkpoints.Kept | None = None) -> dict[str, Any]:
    """Largest batch at ``search_length`` and largest length at ``search_batch`` whose
    compiled train step (Adam, ``search_layers`` layers of width ``search_hidden``) needs at
    most ``budget_mib`` per device: Megatron at ``tensor_devices`` and RSA at each N. Bytes
    ``kept`` earlier are read back instead of compiled (``compiles`` counts both)."""
    kept = kept or checkpoints.Kept(None)
    budget = setup.budget_mib * 2 ** 20
    sizes = dict(hidden=setup.search_hidden, heads=setup.heads, layers=setup.search_layers)
    plans = [("tensor", setup.tensor_devices)] + [("sequence", n) for n in setup.sequence_devices]
    unit = setup.devices  # lengths in multiples of the largest N
    rows, guess = [], {"batch": 4, "length": max(1, setup.search_length // unit)}
    for layout, n in plans:
        measured: dict[tuple[int, int], int] = {}  # the two searches meet at one point at least

        def bytes_at(batch, length, layout=layout, n=n, measured=measured):
            if (batch, length) not in measured:
                measured[batch, length] = kept(
                    ["model_step", layout, n, batch, length, sizes],
                    lambda: cost.memory(model_step(layout, n, batch=batch, length=length,
                                                   **sizes)).total)
            return measured[batch, length]
        batch, _ = largest(lambda b: bytes_at(b, setup.search_length) <= budget, 1,
                           guess["batch"], setup.search_precision)
        length, _ = largest(lambda length: bytes_at(setup.search_batch, length) <= budget,
                            unit, guess["length"], setup.search_precision)
        if layout == "sequence":  # the next N starts from this N's answer, grown
            guess = {"batch": max(1, 2 * batch), "length": max(1, 3 * length // (2 * unit))}
        rows.append({"layout": layout, "devices": n, "max_batch": batch, "max_length": length,
                     "compiles": len(measured)})
    return {"rows": rows, "budget_mib": setup.budget_mib, "search_length": setup.search_length,
            "search_batch": setup.search_batch}


# 5. communication --------------------------------------------------------------------------

def communication(devices: list[int], *, batch: int, length: int, hidden: int, heads: int,
                  kept: checkpoints.Kept | None = None) -> list[dict[str, Any]]:
    """Bytes each device sends per train step of a one-layer model: collective-permutes of
    RSA, against the paper's 8 (N - 1) B Z (L / N) A elements; and Megatron's all-reduces
    (operand bytes, and a ring all-reduce's traffic 2 (N - 1) / N times them): four of
    B L H floats per block, as in Megatron-LM, whose fused query/key/value projection
    ``lab.models.transformer`` shares (``lab.parallel.megatron``). Collectives ``kept``
    earlier are read back instead of compiled."""
    kept = kept or checkpoints.Kept(None)
    rows = []
    for n in devices:
        if n == 1:
            continue
        sizes = dict(batch=batch, length=length, hidden=hidden, heads=heads, layers=1)
        def collectives(layout, n=n, sizes=sizes):
            return kept(["collectives", layout, n, sizes], lambda: cost.summary(
                cost.collectives(model_step(layout, n, **sizes))))

        rsa = collectives("sequence")
        row = {"devices": n, "rsa_permute_bytes": rsa.get("collective-permute", {}).get("bytes", 0),
               "rsa_permutes": rsa.get("collective-permute", {}).get("count", 0),
               "rsa_all_gathers": rsa.get("all-gather", {}).get("count", 0),
               "paper_bytes": 4 * 8 * (n - 1) * batch * hidden * (length // n)}
        if heads % n == 0:
            tp = collectives("tensor")
            reduce = tp.get("all-reduce", {}).get("bytes", 0)
            row |= {"megatron_all_reduce_bytes": reduce,
                    "megatron_ring_traffic_bytes": reduce * 2 * (n - 1) / n}
        rows.append(row)
    return rows


# 6. one device's longest sequence ----------------------------------------------------------

def single_step(attention: str, *, batch: int, length: int, hidden: int, heads: int,
                layers: int, block: int = 64):
    """The compiled one-device train step (Adam; loss the mean square of the logits) with
    ``"full"`` attention or ``"blockwise"`` attention over key blocks of ``block``, on the
    default device. Compiled for its bytes (``measuring``)."""
    compiler_options = measuring(jax.default_backend())
    optimizer = optax.adam(1e-3)
    attend = full_attention if attention == "full" else blockwise_attention(block)
    model, opt_state = shapes(lambda: Transformer(64, 8, hidden, heads, layers, length,
                                                   key=jax.random.key(0)), optimizer)

    def step(model, opt_state, tokens):
        def loss(model):
            return jnp.mean(jax.vmap(lambda t: model(t, None, attend))(tokens) ** 2)

        grads = eqx.filter_grad(loss)(model)
        updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state

    return compile_program(step, model, opt_state,
                           jax.ShapeDtypeStruct((batch, length), jnp.int32),
                           compiler_options=compiler_options)


def longest_one_device(setup: Setup, *, block: int = 64, kept: checkpoints.Kept | None = None
                       ) -> dict[str, int]:
    """The longest sequence (multiple of ``block``) whose one-device train step (batch 1,
    one layer of ``one_device_hidden``) fits ``one_device_budget_mib``, with full against
    blockwise attention, on the default device (the GPU where there is one). Bytes ``kept``
    earlier are read back instead of compiled."""
    kept = kept or checkpoints.Kept(None)
    budget = setup.one_device_budget_mib * 2 ** 20
    out: dict[str, int] = {"block": block}
    for attention in ("full", "blockwise"):
        def fits(length, attention=attention):
            sizes = dict(batch=1, length=length, hidden=setup.one_device_hidden,
                         heads=setup.heads, layers=1, block=block)
            return kept(["single_step", attention, jax.default_backend(), sizes],
                        lambda: cost.memory(single_step(attention, **sizes)).total) <= budget

        out[f"{attention}_max_length"], out[f"{attention}_compiles"] = largest(
            fits, block, 8, setup.search_precision)
    return out


# claims -----------------------------------------------------------------------------------

EXACT_ATOL = 1e-5  # float32: about 100 rounding steps (2^-23) of values of order 1
CURVE_ATOL = 1e-3  # loss curves, one device against N devices
CHANCE_MARGIN = 0.05  # "at chance": no more than 5 accuracy points above 1 / values

PAPER = ("Li, Xue, Baranwal, Li & You, Sequence Parallelism: Long Sequence Training from "
         "System Perspective (ACL 2023, arXiv 2105.13120)")
RSA_QUOTE = ("To compute the attention output, we integrated ring-style communication with "
             "self-attention calculation and proposed Ring Self-Attention (RSA).")
HEADLINE_QUOTE = ("Compared with tensor parallelism, our approach achieved 13.7× and 3.0× "
                  "maximum batch size and sequence length respectively when scaling up to 64 "
                  "NVIDIA P100 GPUs.")

# Every claim but one is a deterministic check: the attention and the training are float32
# programs, the bytes are read from compiled programs, the searches are deterministic. The
# ablation's accuracy depends on the seed: one unit per seed, decided by the shared rule.
CLAIMS = declarations(
    Declaration(
        name="exact",
        statement="Ring Self-Attention and blockwise ring attention equal full attention, "
                  "outputs and gradients, in float32",
        quote=RSA_QUOTE, source="Abstract (RSA computes the attention output; Sec. 3)",
        unit="configuration (number of devices N, attention rsa or ring, causal or not)",
        measure="largest absolute error of the output and of the gradients w.r.t. q, k, v "
                "against full_attention on one device",
        comparison=CHECK, direction=LESS, threshold=EXACT_ATOL,
        minimum_effect_source=f"a check: every configuration within {EXACT_ATOL:g}, about "
                              "100 float32 rounding steps of values of order 1 (the tests "
                              "check 1e-10 in float64)",
        family="equals_one_device", declared_after=""),
    Declaration(
        name="identical_curves",
        statement="Training sequence-parallel over N devices gives the one-device loss curve "
                  f"to {CURVE_ATOL:g} at every step",
        quote="(not found in the stored text of the paper: only its abstract is stored) "
              + RSA_QUOTE,
        source="Abstract; the training experiments of Sec. 4",
        unit="seed (one model and batch stream, trained on one device and on N devices)",
        measure="largest |loss difference| over the whole run, one device against RSA over "
                "N devices",
        comparison=CHECK, direction=LESS, threshold=CURVE_ATOL,
        minimum_effect_source=f"a check: {CURVE_ATOL:g} in loss, 0.05% of the initial loss "
                              "ln(values) = 2.08 and about 1,000 times one step's float32 "
                              "rounding (the rounding control, a start perturbed by 2^-23, "
                              "shows how far training amplifies it: numbers beside)",
        family="equals_one_device",
        declared_after="the tolerance stood before any run (2026-11-23); the check over the "
                       "whole run replaces an earlier rule that let curves part near "
                       "the rounding control's step; chosen 2026-11-27 knowing both "
                       "records part at step 240"),
    Declaration(
        name="ablation_at_chance",
        statement="Attending only within each device's chunk stays at chance where the "
                  "answer is on other devices",
        quote="More importantly, we no longer require a single device to hold the whole "
              "sequence. ... To compute the attention output, we integrated ring-style "
              "communication with self-attention calculation and proposed Ring "
              "Self-Attention (RSA).",
        source="Abstract (the communication is what attention across devices needs)",
        unit="seed", measure="local-only model's accuracy at the questions over the last "
                             "tenth of training, minus chance (1 / values)",
        comparison=THRESHOLD, direction=LESS, threshold=CHANCE_MARGIN, minimum_effect=0.0,
        minimum_effect_source=f"stated: at most {CHANCE_MARGIN:g} above chance (0.125 with 8 "
                              "values); answering even a quarter of the questions would give "
                              "chance + 0.22",
        family="ablation",
        declared_after="the 2026-11-26 runs (before: within 3 binomial standard errors of "
                       "chance on the pooled answers)"),
    Declaration(
        name="crossover_sign",
        statement="Sequence parallelism needs more memory per device than tensor parallelism "
                  "at the smallest B x L of the grid and less at the largest (the MLP block)",
        quote="(not found in the stored text of the paper: only its abstract is stored; "
              "Sec. 3's memory comparison of the MLP block, sequence parallelism ahead when "
              "BL > 32H, is quoted from the issue) we propose sequence parallelism, a "
              "memory-efficient parallelism method",
        source="Sec. 3 (memory of the MLP block); Abstract",
        unit="end of the B x L grid (the smallest and the largest)",
        measure="bytes per device on the claimed side: sequence minus tensor at the "
                "smallest B x L, tensor minus sequence at the largest (compiled programs)",
        comparison=CHECK, direction=GREATER, threshold=1.0,
        minimum_effect_source="a check: at least one byte on the claimed side at each end",
        family="memory", declared_after=""),
    Declaration(
        name="larger_batch_than_tensor",
        statement="Under a per-device budget, sequence parallelism at N = devices fits a "
                  "larger batch than tensor parallelism at its cap (N = heads)",
        quote=HEADLINE_QUOTE, source="Abstract; Sec. 4 (maximum batch size)",
        unit="the search (deterministic: compiled programs' bytes)",
        measure="sequence parallelism's largest batch over tensor parallelism's",
        comparison=CHECK, direction=GREATER,
        minimum_effect_source="a check against 1 + 1/search_precision: each search stops "
                              "within 1/search_precision of the largest size, so a ratio "
                              "below that could be a tie; the paper reports 13.7x at 64 GPUs",
        paper_value="13.7x tensor parallelism's largest batch, at 64 NVIDIA P100 GPUs "
                    "(Abstract)",
        family="memory",
        declared_after="the 2026-11-26 runs (before: a ratio above 1, batch and length in "
                       "one claim)"),
    Declaration(
        name="longer_sequence_than_tensor",
        statement="Under a per-device budget, sequence parallelism at N = devices fits a "
                  "longer sequence than tensor parallelism at its cap (N = heads)",
        quote=HEADLINE_QUOTE, source="Abstract; Sec. 4 (maximum sequence length)",
        unit="the search (deterministic: compiled programs' bytes)",
        measure="sequence parallelism's longest sequence over tensor parallelism's",
        comparison=CHECK, direction=GREATER,
        minimum_effect_source="a check against 1 + 1/search_precision (the searches' "
                              "precision); the paper reports 3.0x at 64 GPUs",
        paper_value="3.0x tensor parallelism's longest sequence, at 64 NVIDIA P100 GPUs "
                    "(Abstract)",
        family="memory",
        declared_after="the 2026-11-26 runs (before: a ratio above 1, batch and length in "
                       "one claim)"),
    Declaration(
        name="linear_in_devices",
        statement="Sequence parallelism's largest batch grows about linearly with N",
        quote="Experiments show that sequence parallelism performs well when scaling with "
              "batch size and sequence length.",
        source="Abstract; Sec. 4 (scaling with batch size)",
        unit="the fit over N = 1, 2, 4, ... devices (deterministic)",
        measure="exponent of N in the largest batch (slope of log batch on log N; 1 is "
                "linear)",
        comparison=CHECK, direction=GREATER, threshold=0.8,
        minimum_effect_source="a check: exponent at least 0.8 ('about linear'; the searches' "
                              "precision moves a single point by up to 1/search_precision)",
        family="memory", declared_after=""),
)


def _per_seed(a: list[dict], b: list[dict], key: str = "loss") -> list[float]:
    return [float(np.abs(x[key] - y[key]).max()) for x, y in zip(a, b, strict=True)]


def verdict(setup: Setup, exact: list[dict[str, Any]], trained: dict[str, list[dict]],
            memory: dict[str, Any], sizes: dict[str, Any], comm: list[dict[str, Any]]
            ) -> dict[str, Any]:
    """Every number of the run, per-unit numbers included (``summary`` judges the claims
    from them)."""
    m: dict[str, Any] = {"devices": setup.devices, "chance": setup.task.chance}
    m["exactness"] = exact
    m["max_output_error"] = max(r["output_error"] for r in exact)
    m["max_gradient_error"] = max(r["gradient_error"] for r in exact)

    names = list(trained)[:3]  # one device, sequence-parallel, local only
    one, par, control = trained[ONE], trained[names[1]], trained[CONTROL]
    m["curve_max_abs_difference_by_seed"] = _per_seed(one, par)
    m["control_max_abs_difference_by_seed"] = _per_seed(one, control)
    m["curve_max_abs_difference"] = max(m["curve_max_abs_difference_by_seed"])
    m["control_max_abs_difference"] = max(m["control_max_abs_difference_by_seed"])
    m["divergence_step_by_seed"] = [divergence_step(a["loss"], b["loss"], CURVE_ATOL)
                                    for a, b in zip(one, par, strict=True)]
    m["control_divergence_step_by_seed"] = [divergence_step(a["loss"], b["loss"], CURVE_ATOL)
                                            for a, b in zip(one, control, strict=True)]
    m["divergence_step"] = min(m["divergence_step_by_seed"])
    m["control_divergence_step"] = min(m["control_divergence_step_by_seed"])
    tail = max(1, setup.steps // 10)
    by_seed = {k: [float(r["accuracy"][-tail:].mean()) for r in v] for k, v in trained.items()}
    m["final_accuracy_by_seed"] = by_seed
    final = {k: float(np.mean(v)) for k, v in by_seed.items()}
    m["final_accuracy"] = final
    m["one_device_final_accuracy"], m["sequence_parallel_final_accuracy"], \
        m["local_final_accuracy"] = (final[k] for k in names)
    m["local_final_accuracy_by_seed"] = by_seed[names[2]]
    m["control_final_accuracy"] = final[CONTROL]
    # 3 binomial standard errors of chance over the last tenth's answers, counting at most
    # one independent answer per record (a sequence's questions ask about only ``keys``
    # records, so its answers repeat): shown beside the ablation, not a verdict
    per_sequence = min(setup.task.queries, setup.task.keys)
    answers = tail * setup.batch * per_sequence * setup.seeds
    se = np.sqrt(setup.task.chance * (1 - setup.task.chance) / answers)
    m["local_chance_band"] = float(3 * se)
    before = max(1, m["control_divergence_step"] - 1)
    m["curve_max_abs_difference_before_control"] = max(
        float(np.abs(a["loss"][:before] - b["loss"][:before]).max())
        for a, b in zip(one, par, strict=True))

    m["memory"] = memory
    for part in ("mlp", "attention"):
        measured, paper = memory[f"{part}_crossover"], memory[f"{part}_paper_crossover"]
        m[f"{part}_crossover_bl"] = measured
        t, s = memory[f"{part}_tensor_bytes"], memory[f"{part}_sequence_bytes"]
        m[f"{part}_sequence_wins_at_largest_bl"] = bool(s[-1] < t[-1])
        m[f"{part}_tensor_wins_at_smallest_bl"] = bool(t[0] < s[0])
        m[f"{part}_crossover_over_paper"] = None if measured is None else measured / paper

    rows = sizes["rows"]
    tp = next(r for r in rows if r["layout"] == "tensor")
    seq = [r for r in rows if r["layout"] == "sequence"]
    m["sizes"] = rows
    m["sequence_devices"] = [r["devices"] for r in seq]
    m["max_batch_by_devices"] = [r["max_batch"] for r in seq]
    m["max_length_by_devices"] = [r["max_length"] for r in seq]
    m["tensor_max_batch"], m["tensor_max_length"] = tp["max_batch"], tp["max_length"]
    top = seq[-1]
    m["batch_ratio"] = top["max_batch"] / max(tp["max_batch"], 1)
    m["length_ratio"] = top["max_length"] / max(tp["max_length"], 1)
    # growth in N: slope of log(max size) against log(N), 1 for linear
    n = np.log([r["devices"] for r in seq])
    for what in ("batch", "length"):
        y = np.log(np.maximum([r[f"max_{what}"] for r in seq], 1))
        m[f"max_{what}_exponent"] = float(np.polyfit(n, y, 1)[0])

    m["communication"] = comm
    m["rsa_bytes_over_paper"] = [r["rsa_permute_bytes"] / r["paper_bytes"] for r in comm]
    m["rsa_all_gathers"] = sum(r["rsa_all_gathers"] for r in comm)
    return m


def summary(m: dict[str, Any], setup: Setup) -> dict[str, Any]:
    """The claims (``CLAIMS``, judged by the shared rule from the per-unit numbers), study
    and headline for ``record``. Works on records from before the per-unit numbers: a
    check is decided by the largest error they kept (every unit within the tolerance
    exactly when the largest is); the ablation's per-seed accuracies, where missing, make
    it "not tested" with how to re-make it."""
    n = setup.devices
    seeds = plural(setup.seeds, "seed")
    claims = []

    exact = m.get("exactness")
    claims.append(judge(
        CLAIMS["exact"], [max(r["output_error"], r["gradient_error"]) for r in exact] if exact
        else [max(m["max_output_error"], m["max_gradient_error"])],
        numbers={"max output error": m["max_output_error"],
                 "max gradient error": m["max_gradient_error"],
                 "configurations": len(exact) if exact else "the record keeps only the "
                                                              "largest error",
                 "tolerance": EXACT_ATOL}))

    per_seed = m.get("curve_max_abs_difference_by_seed")
    claims.append(judge(
        CLAIMS["identical_curves"], per_seed or [m["curve_max_abs_difference"]],
        numbers={"max |loss difference|": m["curve_max_abs_difference"],
                 "tolerance": CURVE_ATOL, "first step apart": m["divergence_step"],
                 "max |loss difference| before the control parts":
                     m["curve_max_abs_difference_before_control"],
                 "rounding control: max |loss difference|": m["control_max_abs_difference"],
                 "rounding control: first step apart": m["control_divergence_step"],
                 "seeds": seeds if per_seed else f"{seeds}; the record keeps only the "
                                                 "largest difference"}))

    local = m.get("local_final_accuracy_by_seed")
    if local is None and setup.seeds == 1:  # one seed: its mean is the seed's number
        local = [m["local_final_accuracy"]]
    chance = setup.task.chance
    claims.append(judge(
        CLAIMS["ablation_at_chance"], None if local is None else [a - chance for a in local],
        to_remake="" if local is not None else
        f"the record has no per-seed accuracy; re-run with {seeds} (-p preset claim: "
        "about 26 min on the 2-core CPU)",
        numbers={"accuracy: one device": m["one_device_final_accuracy"],
                 f"RSA N={n}": m["sequence_parallel_final_accuracy"],
                 "local only": m["local_final_accuracy"], "chance": chance,
                 "3 standard errors of chance": m["local_chance_band"]}))

    mem = m["memory"]
    if len(mem["bl"]) >= 2:
        t, s = mem["mlp_tensor_bytes"], mem["mlp_sequence_bytes"]
        claims.append(judge(
            CLAIMS["crossover_sign"], [s[0] - t[0], t[-1] - s[-1]],
            numbers={"measured MLP crossover BL": m["mlp_crossover_bl"],
                     "paper 32H": mem["mlp_paper_crossover"],
                     "sequence / tensor bytes at the ends": f"{s[0] / t[0]:.3f}, "
                                                            f"{s[-1] / t[-1]:.3f}",
                     "measured attention crossover BL": m["attention_crossover_bl"],
                     "paper 16AZ": mem["attention_paper_crossover"]}))

    tie = 1 + 1 / setup.search_precision
    claims.append(judge(CLAIMS["larger_batch_than_tensor"], [m["batch_ratio"]], threshold=tie,
                        numbers={"max batch ratio": m["batch_ratio"],
                                 f"max batch: RSA N={n}": m["max_batch_by_devices"][-1],
                                 "max batch: tensor": m["tensor_max_batch"],
                                 "paper (64 GPUs)": "13.7x"}))
    claims.append(judge(CLAIMS["longer_sequence_than_tensor"], [m["length_ratio"]],
                        threshold=tie,
                        numbers={"max length ratio": m["length_ratio"],
                                 f"max length: RSA N={n}": m["max_length_by_devices"][-1],
                                 "max length: tensor": m["tensor_max_length"],
                                 "paper (64 GPUs)": "3.0x"}))
    claims.append(judge(CLAIMS["linear_in_devices"], [m["max_batch_exponent"]],
                        numbers={"exponent of N: batch": m["max_batch_exponent"],
                                 "length": m["max_length_exponent"],
                                 "max batch by N": str(m["max_batch_by_devices"]),
                                 "max length by N": str(m["max_length_by_devices"])}))
    return claims_summary(
        paper=PAPER, paper_setting="BERT on up to 64 P100 GPUs",
        measured=(f"{plural(n, 'simulated CPU device')}; retrieval over L={setup.task.length}, "
                  f"{setup.layers}-layer encoder of width {setup.hidden}, {seeds}; "
                  "memory from compiled programs"),
        claims=claims,
        headline=["max_output_error", "curve_max_abs_difference", "local_final_accuracy",
                  "mlp_crossover_bl", "batch_ratio", "length_ratio"],
        labels={"max_output_error": "ring attention against full attention: largest output "
                                    "error",
                "curve_max_abs_difference": "training curves: largest loss difference",
                "local_final_accuracy": "no communication (ablation): final accuracy",
                "mlp_crossover_bl": "MLP memory crossover at B x L",
                "batch_ratio": "largest batch: sequence over tensor parallelism",
                "length_ratio": "longest sequence: sequence over tensor parallelism"})


def rederive(metrics: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    """A recorded run's claims under today's declarations, from its recorded numbers
    (``python -m lab claims rederive``)."""
    return summary(metrics, configure(**parameters))


def describe(m: dict[str, Any], setup: Setup) -> str:
    """Each claim's verdict with its evidence, as Markdown lines (every number from ``m``)."""
    return "\n".join(f"- **{c['name']}: {said(c)}.** {c['statement']}."
                     for c in summary(m, setup)["claims"])


def curves(trained: dict[str, list[dict]], m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What ``record(curves=...)`` stores for the compare view."""
    out = {}
    for name, rs in trained.items():
        key = name.replace(" ", "_").replace(",", "").replace("=", "")
        steps = list(range(1, len(rs[0]["loss"]) + 1))
        out[f"{key}_loss"] = spread_curve(steps, [r["loss"] for r in rs], xlabel="step",
                                          ylabel="loss")
        out[f"{key}_accuracy"] = spread_curve(steps, [r["accuracy"] for r in rs],
                                              xlabel="step", ylabel="accuracy")
    out["max_batch"] = {"x": m["sequence_devices"], "y": m["max_batch_by_devices"],
                        "xlabel": "sequence devices N", "xscale": "log", "ylabel": "max batch"}
    mem = m["memory"]
    for layout in ("tensor", "sequence"):
        out[f"mlp_{layout}_bytes"] = {"x": mem["bl"], "y": mem[f"mlp_{layout}_bytes"],
                                      "xlabel": "B x L", "xscale": "log",
                                      "ylabel": "bytes per device"}
    return out
