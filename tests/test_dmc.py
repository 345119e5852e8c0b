"""The DeepMind Control Suite wrapper: a real cartpole smoke test plus its error messages.

The tests that run MuJoCo skip, saying what to install, where dm_control or a headless GL
library is missing; the error-message tests run everywhere.
"""

import subprocess
import sys

import numpy as np
import pytest

from lab.envs import dmc


@pytest.fixture(scope="module")
def cartpole(suite):
    try:
        env = dmc.make_dmc("cartpole_swingup", image_size=64, seed=0)
        env.reset()
    except Exception as err:  # the render probe: a GL library that loads but cannot render
        pytest.skip(f"MuJoCo cannot render here ({type(err).__name__}: {err})")
    yield env
    env.close()


def test_cartpole_smoke(cartpole):
    assert cartpole.action_repeat == 8 and cartpole.episode_steps == 125
    assert cartpole.action_size == 1
    frame = cartpole.reset()
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8
    assert frame.std() > 0  # something was drawn
    action = np.random.default_rng(0).uniform(-1, 1, cartpole.action_size)
    frame, reward, done = cartpole.step(action)
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8
    assert isinstance(reward, float) and 0.0 <= reward <= 8.0
    assert done is False


def test_reward_is_summed_over_repeats(suite, cartpole):  # cartpole: skip if rendering fails
    action = np.array([0.7])
    env = dmc.DMCEnv("cartpole_swingup", image_size=64, seed=3)
    env.reset()
    _, reward, _ = env.step(action)
    env.close()

    raw = suite.load("cartpole", "swingup", task_kwargs={"random": 3})
    raw.reset()
    expected = sum(raw.step(action).reward for _ in range(8))  # bounds are [-1, 1]: no rescale
    assert reward == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert expected > 0


def test_done_at_the_time_limit(cartpole):
    env = dmc.DMCEnv("cartpole_swingup", image_size=16, action_repeat=250, seed=0)
    env.reset()
    dones = [env.step(np.zeros(1))[2] for _ in range(env.episode_steps)]
    env.close()
    assert env.episode_steps == 4 and dones == [False, False, False, True]


def test_same_seed_same_frames_and_the_action_moves_the_cart(cartpole):
    """Rendering is a function of the state: one seed gives the same frames and rewards, and
    pushing the cart the other way draws it elsewhere (a frame stuck on reset breaks this).
    The cost of a step is `benchmarks/sac_ae.py`'s to measure, not a test's."""
    def frames(action, seed=5):
        env = dmc.DMCEnv("cartpole_swingup", image_size=32, seed=seed)
        out = [env.reset()] + [env.step(np.array([action]))[0] for _ in range(3)]
        env.close()
        return np.stack(out)

    left, again, right = frames(-1.0), frames(-1.0), frames(1.0)
    np.testing.assert_array_equal(left, again)
    np.testing.assert_array_equal(left[0], right[0])  # the same start
    assert np.abs(left[-1].astype(int) - right[-1]).sum() > 0  # pushed apart


def test_task_names(suite):
    assert dmc.split_task("ball_in_cup_catch") == ("ball_in_cup", "catch")
    assert dmc.split_task("cartpole_swingup") == ("cartpole", "swingup")
    assert {dmc.split_task(name) for name in dmc.DMC_TASKS} <= {
        (domain, task) for domain, task in suite.ALL_TASKS}


def test_unknown_task_fails_before_loading(monkeypatch):
    monkeypatch.setattr(dmc, "_load_suite", lambda: pytest.fail("dm_control was loaded"))
    with pytest.raises(ValueError, match="unknown DMC task 'cartpole_balance'") as info:
        dmc.make_dmc("cartpole_balance", image_size=64)
    assert "cheetah_run" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("size", [14, 0, 64.0])
def test_too_small_image(monkeypatch, size):
    monkeypatch.setattr(dmc, "_load_suite", lambda: pytest.fail("dm_control was loaded"))
    with pytest.raises(ValueError, match="image_size must be an integer >= 15"):
        dmc.make_dmc("cartpole_swingup", image_size=size)


def test_missing_gl_message(monkeypatch):
    real = dmc.gl_problem(dmc.choose_gl_backend())
    monkeypatch.setattr(dmc, "_can_load", lambda library: False)
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    message = dmc.gl_problem("osmesa")
    assert message.startswith("MuJoCo cannot render: no OSMesa (MUJOCO_GL=osmesa).")
    assert "apt-get install libosmesa6" in message and "\n" not in message
    assert dmc.gl_problem("egl").startswith("MuJoCo cannot render: no EGL (MUJOCO_GL=egl).")
    assert dmc.gl_problem("glfw") is None
    with pytest.raises(RuntimeError, match="libosmesa6"):
        dmc.make_dmc("cartpole_swingup", image_size=64)
    monkeypatch.undo()
    assert dmc.gl_problem(dmc.choose_gl_backend()) == real  # the real backend is untouched


def test_backend_choice(monkeypatch):
    for gpu, backend in [(True, "egl"), (False, "osmesa")]:
        monkeypatch.delenv("MUJOCO_GL", raising=False)
        monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)
        monkeypatch.setattr(dmc, "has_gpu", lambda gpu=gpu: gpu)
        assert dmc.choose_gl_backend() == backend
        assert dmc.os.environ["PYOPENGL_PLATFORM"] == backend
    monkeypatch.setenv("MUJOCO_GL", "egl")  # the user's choice wins
    assert dmc.choose_gl_backend() == "egl"
    monkeypatch.delenv("MUJOCO_GL")
    monkeypatch.setattr(dmc.sys, "platform", "darwin")  # not Linux: left to dm_control
    assert dmc.choose_gl_backend() == "glfw" and "MUJOCO_GL" not in dmc.os.environ


def test_import_lab_envs_does_not_import_dm_control():
    code = ("import sys, lab.envs; "
            "print(sorted(m for m in ('dm_control', 'mujoco') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_sac_ae_trains_on_dmc_and_resumes_exactly(suite, tmp_path):
    """The host-side loop on real cartpole frames (tiny agent, 20-step episodes): it runs,
    and a run interrupted after its first chunk resumes to the uninterrupted result."""
    import jax

    from lab.train import sac_ae
    from lab.train import sac_ae_loop as loops

    agent = sac_ae.SACAEConfig(batch_size=4, hidden_dim=16, features_dim=8, num_filters=4)
    loop = loops.LoopConfig(steps=40, init_steps=10, eval_every=20, eval_episodes=1,
                            replay_capacity=64)

    def run(**kwargs):
        with dmc.make_dmc("cartpole_swingup", image_size=16, action_repeat=50) as env, \
                dmc.make_dmc("cartpole_swingup", image_size=16, action_repeat=50) as eval_env:
            return loops.train_host(env, eval_env, agent, loop, jax.random.key(0), **kwargs)

    state, history = run()
    assert np.isfinite(history.eval_returns).all() and int(state.agent.step) == 39
    assert np.isfinite(history.logs.critic_loss[10:]).all()
    path = tmp_path / "dmc.ckpt"
    run(checkpoint=path, stop_after=1)
    resumed_state, resumed = run(checkpoint=path)
    np.testing.assert_array_equal(resumed.eval_returns, history.eval_returns)
    np.testing.assert_array_equal(resumed.logs.critic_loss, history.logs.critic_loss)
    np.testing.assert_array_equal(resumed_state.agent.critic.q1.layers[0].weight,
                                  state.agent.critic.q1.layers[0].weight)
