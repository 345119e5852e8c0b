"""The SAC-AE agent (Yarats et al. 2019, arXiv:1910.01741) as the reference training script
(``denisyarats/pytorch_sac_ae``) runs it: pure functions over an ``AgentState`` pytree.

``update(config, state, batch)`` does, in order: a critic update; every ``actor_every`` steps
an actor and temperature update; every ``target_every`` steps a soft target update; every
``decoder_every`` steps (when ``config.decoder``) an autoencoder update. The schedule uses
``lax.cond`` on ``state.step`` (counted from 0, so step 0 does everything), so ``update`` is
one jit-able function and can run inside ``lax.scan``.

Who trains what (the reference's routing):
- critic TD loss -> conv trunk, critic encoder head, both Q heads (critic Adam);
- actor loss -> actor head + actor MLP only; the conv features go through
  ``stop_gradient`` and the critic is read, not trained (actor Adam);
- temperature loss -> ``log_alpha`` (Adam, beta1 0.5);
- reconstruction loss -> conv trunk + critic encoder head (encoder Adam, a second Adam
  state on the same convs) and the decoder (L2 weight decay added to the gradient, then
  Adam: ``optax.add_decayed_weights`` before ``optax.adam``, as PyTorch's Adam
  ``weight_decay``).

Batches hold channels-last uint8 observations ``(B, H, W, C)``. Metrics of sub-updates that
did not run at a step are NaN.

Several devices: ``update(config, state, batch, mesh)`` with a ``lab.parallel.mesh`` splits
the batch over its ``"data"`` axis and keeps the state (networks, targets, optimizer states,
``log_alpha``) replicated; with a ``"model"`` axis above 1 the weight matrices, among them
the encoder's flat projection (39,200 -> 50 at 84x84) and the decoder's (50 -> 39,200), are
split over it. The losses are batch means, so XLA reduces the gradients across devices and
the update equals the single-device one up to float rounding.
"""

import dataclasses
import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from lab import parallel
from lab.models.sac_ae import (
    Actor,
    Critic,
    Decoder,
    conv_output_size,
    min_image_size,
    orthogonal_init,
    tanh_gaussian_sample,
)
from lab.train.replay import Transitions as Batch  # what the replay buffer samples


