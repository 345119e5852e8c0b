"""The SAC-AE reproduction: presets, runs with checkpoints, the random baseline, the verdict.

Claim (Yarats et al. 2019), measured at CPU scale on the JAX pixel tasks: SAC-AE learns
pixel swing-up to a stated threshold well above a uniformly random policy, and does better
than pixel SAC (the same agent with no decoder) at the same step budget. Each of ``seeds``
seeds trains both variants; a run's score is the mean deterministic evaluation return at
the last evaluation.

``devices`` above 1 runs each update data-parallel on that many devices (the batch split
over them, the agent replicated), ``model_devices`` of which also split the widest
matrices (the encoder's and decoder's projections); see ``lab.parallel``.
"""

import hashlib
import inspect
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh

from lab import envs, parallel
from lab.runs.claims import TOO_SMALL, Claim, decidable, plural, verdict_of
from lab.runs.claims import summary as claims_summary
from lab.runs.params import with_preset
from lab.train import checkpoint as checkpoints
from lab.train import sac_ae_loop as loops
from lab.train.sac_ae import SACAEConfig

DMC_PREFIX = "dmc:"
THRESHOLD_FRACTION = 0.25
"""The swing-up threshold: a quarter of the maximum return (1 per physics step)."""

# Named set-ups; a preset's values replace the notebook's. ``claim`` is the CPU measurement
# of the claim (about 45 minutes on 2 cores); the dmc_* presets are the paper's set-ups for
# a GPU machine (steps are agent steps: environment steps / action repeat).
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "claim": dict(env="pendulum_swingup", image_size=24, action_repeat=8, steps=10_000,
                  init_steps=1000, eval_every=2000, seeds=3),
    "dmc_cartpole": dict(env="dmc:cartpole_swingup", image_size=84, action_repeat=8,
                         steps=62_500, eval_every=1250, init_steps=1000, batch_size=128,
                         hidden_dim=1024, eval_episodes=10, replay_capacity=100_000,
                         seeds=3),
    "dmc_cheetah": dict(env="dmc:cheetah_run", image_size=84, action_repeat=4,
                        steps=125_000, eval_every=2500, init_steps=1000, batch_size=128,
                        hidden_dim=1024, eval_episodes=10, replay_capacity=100_000, seeds=3),
}
PRESETS["gpu"] = PRESETS["dmc_cartpole"]  # `python -m lab run --all --preset gpu` on a lent GPU
VARIANTS = {"sac_ae": True, "pixel_sac": False}
"""Variant name -> decoder on."""


@dataclass(frozen=True)
class Setup:
    """Everything one run of the notebook needs, validated."""

    env: str
    image_size: int
    action_repeat: int
    agent: SACAEConfig
    loop: loops.LoopConfig
    seeds: int
    variants: tuple[str, ...]
    devices: int = 1
    """Devices each update runs on (the batch split over ``devices // model_devices``)."""
    model_devices: int = 1
    """Devices of the ``model`` axis that split the widest matrices."""

    @property
    def is_dmc(self) -> bool:
        return self.env.startswith(DMC_PREFIX)

    def make_env(self, seed: int = 0):
        if self.is_dmc:
            return envs.make_dmc(self.env[len(DMC_PREFIX):], image_size=self.image_size,
                                 action_repeat=self.action_repeat, seed=seed)
        return envs.make(self.env, image_size=self.image_size,
                         action_repeat=self.action_repeat)

    @property
    def max_return(self) -> float:
        """Largest possible episode return: reward <= 1 per physics step, 1000 steps."""
        return 1000.0

    def agent_config(self, variant: str) -> SACAEConfig:
        return replace(self.agent, decoder=VARIANTS[variant])

    def mesh(self) -> Mesh | None:
        """``parallel.mesh(devices, model_devices)``; None on one device (the plain jit)."""
        return parallel.mesh_or_none(self.devices, self.model_devices)


