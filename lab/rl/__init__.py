"""RL losses: pure functions of arrays.

``lab.rl.a3c`` (the advantage actor-critic loss of A3C and GA3C, RMSProp), ``lab.rl.returns``
(bootstrapped n-step returns),
``lab.rl.mpo`` (E-step, temperature dual, decoupled M-step), ``lab.rl.vmpo`` (V-MPO) and
``lab.rl.search`` (local soft tree search with a model).
"""

# Eager, not lab.lazy: the function ``search`` shares its module's name, which a lazy package
# would hand out once anything imported ``lab.rl.search`` (the modules all import jax anyway).
from lab.rl.a3c import A3CAux, a3c_loss, log_policy, rmsprop
from lab.rl.mpo import Duals, dual, e_step, init_duals, m_step_loss, mpo_loss
from lab.rl.returns import bootstrapped_returns
from lab.rl.search import search, soft_value
from lab.rl.vmpo import top_half, vmpo_loss

__all__ = [
    "A3CAux",
    "Duals",
    "a3c_loss",
    "bootstrapped_returns",
    "log_policy",
    "rmsprop",
    "dual",
    "e_step",
    "init_duals",
    "m_step_loss",
    "mpo_loss",
    "search",
    "soft_value",
    "top_half",
    "vmpo_loss",
]
