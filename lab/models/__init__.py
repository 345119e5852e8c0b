"""Equinox models. Each takes one unbatched example; batch with ``jax.vmap``.

Importing the package imports no model: each name below comes from its module on first use
(``lab.lazy``)."""

from lab.lazy import exports

_HOMES = {  # public name -> the module that defines it, imported on first use
    "Actor": ".sac_ae",
    "ActorCritic": ".ga3c",
    "ConvTrunk": ".sac_ae",
    "Critic": ".sac_ae",
    "Decoder": ".sac_ae",
    "DynamicsModel": ".policy",
    "Encoder": ".sac_ae",
    "EncoderHead": ".sac_ae",
    "GatedPixelCNN": ".pixelcnn",
    "GaussianPolicy": ".policy",
    "MetaRNN": ".meta_rnn",
    "MultiscalePixelCNN": ".pixelcnn",
    "QCritic": ".policy",
    "VSMLCell": ".vsml",
    "VSMLNetwork": ".vsml",
    "VSMLState": ".vsml",
    "ValueCritic": ".policy",
    "convnet": ".feedforward",
    "mlp": ".feedforward",
    "online_loss": ".vsml",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = exports(__name__, _HOMES)