def configure(*, preset: str, env: str, image_size: int, action_repeat: int, steps: int,
              init_steps: int, eval_every: int, eval_episodes: int, seeds: int,
              batch_size: int, hidden_dim: int, num_filters: int, replay_capacity: int,
              variants: list[str], devices: int = 1, model_devices: int = 1) -> Setup:
    """The notebook's parameters as a :class:`Setup`; raises ValueError naming a bad one.
    The runner calls this before it starts a kernel (the notebook's metadata names it)."""
    p = with_preset(dict(preset=preset, env=env, image_size=image_size,
                         action_repeat=action_repeat, steps=steps, init_steps=init_steps,
                         eval_every=eval_every, eval_episodes=eval_episodes, seeds=seeds,
                         batch_size=batch_size, hidden_dim=hidden_dim,
                         num_filters=num_filters, replay_capacity=replay_capacity,
                         variants=variants, devices=devices, model_devices=model_devices),
                    PRESETS)
    parallel.check_devices(devices, model_devices, batch_size=p["batch_size"])
    name = p["env"]
    if name.startswith(DMC_PREFIX):
        task = name[len(DMC_PREFIX):]
        if task not in envs.DMC_TASKS:
            raise ValueError(f"unknown DMC task {task!r}; choose one of "
                             f"{', '.join(DMC_PREFIX + t for t in envs.DMC_TASKS)}")
        repeat = p["action_repeat"] or envs.DMC_TASKS[task]
    elif name in envs.ENVS:
        repeat = p["action_repeat"] or envs.ENVS[name]().action_repeat
    else:
        raise ValueError(f"unknown env {name!r}; choose one of {', '.join(envs.ENVS)} or "
                         f"{DMC_PREFIX}<task> with a task from {', '.join(envs.DMC_TASKS)}")
    unknown = [v for v in p["variants"] if v not in VARIANTS]
    if unknown or not p["variants"]:
        raise ValueError(f"variants must be a non-empty list from {', '.join(VARIANTS)}, "
                         f"got {p['variants']}")
    if p["seeds"] < 1:
        raise ValueError(f"seeds must be at least 1, got {p['seeds']}")
    agent = SACAEConfig(batch_size=p["batch_size"], hidden_dim=p["hidden_dim"],
                        num_filters=p["num_filters"])
    if p["image_size"] < max(agent.min_image_size, envs.MIN_IMAGE_SIZE):
        raise ValueError(f"image_size {p['image_size']} is too small: the encoder's "
                         f"{agent.num_layers} convs need at least "
                         f"{max(agent.min_image_size, envs.MIN_IMAGE_SIZE)}")
    loop = loops.LoopConfig(steps=p["steps"], init_steps=p["init_steps"],
                            eval_every=p["eval_every"], eval_episodes=p["eval_episodes"],
                            replay_capacity=min(p["replay_capacity"], 2 * p["steps"] + 16))
    setup = Setup(name, p["image_size"], repeat, agent, loop, p["seeds"],
                  tuple(p["variants"]), devices, model_devices)
    if not setup.is_dmc:  # DMC is checked when its environment is built (it loads MuJoCo)
        loops.check(setup.make_env(), agent, loop)
    return setup


PARAMETERS = tuple(inspect.signature(configure).parameters)


def checkpoint_path(setup: Setup, variant: str, seed: int) -> Path:
    """Where a run's checkpoint lives: named by a hash of everything that defines it (not
    the devices: a run resumes on any number of them, equal up to float rounding)."""
    spec = json.dumps([setup.env, setup.image_size, setup.action_repeat,
                       asdict(setup.agent_config(variant)), asdict(setup.loop), seed],
                      sort_keys=True)
    digest = hashlib.sha256(spec.encode()).hexdigest()[:16]
    return checkpoints.default_dir() / f"sac_ae-{variant}-seed{seed}-{digest}.ckpt"


@dataclass
class Run:
    variant: str
    seed: int
    state: loops.TrainState
    history: loops.History


