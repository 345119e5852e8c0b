"""lab.causal.ges and lab.causal.pdag: CPDAGs and Meek's rules on hand cases, DAG extensions,
and GES against exhaustive enumeration of every DAG (with and without background knowledge)
on small linear-Gaussian SCMs."""

import itertools

import numpy as np
import pytest

from lab.causal import SCM, Graph, Knowledge, ges, node_bic
from lab.causal.ges import deletes, inserts
from lab.causal.pdag import cpdag, extension, meek
from lab.causal.scm import find_cycle
from lab.causal.score import Moments

NAMES = ("a", "b", "c", "d")


def pattern(d: int, arrows=(), lines=()) -> np.ndarray:
    """A pattern over ``d`` nodes from directed ``(i, j)`` and undirected ``(i, j)`` pairs."""
    g = np.zeros((d, d), bool)
    for i, j in arrows:
        g[i, j] = True
    for i, j in lines:
        g[i, j] = g[j, i] = True
    return g


def sample(edges, names=NAMES[:3], n=2000, seed=0, weight=1.0) -> np.ndarray:
    graph = Graph.from_edges(names, edges)
    scm = SCM(graph, np.where(graph.edges.T, weight, 0.0), np.ones(len(names)))
    return scm.sample(np.random.default_rng(seed), n)


def best_over_all_dags(data, names, knowledge=Knowledge()) -> float:
    """The lowest BIC over every DAG on ``names`` that holds ``knowledge``, by enumeration."""
    required, allowed = knowledge.matrices(names)
    moments, d = Moments.of(data), len(names)
    pairs = list(itertools.combinations(range(d), 2))
    scores = {}
    best = np.inf
    for marks in itertools.product((0, 1, 2), repeat=len(pairs)):
        edges = np.zeros((d, d), bool)
        for (i, j), mark in zip(pairs, marks, strict=True):
            if mark:
                edges[(i, j) if mark == 1 else (j, i)] = True
        if np.any(required & ~edges) or np.any(edges & ~allowed) or find_cycle(edges):
            continue
        total = 0.0
        for j in range(d):
            parents = tuple(np.flatnonzero(edges[:, j]))
            if (j, parents) not in scores:
                scores[j, parents] = node_bic(moments, j, parents).bic
            total += scores[j, parents]
        best = min(best, total)
    return best


def test_cpdag_keeps_a_collider_and_leaves_a_chain_undirected():
    collider = pattern(3, arrows=[(0, 2), (1, 2)])
    np.testing.assert_array_equal(cpdag(collider), collider)
    chain = pattern(3, arrows=[(0, 1), (1, 2)])
    np.testing.assert_array_equal(cpdag(chain), pattern(3, lines=[(0, 1), (1, 2)]))
    # a -> c <- b, c -> d: the collider is compelled, and so is c -> d (Meek's R1)
    np.testing.assert_array_equal(cpdag(pattern(4, arrows=[(0, 2), (1, 2), (2, 3)])),
                                  pattern(4, arrows=[(0, 2), (1, 2), (2, 3)]))
    # a -> b, a -> c, b -> c: a complete DAG's class is every orientation
    np.testing.assert_array_equal(cpdag(pattern(3, arrows=[(0, 1), (0, 2), (1, 2)])),
                                  pattern(3, lines=[(0, 1), (0, 2), (1, 2)]))


