"""ProxProp: proximal backpropagation (Frerix, Möllenhoff, Moeller & Cremers, ICLR 2018).

Backpropagation takes an explicit gradient step on every layer. ProxProp keeps the
explicit steps on the activations but takes an implicit (proximal) step on the linear
parameters ``theta`` of each hidden ``Linear`` or ``Conv2d`` layer ``z = phi(theta, a)``:

1. a forward pass keeps each layer's input ``a`` and output ``z`` (pre-activation);
2. one backward pass at the current weights gives ``g = dL/dz`` for every layer, with
   ``L`` the loss *averaged* over the batch;
3. the target is ``z* = z - g``, and the proximal step solves

       theta_new = argmin_theta 1/2 sum_batch ||phi(theta, a) - z*||^2
                                + 1/(2 tau) ||theta - theta_k||^2

   (a *sum* over the batch paired with the *mean* loss: this fixes the scale of ``tau``);
4. the direction ``d = theta_k - theta_new`` is handed to any optax transformation in place
   of the gradient. The last layer gets its ordinary gradient.

Because ``phi`` is linear in ``theta`` (Jacobian ``J``, so ``J^T g`` is the gradient), the
step has the closed form ``d = (J^T J + I/tau)^-1 J^T g``: a positive-definite
preconditioner times the gradient, hence a descent direction (the paper's theorem), and
``d / tau -> gradient`` as ``tau -> 0``. Solvers:

- ``"exact"`` (Linear layers): with ``A = [a, 1]`` (batch x (in+1)) and ``G`` the stacked
  ``g``, ``d^T = A^T (A A^T + I/tau)^-1 G`` by a Cholesky solve of size batch, or the
  equivalent ``(A^T A + I/tau)^-1 A^T G`` of size in+1, whichever is smaller;
- ``"cgK"`` (Linear and Conv2d; ``cg3``, ``cg5``, ``cg10`` in the paper): K conjugate
  gradient iterations on ``(J^T J + I/tau) d = J^T g`` from ``d = 0``, i.e. warm-started at
  ``theta_k``, with one step size per iteration shared by the whole layer. For Conv2d, ``J``
  and ``J^T`` are the layer's own forward map and its transpose; for Linear layers the same
  iterates are computed on the smaller of the Gram matrices ``A A^T`` and ``A^T A``, which
  costs far less when the batch is small;
- ``"colcgK"`` (``colcg3``, ``colcg10``): the CG of the paper's reference code
  (github.com/tfrerix/proxprop, ``ProxProp.py``, ``conjugate_gradient_block``, called by
  ``optimization_step`` with ``tol=1e-2``, ``maxit=K``, ``eps=1e-6``). On a Linear layer the
  unknown is ``[W, b]^T``, one column per output unit, and the same system is solved column by
  column: each column has its own step sizes ``alpha_j = |r_j|^2 / (<p_j, H p_j> + eps)`` and
  ``beta_j = |r_j,new|^2 / (|r_j|^2 + eps)``. The stopping rule is *joint*, not per column:
  after each iteration (at most K), all columns stop once the worst column's squared residual
  is below ``tol^2`` times the *mean* initial squared residual,
  ``max_j |r_j|^2 < 1e-4 mean_j |r_j^0|^2``. On a Conv2d layer the reference flattens all
  parameters into one column, so this is ``cgK`` with that stopping rule and ``eps``. The
  ``eps`` is kept as the reference has it, although it is not scale-free: with the mean loss,
  a column's ``|r_j|^2`` is about 1e-6 on the fashion_mlp layers, so ``eps`` damps both step
  sizes there (``benchmarks/proxprop.py --sizes errors`` shows the effect);
- ``"gradient"``: plain backpropagation through the same code, for like-for-like timing.
"""

import re
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jax.scipy.linalg import cho_factor, cho_solve

PARAMETERISED = (eqx.nn.Linear, eqx.nn.Conv2d)
PARAMETER_FREE = (eqx.nn.Lambda, eqx.nn.MaxPool2d, eqx.nn.AvgPool2d)
_CG = re.compile(r"(col)?cg([1-9][0-9]*)")
REFERENCE_TOL = 1e-2
"""``colcgK`` stops once every column's residual is below this times the initial RMS one."""
REFERENCE_EPS = 1e-6
"""``colcgK`` adds this to the denominators of its step sizes, as the reference code does."""


