"""Partially directed graphs: a DAG's Markov equivalence class as a CPDAG, Meek's orientation
rules, and a DAG extension of a pattern (Dor & Tarsi 1992).

A *pattern* is a boolean matrix ``g`` over ``d`` nodes: ``g[i, j] and not g[j, i]`` is the
directed edge ``i -> j``, ``g[i, j] and g[j, i]`` the undirected edge ``i - j`` (either
orientation is possible). A DAG (``Graph.edges``) is a pattern with no undirected edge.

- ``cpdag(dag)``: the completed PDAG of the DAG's equivalence class (Chickering 1995, Meek
  1995): the skeleton with the v-structures ``a -> c <- b`` (``a``, ``b`` non-adjacent)
  directed, closed under Meek's rules. Two DAGs are Markov equivalent exactly when their
  CPDAGs are equal.
- ``meek(g)``: Meek's rules R1-R4 applied until none fires. They orient an undirected edge
  only where every DAG of the class that keeps ``g``'s directed edges has that orientation,
  so after background knowledge has oriented some edges they give the maximally oriented
  pattern (Meek 1995, "Causal inference and causal explanation with background knowledge").
- ``extension(g)``: a DAG with ``g``'s skeleton, its directed edges and its v-structures and
  no others, or None when there is none (Dor & Tarsi's algorithm finds one whenever one
  exists).
"""

import numpy as np


def directed(g: np.ndarray) -> np.ndarray:
    """``[i, j]``: the edge ``i -> j``."""
    return g & ~g.T


def undirected(g: np.ndarray) -> np.ndarray:
    """``[i, j]`` and ``[j, i]``: the edge ``i - j``."""
    return g & g.T


def adjacent(g: np.ndarray) -> np.ndarray:
    """``[i, j]``: an edge of either kind between ``i`` and ``j``."""
    return g | g.T


def v_structures(g: np.ndarray) -> set[tuple[int, int, int]]:
    """The triples ``(a, c, b)``, ``a < b``, with ``a -> c <- b`` directed and ``a``, ``b``
    non-adjacent."""
    arrows, adj = directed(g), adjacent(g)
    found = set()
    for c in range(len(g)):
        parents = np.flatnonzero(arrows[:, c])
        for k, a in enumerate(parents):
            for b in parents[k + 1:]:
                if not adj[a, b]:
                    found.add((int(a), c, int(b)))
    return found


def _implied(g: np.ndarray, a: int, b: int) -> bool:
    """Whether one of Meek's rules orients the undirected edge ``a - b`` as ``a -> b``:

    - R1: ``c -> a - b``, ``c`` and ``b`` non-adjacent (else a new v-structure at ``a``);
    - R2: ``a -> c -> b`` (else a cycle);
    - R3: ``c - a - d``, ``c -> b <- d``, ``c`` and ``d`` non-adjacent;
    - R4: ``d -> c -> b``, ``a`` adjacent to ``c`` and ``d``, ``d`` and ``b`` non-adjacent.
    """
    arrows, lines, adj = directed(g), undirected(g), adjacent(g)
    if np.any(arrows[:, a] & ~adj[:, b]):
        return True
    if np.any(arrows[a] & arrows[:, b]):
        return True
    both = np.flatnonzero(lines[a] & arrows[:, b])
    if len(both) > 1 and np.any(~adj[np.ix_(both, both)] & ~np.eye(len(both), dtype=bool)):
        return True
    for c in np.flatnonzero(arrows[:, b] & adj[a]):
        if np.any(arrows[:, c] & adj[a] & ~adj[:, b]):
            return True
    return False


def meek(g: np.ndarray) -> np.ndarray:
    """``g`` with Meek's rules R1-R4 applied until none fires (see the module docstring)."""
    g = np.array(g, bool)
    changed = True
    while changed:
        changed = False
        for a, b in zip(*np.nonzero(undirected(g)), strict=True):
            if g[a, b] and g[b, a] and _implied(g, int(a), int(b)):
                g[b, a] = False
                changed = True
    return g


def cpdag(dag: np.ndarray) -> np.ndarray:
    """The CPDAG of a DAG: its skeleton, its v-structures directed, then Meek's rules."""
    dag = np.asarray(dag, bool)
    g = adjacent(dag)
    for a, c, b in v_structures(dag):
        g[c, a] = g[c, b] = False
    return meek(g)


def extension(g: np.ndarray) -> np.ndarray | None:
    """A consistent DAG extension of the pattern ``g`` (Dor & Tarsi 1992), or None: repeatedly
    take a node ``x`` with no directed edge out of it whose undirected neighbours are each
    adjacent to all of ``x``'s other neighbours, direct its undirected edges into it, and set
    it aside. When no such node is left before all are set aside, no extension exists."""
    g = np.array(g, bool)
    dag = directed(g)
    remaining = list(range(len(g)))
    while remaining:
        arrows, plain, adj = directed(g), undirected(g), adjacent(g)
        for x in remaining:
            if np.any(arrows[x]):
                continue
            neighbours = np.flatnonzero(adj[x])
            lines = np.flatnonzero(plain[x])
            if all(adj[y, z] for y in lines for z in neighbours if z != y):
                for y in lines:
                    dag[y, x] = True
                g[x, :] = g[:, x] = False
                remaining.remove(x)
                break
        else:
            return None
    return dag
