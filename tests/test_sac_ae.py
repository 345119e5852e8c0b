"""SAC-AE: shapes, gradient routing, soft targets, temperature and losses (lab.train.sac_ae)."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.models.sac_ae import (
    ConvTrunk,
    Decoder,
    Encoder,
    tanh_gaussian_log_prob,
    tanh_gaussian_sample,
)
from lab.train.sac_ae import (
    AgentState,
    Batch,
    SACAEConfig,
    act,
    critic_loss,
    init,
    reconstruction_target,
    soft_update_target,
    td_target,
    temperature_loss,
    update,
    update_actor_and_alpha,
    update_critic,
    update_decoder,
)

SIZE, CHANNELS, ACTIONS, BATCH = 32, 9, 2, 8
CONFIG = SACAEConfig(hidden_dim=64, batch_size=BATCH)


def _batch(key) -> Batch:
    """Smooth images (a gradient with a per-example shift and channel offset)."""
    k_shift, k_action, k_reward = jax.random.split(key, 3)
    shift = jax.random.uniform(k_shift, (BATCH, 1, 1, 1), maxval=128.0)
    rows = jnp.arange(SIZE)[None, :, None, None] * 4.0
    cols = jnp.arange(SIZE)[None, None, :, None] * 2.0
    chan = jnp.arange(CHANNELS)[None, None, None, :] * 10.0
    obs = jnp.mod(rows + cols + chan + shift, 256.0).astype(jnp.uint8)
    return Batch(obs=obs,
                 action=jax.random.uniform(k_action, (BATCH, ACTIONS), minval=-1, maxval=1),
                 reward=jax.random.normal(k_reward, (BATCH,)),
                 next_obs=jnp.flip(obs, axis=-2),
                 not_done=jnp.ones((BATCH,)))


def _arrays(tree) -> list:
    return jax.tree_util.tree_leaves(eqx.filter(tree, eqx.is_array))


def _same(a, b) -> bool:
    return all(bool(jnp.array_equal(x, y)) for x, y in zip(_arrays(a), _arrays(b), strict=True))


def _all_moved(a, b) -> bool:
    """Every weight matrix (ndim >= 2) changed."""
    return all(not bool(jnp.array_equal(x, y))
               for x, y in zip(_arrays(a), _arrays(b), strict=True) if x.ndim >= 2)


@pytest.fixture(scope="module")
def setup():
    state = init(CONFIG, jax.random.key(0), (SIZE, SIZE, CHANNELS), ACTIONS)
    return state, _batch(jax.random.key(1))


@pytest.fixture(scope="module")
def after_critic(setup):
    state, batch = setup
    return eqx.filter_jit(update_critic)(CONFIG, state, batch, jax.random.key(2))


def test_encoder_shapes_84():
    encoder = Encoder((84, 84, 9), key=jax.random.key(0))
    obs = jax.ShapeDtypeStruct((84, 84, 9), jnp.uint8)
    assert jax.eval_shape(encoder.trunk, obs).shape == (35, 35, 32)
    assert encoder.head.linear.in_features == 39200
    assert jax.eval_shape(encoder, obs).shape == (50,)


@pytest.mark.parametrize("shape", [(84, 84), (64, 64), (48, 48), (33, 33), (48, 40), (15, 15)])
def test_decoder_inverts_encoder_shape(shape):
    obs_shape = (*shape, 9)
    encoder = Encoder(obs_shape, key=jax.random.key(0))
    decoder = Decoder(obs_shape, key=jax.random.key(1))
    h = jax.eval_shape(encoder, jax.ShapeDtypeStruct(obs_shape, jnp.uint8))
    assert jax.eval_shape(decoder, h).shape == obs_shape


def test_trunk_too_small_image_raises():
    with pytest.raises(ValueError, match="minimum is 15"):
        ConvTrunk(9, (14, 84), key=jax.random.key(0))
    with pytest.raises(ValueError, match="minimum is 15"):
        init(CONFIG, jax.random.key(0), (14, 14, 9), ACTIONS)


@pytest.mark.parametrize("kwargs", [{"discount": 1.5}, {"hidden_dim": 0}, {"critic_tau": -0.1},
                                    {"actor_every": 0}, {"bits": 9}, {"log_std_min": 3.0},
                                    {"init_temperature": 0.0}])
def test_config_bad_values_raise(kwargs):
    with pytest.raises(ValueError):
        SACAEConfig(**kwargs)


def test_init_uses_delta_orthogonal_convs_and_orthogonal_linears(setup):
    state, _ = setup
    conv = state.critic.encoder.trunk.convs[1].weight  # (3, 3, 32, 32), HWIO
    centre = conv[1, 1]
    np.testing.assert_allclose(centre @ centre.T, 2.0 * np.eye(32), atol=1e-5)
    assert not bool(jnp.any(conv.at[1, 1].set(0.0)))  # every other tap is zero
    w = state.actor.mlp.layers[1].weight  # 64 x 64
    np.testing.assert_allclose(w @ w.T, np.eye(64), atol=1e-5)
    assert float(jnp.abs(state.actor.mlp.layers[1].bias).sum()) == 0.0
    assert _same(state.critic, state.target_critic)
    assert float(jnp.exp(state.log_alpha)) == pytest.approx(0.1)


def test_critic_update_trains_convs_and_q_not_actor(setup, after_critic):
    state, _ = setup
    new, aux = after_critic
    assert _all_moved(state.critic, new.critic)
    assert _same(state.actor, new.actor)
    assert _same(state.target_critic, new.target_critic)
    assert _same(state.decoder, new.decoder)
    assert bool(jnp.isfinite(aux.critic_loss))


def test_actor_update_leaves_convs_and_critic_unchanged(setup):
    state, batch = setup
    new, aux = eqx.filter_jit(update_actor_and_alpha)(CONFIG, state, batch, jax.random.key(3))
    assert _same(state.critic, new.critic)
    assert _same(state.decoder, new.decoder)
    assert _all_moved(state.actor, new.actor)
    # temperature: the initial entropy is below -|A|, so alpha must rise from 0.1
    assert float(aux.entropy) < -ACTIONS
    assert float(jnp.exp(new.log_alpha)) > 0.1


def test_decoder_update_trains_convs_head_and_decoder_only(setup):
    state, batch = setup
    new, _ = eqx.filter_jit(update_decoder)(CONFIG, state, batch, jax.random.key(4))
    assert _all_moved(state.critic.encoder, new.critic.encoder)
    assert _all_moved(state.decoder, new.decoder)
    assert _same((state.critic.q1, state.critic.q2), (new.critic.q1, new.critic.q2))
    assert _same(state.actor, new.actor)
    assert _same(state.target_critic, new.target_critic)


def test_target_soft_update_closed_form(setup, after_critic):
    state, _ = setup
    moved, _ = after_critic  # online critic differs from the target now
    new = soft_update_target(CONFIG, moved)
    for part, tau in (("encoder", CONFIG.encoder_tau), ("q1", CONFIG.critic_tau),
                      ("q2", CONFIG.critic_tau)):
        online = _arrays(getattr(moved.critic, part))
        old = _arrays(getattr(moved.target_critic, part))
        for o, t, n in zip(online, old, _arrays(getattr(new.target_critic, part)), strict=True):
            np.testing.assert_allclose(n, (1 - tau) * t + tau * o, rtol=1e-6, atol=1e-7)
        assert any(not bool(jnp.array_equal(o, t)) for o, t in zip(online, old, strict=True))


def test_update_schedule_actor_and_target_every_two(setup):
    state, batch = setup
    step = eqx.filter_jit(update)
    s1, m1 = step(CONFIG, state, batch)  # step 0: everything runs
    assert _all_moved(state.actor, s1.actor)
    assert not _same(state.target_critic, s1.target_critic)
    assert bool(jnp.isfinite(m1.actor.actor_loss)) and bool(jnp.isfinite(m1.decoder.mse))
    s2, m2 = step(CONFIG, s1, batch)  # step 1: critic and decoder only
    assert _same(s1.actor, s2.actor)
    assert _same(s1.target_critic, s2.target_critic)
    assert float(s1.log_alpha) == float(s2.log_alpha)
    assert not _same(s1.critic.encoder.trunk, s2.critic.encoder.trunk)
    assert bool(jnp.isnan(m2.actor.actor_loss)) and bool(jnp.isfinite(m2.decoder.mse))
    assert int(s2.step) == 2


def test_reconstruction_loss_decreases_on_fixed_batch(setup):
    state, batch = setup

    @jax.jit
    def run(state: AgentState):
        def body(s, key):
            return update_decoder(CONFIG, s, batch, key)
        return jax.lax.scan(body, state, jax.random.split(jax.random.key(5), 50))

    _, aux = run(state)
    mse = np.asarray(aux.mse)
    assert mse[-5:].mean() < 0.5 * mse[:5].mean(), mse


def test_temperature_loss_gradient_sign():
    log_pi = jnp.array([1.0, 3.0])  # entropy estimate -2
    for target, sign in ((-5.0, 1.0), (5.0, -1.0)):
        grad = jax.grad(lambda la, t=target: temperature_loss(la, log_pi, t)[0])(jnp.log(0.1))
        # d/dlog_alpha mean(alpha (-log_pi - target)) = alpha * (entropy - target)
        np.testing.assert_allclose(grad, 0.1 * (-2.0 - target), rtol=1e-6)
        assert np.sign(grad) == sign  # entropy above target -> alpha falls (positive grad)


def test_tanh_gaussian_log_prob_change_of_variables():
    mean, log_std = jnp.array([0.3]), jnp.array([-0.2])
    u = np.linspace(-3.0, 3.0, 13)
    got = np.array([tanh_gaussian_log_prob(jnp.array([x]), mean, log_std) for x in u])
    std = np.exp(-0.2)
    log_normal = -0.5 * ((u - 0.3) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    h = 1e-5
    jacobian = (np.tanh(u + h) - np.tanh(u - h)) / (2 * h)  # float64 finite differences
    np.testing.assert_allclose(got, log_normal - np.log(jacobian), rtol=1e-4, atol=1e-4)
    # the density of a = tanh(u) integrates to one over (-1, 1)
    a = np.linspace(-1 + 1e-6, 1 - 1e-6, 200001)
    logp = jax.vmap(lambda x: tanh_gaussian_log_prob(x[None], mean, log_std))(
        jnp.arctanh(jnp.asarray(a, jnp.float32)))
    assert np.trapezoid(np.exp(np.asarray(logp, np.float64)), a) == pytest.approx(1.0, abs=2e-3)


def test_tanh_gaussian_sample_matches_log_prob():
    mean, log_std = jnp.array([0.5, -1.0]), jnp.array([0.1, -1.0])
    a, logp = tanh_gaussian_sample(mean, log_std, jax.random.key(0))
    assert bool(jnp.all(jnp.abs(a) < 1))
    np.testing.assert_allclose(logp, tanh_gaussian_log_prob(jnp.arctanh(a), mean, log_std),
                               rtol=1e-3)


def test_reconstruction_target_five_bits_in_range():
    obs = jnp.arange(256, dtype=jnp.uint8).reshape(1, 16, 16)
    t = reconstruction_target(obs, jax.random.key(0))
    assert float(t.min()) >= -0.5 and float(t.max()) <= 0.5
    np.testing.assert_array_equal(np.floor((np.asarray(t) + 0.5) * 32), np.asarray(obs) // 8)


def test_td_target_and_critic_loss_hand_values():
    y = td_target(jnp.array([1.0, 2.0]), jnp.array([1.0, 0.0]), 0.9, jnp.array([3.0, 5.0]),
                  jnp.array([4.0, 1.0]), jnp.array([-1.0, 2.0]), jnp.asarray(0.5))
    np.testing.assert_allclose(y, [1.0 + 0.9 * (3.0 + 0.5), 2.0])
    loss, _ = critic_loss(jnp.array([0.0, 0.0]), jnp.array([1.0, 1.0]), jnp.array([1.0, 3.0]))
    np.testing.assert_allclose(loss, (1 + 9) / 2 + (0 + 4) / 2)


def test_act_deterministic_is_tanh_mean(setup):
    state, batch = setup
    obs = batch.obs[0]
    mean, _ = state.actor(state.critic.encoder.trunk(obs))
    np.testing.assert_allclose(act(state, obs, jax.random.key(0), True), jnp.tanh(mean),
                               rtol=1e-6)
    sample = act(state, obs, jax.random.key(0), False)
    assert sample.shape == (ACTIONS,) and bool(jnp.all(jnp.abs(sample) <= 1))


def test_pixel_sac_ablation_has_no_decoder():
    config = dataclasses.replace(CONFIG, decoder=False)
    state = init(config, jax.random.key(0), (SIZE, SIZE, CHANNELS), ACTIONS)
    assert state.decoder is None and state.decoder_opt_state is None
    batch = _batch(jax.random.key(1))
    with pytest.raises(ValueError, match="decoder"):
        update_decoder(config, state, batch, jax.random.key(2))
    new, metrics = eqx.filter_eval_shape(update, config, state, batch)  # traces, no compile
    assert new.decoder is None and metrics.decoder.mse.shape == ()


def test_actor_loss_stops_gradient_at_conv_features(setup):
    state, batch = setup

    def actor_loss_of_trunk(trunk):
        s = eqx.tree_at(lambda st: st.critic.encoder.trunk, state, trunk)
        return update_actor_and_alpha(CONFIG, s, batch, jax.random.key(3))[1].actor_loss

    grads = eqx.filter_jit(eqx.filter_grad(actor_loss_of_trunk))(state.critic.encoder.trunk)
    assert all(not bool(jnp.any(g)) for g in _arrays(grads))
