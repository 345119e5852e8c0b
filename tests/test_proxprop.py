"""ProxProp against closed forms, in float64."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lab.models import convnet, mlp
from lab.optim import ProxProp, proximal_step, value_and_direction
from lab.train import cross_entropy


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _flat(tree) -> np.ndarray:
    leaves = jax.tree.leaves(eqx.filter(tree, eqx.is_array))
    return np.concatenate([np.ravel(leaf) for leaf in leaves])


def _layer_problem(batch, n_in, n_out, seed=0):
    keys = jax.random.split(jax.random.key(seed), 3)
    layer = eqx.nn.Linear(n_in, n_out, key=keys[0], dtype=jnp.float64)
    a = jax.random.normal(keys[1], (batch, n_in), jnp.float64)
    g = jax.random.normal(keys[2], (batch, n_out), jnp.float64) / batch
    gradient = eqx.filter_grad(lambda lin: jnp.sum(jax.vmap(lin)(a) * g))(layer)
    return layer, a, g, gradient


def _lstsq_direction(layer, a, g, tau):
    """theta_k - argmin 1/2||A theta^T - z*||^2 + 1/(2 tau)||theta - theta_k||^2, by lstsq."""
    A = np.hstack([np.asarray(a), np.ones((a.shape[0], 1))])
    theta_k = np.hstack([np.asarray(layer.weight), np.asarray(layer.bias)[:, None]])
    z_star = A @ theta_k.T - np.asarray(g)
    stacked = np.vstack([A, np.eye(A.shape[1]) / np.sqrt(tau)])
    target = np.vstack([z_star, theta_k.T / np.sqrt(tau)])
    theta_new = np.linalg.lstsq(stacked, target, rcond=None)[0].T
    return theta_k - theta_new


@pytest.mark.parametrize("batch, n_in", [(5, 12), (20, 6)])  # both sides of the solve
def test_proxprop_exact_matches_lstsq(batch, n_in):
    layer, a, g, gradient = _layer_problem(batch, n_in, 4)
    step = proximal_step(layer, a, g, gradient, ProxProp(tau=0.3, solver="exact"))
    got = np.hstack([np.asarray(step.weight), np.asarray(step.bias)[:, None]])
    expected = _lstsq_direction(layer, a, g, 0.3)
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 1e-8


def test_proxprop_cg_error_falls_with_iterations_and_reaches_exact():
    layer, a, g, gradient = _layer_problem(8, 6, 3, seed=1)
    exact = _flat(proximal_step(layer, a, g, gradient, ProxProp(tau=2.0, solver="exact")))
    errors = [np.linalg.norm(_flat(proximal_step(layer, a, g, gradient,
                                                 ProxProp(tau=2.0, solver=f"cg{k}"))) - exact)
              for k in range(1, 9)]
    assert all(later < earlier for earlier, later in zip(errors[:6], errors[1:7], strict=True))
    # A^T A + I/tau has at most in+1 = 7 distinct eigenvalues: CG is exact by then.
    assert errors[-1] / np.linalg.norm(exact) < 1e-8


def _network_problem(seed, batch=6):
    keys = jax.random.split(jax.random.key(seed), 3)
    model = jax.tree.map(lambda p: p.astype(jnp.float64) if eqx.is_array(p) else p,
                         mlp([5, 7, 6, 4], key=keys[0]))
    x = jax.random.normal(keys[1], (batch, 5), jnp.float64)
    y = jax.random.randint(keys[2], (batch,), 0, 4)
    return model, x, y


@pytest.mark.parametrize("solver", ["exact", "cg3", "colcg3"])
def test_proxprop_small_tau_direction_approaches_gradient(solver):
    model, x, y = _network_problem(0)
    _, gradient = value_and_direction(model, x, y, cross_entropy, ProxProp(1.0, "gradient"))
    _, direction = value_and_direction(model, x, y, cross_entropy, ProxProp(1e-6, solver))
    hidden = slice(0, 4)  # layers 1 and 3: the hidden Linear layers
    d, grad = _flat(direction.layers[hidden]), _flat(gradient.layers[hidden])
    assert d @ grad / (np.linalg.norm(d) * np.linalg.norm(grad)) > 0.999
    np.testing.assert_allclose(d / 1e-6, grad, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("solver, tau", [("exact", 0.05), ("exact", 10.0), ("cg3", 1.0),
                                         ("colcg3", 1.0)])
def test_proxprop_step_is_a_descent_direction(seed, solver, tau):
    """theta_new - theta_k = -d is a descent direction: <d, grad L> > 0 for every layer."""
    model, x, y = _network_problem(seed)
    (loss, _), grads = value_and_direction(model, x, y, cross_entropy, ProxProp(1.0, "gradient"))
    _, direction = value_and_direction(model, x, y, cross_entropy, ProxProp(tau, solver))
    for i in (1, 3):
        assert _flat(direction.layers[i]) @ _flat(grads.layers[i]) > 0
    # and a small step along it lowers the loss
    stepped = eqx.apply_updates(model, jax.tree.map(lambda d: -1e-3 * d, direction))
    assert cross_entropy(jax.vmap(stepped)(x), y)[0] < loss


def test_proxprop_last_layer_and_gradient_solver_are_plain_backprop():
    model, x, y = _network_problem(1)
    (loss, _), grads = eqx.filter_value_and_grad(
        lambda m: cross_entropy(jax.vmap(m)(x), y), has_aux=True)(model)
    _, same = value_and_direction(model, x, y, cross_entropy, ProxProp(1.0, "gradient"))
    _, prox = value_and_direction(model, x, y, cross_entropy, ProxProp(1.0, "exact"))
    np.testing.assert_allclose(_flat(same), _flat(grads), rtol=1e-12)
    np.testing.assert_allclose(_flat(prox.layers[5]), _flat(grads.layers[5]), rtol=1e-12)
    assert not np.allclose(_flat(prox.layers[1]), _flat(grads.layers[1]))


def test_proxprop_convolution_step_matches_dense_matrix_form():
    keys = jax.random.split(jax.random.key(3), 3)
    conv = eqx.nn.Conv2d(2, 3, 3, padding=1, key=keys[0], dtype=jnp.float64)
    a = jax.random.normal(keys[1], (2, 2, 5, 5), jnp.float64)
    g = jax.random.normal(keys[2], (2, 3, 5, 5), jnp.float64) / 2
    params, static = eqx.partition(conv, eqx.is_array)
    flat, unflatten = jax.flatten_util.ravel_pytree(params)

    def phi(theta):  # the layer as a function of its parameters: linear, J theta
        return jnp.ravel(jax.vmap(eqx.combine(unflatten(theta), static))(a))

    J = jax.jacobian(phi)(flat)  # (batch * outputs, parameters)
    np.testing.assert_allclose(J @ flat, phi(flat), rtol=1e-10)
    tau = 0.5
    dense = np.linalg.solve(J.T @ J + np.eye(len(flat)) / tau, J.T @ np.ravel(g))
    gradient = eqx.filter_grad(lambda c: jnp.sum(jax.vmap(c)(a) * g))(conv)
    np.testing.assert_allclose(_flat(gradient), J.T @ np.ravel(g), rtol=1e-10)
    step = proximal_step(conv, a, g, gradient, ProxProp(tau, "cg300"))
    assert np.linalg.norm(_flat(step) - dense) / np.linalg.norm(dense) < 1e-8


def test_proxprop_on_a_convnet_descends_and_approaches_the_gradient_for_small_tau():
    model = convnet(1, 8, 10, key=jax.random.key(0))
    model = jax.tree.map(lambda a: a.astype(jnp.float64) if eqx.is_array(a) else a, model)
    x = jax.random.normal(jax.random.key(1), (4, 1, 8, 8), jnp.float64)
    y = jnp.arange(4)
    (loss, _), grads = value_and_direction(model, x, y, cross_entropy, ProxProp(1.0, "gradient"))
    _, direction = value_and_direction(model, x, y, cross_entropy, ProxProp(1.0, "cg3"))
    assert _flat(direction) @ _flat(grads) > 0  # a descent direction on the conv layers too
    stepped = eqx.apply_updates(model, jax.tree.map(lambda d: -1e-3 * d, direction))
    assert cross_entropy(jax.vmap(stepped)(x), y)[0] < loss
    tau = 1e-8  # the deviation is O(tau ||J^T J||): a convolution sums over positions
    _, small = value_and_direction(model, x, y, cross_entropy, ProxProp(tau, "cg3"))
    convs = [i for i, layer in enumerate(model.layers) if isinstance(layer, eqx.nn.Conv2d)]
    assert convs  # the proximal step on each convolution: tau times the gradient, tau -> 0
    for i in convs:
        np.testing.assert_allclose(_flat(small.layers[i]) / tau, _flat(grads.layers[i]),
                                   rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"tau": 0.0}, "tau must be a positive number, got 0.0"),
    ({"tau": -1.0}, "tau must be a positive number"),
    ({"solver": "newton"}, "unknown ProxProp solver 'newton'"),
    ({"solver": "cg0"}, "unknown ProxProp solver 'cg0'"),
    ({"solver": "colcg"}, "unknown ProxProp solver 'colcg'"),
])
def test_proxprop_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ProxProp(**kwargs)


def test_proxprop_names_a_layer_it_cannot_handle():
    keys = jax.random.split(jax.random.key(0), 2)
    model = eqx.nn.Sequential([eqx.nn.Linear(3, 4, key=keys[0]), eqx.nn.LayerNorm(4),
                               eqx.nn.Linear(4, 2, key=keys[1])])
    with pytest.raises(TypeError, match=r"cannot handle layer 1 \(LayerNorm\)"):
        value_and_direction(model, jnp.ones((2, 3)), jnp.zeros(2, int), cross_entropy,
                            ProxProp())
    conv = convnet(1, 8, 10, key=keys[0])
    with pytest.raises(TypeError, match="solver 'exact' handles Linear layers only, but "
                                        "layer 0 is Conv2d"):
        value_and_direction(conv, jnp.ones((2, 1, 8, 8)), jnp.zeros(2, int), cross_entropy,
                            ProxProp(solver="exact"))


@pytest.mark.parametrize("batch, n_in", [(5, 12), (20, 6)])  # dual and primal Gram forms
@pytest.mark.parametrize("iterations", [1, 2, 4])
def test_proxprop_dense_cg_matches_matrix_free_cg_iterates(batch, n_in, iterations):
    from lab.optim.proxprop import _cg

    layer, a, g, gradient = _layer_problem(batch, n_in, 3, seed=2)
    dense = proximal_step(layer, a, g, gradient, ProxProp(0.7, f"cg{iterations}"))
    matrix_free = eqx.combine(_cg(layer, a, g, gradient, 0.7, iterations), gradient)
    np.testing.assert_allclose(_flat(dense), _flat(matrix_free), rtol=1e-9)


def _numpy_column_cg(A, G, tau, iterations, tol, eps):
    """The reference code's CG written out column by column in plain numpy: textbook CG on
    ``(A^T A + I/tau) d_j = A^T g_j`` for each output unit j (its own alpha and beta, eps
    added to their denominators), keeping every iterate; then the joint stopping rule: the
    first k at which max_j |r_j^k|^2 < tol^2 mean_j |r_j^0|^2, else k = iterations."""
    H = A.T @ A + np.eye(A.shape[1]) / tau
    B = A.T @ G
    iterates, residuals = [], []
    for j in range(B.shape[1]):
        x, r = np.zeros(B.shape[0]), B[:, j].copy()
        p, rr = r.copy(), r @ r
        xs, rs = [x.copy()], [rr]
        for _ in range(iterations):
            hp = H @ p
            alpha = rr / (p @ hp + eps)
            x, r = x + alpha * p, r - alpha * hp
            rr_new = r @ r
            p, rr = r + rr_new / (rr + eps) * p, rr_new
            xs.append(x.copy())
            rs.append(rr)
        iterates.append(xs)
        residuals.append(rs)
    residuals = np.array(residuals)  # (columns, iterations + 1)
    met = [k for k in range(1, iterations + 1)
           if residuals[:, k].max() < tol**2 * residuals[:, 0].mean()]
    stop = met[0] if met else iterations
    return np.stack([xs[stop] for xs in iterates], axis=1), stop


def _stacked(step):
    return np.hstack([np.asarray(step.weight), np.asarray(step.bias)[:, None]]).T


@pytest.mark.parametrize("batch, n_in", [(5, 12), (20, 6)])  # dual and primal Gram forms
@pytest.mark.parametrize("iterations", [1, 3, 40])
def test_proxprop_colcg_matches_numpy_column_by_column_cg(batch, n_in, iterations):
    from lab.optim.proxprop import REFERENCE_EPS, REFERENCE_TOL

    layer, a, g, gradient = _layer_problem(batch, n_in, 4, seed=3)
    A = np.hstack([np.asarray(a), np.ones((batch, 1))])
    tau = 0.7
    expected, stop = _numpy_column_cg(A, np.asarray(g), tau, iterations, REFERENCE_TOL,
                                      REFERENCE_EPS)
    if iterations == 40:
        assert stop < iterations  # the early stop has acted
    got = _stacked(proximal_step(layer, a, g, gradient, ProxProp(tau, f"colcg{iterations}")))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_proxprop_colcg_steps_differ_per_column_and_from_whole_layer_cg():
    layer, a, g, gradient = _layer_problem(6, 9, 3, seed=4)
    A = np.hstack([np.asarray(a), np.ones((6, 1))])
    column = _stacked(proximal_step(layer, a, g, gradient, ProxProp(0.7, "colcg2")))
    whole = _stacked(proximal_step(layer, a, g, gradient, ProxProp(0.7, "cg2")))
    assert np.linalg.norm(column - whole) > 1e-3 * np.linalg.norm(whole)
    # a column solved on its own (a one-output layer) gives that column's iterate
    one, _ = _numpy_column_cg(A, np.asarray(g)[:, 1:2], 0.7, 2, 1e-2, 1e-6)
    np.testing.assert_allclose(column[:, 1:2], one, rtol=1e-9)


@pytest.mark.parametrize("batch, n_in", [(5, 12), (20, 6)])
def test_proxprop_colcg_reaches_exact_step(batch, n_in):
    """Without the early stop and eps, in+1 iterations are exact (at most in+1 distinct
    eigenvalues); with the reference rule the error is within the stopping bound
    |D - D*| <= tau |R| < tau 1e-2 |A^T G| (the smallest eigenvalue is at least 1/tau)."""
    from lab.optim.proxprop import _dense_cg

    layer, a, g, gradient = _layer_problem(batch, n_in, 4, seed=5)
    tau = 2.0
    exact = _stacked(proximal_step(layer, a, g, gradient, ProxProp(tau, "exact")))
    A = jnp.hstack([a, jnp.ones((batch, 1))])
    full = _dense_cg(A, g, tau, n_in + 1, columnwise=True)
    assert np.linalg.norm(full - exact) / np.linalg.norm(exact) < 1e-8
    stopped = _stacked(proximal_step(layer, a, g, gradient, ProxProp(tau, "colcg50")))
    bound = tau * 1e-2 * np.linalg.norm(np.asarray(A.T @ g))
    assert 1e-12 < np.linalg.norm(stopped - exact) < bound


def test_proxprop_colcg_on_a_convolution_is_one_column_with_the_stopping_rule():
    from lab.optim.proxprop import _cg

    keys = jax.random.split(jax.random.key(6), 3)
    conv = eqx.nn.Conv2d(2, 3, 3, padding=1, key=keys[0], dtype=jnp.float64)
    a = jax.random.normal(keys[1], (2, 2, 5, 5), jnp.float64)
    g = jax.random.normal(keys[2], (2, 3, 5, 5), jnp.float64) / 2
    gradient = eqx.filter_grad(lambda c: jnp.sum(jax.vmap(c)(a) * g))(conv)
    for k in (1, 3):
        step = proximal_step(conv, a, g, gradient, ProxProp(0.5, f"colcg{k}"))
        plain = _cg(conv, a, g, gradient, 0.5, k, eps=1e-6)
        np.testing.assert_allclose(_flat(step), _flat(plain), rtol=1e-10)
    long = _flat(proximal_step(conv, a, g, gradient, ProxProp(0.5, "colcg300")))
    exact = _flat(proximal_step(conv, a, g, gradient, ProxProp(0.5, "cg300")))
    error = np.linalg.norm(long - exact)
    assert 1e-12 < error < 0.5 * 1e-2 * np.linalg.norm(_flat(gradient))


def test_proxprop_layer_problems_are_each_hidden_layers_inputs_and_signals():
    from lab.optim.proxprop import layer_problems

    model, x, y = _network_problem(2)
    problems = layer_problems(model, x, y, cross_entropy)
    assert [p[0] for p in problems] == [1, 3]  # the hidden Linear layers, not the last
    for i, a, g, gradient in problems:
        assert a.shape == (6, model.layers[i].in_features)
        np.testing.assert_allclose(gradient.weight, g.T @ a, rtol=1e-10)  # dL/dW = g^T a
        np.testing.assert_allclose(gradient.bias, g.sum(0), rtol=1e-10)
    np.testing.assert_allclose(problems[1][1], jax.nn.relu(jax.vmap(model.layers[1])(x)))
