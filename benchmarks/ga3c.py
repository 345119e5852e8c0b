"""Throughput of the three executions of one actor-critic, side by side in one run: host GA3C
(queues), host A3C (per-agent forward passes and updates) and the jitted A2C.

    .venv/bin/python benchmarks/ga3c.py [--game breakout] [--agents 1 4 16 32] [--seconds 10]
                                        [--a2c-envs 16 256 1024]

Same network (the MinAtar torso), same game, same loss and optimizer. For each agent count
GA3C and A3C run ``--seconds`` each (compilation excluded); the jitted A2C runs ``--seconds``
at each number of vmapped games. Prints environment steps, predictions (states through the
network) and trainings (updates) per second, then the two ratios the issue sets targets for:
GA3C / A3C environment steps per second at 16 agents (target at least 3x) and the fastest
jitted A2C / GA3C at 16 agents (target at least 100x). The host runs step MinAtar's numpy
games in Python threads, the A2C gymnax's inside one compiled program. Last, the network's
floating-point work per environment step (XLA's count for one forward pass, times the five
passes an A2C step makes) and the rate the fastest A2C ran it at: where that is near the
CPU's peak, the A2C is bound by the network, not by stepping games.
"""

import argparse
import dataclasses
import os
import platform

import jax
import jax.numpy as jnp

from lab.experiments.ga3c import run_a2c
from lab.runs.benchmarking import cpu_model
from lab.train.a2c import A2CConfig, init_model
from lab.train.ga3c import GA3CConfig, run_a3c, run_ga3c

TARGETS = {"ga3c/a3c at 16 agents": 3.0, "a2c/ga3c": 100.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--game", default="breakout")
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--a2c-envs", type=int, nargs="+", default=[16, 256, 1024])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    base = GA3CConfig(game=args.game)
    print(f"{cpu_model()}, {os.cpu_count()} cores, {platform.python_version()}, jax "
          f"{jax.__version__} on {jax.devices()[0].platform}; MinAtar {args.game}, "
          f"{args.seconds:g} s per run")
    print(f"{'execution':>10} {'agents':>7} {'env steps/s':>12} {'predictions/s':>14} "
          f"{'trainings/s':>12}")
    rates = {}
    for agents in args.agents:
        for name, run in (("ga3c", run_ga3c), ("a3c", run_a3c)):
            r = run(dataclasses.replace(base, agents=agents), jax.random.key(0),
                    seconds=args.seconds)
            rates[name, agents] = r.rate("env_steps")
            print(f"{name:>10} {agents:>7} {r.rate('env_steps'):12,.0f} "
                  f"{r.rate('predictions'):14,.0f} {r.rate('trainings'):12,.1f}")
    for envs in args.a2c_envs:
        r = run_a2c(A2CConfig(envs=envs, hyper=base.hyper), base.task, jax.random.key(0),
                    seconds=args.seconds)
        rates["a2c", envs] = r.rate("env_steps")
        print(f"{'a2c':>10} {envs:>7} {r.rate('env_steps'):12,.0f} "
              f"{r.rate('env_steps'):14,.0f} {r.rate('trainings'):12,.1f}")
    if ("ga3c", 16) in rates:
        ratios = {"ga3c/a3c at 16 agents": rates["ga3c", 16] / rates["a3c", 16],
                  "a2c/ga3c": max(rates["a2c", e] for e in args.a2c_envs) / rates["ga3c", 16]}
        for name, ratio in ratios.items():
            verdict = "meets" if ratio >= TARGETS[name] else "below"
            print(f"{name}: {ratio:.1f}x ({verdict} the target of {TARGETS[name]:g}x)")
    flops = forward_flops(base)
    fastest = max(rates["a2c", e] for e in args.a2c_envs)
    print(f"network: {flops / 1e3:,.0f} kFLOP per forward pass; an A2C step makes about 5 "
          f"(acting, the loss's forward and backward, the bootstrap value): "
          f"{5 * flops * fastest / 1e9:.1f} GFLOP/s at {fastest:,.0f} env steps/s")


def forward_flops(config: GA3CConfig) -> float:
    """XLA's count of floating-point operations for one forward pass of the network."""
    model = init_model(config.hyper, config.task, jax.random.key(0))
    obs = jnp.zeros(config.task.obs_shape)
    cost = jax.jit(lambda x: model(x)).lower(obs).compile().cost_analysis()
    return float((cost if isinstance(cost, dict) else cost[0])["flops"])


if __name__ == "__main__":
    main()
