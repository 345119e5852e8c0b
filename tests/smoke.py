"""What the tests run notebooks with and how they compile, shared with
``benchmarks/notebook_smoke.py``; no imports, so reading it sets nothing up."""

# Tiny parameters per notebook: enough to execute every cell in seconds (plumbing, not claims;
# the README's rule: each run under 60 s on the idle machine).
SMOKE = {
    "00_quickstart": {"epochs": 2, "width": 16},
    "01_proxprop": {"epochs": 2, "seeds": 1, "hidden": [32, 16, 32], "lr_grid": [0.1]},
    # 02: the Meta-RNN at meta_rnn_lr alone (its step-size sweep: tests/test_vsml_experiment.py)
    "02_vsml": {"iterations": 3, "seeds": 1, "steps": 8, "test_steps": 10, "test_episodes": 2,
                "tasks": ["iris"], "image_tasks": [], "meta_rnn_tasks_per_batch": 2,
                "meta_rnn_lrs": [], "backprop_iterations": 3},
    "03_sac_ae": {"image_size": 16, "action_repeat": 50, "steps": 40, "init_steps": 20,
                  "eval_every": 20, "eval_episodes": 1, "seeds": 1, "batch_size": 4,
                  "hidden_dim": 16, "num_filters": 4},
    "04_policy_improvement": {"agent": "search", "depth": 1, "branching": 3, "model": "true",
                              "compare": False, "seeds": 2, "total_steps": 200,
                              "eval_every": 100, "widths": 8, "batch_size": 8},
    # 05: the sweep machinery end to end on the quickest workload that reports phases (07's
    # A2C; its MPO workload, 04, is swept in tests/test_early_termination.py)
    "05_sweeps": {"trials": 1, "phases": 1, "total_steps": 200, "eval_every": 100, "workers": 1,
                  "workload": "07_a2c.ipynb", "metric": "a2c_final_return",
                  "fixed": {"envs": 2, "seeds": 1},
                  "space": {"learning_rate": {"type": "loguniform", "low": 1e-4,
                                              "high": 1e-2}}},
    "06_ga3c": {"seeds": 1, "seconds": 1.0, "agents": 2, "prediction_batch": 4,
                "training_batch": 10, "a2c_envs": 2, "agent_counts": [1, 2],
                "trainer_counts": [1], "throughput_seconds": 0.5, "lags": [0, 1],
                "lag_updates": 5, "step_wait": 0.4, "initial_wait": 0.2,
                "adjust_seconds": 1.0, "adjust_seeds": 1, "adjust_starts": [[2, 1, 1]],
                "fixed_configs": [[2, 1, 1]], "checkpoint": False},
    "07_a2c": {"envs": 2, "seeds": 1, "total_steps": 200, "eval_every": 100},
    "08_early_termination": {"configurations": 3, "seeds": 1, "envs": 2, "total_steps": 80,
                             "evaluations": 2, "phases": 2, "orders": 3,
                             "mpo_configurations": 3, "mpo_total_steps": 200,
                             "mpo_eval_every": 100,
                             "mpo_fixed": {"widths": 8, "batch_size": 8}, "live_trials": 0},
    "09_sequence_parallel": {"devices": 2, "length": 32, "keys": 2, "values": 4, "hidden": 16,
                             "layers": 1, "batch": 2, "steps": 4, "exact_devices": [2],
                             "tensor_devices": 2, "memory_hidden": 16, "memory_batch": 2,
                             "memory_bl": [32], "search_hidden": 16, "search_length": 32,
                             "search_batch": 2, "search_precision": 1,
                             "budget_mib": 0.5, "one_device_hidden": 16,
                             "one_device_budget_mib": 0.0},
    "10_automap": {"hidden": 64, "stack_layers": [1], "budget": 3, "seeds": 1,
                   "searchers": ["greedy", "mcts"], "regime_batch": [8], "regime_length": [32],
                   "regime_budgets": [1.0], "regime_compiles": 3, "exhaustive_limit": 0},
    # 11: the pipeline check runs in benchmarks/interlocking.py's quick test, and the image
    # task's ResNet there and in tests/test_interlocking*.py: the smoke run takes the text task,
    # at text_lr (the step-size search is tests/test_interlocking_experiment.py's: 47 -> 30 s)
    "11_interlocking": {"tasks": ["text"], "rules": ["local", "pairwise"], "seeds": 1,
                        "channels": 4, "blocks": 1, "image_steps": 10, "image_batch": 8,
                        "hidden": 16, "length": 16, "text_batch": 4, "text_steps": 10,
                        "eval_every": 5, "eval_examples": 16, "timing_repeats": 1,
                        "pipeline_batches": 0, "text_lr_grid": []},
    # 12: the shallow variant's compile is left to tests/test_pixelcnn.py
    "12_pixelcnn": {"models": ["sequential", "multiscale"], "seeds": 1, "steps": 2,
                    "eval_every": 2, "eval_examples": 8, "batch": 4,
                    "channels": 8, "layers": 2, "base": 16, "base_channels": 8,
                    "base_layers": 1, "group_channels": 8, "group_blocks": 1,
                    "group_shapes": [[4, 2]], "timing_sizes": [16, 32], "timing_batch": 2,
                    "timing_steps": 16,
                    "samples": 2},
    # 13: ClariNet and the M ablations compile their own losses: left to the unit tests
    "13_parallel_wavenet": {"teacher_channels": 8, "teacher_layers": 4, "cycle": 4,
                            "mixtures": 3, "teacher_steps": 4, "flows": 2,
                            "student_channels": 8, "student_layers": 3, "student_steps": 4,
                            "batch": 2, "length": 512, "student_batch": 2,
                            "student_length": 512, "chunk": 2, "eval_every": 2,
                            "variants": ["student", "no_power"], "eval_utterances": 1,
                            "timing_lengths": [256, 512], "timing_widths": [8],
                            "timing_steps": 16},
    "14_causal_selection": {"nodes": [4], "mechanisms": ["linear"], "repeats": 2,
                            "candidates": 6, "hidden": [8, 8], "steps": 20, "stop_every": 5,
                            "train_rows": 200, "stopping_rows": 50,
                            "selection_rows": 100, "test_rows": 100, "diabetes_repeats": 2},
}