def train(setup: Setup, variant: str, seed: int, on_eval=None) -> Run:
    """Train one variant from one seed (resuming from its checkpoint if there is one)."""
    key = jax.random.key(seed)
    path = checkpoint_path(setup, variant, seed)
    if setup.is_dmc:
        with setup.make_env(seed) as env, setup.make_env(seed + 1000) as eval_env:
            state, history = loops.train_host(env, eval_env, setup.agent_config(variant),
                                              setup.loop, key, seed=seed, checkpoint=path,
                                              on_eval=on_eval, mesh=setup.mesh())
    else:
        state, history = loops.train(setup.make_env(), setup.agent_config(variant),
                                     setup.loop, key, checkpoint=path, on_eval=on_eval,
                                     mesh=setup.mesh())
    return Run(variant, seed, state, history)


def random_returns(setup: Setup, episodes: int = 20) -> np.ndarray:
    """Returns of a uniformly random policy (the baseline the threshold is stated against)."""
    if setup.is_dmc:
        out = []
        with setup.make_env(12345) as env:
            for _ in range(episodes):
                env.reset()
                total, done = 0.0, False
                rng = np.random.default_rng(len(out))
                while not done:
                    _, reward, done = env.step(rng.uniform(-1, 1, env.action_size))
                    total += reward
                out.append(total)
        return np.array(out)
    env = setup.make_env()
    keys = jax.random.split(jax.random.key(12345), episodes)
    return np.asarray(jax.jit(jax.vmap(lambda k: envs.random_episode_return(env, k)))(keys))


def final_score(run: Run) -> float:
    """Mean evaluation return at the last evaluation."""
    return float(np.mean(run.history.eval_returns[-1]))


def verdict(setup: Setup, runs: list[Run], random: np.ndarray) -> dict[str, Any]:
    """The claim's numbers from finished runs."""
    threshold = float(np.mean(random)) + THRESHOLD_FRACTION * (
        setup.max_return - float(np.mean(random)))
    m: dict[str, Any] = {
        "env": setup.env, "image_size": setup.image_size, "agent_steps": setup.loop.steps,
        "env_steps": setup.loop.steps * setup.action_repeat, "seeds": setup.seeds,
        "random_return": float(np.mean(random)), "threshold": threshold}
    for variant in setup.variants:
        scores = [final_score(r) for r in runs if r.variant == variant]
        curves = np.array([r.history.eval_returns.mean(1) for r in runs if r.variant == variant])
        m[f"{variant}_final_return"] = float(np.mean(scores))
        m[f"{variant}_final_return_std"] = float(np.std(scores))
        m[f"{variant}_final_returns"] = scores
        m[f"{variant}_mean_eval_return"] = float(curves.mean())  # area under the curve
        m[f"{variant}_train_seconds"] = float(np.mean(
            [r.history.seconds for r in runs if r.variant == variant]))
        env_steps = runs[0].history.eval_steps * setup.action_repeat
        for mark in (100_000, 500_000):  # the paper's reporting points, when reached
            if mark in env_steps:
                at = curves[:, list(env_steps).index(mark)]
                m[f"{variant}_return_at_{mark // 1000}k_env_steps"] = float(at.mean())
    if "sac_ae" in setup.variants:
        m["claim_learns_above_threshold"] = bool(
            min(m["sac_ae_final_returns"]) >= threshold)
    if set(VARIANTS) <= set(setup.variants):
        m["sac_ae_minus_pixel_sac"] = m["sac_ae_final_return"] - m["pixel_sac_final_return"]
        m["claim_beats_pixel_sac"] = bool(m["sac_ae_minus_pixel_sac"] > 0)
        pairs = zip(m["sac_ae_final_returns"], m["pixel_sac_final_returns"], strict=True)
        m["seeds_sac_ae_ahead"] = int(sum(a > b for a, b in pairs))
        # a difference smaller than the spread between seeds is not a clear win
        m["difference_within_seed_spread"] = bool(abs(m["sac_ae_minus_pixel_sac"]) < max(
            m["sac_ae_final_return_std"], m["pixel_sac_final_return_std"]))
    return m


