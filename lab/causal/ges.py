"""Greedy equivalence search (GES; Chickering 2002, "Optimal Structure Identification With
Greedy Search", JMLR 3) on the Gaussian BIC of ``lab.causal.score``, under background
knowledge.

**A BIC is a cost here: lower is better** (``node_bic``; the same score as ``search``). The
search moves between Markov equivalence classes, each held as its CPDAG (the pattern
convention of ``lab.causal.pdag``). The forward phase applies, while one lowers the BIC, the
valid Insert that lowers it most; the backward phase then does the same with Delete
(Chickering's section 4; FGES, Ramsey et al. 2017, evaluates the same operators with caching
and parallelism). With ``Pa`` the directed parents of ``Y``, ``NA`` the undirected neighbours
of ``Y`` that are adjacent to ``X`` and ``s(Y, P)`` the BIC of ``Y`` on parents ``P``:

- Insert(X, Y, T), ``X`` and ``Y`` non-adjacent, ``T`` a subset of ``Y``'s undirected
  neighbours not adjacent to ``X``. Valid when ``NA | T`` is a clique and every semi-directed
  path from ``Y`` to ``X`` passes through it (Theorem 15). It adds ``X -> Y`` and directs
  ``t -> Y`` for ``t`` in ``T``; the BIC changes by ``s(Y, Pa|NA|T|{X}) - s(Y, Pa|NA|T)``.
- Delete(X, Y, H), ``X -> Y`` or ``X - Y``, ``H`` a subset of ``NA``. Valid when ``NA - H`` is
  a clique (Theorem 17). It removes the edge and directs ``Y - h`` as ``Y -> h`` and ``X - h``
  as ``X -> h`` for ``h`` in ``H``; the BIC changes by
  ``s(Y, (Pa|(NA-H)) - {X}) - s(Y, Pa|(NA-H)|{X})``.

After each operator the pattern is made a CPDAG again through one of its DAGs (``extension``
then ``cpdag``). Node scores are cached by parent set: the BIC decomposes, and every DAG of a
class has the same BIC (score equivalence), so a class's BIC is that of any of its DAGs.

**Background knowledge** (``Knowledge``: required and forbidden directed edges; tiers forbid
every edge from a later tier to an earlier one) constrains a class, not one DAG of it: a class
is *admissible* when one of its DAGs holds every required edge with its direction and no
forbidden edge. ``admissible`` decides that exactly: it orients the CPDAG's undirected edges
as the knowledge says (a required ``i -> j``; ``j -> i`` where ``i -> j`` is forbidden) and
looks for a DAG extension of that pattern with the class's v-structures (Dor & Tarsi's
algorithm finds one if any exists). The search starts from the class of the required edges'
DAG (admissible: that DAG holds the knowledge), never deletes a required edge nor inserts an edge
between two variables whose both directions are forbidden, and applies, among the operators
that lower the BIC, the best one whose resulting class is admissible. It returns the class's
CPDAG, the pattern with the knowledge's orientations closed under Meek's rules R1-R4 (the
orientations that every admissible DAG of the class shares; Meek 1995), and one admissible
DAG with its BIC.

Where this differs from Tetrad's FGES with knowledge: Tetrad starts from the required edges as
directed edges, orients edges against forbidden directions, and keeps the knowledge's
orientations in its working graph (its Meek rules take the knowledge); it refuses an Insert
whose own DAG orientation is forbidden (``X -> Y``, or ``t -> Y`` for ``t`` in ``T``) and a
Delete whose new orientations are (``X -> h`` or ``Y -> h``), and never deletes a required
edge. Here the check is on the resulting class instead: an operator whose own orientation is
forbidden is still taken when another DAG of the new class honours the knowledge, and one
whose orientation is allowed is refused when no DAG of the new class does. Operators are
evaluated on the CPDAG, not on the knowledge-oriented pattern, so ``Pa`` and ``NA`` are
Chickering's, and Theorems 15 and 17 apply as stated.
"""

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from lab.causal.pdag import adjacent, cpdag, directed, extension, meek, undirected
from lab.causal.scm import Graph, check_dag
from lab.causal.score import FLOOR, TOLERANCE, Knowledge, Moments, StandIn, node_bic

