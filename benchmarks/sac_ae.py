"""Speed of SAC-AE on this machine, side by side in one run:

    .venv/bin/python benchmarks/sac_ae.py [--quick] [--size 84] [--batch 128] [--no-dmc]

1. Time per full update (critic, actor and temperature, decoder, soft targets: the first
   update of the schedule, where all of them run) at ``--batch`` on ``--size`` frames of 9
   channels, for three formulations of the same convolutions:
   - ``matmul``: the model's own (``lab.models.conv``: patches times a matrix, channels-last);
   - ``lax NHWC``: XLA's convolution, channels-last;
   - ``lax NCHW``: XLA's convolution, channels-first (what ``eqx.nn.Conv2d`` and the
     PyTorch reference use).
   Each is timed at the top level of a jitted function and inside ``lax.scan`` (as the
   training loop runs it); the ratio is the time over ``matmul``'s at the top level.
   Beside them, the autoencoder step alone (convs, encoder head and decoder; reconstruction
   loss; Adam), ours against the same layers in PyTorch (channels-first, its default CPU
   convolutions) when torch is installed (it is not a dependency: ``pip install torch``).
2. Steps per second of the whole training loop: on the JAX task (one jitted scan of
   environment, replay and one update per step; ``--loop-size`` frames, the notebook's CPU
   agent) and on DMC cartpole (the host-side loop; skipped without dm_control or GL), with
   the environment alone for comparison. Environment steps are agent steps x action repeat.

Times are the best and the median of ``--repeats`` calls after a warm-up call (whose time,
compilation included, is printed). ``--quick`` is a smoke run of the same code paths at tiny
sizes.
"""

import argparse
import datetime
import os
import platform
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from lab import envs
from lab.models import conv as convs
from lab.runs.benchmarking import timed
from lab.train import sac_ae
from lab.train import sac_ae_loop as loops

_MATMUL = (convs.conv2d, convs.conv_transpose2d)


def lax_conv2d(layout: str):
    """``conv2d`` through ``lax.conv_general_dilated`` in ``layout`` (same math)."""
    def conv2d(x, weight, stride=1):
        if layout == "NHWC":
            return jax.lax.conv_general_dilated(
                x[None], weight, (stride, stride), "VALID",
                dimension_numbers=("NHWC", "HWIO", "NHWC"))[0]
        y = jax.lax.conv_general_dilated(
            jnp.moveaxis(x, -1, 0)[None], jnp.transpose(weight, (3, 2, 0, 1)),
            (stride, stride), "VALID")[0]
        return jnp.moveaxis(y, 0, -1)
    return conv2d


def lax_conv_transpose2d(layout: str):
    """``conv_transpose2d`` through ``lax.conv_transpose`` (the gradient form)."""
    def conv_transpose2d(x, weight, stride=1, output_padding=0):
        k = weight.shape[0]
        pad_h, pad_w = ((output_padding,) * 2 if isinstance(output_padding, int)
                        else output_padding)
        padding = [(k - 1, k - 1 + pad_h), (k - 1, k - 1 + pad_w)]
        w = jnp.swapaxes(weight, 2, 3)  # (K, K, C_out, C_in): the forward conv's weight
        if layout == "NHWC":
            return jax.lax.conv_transpose(x[None], w, (stride, stride), padding,
                                          dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                          transpose_kernel=True)[0]
        y = jax.lax.conv_transpose(jnp.moveaxis(x, -1, 0)[None],
                                   jnp.transpose(w, (3, 2, 0, 1)), (stride, stride), padding,
                                   dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                   transpose_kernel=True)[0]
        return jnp.moveaxis(y, 0, -1)
    return conv_transpose2d


FORMULATIONS = {
    "matmul": _MATMUL,
    "lax NHWC": (lax_conv2d("NHWC"), lax_conv_transpose2d("NHWC")),
    "lax NCHW": (lax_conv2d("NCHW"), lax_conv_transpose2d("NCHW")),
}


def use(formulation: str) -> None:
    """Make ``lab.models.conv``'s layers call ``formulation``'s functions."""
    convs.conv2d, convs.conv_transpose2d = FORMULATIONS[formulation]


def update_times(size: int, batch: int, hidden: int, repeats: int, scan: int):
    config = sac_ae.SACAEConfig(batch_size=batch, hidden_dim=hidden)
    key = jax.random.key(0)
    k_obs, k_next, k_act = jax.random.split(key, 3)
    shape = (batch, size, size, 9)
    data = sac_ae.Batch(
        jax.random.randint(k_obs, shape, 0, 256).astype(jnp.uint8),
        jax.random.uniform(k_act, (batch, 1), minval=-1, maxval=1), jnp.ones((batch,)),
        jax.random.randint(k_next, shape, 0, 256).astype(jnp.uint8), jnp.ones((batch,)))
    for name in FORMULATIONS:
        use(name)
        yield (name, *_time_formulation(config, key, data, size, repeats, scan))
    use("matmul")