def curves(setup: Setup, runs: list[Run]) -> dict[str, dict[str, Any]]:
    """Each variant's evaluation return (mean over seeds) against environment steps, in the
    form ``record(curves=...)`` stores for the compare view (``lab.widgets.compare``)."""
    out = {}
    for variant in setup.variants:
        mine = [r for r in runs if r.variant == variant]
        if mine:
            y = np.mean([r.history.eval_returns.mean(1) for r in mine], axis=0)
            out[variant] = {"x": (mine[0].history.eval_steps * setup.action_repeat).tolist(),
                            "y": y.tolist(), "xlabel": "environment steps",
                            "ylabel": "evaluation return"}
    return out


def describe(m: dict[str, Any]) -> str:
    """The conclusions as Markdown, every number from ``m``."""
    def score(variant):
        return (f"{m[f'{variant}_final_return']:.1f} ± {m[f'{variant}_final_return_std']:.1f} "
                f"(seeds: {', '.join(f'{s:.1f}' for s in m[f'{variant}_final_returns'])})")

    def needs(claim):
        return (f"; deciding it needs {DECIDABLE_AT[claim]:,} {DECIDABLE_UNIT}, this run "
                f"had {m['env_steps']:,}")

    lines = [f"**Set-up.** `{m['env']}` at {m['image_size']}x{m['image_size']} pixels, "
             f"{m['agent_steps']:,} agent steps ({m['env_steps']:,} environment steps), "
             f"{m['seeds']} seeds. A uniformly random policy scores "
             f"{m['random_return']:.1f}; the threshold is a quarter of the way from it to the "
             f"maximum of 1000: **{m['threshold']:.1f}**.", ""]
    if "sac_ae_final_return" in m:
        held = "holds" if m["claim_learns_above_threshold"] else "does not hold"
        if too_small(m, "learns_above_threshold"):
            held = f"{TOO_SMALL} (measured: {held}{needs('learns_above_threshold')})"
        lines += [f"- **Claim 1, SAC-AE learns swing-up above the threshold on every seed: "
                  f"{held}.** Final evaluation return {score('sac_ae')}.", ""]
    if "claim_beats_pixel_sac" in m:
        held = "holds on the mean" if m["claim_beats_pixel_sac"] else "does not hold"
        if m["difference_within_seed_spread"]:
            held += ", but the difference is smaller than the spread between seeds"
        if too_small(m, "beats_pixel_sac"):
            held = f"{TOO_SMALL} (measured: {held}{needs('beats_pixel_sac')})"
        lines += [f"- **Claim 2, SAC-AE beats pixel SAC (no decoder) at the same step "
                  f"budget: {held}** (difference {m['sac_ae_minus_pixel_sac']:+.1f}; SAC-AE "
                  f"ahead on {m['seeds_sac_ae_ahead']} of {m['seeds']} seeds). Pixel SAC: "
                  f"{score('pixel_sac')}. Mean return over all evaluations (area under the "
                  f"curve): SAC-AE {m['sac_ae_mean_eval_return']:.1f}, pixel SAC "
                  f"{m['pixel_sac_mean_eval_return']:.1f}.", "",
                  f"Training time per run: SAC-AE {m['sac_ae_train_seconds']:.0f} s, pixel "
                  f"SAC {m['pixel_sac_train_seconds']:.0f} s (the decoder's cost).", ""]
    return "\n".join(lines)


PAPER = ("Yarats, Zhang, Kostrikov, Amos, Pineau & Fergus, Improving Sample Efficiency in "
         "Model-Free Reinforcement Learning from Images (AAAI 2021)")
PAPER_SETTING = "DeepMind Control tasks from 84x84 pixels, up to 500k environment steps"

# The smallest budget, in environment steps, at which each claim can be decided, fixed
# before any run: the `claim` preset's 80,000 (10,000 agent steps at action repeat 8), the
# run that decided both (benchmarks/RESULTS.md, "Claim: notebooks/03_sac_ae.ipynb": claim 1
# holds, claim 2 weakly); no shorter run has decided them. The CPU defaults' 12,000 (1,500
# agent steps) only show the start of learning (SAC-AE 80.0 against a threshold of 258.3).
# Below it a verdict reads "too small to decide here" (``lab.runs.claims.decidable``).
DECIDABLE_AT = {"learns_above_threshold": 80_000, "beats_pixel_sac": 80_000}
DECIDABLE_UNIT = "environment steps"