Score = Callable[[int, frozenset], float]


class Move(NamedTuple):
    delta: float  # the change in BIC (negative: better)
    kind: str  # "insert" or "delete"
    x: int
    y: int
    subset: frozenset  # T of an Insert, H of a Delete


class GESResult(NamedTuple):
    cpdag: np.ndarray  # the equivalence class found (``lab.causal.pdag``'s convention)
    pattern: np.ndarray  # the CPDAG with the knowledge's orientations and Meek's rules
    graph: Graph  # a DAG of the class that honours the knowledge
    bic: float  # of ``graph`` (and of every DAG of the class)
    inserts: int
    deletes: int

    @property
    def steps(self) -> int:
        return self.inserts + self.deletes


def _subsets(items: Sequence[int]) -> Iterator[frozenset]:
    return (frozenset(c) for r in range(len(items) + 1)
            for c in itertools.combinations(items, r))


def _clique(adj: np.ndarray, nodes: frozenset) -> bool:
    return all(adj[a, b] for a, b in itertools.combinations(nodes, 2))


def _blocked(g: np.ndarray, y: int, x: int, through: frozenset) -> bool:
    """Whether every semi-directed path from ``y`` to ``x`` (each edge ``u -> v`` or
    ``u - v``) passes through a node of ``through``."""
    seen, stack = {y}, [y]
    while stack:
        for v in map(int, np.flatnonzero(g[stack.pop()])):
            if v == x:
                return False
            if v not in seen and v not in through:
                seen.add(v)
                stack.append(v)
    return True


def inserts(g: np.ndarray, score: Score, allowed: np.ndarray,
            max_parents: int | None = None) -> list[Move]:
    """Every valid Insert(X, Y, T) on the CPDAG ``g`` (Chickering's Theorem 15) with its change
    in BIC, except between two variables whose both directions ``allowed`` forbids, and those
    that would score ``Y`` on more than ``max_parents`` parents."""
    adj, lines, arrows = adjacent(g), undirected(g), directed(g)
    moves = []
    for x, y in itertools.permutations(range(len(g)), 2):
        if adj[x, y] or not (allowed[x, y] or allowed[y, x]):
            continue
        neighbours = np.flatnonzero(lines[y])
        na = frozenset(int(t) for t in neighbours if adj[x, t])
        others = [int(t) for t in neighbours if not adj[x, t]]
        parents = frozenset(map(int, np.flatnonzero(arrows[:, y])))
        for t in _subsets(others):
            given = parents | na | t
            if max_parents is not None and len(given) + 1 > max_parents:
                continue
            if _clique(adj, na | t) and _blocked(g, y, x, na | t):
                moves.append(Move(score(y, given | {x}) - score(y, given), "insert", x, y, t))
    return moves


def deletes(g: np.ndarray, score: Score, required: np.ndarray) -> list[Move]:
    """Every valid Delete(X, Y, H) on the CPDAG ``g`` (Chickering's Theorem 17) with its
    change in BIC, except of a ``required`` edge (in either direction)."""
    adj, lines, arrows = adjacent(g), undirected(g), directed(g)
    moves = []
    for x, y in zip(*np.nonzero(g), strict=True):
        x, y = int(x), int(y)
        if required[x, y] or required[y, x]:
            continue
        na = [int(h) for h in np.flatnonzero(lines[y]) if adj[x, h]]
        parents = frozenset(map(int, np.flatnonzero(arrows[:, y])))
        for h in _subsets(na):
            kept = parents | (frozenset(na) - h)
            if _clique(adj, frozenset(na) - h):
                moves.append(Move(score(y, kept - {x}) - score(y, kept | {x}), "delete", x, y, h))
    return moves


