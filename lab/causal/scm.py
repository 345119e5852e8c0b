"""Causal graphs and structural causal models (SCMs), sampled in topological order.

A ``Graph`` is a directed graph over named variables: ``edges[i, j]`` is True for ``i -> j``
(``i`` is a parent of ``j``). ``check_dag`` refuses a cycle in one line, naming it.

An ``SCM`` over a DAG sets each variable from its parents and its own noise, column
convention ``x = B x + e``: ``B[j, i]`` is the weight of the edge ``i -> j`` and ``e_j`` is
Gaussian with standard deviation ``noise[j]``.

- ``mechanism="linear"``: ``x_j = sum_i B[j, i] x_i + e_j``. Then ``x = (I - B)^-1 e`` and
  ``Cov(x) = (I - B)^-1 Omega (I - B)^-T`` with ``Omega = diag(noise^2)`` (``covariance``).
- ``mechanism="nonlinear"``: ``x_j = sum_i B[j, i] tanh(x_i) + e_j`` (the parents enter
  through a saturating nonlinearity, so a linear regression on them is misspecified).

``sample(rng, n, shift=..., scale=..., intervene=...)`` draws ``n`` rows: ``shift`` adds a
constant to chosen variables' noise means and ``scale`` multiplies their noise standard
deviations (a domain shift of their mechanisms' noise; the official code's test domains draw
the noise from N(1, 2^2) instead of N(0, 1)), ``intervene`` sets chosen variables to
constants (``do(x_j = v)``: their parents no longer matter).
"""

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

MECHANISMS = ("linear", "nonlinear")


@dataclasses.dataclass(frozen=True)
class Graph:
    """Named variables and a boolean adjacency matrix ``edges[i, j]``: ``i -> j``."""

    names: tuple[str, ...]
    edges: np.ndarray

    def __post_init__(self):
        edges = np.asarray(self.edges, bool)
        if edges.shape != (len(self.names), len(self.names)):
            raise ValueError(f"edges has shape {edges.shape}; a graph over "
                             f"{len(self.names)} variables needs {(len(self.names),) * 2}")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"variable names repeat: {list(self.names)}; give each its own")
        if np.any(np.diag(edges)):
            name = self.names[int(np.flatnonzero(np.diag(edges))[0])]
            raise ValueError(f"the graph has a self-loop on {name!r}; remove it")
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "edges", edges)

    @classmethod
    def from_edges(cls, names: Sequence[str], edges: Sequence[tuple[str, str]]) -> "Graph":
        """A graph from ``(parent, child)`` name pairs; an unknown name is a one-line error."""
        index = {n: i for i, n in enumerate(names)}
        matrix = np.zeros((len(names), len(names)), bool)
        for parent, child in edges:
            for name in (parent, child):
                if name not in index:
                    raise ValueError(f"edge {parent} -> {child} names {name!r}, which is not "
                                     f"a variable; use one of {', '.join(names)}")
            matrix[index[parent], index[child]] = True
        return cls(tuple(names), matrix)

    def index(self, name: str) -> int:
        if name not in self.names:
            raise ValueError(f"{name!r} is not a variable of the graph; use one of "
                             f"{', '.join(self.names)}")
        return self.names.index(name)

    def parents(self, j: int) -> np.ndarray:
        return np.flatnonzero(self.edges[:, j])

    def children(self, j: int) -> np.ndarray:
        return np.flatnonzero(self.edges[j])

    def ancestors(self, j: int) -> set[int]:
        found, stack = set(), list(self.parents(j))
        while stack:
            i = int(stack.pop())
            if i not in found:
                found.add(i)
                stack.extend(self.parents(i))
        return found

    def edge_list(self) -> list[tuple[str, str]]:
        return [(self.names[i], self.names[j]) for i, j in zip(*np.nonzero(self.edges),
                                                                strict=True)]


def find_cycle(edges: np.ndarray) -> list[int] | None:
    """A directed cycle as a list of node indices (first repeated at the end), or None."""
    edges = np.asarray(edges, bool)
    state = np.zeros(len(edges), int)  # 0 unseen, 1 on the stack, 2 done
    path: list[int] = []

    def visit(i: int) -> list[int] | None:
        state[i] = 1
        path.append(i)
        for j in np.flatnonzero(edges[i]):
            if state[j] == 1:
                return path[path.index(int(j)):] + [int(j)]
            if state[j] == 0 and (cycle := visit(int(j))) is not None:
                return cycle
        state[i] = 2
        path.pop()
        return None

    for i in range(len(edges)):
        if state[i] == 0 and (cycle := visit(i)) is not None:
            return cycle
    return None


