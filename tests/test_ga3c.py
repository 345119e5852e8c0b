"""Host GA3C and A3C: queue batching, lag bookkeeping, sampling, and threads that end on
every exit path (a run's end, an error in a thread, Ctrl-C)."""

import functools
import queue
import threading
import time

import jax
import numpy as np
import pytest

from lab.train import ga3c
from lab.train.ga3c import GA3CConfig, Params, lags_of, run_a3c, run_ga3c, sample, take_batch

TINY = GA3CConfig(game="breakout", agents=3, prediction_batch=4, training_batch=10)


def test_take_batch_takes_everything_waiting_in_one_call():
    q = queue.Queue()
    for i in range(7):
        q.put(i)
    assert take_batch(q, most=32) == list(range(7))  # 7 waiting states: one batch of 7
    for i in range(7):
        q.put(i)
    assert take_batch(q, most=4) == [0, 1, 2, 3] and take_batch(q, most=4) == [4, 5, 6]
    assert take_batch(q, most=4, timeout=0.01) == []


def test_lags_follow_a_known_schedule_of_versions():
    assert lags_of(np.array([0, 0, 1, 2]), 3).tolist() == [3, 3, 2, 1]
    params = Params(model="m", opt_state="o")
    calls = []

    def update(model, opt_state, *batch):
        calls.append(batch)
        return model, opt_state

    # versions the steps acted with, against the version each update trains
    assert params.apply(update, "batch", np.array([0, 0])).tolist() == [0, 0]
    assert params.apply(update, "batch", np.array([0, 1])).tolist() == [1, 0]
    assert params.apply(update, "batch", np.array([0, 2, 2])).tolist() == [2, 0, 0]
    assert params.read() == ("m", 3) and calls == [("batch",)] * 3


def test_sample_follows_the_probabilities():
    rng = np.random.default_rng(0)
    probs = np.tile([0.2, 0.0, 0.8], (20_000, 1))
    counts = np.bincount(sample(probs, rng), minlength=3) / 20_000
    np.testing.assert_allclose(counts, [0.2, 0.0, 0.8], atol=0.01)
    assert sample(np.array([[0.0, 1.0]]), rng).tolist() == [1]


def threads_now() -> int:
    return threading.active_count()


def signatures(jitted: ga3c.Compiled) -> dict[str, int]:
    """How many argument signatures each jitted piece's dispatch holds (equinox's
    ``filter_jit`` keeps its ``jax.jit`` as ``_cached``)."""
    return {name: getattr(f, "_cached", f)._cache_size() for name, f in jitted._asdict().items()}


@pytest.mark.slow
def test_ga3c_and_a3c_run_measure_and_leave_no_thread_behind(monkeypatch):
    before = threads_now()
    compiled, compile_all = [], ga3c.compile_all  # what each run compiles, as it compiled it

    def recorded(*args):
        jitted = compile_all(*args)
        compiled.append((jitted, signatures(jitted)))
        return jitted

    monkeypatch.setattr(ga3c, "compile_all", recorded)
    r = run_ga3c(TINY, jax.random.key(0), env_steps=300)
    assert threads_now() == before
    assert r.env_steps >= 300 and r.trainings >= 1 and r.predictions >= r.env_steps
    assert 1 <= r.batch_sizes.max() <= 4 and len(r.latencies) == r.predictions
    assert len(r.lags) == r.trainings * TINY.training_batch and r.lags.min() >= 0
    assert len(r.episodes) >= 1 and r.rate("env_steps") > 0
    a = run_a3c(TINY, jax.random.key(0), env_steps=150)
    assert threads_now() == before
    assert a.env_steps >= 150 and a.trainings >= 1 and a.predictions >= a.env_steps
    # the threads called nothing with a signature compile_all had not called it with
    assert len(compiled) == 2
    for jitted, seen in compiled:
        assert signatures(jitted) == seen


