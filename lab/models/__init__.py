"""Equinox models. Each takes one unbatched example; batch with ``jax.vmap``."""

from lab.models.feedforward import convnet, mlp
from lab.models.ga3c import ActorCritic
from lab.models.meta_rnn import MetaRNN
from lab.models.pixelcnn import GatedPixelCNN, MultiscalePixelCNN
from lab.models.policy import DynamicsModel, GaussianPolicy, QCritic, ValueCritic
from lab.models.sac_ae import Actor, ConvTrunk, Critic, Decoder, Encoder, EncoderHead
from lab.models.vsml import VSMLCell, VSMLNetwork, VSMLState, online_loss

__all__ = [
    "Actor",
    "ActorCritic",
    "ConvTrunk",
    "Critic",
    "Decoder",
    "DynamicsModel",
    "Encoder",
    "EncoderHead",
    "GatedPixelCNN",
    "GaussianPolicy",
    "MetaRNN",
    "MultiscalePixelCNN",
    "QCritic",
    "VSMLCell",
    "VSMLNetwork",
    "VSMLState",
    "ValueCritic",
    "convnet",
    "mlp",
    "online_loss",
]