@dataclass(frozen=True)
class ProxProp:
    """How hidden layers are updated: ``tau`` (the proximal step size) and the solver."""

    tau: float = 0.05
    """Proximal step size; > 0. Small tau: the direction approaches tau * gradient."""
    solver: str = "cg3"
    """'exact' (Linear layers only), 'cgK' for K conjugate-gradient iterations over the whole
    layer, 'colcgK' for the reference code's column-wise CG (at most K iterations), or
    'gradient' (plain backprop)."""

    def __post_init__(self):
        if not (isinstance(self.tau, int | float) and 0 < self.tau < float("inf")):
            raise ValueError(f"ProxProp tau must be a positive number, got {self.tau!r}")
        if self.solver not in ("exact", "gradient") and not _CG.fullmatch(str(self.solver)):
            raise ValueError(f"unknown ProxProp solver {self.solver!r}; use 'exact', 'gradient'"
                             ", 'cgK' with K iterations (cg3, cg5, cg10) or 'colcgK' for the"
                             " reference code's column-wise CG (colcg3, colcg10)")

    @property
    def cg_iterations(self) -> int | None:
        match = _CG.fullmatch(self.solver)
        return int(match.group(2)) if match else None

    @property
    def columnwise(self) -> bool:
        """True for 'colcgK': the reference code's CG (per-column steps, early stop)."""
        return self.solver.startswith("colcg")


def parameterised_layers(model: eqx.nn.Sequential, solver: str) -> list[int]:
    """Indices of the Linear/Conv2d layers; raises for a layer ProxProp cannot handle."""
    if not isinstance(model, eqx.nn.Sequential):
        raise TypeError(f"ProxProp needs an eqx.nn.Sequential, got {type(model).__name__}; "
                        "build the model with lab.models.mlp or lab.models.convnet")
    found = []
    for i, layer in enumerate(model.layers):
        if isinstance(layer, PARAMETERISED):
            found.append(i)
        elif not isinstance(layer, PARAMETER_FREE):
            raise TypeError(f"ProxProp cannot handle layer {i} ({type(layer).__name__}); "
                            "use Linear, Conv2d, pooling and Lambda activations")
    hidden = found[:-1]
    if solver == "exact":
        for i in hidden:
            if not isinstance(model.layers[i], eqx.nn.Linear):
                raise TypeError(f"solver 'exact' handles Linear layers only, but layer {i} is "
                                f"{type(model.layers[i]).__name__}; use cg3, cg5 or cg10")
    return found


def _tapped_forward(layers, taps, x, perturbations):
    """One example through ``layers``; returns the output and each tapped layer's input.
    ``perturbations`` (zeros) are added to the tapped outputs so that the gradient with
    respect to them is ``dL/dz``."""
    inputs = []
    for i, layer in enumerate(layers):
        if i in taps:
            inputs.append(x)
            x = layer(x) + perturbations[taps.index(i)]
        else:
            x = layer(x)
    return x, inputs


def _augmented(layer: eqx.nn.Linear, a: jax.Array) -> jax.Array:
    """``A = [a, 1]`` (or ``a`` without a bias): the layer is ``z = A theta^T``."""
    if layer.bias is None:
        return a
    return jnp.concatenate([a, jnp.ones((a.shape[0], 1), a.dtype)], 1)


def _exact(A: jax.Array, g: jax.Array, tau: float) -> jax.Array:
    """``D = A^T (A A^T + I/tau)^-1 G`` (batch-sized Cholesky) or, for a batch larger than
    the features, the equal ``(A^T A + I/tau)^-1 A^T G``."""
    batch, features = A.shape
    if batch <= features:
        K = A @ A.T + jnp.eye(batch, dtype=A.dtype) / tau
        return A.T @ cho_solve(cho_factor(K), g)
    K = A.T @ A + jnp.eye(features, dtype=A.dtype) / tau
    return cho_solve(cho_factor(K), A.T @ g)


def _ratio(numerator: jax.Array, denominator: jax.Array) -> jax.Array:
    """``numerator / denominator``, 0 where the denominator is 0 (a zero residual)."""
    safe = denominator > 0
    return jnp.where(safe, numerator / jnp.where(safe, denominator, 1.0), 0.0)