def _time_formulation(config, key, data, size: int, repeats: int, scan: int):
    state = sac_ae.init(config, key, (size, size, 9), 1)
    top = eqx.filter_jit(lambda s, b: sac_ae.update(config, s, b)[0])
    # step 0 runs every sub-update; inside the scan the step counter is put back to 0
    looped = eqx.filter_jit(lambda s, b: jax.lax.scan(
        lambda s, _: (at_step0(sac_ae.update(config, s, b)[0]), None), s,
        length=scan)[0])
    first, best, median = timed(lambda: top(state, data), repeats)
    first_loop, best_loop, median_loop = timed(lambda: looped(state, data), repeats)
    return first, best, median, first_loop, best_loop / scan, median_loop / scan


def reconstruction_times(size: int, batch: int, repeats: int):
    """Seconds of one autoencoder update: ours per formulation, and PyTorch's."""
    config = sac_ae.SACAEConfig(batch_size=batch, hidden_dim=16)
    key = jax.random.key(0)
    obs = jax.random.randint(key, (batch, size, size, 9), 0, 256).astype(jnp.uint8)
    data = sac_ae.Batch(obs, jnp.zeros((batch, 1)), jnp.ones((batch,)), obs,
                        jnp.ones((batch,)))
    rows = []
    for name in FORMULATIONS:
        use(name)
        state = sac_ae.init(config, key, (size, size, 9), 1)
        step = eqx.filter_jit(lambda s, b: sac_ae.update_decoder(config, s, b, key)[0])
        rows.append((name, *timed(lambda: step(state, data), repeats)))  # noqa: B023
    use("matmul")
    try:
        rows.append(("PyTorch", *torch_reconstruction_times(size, batch, repeats)))
    except ImportError:
        rows.append(("PyTorch", float("nan"), float("nan"), float("nan")))
    return rows


