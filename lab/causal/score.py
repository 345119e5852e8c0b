"""The Gaussian BIC of a causal graph given data, per node and in total, and a greedy structure
search under background knowledge (the FGES analogue of the paper's official code).

**Sign convention: a BIC is a cost. Lower is better** (more plausible graph given the data).
For node ``j`` with parents ``P``, least squares of ``x_j`` on ``[1, x_P]`` leaves residual
variance ``s2 = RSS / n`` (computed from the covariance, ``Moments``); the maximised Gaussian
log-likelihood is ``-n/2 (log(2 pi s2) + 1)`` and

    BIC_j = -2 log L_j + k_j log n,     k_j = |P| + 2 (the intercept and the variance).

The graph's BIC is the sum over nodes (the score decomposes).

**The variance floor.** A node that its parents (or a constant) predict exactly would have
``s2 = 0`` and a BIC of minus infinity; and in model selection, where a candidate's
predictions replace the target column, the target's term falls by ``n log(1/alpha^2)`` when the
predictions are shrunk toward their mean by ``alpha`` (the residual variance shrinks with
them), so a constant, or a heavily shrunk predictor, would win outright. The residual
variance is therefore taken as ``max(s2, f)`` (``NodeScore.floored`` flags it): below the floor
every fit scores the same, ``-2 log L = n (log(2 pi f) + 1)``. The floor ``f`` is

- for an observed column: ``floor * Var(x_j)`` (relative, so the units do not matter), which
  only stops an exact fit;
- for a column of predictions standing in for the observed target (``StandIn``, as
  ``lab.causal.select`` scores them): the *observed* target's residual variance on the same
  parents (and at least ``floor * Var(y)``), a scale no prediction can shrink. No candidate
  then scores better than the true values on the target's own term: a constant or a shrunk
  predictor at best ties them there, and the children's terms (where a constant loses what
  the target explained) decide.

The floor for a stand-in is ours: the official code scores the predictions with Tetrad's SEM
BIC, which has no floor.
"""

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from lab.causal.scm import Graph, check_dag, find_cycle

FLOOR = 1e-3  # the residual variance floor, relative to the node's variance
NUMERICAL_FLOOR = 1e-12  # relative: keeps the log finite where no floor is wanted (Tetrad's)
TOLERANCE = 1e-9  # the search's smallest gain, relative to the BIC


class NodeScore(NamedTuple):
    bic: float
    variance: float  # residual variance used (after the floor)
    floored: bool


class Moments(NamedTuple):
    """What every node's score needs from the data: the row count and the covariance (divisor
    ``n``). Least squares with an intercept leaves ``RSS / n = C_jj - C_jP C_PP^-1 C_Pj``, so
    scoring a parent set is a small solve on ``C`` instead of a pass over the rows (as
    Tetrad's SEM BIC does)."""

    n: int
    cov: np.ndarray

    @classmethod
    def of(cls, data: np.ndarray) -> "Moments":
        data = np.asarray(data, float)
        centred = data - data.mean(0)
        return cls(data.shape[0], centred.T @ centred / data.shape[0])

    def residual_variance(self, j: int, parents: Sequence[int]) -> float:
        parents = list(parents)
        if not parents:
            return float(self.cov[j, j])
        c = self.cov[np.ix_(parents, [j])]
        coef = np.linalg.lstsq(self.cov[np.ix_(parents, parents)], c, rcond=None)[0]
        return max(float(self.cov[j, j] - (c.T @ coef)[0, 0]), 0.0)


class StandIn(NamedTuple):
    """Column ``target`` of the data scored holds predictions standing in for the observed
    values, whose data's moments are ``observed``: the target's floor is the observed
    target's residual variance on the same parents (see the module docstring)."""

    observed: Moments
    target: int

    def minimum(self, parents: Sequence[int], floor: float) -> float:
        t = self.target
        return max(self.observed.residual_variance(t, parents),
                   floor * max(float(self.observed.cov[t, t]), 1e-12))


def node_bic(data: np.ndarray | Moments, j: int, parents: Sequence[int],
             floor: float = FLOOR, stand_in: StandIn | None = None) -> NodeScore:
    """The BIC of node ``j`` regressed on ``parents``, its residual variance floored (see the
    module docstring; ``stand_in`` when column ``stand_in.target`` holds predictions)."""
    moments = data if isinstance(data, Moments) else Moments.of(data)
    n = moments.n
    variance = moments.residual_variance(j, parents)
    if stand_in is not None and j == stand_in.target:
        minimum = stand_in.minimum(parents, floor)
    else:
        minimum = floor * max(float(moments.cov[j, j]), 1e-12)
    floored = variance < minimum
    variance = max(variance, minimum)
    log_likelihood = -0.5 * n * (np.log(2 * np.pi * variance) + 1.0)
    k = len(parents) + 2
    return NodeScore(float(-2 * log_likelihood + k * np.log(n)), variance, bool(floored))


def graph_bic(data: np.ndarray, graph: Graph, floor: float = FLOOR,
              nodes: Sequence[int] | None = None, stand_in: StandIn | None = None
              ) -> tuple[float, list[NodeScore]]:
    """The BIC of ``graph`` given ``data`` ``(n, d)`` (columns in ``graph.names`` order):
    the total over ``nodes`` (all by default) and each node's score."""
    if data.shape[1] != len(graph.names):
        raise ValueError(f"data has {data.shape[1]} columns; the graph has "
                         f"{len(graph.names)} variables")
    nodes = range(len(graph.names)) if nodes is None else nodes
    moments = Moments.of(data)
    scores = [node_bic(moments, j, graph.parents(j), floor, stand_in) for j in nodes]
    return float(sum(s.bic for s in scores)), scores


