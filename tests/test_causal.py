"""lab.causal: SCM sampling against the closed-form covariance, the BIC against wrong graphs,
the variance floor, the search under background knowledge, and the selection arithmetic."""

import jax
import numpy as np
import pytest

from lab.causal import (
    SCM,
    Graph,
    Knowledge,
    StandIn,
    ancestor_lambda,
    causal_scores,
    check_dag,
    combined,
    graph_bic,
    node_bic,
    random_dag,
    search,
    top_k,
    topological_order,
)
from lab.causal.score import Moments


def chain() -> Graph:
    return Graph.from_edges(("a", "b", "c", "y"), [("a", "b"), ("b", "y"), ("a", "y"),
                                                   ("y", "c")])


def test_linear_samples_have_the_covariance_of_the_closed_form():
    rng = np.random.default_rng(0)
    scm = SCM.random(rng, random_dag(rng, 5, 0.6))
    x = scm.sample(rng, 400_000)
    expected = scm.covariance()  # (I - B)^-1 Omega (I - B)^-T
    np.testing.assert_allclose(np.cov(x.T), expected, atol=0.03 * np.abs(expected).max())


def test_shift_moves_the_noise_mean_and_intervention_cuts_the_parents():
    rng = np.random.default_rng(1)
    graph = chain()
    scm = SCM(graph, np.where(graph.edges.T, 1.0, 0.0), np.ones(4))
    shifted = scm.sample(rng, 100_000, shift={0: 2.0})  # a: mean 2, b = a + e: mean 2
    assert shifted[:, 0].mean() == pytest.approx(2.0, abs=0.02)
    assert shifted[:, 1].mean() == pytest.approx(2.0, abs=0.03)
    done = scm.sample(rng, 100_000, intervene={1: 5.0})  # do(b = 5): y = a + b + e
    assert np.all(done[:, 1] == 5.0) and done[:, 3].mean() == pytest.approx(5.0, abs=0.03)


def test_the_true_graph_has_a_lower_bic_than_random_wrong_graphs_on_large_samples():
    rng = np.random.default_rng(2)
    wins = 0
    for _ in range(100):
        graph = random_dag(rng, 5, 0.5)
        scm = SCM.random(rng, graph)
        x = scm.sample(rng, 2000)
        wrong = random_dag(rng, 5, 0.5)
        while np.array_equal(wrong.edges, graph.edges):
            wrong = random_dag(rng, 5, 0.5)
        wins += graph_bic(x, graph)[0] < graph_bic(x, wrong)[0]
    assert wins >= 95


def test_node_bic_is_the_gaussian_formula_and_the_floor_catches_an_exact_predictor():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((500, 2))
    x[:, 1] = 2 * x[:, 0] + 0.5 * rng.standard_normal(500)
    score = node_bic(x, 1, [0])
    residual = x[:, 1] - np.polyval(np.polyfit(x[:, 0], x[:, 1], 1), x[:, 0])
    s2 = np.mean(residual ** 2)
    assert score.bic == pytest.approx(500 * (np.log(2 * np.pi * s2) + 1) + 3 * np.log(500))
    assert not score.floored
    exact = x.copy()
    exact[:, 1] = 3 * exact[:, 0] + 1  # an exactly linear function of its parent
    floored = node_bic(exact, 1, [0])
    assert floored.floored and np.isfinite(floored.bic)
    constant = x.copy()
    constant[:, 1] = 0.7  # a constant predictor: no variance at all
    assert node_bic(constant, 1, []).floored and np.isfinite(node_bic(constant, 1, []).bic)