def torch_reconstruction_times(size: int, batch: int, repeats: int):
    """The reference's encoder and decoder in PyTorch, one Adam step on the same loss."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    out = sac_ae.conv_output_size(size, 4)
    pad = size - 2 * ((size - 3) // 2 + 1) - 1
    convs = nn.ModuleList([nn.Conv2d(9, 32, 3, stride=2)] + [nn.Conv2d(32, 32, 3)
                                                              for _ in range(3)])
    head = nn.Sequential(nn.Linear(32 * out * out, 50), nn.LayerNorm(50))
    fc = nn.Linear(50, 32 * out * out)
    deconvs = nn.ModuleList([nn.ConvTranspose2d(32, 32, 3) for _ in range(3)] + [
        nn.ConvTranspose2d(32, 9, 3, stride=2, output_padding=pad)])
    modules = nn.ModuleList([convs, head, fc, deconvs])
    optimizer = torch.optim.Adam(modules.parameters(), lr=1e-3)
    obs = torch.randint(0, 256, (batch, 9, size, size), dtype=torch.uint8)

    def step():
        x = obs.float() / 255.0
        for conv in convs:
            x = torch.relu(conv(x))
        h = torch.tanh(head(x.flatten(1)))
        y = torch.relu(fc(h)).view(-1, 32, out, out)
        for deconv in deconvs[:-1]:
            y = torch.relu(deconv(y))
        y = deconvs[-1](y)
        target = (torch.floor(obs.float() / 8) + torch.rand_like(y)) / 32 - 0.5
        loss = ((y - target) ** 2).mean() + 1e-6 * (0.5 * h.pow(2).sum(1)).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return timed(step, repeats)


def at_step0(state):
    """The agent with its step counter back at 0, so every update in a scan is a full one."""
    return eqx.tree_at(lambda s: s.step, state, jnp.zeros((), jnp.int32))


def loop_rates(env, agent: sac_ae.SACAEConfig, steps: int, repeats: int):
    """Agent steps per second of the jitted training loop: random phase and update phase."""
    loop = loops.LoopConfig(steps=steps * 4, init_steps=steps, eval_every=steps,
                            eval_episodes=1, replay_capacity=steps * 8)
    state = loops.init(env, agent, loop, jax.random.key(0))
    out = {}
    # the random phase: environment and replay only (no update before init_steps)
    first, best, _ = timed(lambda: loops.run_steps(env, agent, loop, jax.tree.map(
        jnp.copy, state), steps)[1].reward, min(repeats, 2))
    out["random phase (env + replay)"] = (first, steps / best)
    state, _ = loops.run_steps(env, agent, loop, state, steps)
    state, _ = loops.run_steps(env, agent, loop, state, 1)  # the init_steps updates
    first, best, _ = timed(lambda: loops.run_steps(env, agent, loop, jax.tree.map(
        jnp.copy, state), steps)[1].reward, min(repeats, 2))
    out["update phase (env + replay + 1 update)"] = (first, steps / best)
    return out


def dmc_rates(size: int, agent: sac_ae.SACAEConfig, steps: int):
    from lab.envs import dmc
    problem = dmc.gl_problem(dmc.choose_gl_backend())
    if problem:
        return {"skipped": problem}
    try:
        env = dmc.make_dmc("cartpole_swingup", image_size=size)
    except ImportError as err:
        return {"skipped": f"dm_control is not installed ({err})"}
    out = {}
    with env:
        env.reset()
        start = time.perf_counter()
        for _ in range(steps):
            env.step(np.zeros(env.action_size))
        out["environment alone"] = (0.0, steps / (time.perf_counter() - start))
    episode = 1000 // 8
    loop = loops.LoopConfig(steps=2 * episode, init_steps=min(episode, steps),
                            eval_every=episode, eval_episodes=1, replay_capacity=4 * episode)
    for _attempt in ("compile", "timed"):  # the second run reuses the compiled functions
        with dmc.make_dmc("cartpole_swingup", image_size=size) as env, \
                dmc.make_dmc("cartpole_swingup", image_size=size) as eval_env:
            start = time.perf_counter()
            _, history = loops.train_host(env, eval_env, agent, loop, jax.random.key(0))
            seconds = time.perf_counter() - start
    # the run: 2 episodes of training (1 random, 1 with updates) and 3 evaluation episodes
    out["host loop (train + evaluation episodes)"] = (seconds, 5 * episode / seconds)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--size", type=int, default=84, help="frame size of the update test")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--loop-size", type=int, default=24,
                        help="frame size of the JAX training loop (the notebook's default)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scan", type=int, default=2, help="updates per scan in the loop test")
    parser.add_argument("--no-dmc", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.batch, args.hidden, args.loop_size = 16, 4, 16, 16
        args.repeats, args.scan = 1, 2
    print(f"# SAC-AE benchmark, {datetime.date.today()}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, JAX {jax.__version__} on {jax.default_backend()}")

    print(f"\n## Full update: batch {args.batch}, {args.size}x{args.size}x9, MLPs of "
          f"{args.hidden} (seconds)")
    print(f"{'formulation':<10} {'compile+1':>10} {'best':>8} {'median':>8} {'ratio':>6}   "
          f"{'in scan: best':>13} {'median':>8} {'ratio':>6}", flush=True)
    base = None
    for name, first, best, median, _, best_loop, median_loop in update_times(
            args.size, args.batch, args.hidden, args.repeats, args.scan):
        base = base or best
        print(f"{name:<10} {first:>10.2f} {best:>8.3f} {median:>8.3f} {best / base:>6.2f}   "
              f"{best_loop:>13.3f} {median_loop:>8.3f} {best_loop / base:>6.2f}", flush=True)

    print(f"\n## Autoencoder update alone: batch {args.batch}, {args.size}x{args.size}x9 "
          "(seconds)")
    rows = reconstruction_times(args.size, args.batch, args.repeats)
    base = rows[0][2]
    print(f"{'formulation':<10} {'compile+1':>10} {'best':>8} {'median':>8} {'ratio':>6}")
    for name, first, best, median in rows:
        print(f"{name:<10} {first:>10.2f} {best:>8.3f} {median:>8.3f} {best / base:>6.2f}")

    agent = sac_ae.SACAEConfig(batch_size=32 if not args.quick else 4,
                               hidden_dim=256 if not args.quick else 16,
                               num_filters=32 if not args.quick else 4)
    steps = 200 if not args.quick else 20
    env = envs.make("pendulum_swingup", image_size=args.loop_size, action_repeat=8)
    print(f"\n## Training loop on pendulum_swingup, {args.loop_size}x{args.loop_size}, batch "
          f"{agent.batch_size}, MLPs of {agent.hidden_dim}, action repeat 8 ({steps} agent "
          f"steps per timing)")
    print(f"{'phase':<40} {'compile+1 s':>11} {'agent steps/s':>14} {'env steps/s':>12}")
    for name, (first, rate) in loop_rates(env, agent, steps, args.repeats).items():
        print(f"{name:<40} {first:>11.1f} {rate:>14.1f} {8 * rate:>12.1f}")

    if not args.no_dmc:
        print(f"\n## DMC cartpole_swingup, {args.loop_size}x{args.loop_size}, action repeat 8, "
              "same agent")
        for name, value in dmc_rates(args.loop_size, agent, steps).items():
            if name == "skipped":
                print(f"skipped: {value}")
            else:
                seconds, rate = value
                print(f"{name:<52} {rate:>8.1f} agent steps/s {8 * rate:>8.1f} env steps/s")


if __name__ == "__main__":
    main()