def check_dag(graph: Graph) -> None:
    """A one-line ValueError naming a cycle, if the graph has one."""
    cycle = find_cycle(graph.edges)
    if cycle is not None:
        loop = " -> ".join(graph.names[i] for i in cycle)
        raise ValueError(f"the graph has a cycle {loop}; a causal graph must be acyclic")


def topological_order(graph: Graph) -> list[int]:
    """Parents before children (Kahn's algorithm, ties by index); refuses a cycle."""
    check_dag(graph)
    remaining = graph.edges.sum(0).astype(int)
    order, ready = [], [i for i in range(len(remaining)) if remaining[i] == 0]
    while ready:
        i = ready.pop(0)
        order.append(i)
        for j in graph.children(i):
            remaining[j] -= 1
            if remaining[j] == 0:
                ready.append(int(j))
        ready.sort()
    return order


def random_dag(rng: np.random.Generator, nodes: int, edge_probability: float = 0.5,
               names: Sequence[str] | None = None) -> Graph:
    """A random DAG: a random order of the nodes, then each forward pair an edge with
    ``edge_probability``."""
    if nodes < 2:
        raise ValueError(f"a graph needs at least 2 nodes, got {nodes}")
    order = rng.permutation(nodes)
    edges = np.zeros((nodes, nodes), bool)
    for a in range(nodes):
        for b in range(a + 1, nodes):
            edges[order[a], order[b]] = rng.random() < edge_probability
    names = tuple(names) if names is not None else tuple(f"x{i}" for i in range(nodes))
    return Graph(names, edges)


@dataclasses.dataclass(frozen=True)
class SCM:
    """A structural causal model over a DAG (see the module docstring)."""

    graph: Graph
    weights: np.ndarray  # B: (d, d), B[j, i] the weight of i -> j (0 where no edge)
    noise: np.ndarray  # (d,) standard deviations
    mechanism: str = "linear"

    def __post_init__(self):
        check_dag(self.graph)
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown mechanism {self.mechanism!r}; use one of "
                             f"{', '.join(MECHANISMS)}")
        if np.any((self.weights != 0) & ~self.graph.edges.T):
            raise ValueError("weights has a non-zero entry where the graph has no edge")

    @classmethod
    def random(cls, rng: np.random.Generator, graph: Graph, mechanism: str = "linear",
               low: float = 0.5, high: float = 2.0) -> "SCM":
        """Edge weights uniform in ``[low, high]`` with a random sign, noise standard
        deviations uniform in [0.5, 1.5]."""
        d = len(graph.names)
        magnitude = rng.uniform(low, high, (d, d)) * rng.choice([-1.0, 1.0], (d, d))
        return cls(graph, np.where(graph.edges.T, magnitude, 0.0), rng.uniform(0.5, 1.5, d),
                   mechanism)

    def sample(self, rng: np.random.Generator, n: int,
               shift: Mapping[int, float] | None = None,
               scale: Mapping[int, float] | None = None,
               intervene: Mapping[int, float] | None = None) -> np.ndarray:
        """``(n, d)`` rows in topological order of the mechanisms; ``shift`` adds to noise
        means, ``scale`` multiplies noise standard deviations, ``intervene`` sets variables
        (all by index)."""
        d = len(self.graph.names)
        x = np.zeros((n, d))
        noise = rng.standard_normal((n, d)) * self.noise
        for j, factor in (scale or {}).items():
            noise[:, j] *= factor
        for j, value in (shift or {}).items():
            noise[:, j] += value
        for j in topological_order(self.graph):
            if intervene and j in intervene:
                x[:, j] = intervene[j]
                continue
            inputs = x if self.mechanism == "linear" else np.tanh(x)
            x[:, j] = inputs @ self.weights[j] + noise[:, j]
        return x

    def covariance(self) -> np.ndarray:
        """``(I - B)^-1 Omega (I - B)^-T`` (linear mechanisms only)."""
        if self.mechanism != "linear":
            raise ValueError("the closed-form covariance holds for linear mechanisms only")
        inverse = np.linalg.inv(np.eye(len(self.noise)) - self.weights)
        return inverse @ np.diag(self.noise ** 2) @ inverse.T