def test_no_constant_or_shrunk_predictor_beats_the_true_values_on_the_fixed_graph():
    """The review's case (a->y, b->y, y->c, a->c, 200 rows): with the floor relative to the
    prediction's own variance a constant 0.7 scored -5,701.6 against 1,203.7 for the true y.
    Shrinking toward the mean by alpha lowers the target's raw term by n log(1/alpha^2)."""
    rng = np.random.default_rng(7)
    graph = Graph.from_edges(("a", "b", "y", "c"), [("a", "y"), ("b", "y"), ("y", "c"),
                                                    ("a", "c")])
    x = SCM.random(rng, graph).sample(rng, 200)
    y = x[:, 2]
    shrunk = [y.mean() + alpha * (y - y.mean()) for alpha in (0.9, 0.5, 0.1, 1e-3)]
    noisy = y + 0.3 * y.std() * rng.standard_normal(200)
    candidates = np.stack([y, np.full(200, 0.7), *shrunk, noisy])
    scores, floored = causal_scores(x, graph, "y", candidates, observed_floor=True)
    true = scores[0]
    assert scores[1] > true + 10  # the constant loses what y explained of c
    np.testing.assert_allclose(scores[2:6], true, rtol=1e-9)  # shrunk: a tie at the floor
    assert scores[6] > true and floored.tolist() == [False, True, True, True, True, True, False]
    raw = [node_bic(np.column_stack([x[:, :2], p, x[:, 3:]]), 2, [0, 1], floor=0).bic
           for p in (y, shrunk[1])]  # without the floor: exactly 2 n log 2 lower at 1/2
    assert raw[0] - raw[1] == pytest.approx(2 * 200 * np.log(2))


def test_searched_causal_score_uses_ges_and_keeps_the_floor_for_shrunk_predictions():
    """The search mode's score (GES with the known edges required, as the official code runs
    FGES) is, for the true values, the BIC of a graph at least as good as the known one; a
    predictor shrunk toward the mean does not beat the true values there either."""
    rng = np.random.default_rng(7)
    graph = Graph.from_edges(("a", "b", "y", "c"), [("a", "y"), ("b", "y"), ("y", "c"),
                                                    ("a", "c")])
    x = SCM.random(rng, graph).sample(rng, 500)
    y = x[:, 2]
    candidates = np.stack([y, y.mean() + 0.5 * (y - y.mean())])
    scores, _ = causal_scores(x, graph, "y", candidates, "search", observed_floor=True)
    assert scores[0] <= graph_bic(x, graph)[0] + 1e-6
    assert scores[1] >= scores[0] - 1e-6
    fixed, _ = causal_scores(x, graph, "y", candidates, "fixed", observed_floor=True)
    raw, _ = causal_scores(x, graph, "y", candidates, "fixed", observed_floor=False)
    assert fixed[1] >= fixed[0] - 1e-6
    # the paper's score (no floor, as Tetrad's): halving the spread wins by exactly 2n log 2
    assert raw[0] - raw[1] == pytest.approx(2 * 500 * np.log(2), rel=1e-9)
    with pytest.raises(TypeError, match="observed_floor"):  # no default: each call says which
        causal_scores(x, graph, "y", candidates, "search")


def test_terms_without_the_target_do_not_change_the_ranking():
    rng = np.random.default_rng(4)
    graph = chain()
    x = SCM.random(rng, graph).sample(rng, 300)
    y = graph.index("y")
    predictions = x[:, y] + rng.standard_normal((12, 300)) * np.linspace(0.1, 2, 12)[:, None]
    partial, _ = causal_scores(x, graph, "y", predictions,  # the target's and its children's
                               observed_floor=True)
    stand_in = StandIn(Moments.of(x), y)  # the same floor for the target as causal_scores
    full = [graph_bic(np.column_stack([x[:, :y], p, x[:, y + 1:]]), graph, stand_in=stand_in)[0]
            for p in predictions]
    assert np.array_equal(np.argsort(partial), np.argsort(full))
    assert np.allclose(np.asarray(full) - partial, full[0] - partial[0])  # a constant offset


def test_search_keeps_the_required_edges_respects_tiers_and_returns_a_dag():
    rng = np.random.default_rng(5)
    graph = random_dag(rng, 6, 0.5)
    x = SCM.random(rng, graph).sample(rng, 1000)
    names = graph.names
    required = ((names[0], names[5]), (names[2], names[1]))
    tiers = ((names[0], names[2]), (names[1], names[3], names[4], names[5]))
    result = search(x, names, Knowledge(required=required, tiers=tiers))
    check_dag(result.graph)
    for parent, child in required:
        assert result.graph.edges[names.index(parent), names.index(child)]
    later = [names.index(n) for n in tiers[1]]
    earlier = [names.index(n) for n in tiers[0]]
    assert not result.graph.edges[np.ix_(later, earlier)].any()
    assert result.bic <= graph_bic(x, Graph(names, Knowledge(required).matrices(names)[0]))[0]