# Set in every test process (tests/conftest.py) before jax starts. Most XLA optimisations off
# halves most compile times; programs then round differently in the last bits (about 3e-8
# relative measured), so tests compare with tolerances or against runs compiled alike, and
# JAX_DISABLE_MOST_OPTIMIZATIONS=0 make test tests the optimised programs notebooks run. The
# persistent cache keeps only programs that took this long to compile.
COMPILE = {"JAX_DISABLE_MOST_OPTIMIZATIONS": "1",
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.2"}

# With optimisations off, XLA's older CPU fusion emitters compile in about half the time of
# its MLIR ones (measured 2026-11-24 on jax 0.10.2, this 2-core VM: six train steps of
# notebook 09's size search 15.8 s -> 7.4 s; six compile-heavy test modules 156 s -> 106 s).
# With optimisations on they compile slower (25.8 s -> 31.2 s), so the flag goes with
# JAX_DISABLE_MOST_OPTIMIZATIONS=1 only. A debug flag of XLA, which aborts on a flag it does
# not know: added only where this Python's jaxlib accepts it.
# And LLVM's code generation in one piece: by default XLA splits a program's module into up
# to 32 parts compiled on threads of their own, which on 2 busy cores costs more CPU than it
# saves time (measured 2026-12-02, this VM: three compile-heavy test modules, 3 runs each
# alternating, 118.5 / 124.2 / 133.1 s of CPU by default, 100.6 / 105.4 / 107.2 s in one
# piece; wall 105.2 / 111.5 / 119.0 s against 96.1 / 101.1 / 101.6 s).
FAST_COMPILE_FLAG = "--xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1"


def compile_settings(environ, python: str) -> dict[str, str]:
    """What the tests compile under, given the environment ``environ``: ``COMPILE``'s
    variables where ``environ`` does not set its own, and ``FAST_COMPILE_FLAG`` added to
    XLA_FLAGS when most optimisations are off and ``python``'s jaxlib accepts it (one
    interpreter started to ask, about 2 s)."""
    import subprocess

    out = {name: environ.get(name, value) for name, value in COMPILE.items()}
    flags = environ.get("XLA_FLAGS", "")
    if out["JAX_DISABLE_MOST_OPTIMIZATIONS"] not in ("1", "true", "True"):
        return out
    if all(flag in flags.split() for flag in FAST_COMPILE_FLAG.split()):
        return out | {"XLA_FLAGS": flags}
    trial = f"{flags} {FAST_COMPILE_FLAG}".strip()
    probe = subprocess.run(
        [python, "-c", "import jax; jax.jit(lambda x: x + 1)(1.0).block_until_ready()"],
        env={**environ, **out, "XLA_FLAGS": trial, "JAX_PLATFORMS": "cpu"},
        capture_output=True, timeout=300)
    return out | {"XLA_FLAGS": trial} if probe.returncode == 0 else out
