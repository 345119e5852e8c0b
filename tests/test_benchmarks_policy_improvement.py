"""benchmarks/policy_improvement.py: its environment ceiling resets like training does, its
configurations are the variants they name, and its smoke run prints the table."""

import jax
import numpy as np

from lab.envs.control import ControlTask
from tests.conftest import load_benchmark


def _benchmark():
    return load_benchmark("policy_improvement")


def test_env_scan_resets_ended_episodes_only_when_asked():
    bench = _benchmark()
    task = ControlTask("Pendulum-v1")
    steps = task.episode_steps  # 200: every copy's episode is truncated at the last step
    states, _ = jax.vmap(task.reset)(jax.random.split(jax.random.key(0), 2))
    key = jax.random.key(1)
    reset, _ = bench.make_env_scan(task, 2, steps, resets=True)(states, key)
    kept, _ = bench.make_env_scan(task, 2, steps, resets=False)(states, key)
    np.testing.assert_array_equal(reset.time, [0, 0])
    np.testing.assert_array_equal(kept.time, [steps, steps])


def test_variant_configs_learn_in_every_timed_step():
    bench = _benchmark()
    configs = {name: bench.variant_config(name, widths=[64, 64], batch=128, samples=20,
                                          branching=4, steps=200, repeats=2)
               for name in ("MPO", "search d1", "search d2")}
    assert not configs["MPO"].searches and configs["MPO"].depth == 0
    assert configs["search d1"].search_learning and configs["search d1"].depth == 1
    assert configs["search d2"].model == "true" and configs["search d2"].depth == 2
    assert (configs["search d2"].num_samples, configs["search d2"].branching) == (20, 4)
    for config in configs.values():
        # the timed intervals start at steps 200 and 400 and write up to step 600
        assert config.learning_starts == 128 <= config.eval_every
        assert config.replay_capacity >= 3 * 200 and config.num_intervals == 4
        assert config.widths == (64, 64) and config.batch_size == 128


def _table(out: str) -> tuple[list[str], dict[str, list[str]]]:
    """The printed table's header cells and its rows' cells by their first cell."""
    table = [line.strip("| ").split(" | ") for line in out.splitlines()
             if line.startswith("| ") and "---" not in line]
    return table[0], {row[0]: row for row in table[1:]}


def test_benchmark_policy_improvement_quick_prints_table(capsys):
    _benchmark().main(["--quick", "--variants", "MPO"])
    header, rows = _table(capsys.readouterr().out)
    assert list(rows) == ["env alone, with resets", "env alone, no resets", "MPO"]
    total, updates = (header.index("env steps/s, all seeds"),
                      header.index("updates/s, all seeds"))
    assert all(float(row[total]) > 0 for row in rows.values())
    assert rows["env alone, with resets"][-1] == "1"
    assert rows["MPO"][1:3] == ["3", "2 seeds x 12"]
    assert float(rows["MPO"][updates]) == float(rows["MPO"][total])  # 1 update per env step
    assert 0 < float(rows["MPO"][-1]) < 1  # slower than the environment alone