def _cg_loop(curvature, norm2, b: jax.Array, iterations: int, tol: float, eps: float):
    """At most ``iterations`` CG iterations from 0 on ``H x = b``, in given coordinates.

    ``curvature(p) -> (H p, <p, H p>)`` and ``norm2(r) -> <r, r>``, where ``<., .>`` is the
    parameter-space inner product, summed over everything (one CG, scalar steps) or over
    axis 0 (one CG per column, steps of shape (columns,)). ``eps`` is added to the step
    sizes' denominators; after each iteration the loop stops (the state is frozen) once
    ``max <r, r> < tol^2 mean <r_0, r_0>``: never for ``tol=0``."""
    rr0 = norm2(b)
    threshold = tol**2 * jnp.mean(rr0)

    def step(_, state):
        x, r, p, rr, done = state
        hp, php = curvature(p)
        alpha = _ratio(rr, php + eps)
        x_new, r_new = x + alpha * p, r - alpha * hp
        rr_new = norm2(r_new)
        p_new = r_new + _ratio(rr_new, rr + eps) * p
        new = jax.tree.map(lambda old, new: jnp.where(done, old, new), (x, r, p, rr),
                           (x_new, r_new, p_new, rr_new))
        return (*new, done | (jnp.max(rr_new) < threshold))

    start = (jnp.zeros_like(b), b, b, rr0, jnp.asarray(False))
    return jax.lax.fori_loop(0, iterations, step, start)[0]


def _dense_cg(A: jax.Array, g: jax.Array, tau: float, iterations: int, *,
              columnwise: bool = False, tol: float = 0.0, eps: float = 0.0) -> jax.Array:
    """CG on ``(A^T A + I/tau) D = A^T G`` from ``D = 0``, on the smaller Gram matrix; one CG
    over the whole of ``D`` or, ``columnwise``, one per column (output unit).

    With more features than examples the iterates are kept as ``D = A^T Y`` and updated in
    batch space: every CG vector of the parameter space lies in the range of ``A^T``
    (it starts at ``A^T G``), and ``<A^T u, A^T v> = <u, A A^T v>``, so these are exactly
    the parameter-space iterates at a cost of batch^2 per step instead of batch x features.
    """
    def inner(u, v):
        return jnp.sum(u * v, axis=0) if columnwise else jnp.vdot(u, v)

    batch, features = A.shape
    if batch > features:
        gram = A.T @ A

        def curvature(p):
            hp = gram @ p + p / tau
            return hp, inner(p, hp)

        return _cg_loop(curvature, lambda r: inner(r, r), A.T @ g, iterations, tol, eps)
    gram = A @ A.T

    def dual_curvature(q):  # p = A^T q: H p = A^T (gram q + q/tau), <p, H p> = <gram q, .>
        u = gram @ q
        h = u + q / tau
        return h, inner(u, h)

    y = _cg_loop(dual_curvature, lambda s: inner(s, gram @ s), g, iterations, tol, eps)
    return A.T @ y


def _linear_step(layer: eqx.nn.Linear, a, g, gradient, config: "ProxProp"):
    """The direction for a Linear layer, shaped like its gradient."""
    a, g = a.reshape(a.shape[0], -1), g.reshape(g.shape[0], -1)
    A = _augmented(layer, a)
    if config.solver == "exact":
        D = _exact(A, g, config.tau)
    elif config.columnwise:
        D = _dense_cg(A, g, config.tau, config.cg_iterations, columnwise=True,
                      tol=REFERENCE_TOL, eps=REFERENCE_EPS)
    else:
        D = _dense_cg(A, g, config.tau, config.cg_iterations)
    weight = D[: a.shape[1]].T
    if layer.bias is None:
        return eqx.tree_at(lambda grad: grad.weight, gradient, weight)
    return eqx.tree_at(lambda grad: (grad.weight, grad.bias), gradient, (weight, D[-1]))