def apply(g: np.ndarray, move: Move) -> np.ndarray:
    """The CPDAG of the class that ``move`` (valid on the CPDAG ``g``) leads to."""
    g = g.copy()
    x, y = move.x, move.y
    if move.kind == "insert":
        g[x, y], g[y, x] = True, False
        for t in move.subset:
            g[y, t] = False
    else:
        g[x, y] = g[y, x] = False
        for h in move.subset:
            g[h, y] = False
            if g[h, x] and g[x, h]:
                g[h, x] = False
    dag = extension(g)
    assert dag is not None, f"{move} is valid, so its pattern has a DAG extension (Chickering)"
    return cpdag(dag)


def admissible(g: np.ndarray, required: np.ndarray, allowed: np.ndarray) -> np.ndarray | None:
    """For the CPDAG ``g``: the pattern that orients its edges as the knowledge says, closed
    under Meek's rules, when a DAG of the class holds every ``required`` edge with its
    direction and only ``allowed`` directions; else None (see the module docstring)."""
    adj = adjacent(g)
    pattern = g & allowed & ~required.T
    if np.any(required & ~adj) or np.any(adj & ~adjacent(pattern)):
        return None
    dag = extension(pattern)
    if dag is None or not np.array_equal(cpdag(dag), g):
        return None
    return meek(pattern)


def _phase(g: np.ndarray, moves: Callable[[np.ndarray], list[Move]], bic: Callable,
           required: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, int]:
    """Apply the best admissible move that lowers the BIC (by more than rounding: equal
    classes score equal) until none does; the final CPDAG and the number applied."""
    count = 0
    while True:
        tolerance = -TOLERANCE * max(1.0, abs(bic(g)))
        for move in sorted((m for m in moves(g) if m.delta < tolerance), key=lambda m: m.delta):
            after = apply(g, move)
            if admissible(after, required, allowed) is not None:
                g, count = after, count + 1
                break
        else:
            return g, count


def ges(data: np.ndarray, names: Sequence[str], knowledge: Knowledge = Knowledge(),
        floor: float = FLOOR, max_parents: int | None = None,
        stand_in: StandIn | None = None) -> GESResult:
    """GES over equivalence classes on the BIC of ``data`` ``(n, d)`` (columns in ``names``
    order) under ``knowledge`` (see the module docstring). ``max_parents`` bounds the parent
    sets that an Insert scores (as causal-learn's ``maxP``); it does not bound the parents of
    every DAG of the class. ``stand_in``: column ``stand_in.target`` holds predictions (its
    floor is the observed target's residual variance, ``lab.causal.score``); where that floor
    binds, the score is no longer score-equivalent, and the class's BIC is its returned DAG's."""
    required, allowed = knowledge.matrices(names)
    d = len(names)
    if data.shape[1] != d:
        raise ValueError(f"data has {data.shape[1]} columns; the search has {d} variables")
    moments = Moments.of(data)
    cache: dict[tuple[int, frozenset], float] = {}

    def score(j: int, parents: frozenset) -> float:
        if (j, parents) not in cache:
            cache[j, parents] = node_bic(moments, j, sorted(parents), floor, stand_in).bic
        return cache[j, parents]

    def bic(g: np.ndarray) -> float:
        dag = extension(g)
        return sum(score(j, frozenset(map(int, np.flatnonzero(dag[:, j])))) for j in range(d))

    g = cpdag(required)
    g, added = _phase(g, lambda g: inserts(g, score, allowed, max_parents), bic, required,
                      allowed)
    g, removed = _phase(g, lambda g: deletes(g, score, required), bic, required, allowed)
    pattern = admissible(g, required, allowed)
    graph = Graph(tuple(names), extension(pattern))
    check_dag(graph)
    return GESResult(g, pattern, graph, bic(graph.edges), added, removed)