def test_search_recovers_a_chain_skeleton_from_enough_data():
    rng = np.random.default_rng(6)
    graph = Graph.from_edges(("a", "b", "c", "d"), [("a", "b"), ("b", "c"), ("c", "d")])
    scm = SCM(graph, np.where(graph.edges.T, 1.2, 0.0), np.ones(4))
    found = search(scm.sample(rng, 5000), graph.names).graph
    skeleton = found.edges | found.edges.T
    assert np.array_equal(skeleton, graph.edges | graph.edges.T)


def test_selection_arithmetic_minmax_lambda_and_top_k():
    errors = np.array([1.0, 2.0, 3.0, 4.0])
    causal = np.array([40.0, 10.0, 30.0, 20.0])
    np.testing.assert_allclose(combined(errors, causal, 1.0),
                               [0 + 1, 1 / 3 + 0, 2 / 3 + 2 / 3, 1 + 1 / 3])
    assert list(top_k(combined(errors, causal, 1.0), 2)) == [1, 0]
    assert list(top_k(combined(errors, causal, 0.0), 2)) == [0, 1]
    assert ancestor_lambda(chain(), "y") == pytest.approx(0.75)  # y, a, b of a, b, c, y
    assert topological_order(chain()) == [0, 1, 3, 2]


@pytest.mark.parametrize("make, message", [
    (lambda: check_dag(Graph.from_edges(("a", "b", "c"), [("a", "b"), ("b", "c"), ("c", "a")])),
     "the graph has a cycle a -> b -> c -> a; a causal graph must be acyclic"),
    (lambda: Knowledge(required=(("a", "z"),)).matrices(("a", "b")),
     "required edge a -> z names 'z', which is not a variable; use one of a, b"),
    (lambda: causal_scores(np.zeros((5, 4)), chain(), "target", np.zeros((1, 5)),
                           observed_floor=False),
     "'target' is not a variable of the graph; use one of a, b, c, y"),
    (lambda: combined(np.ones(3), np.ones(3), -0.5), "lambda must be at least 0, got -0.5"),
    (lambda: Knowledge(required=(("b", "a"),), tiers=(("a",), ("b",))).matrices(("a", "b")),
     "required edge b -> a is forbidden by the forbidden edges or the tiers"),
])
def test_bad_input_is_one_line_errors(make, message):
    with pytest.raises(ValueError) as error:
        make()
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


@pytest.mark.parametrize("every", [0, 5])
def test_vmapped_training_of_many_candidates_equals_a_loop_over_them(every):
    import equinox as eqx

    from lab.train import causal_selection as train

    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.standard_normal(64)).astype(np.float32)
    schedule = train.Schedule(steps=50, batch=16, lr=1e-2, every=every, patience=2)
    models = train.candidates(jax.random.key(0), 3, inputs=3, hidden=8)
    keys = jax.random.split(jax.random.key(1), 3)
    together, log = train.train(models, keys, x, y, x[:16], y[:16], schedule)
    for i in range(3):
        one = jax.tree.map(lambda a, i=i: a[i] if eqx.is_array(a) else a, models)
        alone, alone_log = eqx.filter_jit(train.train_one)(one, keys[i], x, y, x[:16], y[:16],
                                                           schedule)
        np.testing.assert_allclose(log["loss"][i], alone_log["loss"], rtol=1e-5, atol=1e-6)
        assert int(log["stopped_at"][i]) == int(alone_log["stopped_at"])
        np.testing.assert_allclose(train.predict(together, x)[i],
                                   jax.vmap(alone)(x)[:, 0], rtol=1e-5, atol=1e-5)
    assert float(log["loss"][:, -10:].mean()) < 0.5 * float(log["loss"][:, :10].mean())