def _cg(layer, a: jax.Array, g: jax.Array, gradient, tau: float, iterations: int, *,
        tol: float = 0.0, eps: float = 0.0):
    """At most ``iterations`` CG iterations on ``(J^T J + I/tau) d = J^T g`` from ``d = 0``,
    matrix-free, on all the layer's parameters flattened into one vector."""
    params, static = eqx.partition(layer, eqx.is_array)
    _, forward = jax.linearize(lambda p: jax.vmap(eqx.combine(p, static))(a), params)
    transpose = jax.linear_transpose(forward, params)
    rhs, unflatten = ravel_pytree(eqx.filter(gradient, eqx.is_array))

    def curvature(v):
        (jtjv,) = transpose(forward(unflatten(v)))
        hv = ravel_pytree(jtjv)[0] + v / tau
        return hv, jnp.vdot(v, hv)

    return unflatten(_cg_loop(curvature, lambda r: jnp.vdot(r, r), rhs, iterations, tol, eps))


@eqx.filter_jit
def proximal_step(layer, a: jax.Array, g: jax.Array, gradient, config: ProxProp):
    """The direction ``theta_k - theta_new`` for one layer, shaped like ``gradient`` (the
    layer's backprop gradient, which the 'gradient' solver returns unchanged).

    a: the layer's batched inputs; g: ``dL/dz`` for its batched outputs. Linear layers use
    the dense solvers above; other layers (Conv2d) matrix-free CG."""
    if config.solver == "gradient":
        return gradient
    if isinstance(layer, eqx.nn.Linear):
        return _linear_step(layer, a, g, gradient, config)
    stop = dict(tol=REFERENCE_TOL, eps=REFERENCE_EPS) if config.columnwise else {}
    return eqx.combine(_cg(layer, a, g, gradient, config.tau, config.cg_iterations, **stop),
                       gradient)


@eqx.filter_jit
def value_and_direction(model: eqx.nn.Sequential, x: jax.Array, y: jax.Array, loss_fn,
                        config: ProxProp):
    """Like ``eqx.filter_value_and_grad``, but with ProxProp directions.

    model: an ``eqx.nn.Sequential`` taking one example; x, y: a batch; loss_fn(outputs,
    y) -> (mean loss, aux). Returns ``((loss, aux), directions)``, ``directions`` shaped like
    the model's gradient, for ``optimizer.update``.
    """
    taps = parameterised_layers(model, config.solver)
    (loss, aux), grads, inputs, signals = _signals(model, x, y, loss_fn, taps)
    layers = model.layers
    for position, i in enumerate(taps[:-1]):  # the last layer keeps its gradient
        step = proximal_step(layers[i], inputs[position], signals[position],
                             grads.layers[i], config)
        grads = eqx.tree_at(lambda m, i=i: m.layers[i], grads, step)
    return (loss, aux), grads


def _signals(model: eqx.nn.Sequential, x, y, loss_fn, taps: list[int]):
    """One forward and backward pass: ``((loss, aux), grads, inputs, signals)``, with each
    tapped layer's batched input ``a`` and ``dL/dz`` for its batched output."""
    zeros = [jnp.zeros((x.shape[0], *s.shape), s.dtype)
             for s in _tapped_output_shapes(model.layers, taps, x[0])]

    @eqx.filter_value_and_grad(has_aux=True)
    def loss_and_signals(differentiable):
        model, perturbations = differentiable
        outputs, inputs = jax.vmap(_tapped_forward, (None, None, 0, 0))(
            model.layers, taps, x, perturbations)
        loss, aux = loss_fn(outputs, y)
        return loss, (aux, inputs)

    (loss, (aux, inputs)), (grads, signals) = loss_and_signals((model, zeros))
    return (loss, aux), grads, inputs, signals


@eqx.filter_jit
def layer_problems(model: eqx.nn.Sequential, x: jax.Array, y: jax.Array, loss_fn):
    """The proximal problems a ProxProp step solves: for each hidden Linear/Conv2d layer,
    ``(index, a, g, gradient)`` as :func:`proximal_step` takes them (for benchmarks)."""
    taps = parameterised_layers(model, "gradient")
    _, grads, inputs, signals = _signals(model, x, y, loss_fn, taps)
    return [(i, inputs[n], signals[n], grads.layers[i]) for n, i in enumerate(taps[:-1])]


def _tapped_output_shapes(layers, taps, example):
    """Shapes of the tapped layers' outputs for one example, computing nothing."""
    def forward(x):
        outputs = []
        for i, layer in enumerate(layers):
            x = layer(x)
            if i in taps:
                outputs.append(x)
        return outputs

    return jax.eval_shape(forward, example)
