"""The rule of interlocking backpropagation: which losses train which component of a
``lab.models.interlocking.Stack``, and a component's gradient from its parts.

Rule ``nwise(n)`` trains component ``k`` on the loss ``n - 1`` components ahead (``targets``;
local learning is ``n = 1``, pairwise ``n = 2``, global ``n = K``), alone (mode ``"only"``) or
with its own head's loss (``"sum"``, ``"mean"``): ``trained_on``. ``head_gradients`` is what a
head sends back and ``combine`` joins a component's parts. The jitted training step
(``lab.train.interlocking``, whose docstring states the rule in full) and the pipeline
schedule and its devices (``lab.parallel.interlocking``, ``lab.parallel.interlocking_devices``)
share them.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

Loss = Callable[[jax.Array, jax.Array], jax.Array]
RULES = ("global", "local", "pairwise", "3-wise")
MODES = ("only", "sum", "mean")


def parse_rule(rule: str, components: int) -> tuple[int, str]:
    """``(n, mode)`` of a named rule: global ``K``, local 1, pairwise 2, ``"<n>-wise"``
    ``n``; a suffix ``-sum`` or ``-mean`` picks that mode (``"pairwise-sum"``), none
    ``"only"``."""
    name, mode = rule, "only"
    for suffix in MODES[1:]:
        if rule.endswith("-" + suffix):
            name, mode = rule[:-len(suffix) - 1], suffix
    if name == "global":
        return components, mode
    if name == "local":
        return 1, mode
    if name == "pairwise":
        return 2, mode
    if name.endswith("-wise") and name[:-5].isdigit():
        return int(name[:-5]), mode
    raise ValueError(f"unknown rule {rule!r}; use global, local, pairwise or '<n>-wise', "
                     "optionally ending in -sum or -mean")


def rule_n(rule: str, components: int) -> int:
    """The ``n`` of a named rule (``parse_rule``)."""
    return parse_rule(rule, components)[0]


def targets(components: int, n: int) -> tuple[int, ...]:
    """Zero-based: component ``k`` is trained on loss ``min(k + n - 1, K - 1)`` (index
    ``K - 1`` is the true loss)."""
    check_n(components, n)
    return tuple(min(k + n - 1, components - 1) for k in range(components))


def trained_on(components: int, n: int, mode: str = "only") -> tuple[tuple[int, ...], ...]:
    """Zero-based: the losses whose gradients train component ``k``, nearest first: its
    target alone (``"only"``), or its own loss ``k`` and its target (``"sum"``, ``"mean"``;
    one loss where they are the same)."""
    check_mode(mode)
    return tuple((t,) if mode == "only" or t == k else (k, t)
                 for k, t in enumerate(targets(components, n)))


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")


def combine(parts: list, mode: str):
    """A component's gradient from its losses' gradients (``trained_on``'s order): the sum
    under ``"only"`` and ``"sum"`` (one part under ``"only"``), the mean under ``"mean"``."""
    total = parts[0]
    for part in parts[1:]:
        total = jax.tree.map(jnp.add, total, part)
    if mode == "mean" and len(parts) > 1:
        total = jax.tree.map(lambda g: g / len(parts), total)
    return total


def check_n(components: int, n: int) -> None:
    if components < 2:
        raise ValueError(f"a model of {components} component cannot be trained in parts; "
                         "cut it into at least 2 components")
    if not 1 <= n <= components:
        raise ValueError(f"n = {n} is outside 1 ... {components} (the number of components): "
                         f"n = 1 is local learning, n = {components} global")


def head_gradients(head_loss: Loss, head, h: jax.Array, y: jax.Array):
    """``(loss, head gradients, cotangent on h)`` of ``head_loss(vmap(head)(h), y)``: what
    a head trained on ``h`` sends back (used as a message; never into its own component)."""
    def of_head(pair):
        module, v = pair
        return head_loss(jax.vmap(module)(v), y)

    value, (grads, cotangent) = eqx.filter_value_and_grad(of_head)((head, h))
    return value, grads, cotangent