def target_terms(graph: Graph, target: int) -> list[int]:
    """The nodes whose BIC terms involve ``target``: itself and its children. Replacing the
    target's column changes only these; every other term is the same for every candidate."""
    return [target, *map(int, graph.children(target))]


# structure search ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Knowledge:
    """Background knowledge for the search: edges that must be there, edges that must not,
    and tiers (a variable in a later tier never causes one in an earlier tier). Names."""

    required: tuple[tuple[str, str], ...] = ()
    forbidden: tuple[tuple[str, str], ...] = ()
    tiers: tuple[tuple[str, ...], ...] = ()

    def matrices(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(required, allowed)`` boolean adjacency matrices over ``names``; a name that is
        not a variable, or required edges that contradict the rest, are one-line errors."""
        index = {n: i for i, n in enumerate(names)}

        def at(edge, kind):
            for name in edge:
                if name not in index:
                    raise ValueError(f"{kind} edge {edge[0]} -> {edge[1]} names {name!r}, "
                                     f"which is not a variable; use one of {', '.join(names)}")
            return index[edge[0]], index[edge[1]]

        d = len(names)
        required = np.zeros((d, d), bool)
        allowed = ~np.eye(d, dtype=bool)
        for edge in self.required:
            required[at(edge, "required")] = True
        for edge in self.forbidden:
            allowed[at(edge, "forbidden")] = False
        tier = np.full(d, -1)
        for t, members in enumerate(self.tiers):
            for name in members:
                if name not in index:
                    raise ValueError(f"tier {t} names {name!r}, which is not a variable; use "
                                     f"one of {', '.join(names)}")
                tier[index[name]] = t
        later = (tier[:, None] > tier[None, :]) & (tier[:, None] >= 0) & (tier[None, :] >= 0)
        allowed &= ~later
        if np.any(required & ~allowed):
            i, j = np.argwhere(required & ~allowed)[0]
            raise ValueError(f"required edge {names[i]} -> {names[j]} is forbidden by the "
                             "forbidden edges or the tiers; drop one of them")
        if find_cycle(required) is not None:
            raise ValueError("the required edges form a cycle; a causal graph must be acyclic")
        return required, allowed


class SearchResult(NamedTuple):
    graph: Graph
    bic: float
    steps: int  # operations applied


def search(data: np.ndarray, names: Sequence[str], knowledge: Knowledge = Knowledge(),
           floor: float = FLOOR, max_parents: int | None = None,
           stand_in: StandIn | None = None) -> SearchResult:
    """Greedy hill climbing on the BIC over DAGs that hold ``knowledge`` (kept as the
    comparison point of ``benchmarks/causal_selection.py --search``, where it ends at a worse
    BIC than GES on most graphs; every search of the experiment is ``lab.causal.ges``):
    start from the required edges; at each step apply the single edge addition, deletion or
    reversal that lowers the BIC most (never deleting or reversing a required edge, never
    adding a forbidden one or a cycle); stop when none lowers it. Node scores are cached by
    parent set (the BIC decomposes), so each step rescores only the nodes it touches."""
    required, allowed = knowledge.matrices(names)
    d = len(names)
    if data.shape[1] != d:
        raise ValueError(f"data has {data.shape[1]} columns; the search has {d} variables")
    edges = required.copy()
    moments = Moments.of(data)
    cache: dict[tuple[int, tuple[int, ...]], float] = {}

    def score(j: int, parents) -> float:
        key = (j, tuple(sorted(int(p) for p in parents)))
        if key not in cache:
            cache[key] = node_bic(moments, j, key[1], floor, stand_in).bic
        return cache[key]

    current = [score(j, np.flatnonzero(edges[:, j])) for j in range(d)]
    steps = 0
    while True:
        # a move must lower the BIC by more than rounding: reversing a covered edge leaves it
        # unchanged in exact arithmetic (score equivalence), and rounding could otherwise make
        # that reversal, and then its undoing, look like gains forever
        best, move = -TOLERANCE * max(1.0, abs(sum(current))), None
        for i in range(d):
            for j in range(d):
                if i == j:
                    continue
                parents_j = set(np.flatnonzero(edges[:, j]))
                if edges[i, j]:
                    if required[i, j]:
                        continue
                    # delete i -> j
                    delta = score(j, parents_j - {i}) - current[j]
                    if delta < best:
                        best, move = delta, ("delete", i, j)
                    # reverse i -> j into j -> i
                    if allowed[j, i]:
                        trial = edges.copy()
                        trial[i, j], trial[j, i] = False, True
                        if find_cycle(trial) is None and (max_parents is None or
                                                          trial[:, i].sum() <= max_parents):
                            parents_i = set(np.flatnonzero(edges[:, i]))
                            delta = (score(j, parents_j - {i}) - current[j]
                                     + score(i, parents_i | {j}) - current[i])
                            if delta < best:
                                best, move = delta, ("reverse", i, j)
                elif not edges[j, i] and allowed[i, j]:
                    if max_parents is not None and len(parents_j) >= max_parents:
                        continue
                    trial = edges.copy()
                    trial[i, j] = True
                    if find_cycle(trial) is None:
                        delta = score(j, parents_j | {i}) - current[j]
                        if delta < best:
                            best, move = delta, ("add", i, j)
        if move is None:
            break
        kind, i, j = move
        if kind == "add":
            edges[i, j] = True
        elif kind == "delete":
            edges[i, j] = False
        else:
            edges[i, j], edges[j, i] = False, True
        for node in {i, j}:
            current[node] = score(node, np.flatnonzero(edges[:, node]))
        steps += 1
    graph = Graph(tuple(names), edges)
    check_dag(graph)
    return SearchResult(graph, float(sum(current)), steps)