@dataclasses.dataclass(frozen=True)
class SACAEConfig:
    """SAC-AE hyperparameters; the defaults are the reference script's."""

    batch_size: int = 128
    """Transitions per update (used by the replay loop, not by ``update``)."""
    discount: float = 0.99
    """TD discount; a transition's ``not_done`` multiplies it."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critic (convs, critic head, Q heads)."""
    critic_beta: float = 0.9
    """Adam beta1 of the critic."""
    actor_lr: float = 1e-3
    """Adam learning rate of the actor (its head and MLP)."""
    actor_beta: float = 0.9
    """Adam beta1 of the actor."""
    alpha_lr: float = 1e-4
    """Adam learning rate of ``log_alpha``."""
    alpha_beta: float = 0.5
    """Adam beta1 of ``log_alpha``."""
    encoder_lr: float = 1e-3
    """Adam learning rate of the encoder (convs + critic head) under the reconstruction loss."""
    decoder_lr: float = 1e-3
    """Adam learning rate of the decoder."""
    decoder_weight_decay: float = 1e-7
    """L2 coefficient added to the decoder's gradient before Adam (not decoupled)."""
    latent_lambda: float = 1e-6
    """Weight of the latent penalty ``0.5 ||h||^2`` in the reconstruction loss."""
    init_temperature: float = 0.1
    """Initial alpha."""
    target_entropy: float | None = None
    """Entropy target of the temperature; None means ``-action_dim``."""
    critic_tau: float = 0.01
    """Soft target rate of the Q heads."""
    encoder_tau: float = 0.05
    """Soft target rate of the target critic's encoder (convs and head)."""
    actor_every: int = 2
    """Actor and temperature update period, in updates."""
    target_every: int = 2
    """Soft target update period, in updates."""
    decoder_every: int = 1
    """Autoencoder update period, in updates."""
    decoder: bool = True
    """Train the decoder; False is the pixel-SAC ablation (no reconstruction loss)."""
    bits: int = 5
    """Bit depth of the reconstruction target."""
    features_dim: int = 50
    """Encoder output size."""
    hidden_dim: int = 1024
    """Width of the actor and Q MLPs (two hidden layers)."""
    num_filters: int = 32
    """Channels of every conv."""
    num_layers: int = 4
    """Convs in the trunk (and transposed convs in the decoder)."""
    log_std_min: float = -10.0
    """Lower bound of the actor's log-std."""
    log_std_max: float = 2.0
    """Upper bound of the actor's log-std."""

    def __post_init__(self):
        positive = ("batch_size", "critic_lr", "actor_lr", "alpha_lr", "encoder_lr",
                    "decoder_lr", "init_temperature", "actor_every", "target_every",
                    "decoder_every", "features_dim", "hidden_dim", "num_filters", "num_layers")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("discount", "critic_tau", "encoder_tau", "critic_beta", "actor_beta",
                     "alpha_beta"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("decoder_weight_decay", "latent_lambda"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 1 <= self.bits <= 8:
            raise ValueError(f"bits must be in 1..8, got {self.bits}")
        if not self.log_std_min < self.log_std_max:
            raise ValueError(f"log_std_min {self.log_std_min} must be < log_std_max "
                             f"{self.log_std_max}")

    @property
    def min_image_size(self) -> int:
        """Smallest image height or width the conv stack accepts."""
        return min_image_size(self.num_layers)

    def entropy_target(self, action_dim: int) -> float:
        """``target_entropy``, or ``-action_dim`` when it is None."""
        return -float(action_dim) if self.target_entropy is None else self.target_entropy


class AgentState(eqx.Module):
    """Everything the agent learns or carries. ``decoder`` and its optimizer states are None
    when ``config.decoder`` is False."""

    critic: Critic
    target_critic: Critic
    actor: Actor
    decoder: Decoder | None
    log_alpha: jax.Array
    critic_opt_state: optax.OptState
    actor_opt_state: optax.OptState
    alpha_opt_state: optax.OptState
    encoder_opt_state: optax.OptState | None
    decoder_opt_state: optax.OptState | None
    step: jax.Array
    key: jax.Array


class CriticAux(NamedTuple):
    critic_loss: jax.Array
    q1: jax.Array
    q2: jax.Array
    target_q: jax.Array


class ActorAux(NamedTuple):
    actor_loss: jax.Array
    alpha_loss: jax.Array
    alpha: jax.Array
    entropy: jax.Array


class DecoderAux(NamedTuple):
    reconstruction_loss: jax.Array
    mse: jax.Array
    latent_penalty: jax.Array


class SACAEMetrics(NamedTuple):
    """Diagnostics of one ``update`` (batch means); NaN for sub-updates that did not run."""

    critic: CriticAux
    actor: ActorAux
    decoder: DecoderAux


class Optimizers(NamedTuple):
    critic: optax.GradientTransformation
    actor: optax.GradientTransformation
    alpha: optax.GradientTransformation
    encoder: optax.GradientTransformation
    decoder: optax.GradientTransformation


def optimizers(config: SACAEConfig) -> Optimizers:
    """The five optimizers of the reference (PyTorch Adam: beta2 0.999, eps 1e-8)."""
    return Optimizers(
        critic=optax.adam(config.critic_lr, b1=config.critic_beta),
        actor=optax.adam(config.actor_lr, b1=config.actor_beta),
        alpha=optax.adam(config.alpha_lr, b1=config.alpha_beta),
        encoder=optax.adam(config.encoder_lr),
        decoder=optax.chain(optax.add_decayed_weights(config.decoder_weight_decay),
                            optax.adam(config.decoder_lr)),
    )


# ---------------------------------------------------------------- losses (pure, on arrays)

def td_target(r_t: jax.Array, not_done_t: jax.Array, discount: float, q1_tp1: jax.Array,
              q2_tp1: jax.Array, log_pi_tp1: jax.Array, alpha: jax.Array) -> jax.Array:
    """Soft clipped double-Q target ``r + discount * not_done * (min(Q1', Q2') - alpha
    log pi')``, under ``stop_gradient``. All ``(B,)`` except the scalars."""
    if not (not_done_t.shape == q1_tp1.shape == q2_tp1.shape == log_pi_tp1.shape
            == r_t.shape):
        raise ValueError(f"td_target needs equal (B,) shapes, got reward {r_t.shape}, "
                         f"not_done {not_done_t.shape}, q {q1_tp1.shape}")
    v_tp1 = jnp.minimum(q1_tp1, q2_tp1) - alpha * log_pi_tp1
    return jax.lax.stop_gradient(r_t + not_done_t * discount * v_tp1)


def critic_loss(q1_tm1: jax.Array, q2_tm1: jax.Array,
                target: jax.Array) -> tuple[jax.Array, CriticAux]:
    """``mean((Q1 - y)^2) + mean((Q2 - y)^2)``, the reference's sum of two MSEs."""
    if not q1_tm1.shape == q2_tm1.shape == target.shape:
        raise ValueError(f"critic_loss shapes differ: {q1_tm1.shape}, {q2_tm1.shape}, "
                         f"{target.shape}")
    loss = jnp.mean((q1_tm1 - target) ** 2) + jnp.mean((q2_tm1 - target) ** 2)
    return loss, CriticAux(loss, jnp.mean(q1_tm1), jnp.mean(q2_tm1), jnp.mean(target))


def actor_loss(log_pi: jax.Array, q1: jax.Array, q2: jax.Array,
               alpha: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``mean(alpha log pi - min(Q1, Q2))`` with alpha under ``stop_gradient``; aux is the
    entropy estimate ``-mean(log pi)``."""
    if not log_pi.shape == q1.shape == q2.shape:
        raise ValueError(f"actor_loss shapes differ: {log_pi.shape}, {q1.shape}, {q2.shape}")
    alpha = jax.lax.stop_gradient(alpha)
    return jnp.mean(alpha * log_pi - jnp.minimum(q1, q2)), -jnp.mean(log_pi)


def temperature_loss(log_alpha: jax.Array, log_pi: jax.Array,
                     target_entropy: float) -> tuple[jax.Array, jax.Array]:
    """``mean(alpha * (-log pi - target_entropy))`` with log pi under ``stop_gradient``
    (the reference's form: it differentiates alpha, not log alpha). Alpha falls while the
    entropy is above the target and rises while it is below."""
    alpha = jnp.exp(log_alpha)
    entropy_gap = jax.lax.stop_gradient(-log_pi - target_entropy)
    return jnp.mean(alpha * entropy_gap), alpha


def reconstruction_target(obs: jax.Array, key: jax.Array, bits: int = 5) -> jax.Array:
    """uint8 pixels reduced to ``bits`` bits with uniform dequantisation noise, in
    [-0.5, 0.5]: ``(floor(obs / 2^(8 - bits)) + U[0, 1)) / 2^bits - 0.5``."""
    bins = 2**bits
    x = jnp.floor(obs.astype(jnp.float32) / 2 ** (8 - bits))
    return (x + jax.random.uniform(key, obs.shape)) / bins - 0.5


def reconstruction_loss(reconstruction: jax.Array, target: jax.Array, latent: jax.Array,
                        latent_lambda: float) -> tuple[jax.Array, DecoderAux]:
    """``mean((rec - target)^2) + latent_lambda * mean_b(0.5 ||h_b||^2)``; ``latent`` is
    ``(B, features)``."""
    if reconstruction.shape != target.shape:
        raise ValueError(f"reconstruction {reconstruction.shape} != target {target.shape}")
    mse = jnp.mean((reconstruction - target) ** 2)
    penalty = jnp.mean(0.5 * jnp.sum(latent**2, axis=-1))
    loss = mse + latent_lambda * penalty
    return loss, DecoderAux(loss, mse, penalty)


# ---------------------------------------------------------------- agent

def init(config: SACAEConfig, key: jax.Array, obs_shape: tuple[int, int, int],
         action_dim: int) -> AgentState:
    """A fresh agent for channels-last observations ``obs_shape = (H, W, C)``."""
    if len(obs_shape) != 3:
        raise ValueError(f"obs_shape must be (H, W, C), got {obs_shape}")
    if min(obs_shape[:2]) < config.min_image_size:
        raise ValueError(f"image size {tuple(obs_shape[:2])} is too small for "
                         f"{config.num_layers} conv layers: the minimum is "
                         f"{config.min_image_size}")
    if action_dim < 1:
        raise ValueError(f"action_dim must be >= 1, got {action_dim}")
    k_critic, k_actor, k_decoder, k_init, k_state = jax.random.split(key, 5)
    k_init_critic, k_init_actor, k_init_decoder = jax.random.split(k_init, 3)
    c = config
    critic = orthogonal_init(Critic(obs_shape, action_dim, c.features_dim, c.hidden_dim,
                                    c.num_filters, c.num_layers, key=k_critic),
                             key=k_init_critic)
    conv_size = flat_conv_size(c, obs_shape[:2])
    actor = orthogonal_init(Actor(conv_size, action_dim, c.features_dim, c.hidden_dim,
                                  c.log_std_min, c.log_std_max, key=k_actor),
                            key=k_init_actor)
    opts = optimizers(config)
    log_alpha = jnp.log(jnp.asarray(c.init_temperature, jnp.float32))
    decoder = encoder_opt_state = decoder_opt_state = None
    if c.decoder:
        decoder = orthogonal_init(Decoder(obs_shape, c.features_dim, c.num_filters,
                                          c.num_layers, key=k_decoder), key=k_init_decoder)
        encoder_opt_state = opts.encoder.init(eqx.filter(critic.encoder, eqx.is_array))
        decoder_opt_state = opts.decoder.init(eqx.filter(decoder, eqx.is_array))
    return AgentState(
        # the target is a copy (not the same buffers), so a jit may donate the state
        critic=critic, target_critic=jax.tree.map(jnp.copy, critic), actor=actor,
        decoder=decoder,
        log_alpha=log_alpha,
        critic_opt_state=opts.critic.init(eqx.filter(critic, eqx.is_array)),
        actor_opt_state=opts.actor.init(eqx.filter(actor, eqx.is_array)),
        alpha_opt_state=opts.alpha.init(log_alpha),
        encoder_opt_state=encoder_opt_state, decoder_opt_state=decoder_opt_state,
        step=jnp.zeros((), jnp.int32), key=k_state)


def _apply(opt: optax.GradientTransformation, grads, opt_state, params):
    updates, opt_state = opt.update(grads, opt_state, eqx.filter(params, eqx.is_array))
    return eqx.apply_updates(params, updates), opt_state


def update_critic(config: SACAEConfig, state: AgentState, batch: Batch,
                  key: jax.Array) -> tuple[AgentState, CriticAux]:
    """One critic step on the soft TD target; trains convs, critic head and Q heads."""
    alpha = jnp.exp(state.log_alpha)

    def next_values(obs_tp1, k):
        conv = state.critic.encoder.trunk(obs_tp1)  # the actor reads the online convs
        a_tp1, log_pi_tp1 = tanh_gaussian_sample(*state.actor(conv), k)
        return (*state.target_critic(obs_tp1, a_tp1), log_pi_tp1)

    keys = jax.random.split(key, batch.obs.shape[0])
    q1_tp1, q2_tp1, log_pi_tp1 = jax.vmap(next_values)(batch.next_obs, keys)
    target = td_target(batch.reward, batch.not_done, config.discount, q1_tp1, q2_tp1,
                       log_pi_tp1, alpha)

    def loss_fn(critic):
        q1, q2 = jax.vmap(critic)(batch.obs, batch.action)
        return critic_loss(q1, q2, target)

    grads, aux = eqx.filter_grad(loss_fn, has_aux=True)(state.critic)
    critic, opt_state = _apply(optimizers(config).critic, grads, state.critic_opt_state,
                               state.critic)
    return dataclasses.replace(state, critic=critic, critic_opt_state=opt_state), aux


def update_actor_and_alpha(config: SACAEConfig, state: AgentState, batch: Batch,
                           key: jax.Array) -> tuple[AgentState, ActorAux]:
    """One actor step (its head and MLP; the convs are detached and the critic is read
    only) and one temperature step on the same sampled log-probabilities."""
    opts = optimizers(config)
    conv = jax.lax.stop_gradient(jax.vmap(state.critic.encoder.trunk)(batch.obs))
    keys = jax.random.split(key, batch.obs.shape[0])
    alpha = jnp.exp(state.log_alpha)

    def loss_fn(actor):
        a, log_pi = jax.vmap(lambda c, k: tanh_gaussian_sample(*actor(c), k))(conv, keys)
        q1, q2 = jax.vmap(state.critic.q_values)(conv, a)
        loss, entropy = actor_loss(log_pi, q1, q2, alpha)
        return loss, (entropy, log_pi)

    (loss, (entropy, log_pi)), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(
        state.actor)
    actor, actor_opt_state = _apply(opts.actor, grads, state.actor_opt_state, state.actor)

    target_entropy = config.entropy_target(batch.action.shape[-1])
    (alpha_loss, alpha), alpha_grad = jax.value_and_grad(temperature_loss, has_aux=True)(
        state.log_alpha, log_pi, target_entropy)
    alpha_updates, alpha_opt_state = opts.alpha.update(alpha_grad, state.alpha_opt_state)
    log_alpha = optax.apply_updates(state.log_alpha, alpha_updates)
    state = dataclasses.replace(state, actor=actor, actor_opt_state=actor_opt_state,
                                log_alpha=log_alpha, alpha_opt_state=alpha_opt_state)
    return state, ActorAux(loss, alpha_loss, alpha, entropy)


def soft_update_target(config: SACAEConfig, state: AgentState) -> AgentState:
    """``target <- (1 - tau) target + tau online``: tau = ``critic_tau`` for the Q heads,
    ``encoder_tau`` for the encoder (convs and head)."""
    def polyak(online, target, tau):
        return jax.tree.map(lambda o, t: (1.0 - tau) * t + tau * o, online, target)

    online, target = state.critic, state.target_critic
    target = eqx.tree_at(
        lambda c: (c.encoder, c.q1, c.q2), target,
        (polyak(online.encoder, target.encoder, config.encoder_tau),
         polyak(online.q1, target.q1, config.critic_tau),
         polyak(online.q2, target.q2, config.critic_tau)))
    return dataclasses.replace(state, target_critic=target)


def update_decoder(config: SACAEConfig, state: AgentState, batch: Batch,
                   key: jax.Array) -> tuple[AgentState, DecoderAux]:
    """One autoencoder step on ``batch.obs``: trains convs and critic head (encoder Adam)
    and the decoder (L2 + Adam)."""
    if state.decoder is None:
        raise ValueError("update_decoder needs an agent built with config.decoder=True")
    opts = optimizers(config)
    keys = jax.random.split(key, batch.obs.shape[0])
    target = jax.vmap(lambda o, k: reconstruction_target(o, k, config.bits))(batch.obs, keys)

    def loss_fn(params):
        encoder, decoder = params
        h = jax.vmap(encoder)(batch.obs)
        return reconstruction_loss(jax.vmap(decoder)(h), target, h, config.latent_lambda)

    (g_enc, g_dec), aux = eqx.filter_grad(loss_fn, has_aux=True)(
        (state.critic.encoder, state.decoder))
    encoder, encoder_opt_state = _apply(opts.encoder, g_enc, state.encoder_opt_state,
                                        state.critic.encoder)
    decoder, decoder_opt_state = _apply(opts.decoder, g_dec, state.decoder_opt_state,
                                        state.decoder)
    critic = eqx.tree_at(lambda c: c.encoder, state.critic, encoder)
    return dataclasses.replace(state, critic=critic, decoder=decoder,
                               encoder_opt_state=encoder_opt_state,
                               decoder_opt_state=decoder_opt_state), aux


def _nan_like(aux_type):
    return aux_type(*(jnp.full((), jnp.nan, jnp.float32) for _ in aux_type._fields))


def no_metrics() -> "SACAEMetrics":
    """The metrics of a step with no update: all NaN."""
    return SACAEMetrics(_nan_like(CriticAux), _nan_like(ActorAux), _nan_like(DecoderAux))


def update(config: SACAEConfig, state: AgentState, batch: Batch,
           mesh: Mesh | None = None) -> tuple[AgentState, SACAEMetrics]:
    """One SAC-AE update in the reference order (critic; actor + alpha every
    ``actor_every``; soft targets every ``target_every``; decoder every ``decoder_every``).
    Jit with ``eqx.filter_jit`` (the config and mesh are static) or run inside ``lax.scan``.
    With a ``mesh`` the batch is split over ``"data"`` (its size must divide) and the state
    laid out by ``parallel.constrain_params``; None runs on one device, unchanged."""
    state = parallel.constrain_params(state, mesh)
    batch = parallel.constrain_batch(batch, mesh)
    k_critic, k_actor, k_decoder, k_next = jax.random.split(state.key, 4)
    step = state.step
    state, critic_aux = update_critic(config, state, batch, k_critic)
    state, actor_aux = jax.lax.cond(
        step % config.actor_every == 0,
        lambda s: update_actor_and_alpha(config, s, batch, k_actor),
        lambda s: (s, _nan_like(ActorAux)), state)
    state = jax.lax.cond(step % config.target_every == 0,
                         lambda s: soft_update_target(config, s), lambda s: s, state)
    decoder_aux = _nan_like(DecoderAux)
    if config.decoder:
        state, decoder_aux = jax.lax.cond(
            step % config.decoder_every == 0,
            lambda s: update_decoder(config, s, batch, k_decoder),
            lambda s: (s, _nan_like(DecoderAux)), state)
    state = dataclasses.replace(state, step=step + 1, key=k_next)
    return (parallel.constrain_params(state, mesh),
            SACAEMetrics(critic_aux, actor_aux, decoder_aux))


def act(state: AgentState, obs: jax.Array, key: jax.Array,
        deterministic: bool | jax.Array = False) -> jax.Array:
    """An action in [-1, 1]^A for ONE uint8 observation ``(H, W, C)``: ``tanh(mean)`` when
    ``deterministic``, else a sample of the tanh-Gaussian. Batch with ``jax.vmap``."""
    mean, log_std = state.actor(state.critic.encoder.trunk(obs))
    sample, _ = tanh_gaussian_sample(mean, log_std, key)
    return jnp.where(deterministic, jnp.tanh(mean), sample)


def flat_conv_size(config: SACAEConfig, image_shape: tuple[int, int]) -> int:
    """Length of the flattened conv features for an ``(H, W)`` image."""
    return config.num_filters * math.prod(conv_output_size(s, config.num_layers)
                                          for s in image_shape)