def test_meek_rules_orient_the_hand_cases():
    # R1: a -> b - c, a and c non-adjacent: b -> c
    np.testing.assert_array_equal(meek(pattern(3, arrows=[(0, 1)], lines=[(1, 2)])),
                                  pattern(3, arrows=[(0, 1), (1, 2)]))
    # ... and nothing when a and c are adjacent
    shielded = pattern(3, arrows=[(0, 1)], lines=[(1, 2), (0, 2)])
    np.testing.assert_array_equal(meek(shielded), shielded)
    # R2: a -> b -> c and a - c: a -> c
    np.testing.assert_array_equal(meek(pattern(3, arrows=[(0, 1), (1, 2)], lines=[(0, 2)])),
                                  pattern(3, arrows=[(0, 1), (1, 2), (0, 2)]))
    # R3: a - c -> b, a - d -> b, a - b, c and d non-adjacent: a -> b
    r3 = pattern(4, arrows=[(2, 1), (3, 1)], lines=[(0, 1), (0, 2), (0, 3)])
    np.testing.assert_array_equal(meek(r3), pattern(4, arrows=[(2, 1), (3, 1), (0, 1)],
                                                    lines=[(0, 2), (0, 3)]))
    # R4: d -> c -> b, a - b, a - c, a - d, b and d non-adjacent: a -> b
    r4 = pattern(4, arrows=[(3, 2), (2, 1)], lines=[(0, 1), (0, 2), (0, 3)])
    np.testing.assert_array_equal(meek(r4), pattern(4, arrows=[(3, 2), (2, 1), (0, 1)],
                                                    lines=[(0, 2), (0, 3)]))


def test_extension_is_a_member_of_the_class_and_a_chordless_cycle_has_none():
    rng = np.random.default_rng(0)
    for _ in range(20):
        order = rng.permutation(5)
        dag = np.zeros((5, 5), bool)
        for a, b in itertools.combinations(range(5), 2):
            dag[order[a], order[b]] = rng.random() < 0.5
        g = cpdag(dag)
        member = extension(g)
        assert find_cycle(member) is None and not np.any(member & member.T)
        np.testing.assert_array_equal(cpdag(member), g)
    # a - b - c - d - a: any orientation has a cycle or a v-structure the pattern lacks
    assert extension(pattern(4, lines=[(0, 1), (1, 2), (2, 3), (3, 0)])) is None


def test_operators_follow_chickerings_validity_conditions():
    def zero(j, parents):
        return 0.0

    everything = ~np.eye(4, dtype=bool)
    # y -> w -> x: Insert(x, y, {}) would close a cycle (Theorem 15's path condition)
    path = pattern(3, arrows=[(1, 2), (2, 0)])  # x = 0, y = 1, w = 2
    pairs = {(m.x, m.y) for m in inserts(path, zero, everything[:3, :3])}
    assert (1, 0) in pairs and (0, 1) not in pairs
    # x - y with y - h1, y - h2, x - h1, x - h2, h1 and h2 non-adjacent: NA_yx = {h1, h2} is
    # not a clique, so Delete(x, y, H) needs H to hold h1 or h2 (Theorem 17)
    g = pattern(4, lines=[(0, 1), (1, 2), (1, 3), (0, 2), (0, 3)])
    subsets = {m.subset for m in deletes(g, zero, np.zeros((4, 4), bool)) if (m.x, m.y) == (0, 1)}
    assert subsets == {frozenset({2}), frozenset({3}), frozenset({2, 3})}
    # ... and a required edge is never a Delete
    required = np.zeros((4, 4), bool)
    required[1, 0] = True
    assert not any({m.x, m.y} == {0, 1} for m in deletes(g, zero, required))


def test_ges_recovers_the_cpdag_of_a_collider_and_of_a_chain():
    collider = ges(sample([("a", "c"), ("b", "c")]), NAMES[:3])
    np.testing.assert_array_equal(collider.cpdag, pattern(3, arrows=[(0, 2), (1, 2)]))
    assert collider.graph.edge_list() == [("a", "c"), ("b", "c")]
    chain = ges(sample([("a", "b"), ("b", "c")]), NAMES[:3])
    np.testing.assert_array_equal(chain.cpdag, pattern(3, lines=[(0, 1), (1, 2)]))
    assert chain.inserts == 2 and chain.deletes == 0


@pytest.mark.parametrize("seed", range(4))
def test_ges_finds_the_best_bic_over_all_dags(seed):
    rng = np.random.default_rng(seed)
    edges = [e for e in itertools.combinations(NAMES, 2) if rng.random() < 0.5]
    graph = Graph.from_edges(NAMES, edges)
    data = SCM.random(rng, graph).sample(rng, 2000)
    result = ges(data, NAMES)
    assert result.bic == pytest.approx(best_over_all_dags(data, NAMES), rel=1e-12)
    np.testing.assert_array_equal(result.cpdag, cpdag(graph.edges))


