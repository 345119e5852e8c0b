"""Causal model selection (Kyono & van der Schaar, arXiv 1911.12441; the official code's
"causal assurance metric"): rank trained candidates by how plausible the causal graph is
when each candidate's predictions stand in for the target.

For candidate ``m`` with predictions ``yhat_m`` on the selection split, the selection data
has the target column replaced by ``yhat_m``, and

- ``fixed``: the causal score is the BIC of the known graph on that data, over the terms
  that involve the target (``score.target_terms``: the rest is the same for every
  candidate, so it cannot change the ranking);
- ``search``: the causal score is the BIC of the graph that GES (``lab.causal.ges``, an
  equivalence-class search like the official code's FGES) finds on that data with the known
  graph's edges required.

Both come in two variants, chosen at every call (``observed_floor``): the paper's score, no
floor under the stand-in target (as Tetrad's SEM BIC), and our guarded one (a floor that no
shrunk or constant predictor can beat).

**Lower causal score is better** (a BIC is a cost). Candidates are ranked by

    combined_m = minmax(error)_m + lambda * minmax(causal)_m        (lower is better)

with ``minmax(v) = (v - min v) / (max v - min v)`` over the candidates, and ``lambda`` either
1 or ``ancestor_lambda``: the official code's ``(1 + |ancestors(target)|) / d``, the fraction
of the graph's nodes that are the target or its ancestors. The top ``k`` by ``combined`` are
selected.

On the sign: Tetrad's SEM BIC, which the official code reads off FGES's graph, is
``-n log s2 - k log n`` per node, higher for a more plausible graph; the official code then
ranks candidates by ``normalize(LL) * lambda + normalize(MSE)`` in ascending order, which
with that sign prefers the candidates whose graph is *less* plausible. We read the paper's
intent (the likelihood of the SCM given the predictions should be high) and rank by the BIC
as a cost; ``flip=True`` in the experiment measures the other reading too.
"""

from collections.abc import Sequence

import numpy as np

from lab.causal.ges import ges
from lab.causal.scm import Graph, check_dag
from lab.causal.score import (
    FLOOR,
    NUMERICAL_FLOOR,
    Knowledge,
    Moments,
    StandIn,
    graph_bic,
    target_terms,
)


def with_target(data: np.ndarray, target: int, predictions: np.ndarray) -> np.ndarray:
    """``data`` with column ``target`` replaced by ``predictions``."""
    out = np.array(data, float, copy=True)
    out[:, target] = predictions
    return out


def causal_scores(data: np.ndarray, graph: Graph, target: str, predictions: np.ndarray,
                  mode: str = "fixed", knowledge: Knowledge | None = None, *,
                  observed_floor: bool, floor: float = FLOOR
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(scores (m,), floored (m,))`` for ``predictions`` ``(m, n)`` of ``m`` candidates on
    the ``n`` rows of ``data``; ``floored`` flags a candidate whose target (or a child's)
    residual variance hit the floor. ``mode``: ``fixed`` scores ``graph`` itself; ``search``
    the graph GES finds (``lab.causal.ges``) with ``graph``'s edges (and ``knowledge``)
    required, as the official code runs Tetrad's FGES.

    ``observed_floor`` has no default, so that every call says which score it is:
    ``False`` is the paper's score as the official code computes it with Tetrad's SEM BIC, no
    floor (only ``NUMERICAL_FLOOR``, relative, which keeps the log finite), so a prediction's
    spread counts in full; ``True`` is our guarded variant, whose target floor is the observed
    target's residual variance on the same parents (``lab.causal.score.StandIn``): no
    candidate scores better than the true values on the target's own term."""
    check_dag(graph)
    j = graph.index(target)
    stand_in = StandIn(Moments.of(data), j) if observed_floor else None
    floor = floor if observed_floor else NUMERICAL_FLOOR
    if mode not in ("fixed", "search"):
        raise ValueError(f"unknown causal score mode {mode!r}; use fixed or search")
    scores, floored = [], []
    for yhat in np.atleast_2d(predictions):
        trial = with_target(data, j, yhat)
        if mode == "fixed":
            total, nodes = graph_bic(trial, graph, floor, target_terms(graph, j), stand_in)
            scores.append(total)
            floored.append(any(s.floored for s in nodes))
        else:
            base = knowledge or Knowledge()
            known = Knowledge(tuple(base.required) + tuple(graph.edge_list()), base.forbidden,
                              base.tiers)
            result = ges(trial, graph.names, known, floor, stand_in=stand_in)
            scores.append(result.bic)
            _, nodes = graph_bic(trial, result.graph, floor, stand_in=stand_in)
            floored.append(any(s.floored for s in nodes))
    return np.asarray(scores), np.asarray(floored)


def minmax(values: np.ndarray) -> np.ndarray:
    """``(v - min) / (max - min)``; all zeros when every value is the same."""
    values = np.asarray(values, float)
    span = values.max() - values.min()
    return np.zeros_like(values) if span == 0 else (values - values.min()) / span


def ancestor_lambda(graph: Graph, target: str) -> float:
    """``(1 + |ancestors(target)|) / d``: the fraction of the graph's ``d`` nodes that are
    ``target`` or its ancestors (the official code counts the target itself)."""
    return (1 + len(graph.ancestors(graph.index(target)))) / len(graph.names)


def combined(errors: np.ndarray, causal: np.ndarray, lam: float) -> np.ndarray:
    """``minmax(errors) + lam * minmax(causal)``: lower is better."""
    if lam < 0:
        raise ValueError(f"lambda must be at least 0, got {lam}")
    return minmax(errors) + lam * minmax(causal)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` lowest scores (ties by index)."""
    if not 1 <= k <= len(scores):
        raise ValueError(f"k must be between 1 and the {len(scores)} candidates, got {k}")
    return np.argsort(np.asarray(scores), kind="stable")[:k]


def selected_error(out_of_domain: np.ndarray, chosen: Sequence[int]) -> float:
    """The mean out-of-domain error of the chosen candidates."""
    return float(np.mean(np.asarray(out_of_domain)[list(chosen)]))