def test_early_stopping_keeps_the_best_weights_and_stops_after_the_patience():
    from lab.train import causal_selection as train

    rng = np.random.default_rng(8)
    x = rng.standard_normal((200, 2)).astype(np.float32)
    y = (x[:, 0] + 0.5 * rng.standard_normal(200)).astype(np.float32)
    # a stopping split from another relation: its loss soon rises while training fits (x, y)
    x_stop = rng.standard_normal((100, 2)).astype(np.float32)
    y_stop = (-x_stop[:, 0]).astype(np.float32)
    schedule = train.Schedule(steps=300, batch=32, lr=3e-2, every=10, patience=3)
    models = train.candidates(jax.random.key(2), 2, inputs=2, hidden=8)
    trained, log = train.train(models, jax.random.split(jax.random.key(3), 2), x, y, x_stop,
                               y_stop, schedule)
    for i in range(2):
        held = np.asarray(log["held"][i])
        measured = np.flatnonzero(~np.isnan(held))
        stop = int(log["stopped_at"][i])
        assert stop < schedule.steps and measured[-1] == stop - 1  # nothing measured after
        assert np.all((measured + 1) % schedule.every == 0)
        losses = held[measured]
        best = [k for k in range(len(losses)) if losses[k] < min(losses[:k], default=np.inf)
                - schedule.min_delta]
        assert len(losses) - 1 - best[-1] == schedule.patience  # patience spent, then stop
        final = float(np.mean((np.asarray(train.predict(trained, x_stop))[i] - y_stop) ** 2))
        assert final == pytest.approx(losses[best[-1]], rel=1e-5)  # the best weights kept


def test_keras_candidates_are_relu_with_glorot_weights_and_zero_biases():
    import equinox as eqx

    from lab.train import causal_selection as train

    models = train.candidates(jax.random.key(0), 2, inputs=3, hidden=[64, 32], network="keras")
    linear = [layer for layer in models.layers if isinstance(layer, eqx.nn.Linear)]
    assert [layer.weight.shape[1:] for layer in linear] == [(64, 3), (32, 64), (1, 32)]
    for layer in linear:
        limit = np.sqrt(6.0 / sum(layer.weight.shape[1:]))  # Keras' glorot_uniform
        w = np.asarray(layer.weight)
        assert np.abs(w).max() <= limit and np.abs(w).max() > 0.8 * limit
        assert not np.asarray(layer.bias).any()
    one = jax.tree.map(lambda a: a[0] if eqx.is_array(a) else a, models)
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    w1, w2, w3 = (np.asarray(layer.weight[0]) for layer in linear)
    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    np.testing.assert_allclose(one(x), w3 @ relu(w2 @ relu(w1 @ x)), rtol=1e-5, atol=1e-6)


def test_training_stopped_part_way_continues_from_its_progress_file_to_one_calls_numbers(
        tmp_path, monkeypatch):
    import equinox as eqx

    from lab.train import causal_selection as train

    rng = np.random.default_rng(9)
    x = rng.standard_normal((100, 3)).astype(np.float32)
    y = x.sum(1).astype(np.float32)
    schedule = train.Schedule(steps=40, batch=8, lr=1e-2, optimizer="sgd", every=5,
                              patience=2)
    models = train.candidates(jax.random.key(0), 3, inputs=3, hidden=8, network="keras")
    keys = jax.random.split(jax.random.key(1), 3)
    whole, whole_log = train.train(models, keys, x, y, x[:30], y[:30], schedule)
    progress, advance, pieces = tmp_path / "state.eqx", train._advance, []

    def stopped(*args):  # the run is interrupted during its fourth piece of 5 steps
        pieces.append(args[3])
        if len(pieces) == 4:
            raise KeyboardInterrupt
        return advance(*args)

    monkeypatch.setattr(train, "_advance", stopped)
    with pytest.raises(KeyboardInterrupt):
        train.train(models, keys, x, y, x[:30], y[:30], schedule, progress=progress,
                    save_every=0)
    assert train.checkpoint.read_info(progress)["done"] == 15
    monkeypatch.setattr(train, "_advance", advance)
    resumed, log = train.train(models, keys, x, y, x[:30], y[:30], schedule,
                               progress=progress, save_every=0)
    assert log["seconds_before"] > 0 and log["loss"].shape == (3, 40)
    for a, b in zip(jax.tree.leaves(eqx.filter(whole, eqx.is_array)),
                    jax.tree.leaves(eqx.filter(resumed, eqx.is_array)), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(whole_log["loss"], log["loss"])
    np.testing.assert_array_equal(whole_log["held"], log["held"])
    np.testing.assert_array_equal(whole_log["stopped_at"], log["stopped_at"])
