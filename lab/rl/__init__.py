"""Losses of KL-regularised policy improvement and the soft search: pure functions of arrays.

``lab.rl.mpo`` (E-step, temperature dual, decoupled M-step), ``lab.rl.vmpo`` (V-MPO) and
``lab.rl.search`` (local soft tree search with a model).
"""

from lab.rl.mpo import Duals, dual, e_step, init_duals, m_step_loss, mpo_loss
from lab.rl.search import search, soft_value
from lab.rl.vmpo import top_half, vmpo_loss

__all__ = [
    "Duals",
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