def too_small(m: dict[str, Any], claim: str) -> bool:
    """Whether the run behind :func:`verdict`'s numbers ``m`` is below the budget
    ``claim`` needs (``DECIDABLE_AT``)."""
    return m["env_steps"] < DECIDABLE_AT.get(claim, 0)


def summary(m: dict[str, Any]) -> dict[str, Any]:
    """The claims, study and headline of :func:`verdict`'s numbers for ``record`` (see
    ``lab.runs.claims``). Claim 2 holds *weakly* when SAC-AE is ahead on the mean
    but not on every seed, or by less than the spread between seeds. Below the budget a
    claim needs (``DECIDABLE_AT``) its verdict is "too small to decide here"."""
    claims = []
    if "claim_learns_above_threshold" in m:
        claims.append(Claim(
            "learns_above_threshold", "SAC-AE learns pixel swing-up above a threshold (a "
            "quarter of the way from a random policy to the maximum) on every seed",
            verdict_of(m["claim_learns_above_threshold"]),
            {"SAC-AE final return": m["sac_ae_final_return"],
             "lowest seed": min(m["sac_ae_final_returns"]), "threshold": m["threshold"],
             "random policy": m["random_return"]}))
    if "claim_beats_pixel_sac" in m:
        clear = m["seeds_sac_ae_ahead"] == m["seeds"] and not m["difference_within_seed_spread"]
        claims.append(Claim(
            "beats_pixel_sac", "SAC-AE does better than pixel SAC (the same agent without "
            "the decoder) at the same step budget",
            verdict_of(m["claim_beats_pixel_sac"], weakly=not clear),
            {"final return: SAC-AE": m["sac_ae_final_return"],
             "pixel SAC": m["pixel_sac_final_return"],
             "seeds with SAC-AE ahead": f"{m['seeds_sac_ae_ahead']} of {m['seeds']}",
             "SAC-AE spread (std)": m["sac_ae_final_return_std"]}))
    claims = [decidable(c, budget=m["env_steps"], smallest=DECIDABLE_AT.get(c.name),
                        unit=DECIDABLE_UNIT) for c in claims]
    return claims_summary(
        paper=PAPER, paper_setting=PAPER_SETTING, claims=claims,
        measured=(f"{m['env']} at {m['image_size']}x{m['image_size']}, "
                  f"{plural(m['env_steps'], 'environment step')}, {plural(m['seeds'], 'seed')}"),
        headline=[k for k in ("sac_ae_final_return", "pixel_sac_final_return", "threshold",
                              "random_return") if k in m])


def evaluation_episode(setup: Setup, run: Run, seed: int = 0) -> tuple[float, np.ndarray]:
    """One deterministic episode of a trained agent: ``(return, frames (T + 1, H, W, 3))``."""
    key = jax.random.key(10_000 + seed)
    if setup.is_dmc:
        with setup.make_env(seed + 2000) as env:
            return loops.host_episode(env, run.state.agent, key, setup.loop.num_frames)
    total, frames, _ = eqx.filter_jit(loops.episode)(setup.make_env(), run.state.agent, key,
                                                     setup.loop.num_frames)
    return float(total), np.asarray(frames)


def observations(frames: np.ndarray, times: list[int], num_frames: int) -> np.ndarray:
    """The stacked observations ``(len(times), H, W, 3 num_frames)`` the agent saw at
    ``times`` of an episode's ``frames`` (the first frame repeated at the start)."""
    return np.stack([np.asarray(envs.stack_frames(frames, t, 0, num_frames)) for t in times])


def reconstructions(run: Run, obs: np.ndarray) -> np.ndarray:
    """The decoder's reconstruction of each observation's newest frame, uint8 RGB."""
    return np.asarray(loops.reconstruct(run.state.agent, obs))[..., -3:]