@pytest.mark.slow
def test_an_error_in_a_thread_reaches_the_caller_and_stops_every_thread(monkeypatch):
    before = threads_now()

    def broken(probs, rng):
        raise RuntimeError("predictor failed")

    monkeypatch.setattr(ga3c, "sample", broken)
    with pytest.raises(RuntimeError, match="predictor failed"):
        run_ga3c(TINY, jax.random.key(0), seconds=600)
    assert threads_now() == before


@pytest.mark.slow
def test_ctrl_c_and_stop_join_every_thread():
    before = threads_now()
    seen = []

    def interrupt(stats):
        seen.append(stats.env_steps)
        if stats.env_steps > 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_ga3c(TINY, jax.random.key(0), seconds=600, callback=interrupt, every=0.05)
    assert threads_now() == before
    stopped = run_a3c(TINY, jax.random.key(0), seconds=600, every=0.05,
                      callback=lambda stats: stats.env_steps < 20)  # False: Stop
    assert stopped.env_steps >= 20 and threads_now() == before


@pytest.mark.parametrize("kwargs, message", [
    ({"t_max": 0}, "t_max must be at least 1, got 0"),
    ({"agents": 0}, "agents must be at least 1, got 0"),
    ({"predictors": 0}, "predictors must be at least 1, got 0"),
    ({"trainers": 0}, "trainers must be at least 1, got 0"),
    ({"game": "pong"}, "unknown MinAtar game 'pong'"),
    ({"suite": "atari"}, "atari games take the 'atari' torso, got 'minatar'"),
])
def test_bad_host_settings_are_refused_before_any_work(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GA3CConfig(**kwargs)


NOTEBOOK = {"preset": "default", "game": "breakout", "sticky": 0.1, "seeds": 1, "seconds": 1.0,
            "agents": 2, "predictors": 1, "trainers": 1, "t_max": 5, "prediction_batch": 4,
            "training_batch": 10, "learning_rate": 3e-4, "entropy_cost": 0.01,
            "log_epsilon": 0.0, "a2c_envs": 2, "agent_counts": [1, 2], "trainer_counts": [1],
            "throughput_seconds": 0.5, "lags": [0, 1], "lag_updates": 5,
            "step_wait": 0.4, "initial_wait": 0.2, "adjust_seconds": 1.0, "adjust_seeds": 1,
            "adjust_starts": [[2, 1, 1]], "fixed_configs": [[2, 1, 1]], "checkpoint": False}


@pytest.mark.parametrize("change, message", [
    ({"preset": "huge"}, "unknown preset 'huge'; choose one of default, claim"),
    ({"game": "pong"}, "unknown game 'pong'; choose one of breakout"),
    ({"t_max": 0}, "t_max must be at least 1, got 0"),
    ({"agents": 0}, "agents must be at least 1, got 0"),
    ({"lags": [0, -1]}, "lags must be numbers of updates of at least 0"),
    ({"suite": "nes"}, "unknown suite 'nes'; choose one of minatar, atari"),
    ({"agent_counts": []}, "agent_counts must be a non-empty list"),
    ({"adjust_starts": [[2, 0, 1]]}, r"adjust_starts must be a list of \[agents"),
    ({"fixed_configs": [[2, 1]]}, r"fixed_configs must be a list of \[agents"),
    ({"adjust_seconds": 0.9}, "must cover initial_wait"),
    ({"initial_wait": -1}, "initial_wait must be at least 0 seconds"),
    ({"adjust_seeds": 0}, "adjust_seeds must be at least 1, got 0"),
    ({"seconds": 0}, "seconds must be positive, got 0"),
])
def test_notebook_parameters_are_refused_with_the_fix(change, message):
    from lab.experiments.ga3c import configure

    configure(**NOTEBOOK)  # the valid base
    with pytest.raises(ValueError, match=message):
        configure(**(NOTEBOOK | change))


@pytest.mark.slow
@pytest.mark.parametrize("run", [run_ga3c, run_a3c])
def test_a_callback_holds_every_worker_and_its_time_is_not_counted(run):
    """A paused panel blocks in the callback: no agent steps on (beyond the steps in flight
    when the hold began, at most two per agent), and the held time is not the run's."""
    seen = {}

    def hold(stats):
        if "moved" not in seen and stats.env_steps > 0:
            start, limit = time.perf_counter(), stats.env_steps + 2 * TINY.agents
            seen.update(moved=False, wall=start, seconds=stats.seconds())
            while time.perf_counter() - start < 1.0:  # a window to see a step that mustn't be
                if stats.env_steps > limit:
                    seen["moved"] = True
                    break
                threading.Event().wait(0.01)
        return True

    r = run(TINY, jax.random.key(0), env_steps=200, callback=hold, every=0.05)
    wall = time.perf_counter() - seen["wall"]  # since the hold began
    assert seen["moved"] is False
    assert wall - (r.seconds - seen["seconds"]) >= 1.0  # the hold is not the run's time


# --- the dynamic adjustment, driven by a fake throughput --------------------------------------

def test_random_walk_moves_all_counts_at_once_by_at_most_one_and_never_below_one():
    walk = ga3c.RandomWalk((1, 1, 1), np.random.default_rng(0))
    moved = []
    for _ in range(300):
        before = walk.counts
        after = walk.propose()
        step = np.subtract(after, before)
        assert after != before and np.abs(step).max() == 1 and min(after) >= 1
        moved.append(np.count_nonzero(step))
        walk.judge(float(np.random.default_rng(len(moved)).random()))
    assert max(moved) == 3 and min(moved) == 1  # joint moves, and single ones
    capped = ga3c.RandomWalk((4, 2, 2), np.random.default_rng(1), limits=(4, 2, 3))
    for _ in range(100):
        assert np.all(np.array(capped.propose()) <= (4, 2, 3))
        capped.judge(1.0)


def test_random_walk_reverts_a_worse_window_keeps_a_better_one_and_compares_with_the_last():
    walk = ga3c.RandomWalk((8, 2, 2), np.random.default_rng(2), previous=10.0)
    first = walk.propose()
    assert walk.judge(8.0) is False and walk.counts == (8, 2, 2)  # worse than 10: reverted
    second = walk.propose()
    # the reference compares with the window before, the reverted one (8), not the best (10)
    assert walk.judge(9.0) is True and walk.counts == second != first
    assert walk.previous == 9.0
    walk.propose()
    assert walk.judge(9.0) is True  # a tie keeps the move (reverts only on fewer)


class FakeServer:
    """Trainings accrue each fake second at ``rate(agents, predictors, trainers)`` times
    1 + 0.3 of a normal draw from its own generator: two servers with one seed give the same
    trainings for the same counts at the same second."""

    def __init__(self, seed, counts=(2, 1, 1)):
        self.t, self.done, self.counts = 0.0, 0.0, counts
        self.noise = np.random.default_rng(seed)

    @staticmethod
    def rate(counts):
        agents, predictors, trainers = counts
        return 10.0 * min(agents, 6) - 3.0 * (predictors + trainers)  # best: 6+ agents, 1/1

    def second(self):
        self.t += 1.0
        self.done += max(0.0, self.rate(self.counts) * (1 + 0.3 * self.noise.standard_normal()))

    def sleep(self, seconds):
        before = self.done
        for _ in range(int(seconds)):
            self.second()
        return self.done - before


def reference_run(server, draws, initial_wait, step_wait, windows):
    """NVlabs/GA3C's ``ThreadDynamicAdjustment.run``, re-stated line by line on a fake clock
    (``time.sleep`` advances ``server``; ``draws()`` stands for ``np.random.randint(3,
    size=3)``; the trainers count ``temporal_training_count``). Returns, per window, the
    counts it ran (agents, predictors, trainers) and whether the move was kept."""
    trainer_count, predictor_count, agent_count = 1, 1, 2
    temporal_training_count = server.sleep(initial_wait)  # counted from start-up
    decisions = []
    while len(decisions) < windows:
        old = trainer_count, predictor_count, agent_count
        direction = draws() - 1  # random_walk
        trainer_count = max(1, trainer_count - direction[0])
        predictor_count = max(1, predictor_count - direction[1])
        agent_count = max(1, agent_count - direction[2])
        if (trainer_count, predictor_count, agent_count) == old:
            continue
        old_count = temporal_training_count
        server.counts = (agent_count, predictor_count, trainer_count)  # enable_disable
        temporal_training_count = server.sleep(step_wait)
        ran = server.counts
        if temporal_training_count < old_count:
            trainer_count, predictor_count, agent_count = old
        decisions.append((ran, temporal_training_count >= old_count))
    return decisions


def adjusted_run(server, rng, initial_wait, step_wait, windows):
    """``_adjuster`` on the same fake clock, ticked every fake second: the same rows."""
    walk, trace = ga3c.RandomWalk(server.counts, rng), []

    def apply(counts):
        server.counts = counts

    tick = ga3c._adjuster(walk, ga3c.Adjustment(step_wait=step_wait, initial_wait=initial_wait),
                          lambda: (server.t, server.done), apply, trace)
    while len(trace) < windows + 1:
        server.second()
        tick()
    return trace


def test_adjuster_decides_every_window_as_the_reference_does_the_first_included():
    differs_by_rate = 0
    for seed in range(100):
        reference = reference_run(FakeServer(seed), functools.partial(
            np.random.default_rng(1000 + seed).integers, 3, size=3), 10, 20, windows=29)
        trace = adjusted_run(FakeServer(seed), np.random.default_rng(1000 + seed), 10, 20, 29)
        rows = np.array(trace)
        assert rows[0, 0] == 10.0 and rows[0, 5] == 1.0  # the initial wait: no move yet
        assert np.allclose(np.diff(rows[:, 0]), 20.0)  # windows of exactly step_wait
        ours = [(tuple(int(c) for c in row[1:4]), bool(row[5])) for row in rows[1:]]
        assert ours == reference, f"seed {seed}"
        # the first move: its 20-s count against the 10 s since start-up (rate x seconds)
        assert ours[0][1] == bool(rows[1, 4] * 20 >= rows[0, 4] * 10)
        differs_by_rate += ours[0][1] != bool(rows[1, 4] >= rows[0, 4])
    assert differs_by_rate > 10  # where comparing rates (our rule before) decided otherwise


def test_adjuster_climbs_a_fake_throughput_landscape_and_applies_what_it_runs():
    server, applied = FakeServer(0), []
    walk, trace = ga3c.RandomWalk((2, 1, 1), np.random.default_rng(3)), []

    def apply(counts):
        applied.append(counts)
        server.counts = counts

    tick = ga3c._adjuster(walk, ga3c.Adjustment(step_wait=20, initial_wait=10),
                          lambda: (server.t, server.done), apply, trace)
    waits = []
    for _ in range(10 + 20 * 60):
        server.second()
        waits.append(tick())
    rows = np.array(trace)
    assert len(rows) == 61 and len(applied) == 61 and rows[:, 1:4].min() >= 1
    assert rows[1:, 1:4].tolist() == [list(c) for c in applied[:-1]]  # it ran what it applied
    assert waits[:3] == [9.0, 8.0, 7.0] and waits[9] == 20.0  # seconds until it is due
    assert FakeServer.rate(walk.counts) > FakeServer.rate((2, 1, 1))  # climbed


@pytest.mark.slow
def test_stop_ends_an_adjusted_run_within_one_window_and_joins_every_thread():
    """Stop during a 30-s window: the run ends without finishing it (the bound is the
    window itself, generous on a busy machine: joining the threads takes a second or two)."""
    before = threads_now()
    adjust = ga3c.Adjustment(step_wait=30.0, initial_wait=0.2)
    stopped = []

    def stop_after(stats):
        if stats.seconds() < 1.0:
            return True
        stopped.append(stats.seconds())
        return False  # Stop

    r = run_ga3c(TINY, jax.random.key(0), seconds=600, adjust=adjust, every=0.05,
                 callback=stop_after)
    assert len(stopped) == 1 and r.seconds - stopped[0] < adjust.step_wait
    assert threads_now() == before
    assert len(r.trace) == 1 and r.trace[0, 0] >= 0.2 and r.trace[:, 1:4].min() >= 1
    assert r.trace[-1, 0] <= stopped[0]  # no window judged after Stop