# on data from a -> c <- b, c -> d. The first four are true of that graph, where GES's
# large-sample optimality holds; the last three contradict it, and GES still reaches the best
# admissible BIC on these data (it need not: see test_ges_keeps_a_required_edge_...)
KNOWLEDGE = {
    "required true edge": Knowledge(required=(("a", "c"),)),
    "forbidden non-edges": Knowledge(forbidden=(("a", "b"), ("b", "a"), ("d", "a"))),
    "tiers along the graph": Knowledge(tiers=(("a", "b"), ("c",), ("d",))),
    "required and tiers": Knowledge(required=(("c", "d"),), tiers=(("a",), ("c", "d"))),
    "forbidden true edge": Knowledge(forbidden=(("a", "c"), ("c", "a"))),
    "forbidden compelled direction": Knowledge(forbidden=(("b", "c"),)),
    "tiers against the collider": Knowledge(tiers=(("c",), ("a", "b"))),
}


@pytest.mark.parametrize("case", KNOWLEDGE)
def test_ges_under_knowledge_finds_the_best_bic_over_the_dags_that_hold_it(case):
    data = sample([("a", "c"), ("b", "c"), ("c", "d")], NAMES, seed=1)
    knowledge = KNOWLEDGE[case]
    result = ges(data, NAMES, knowledge)
    required, allowed = knowledge.matrices(NAMES)
    edges = result.graph.edges
    assert not np.any(required & ~edges) and not np.any(edges & ~allowed)
    assert result.bic == pytest.approx(best_over_all_dags(data, NAMES, knowledge), rel=1e-12)


def test_ges_keeps_a_required_edge_with_its_direction_and_orients_what_follows():
    # the chain a - b - c: requiring c -> b leaves only c -> b -> a (Meek's R1 in the pattern)
    result = ges(sample([("a", "b"), ("b", "c")]), NAMES[:3], Knowledge(required=(("c", "b"),)))
    np.testing.assert_array_equal(result.cpdag, pattern(3, lines=[(0, 1), (1, 2)]))
    np.testing.assert_array_equal(result.pattern, pattern(3, arrows=[(2, 1), (1, 0)]))
    assert sorted(result.graph.edge_list()) == [("b", "a"), ("c", "b")]
    # a required edge the data do not support is never deleted
    spurious = ges(sample([("a", "b"), ("b", "c")]), NAMES[:3],
                   Knowledge(required=(("a", "c"),)))
    assert ("a", "c") in spurious.graph.edge_list()
    # with knowledge that is false of the data's graph, GES's optimality does not hold: here
    # it stops in a class whose BIC is 1.7 above the best DAG that has the required d -> a
    data = sample([("a", "c"), ("b", "c"), ("c", "d")], NAMES, seed=1)
    wrong = Knowledge(required=(("d", "a"),))
    result = ges(data, NAMES, wrong)
    assert ("d", "a") in result.graph.edge_list()
    assert result.bic - best_over_all_dags(data, NAMES, wrong) == pytest.approx(1.74, abs=0.01)


def test_ges_never_adds_a_forbidden_edge_nor_a_forbidden_direction():
    data = sample([("a", "c"), ("b", "c")])
    none = ges(data, NAMES[:3], Knowledge(forbidden=(("a", "c"), ("c", "a"))))
    assert not none.cpdag[0, 2] and not none.cpdag[2, 0]
    # a -> c is compelled in the collider's class: forbidding it moves the search elsewhere
    other = ges(data, NAMES[:3], Knowledge(forbidden=(("a", "c"),)))
    assert not other.graph.edges[0, 2] and not other.pattern[0, 2]
    assert other.bic > ges(data, NAMES[:3]).bic


def test_ges_refuses_data_whose_columns_are_not_the_variables():
    with pytest.raises(ValueError, match="data has 2 columns; the search has 3 variables"):
        ges(np.zeros((10, 2)), NAMES[:3])
