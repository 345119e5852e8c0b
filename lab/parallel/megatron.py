"""Megatron-LM's tensor parallelism (Shoeybi et al. 2019, arXiv 1909.08053) as shardings.

Per Transformer block, with the weights of ``eqx.nn.Linear`` stored ``(out, in)``:

- column-parallel (output rows split over the ``model`` axis): the attention's fused
  query/key/value projection ``qkv`` and the MLP's first matmul ``mlp_in``, with their
  biases. ``qkv`` is laid out per head as Megatron-LM's ``query_key_value``
  (``lab.models.transformer.fuse_qkv``), so a row split gives each device whole heads'
  queries, keys and values;
- row-parallel (input columns split): the attention's ``output`` projection and the MLP's
  second matmul ``mlp_out``, whose partial products are summed across the model devices;
- everything else (embeddings, LayerNorms, the read-out) replicated.

So, as in Megatron-LM (its ``f`` and ``g`` operators), a block's train step all-reduces
four ``(B / data) x L x H`` activations over the model axis: the outputs of ``output`` and
of ``mlp_out`` in the forward pass, the gradients of the inputs of ``qkv`` and of
``mlp_in`` in the backward pass (XLA may combine several into one instruction). With
separate query, key and value layers XLA reduced each one's input gradient on its own:
six, 1.5 times the bytes.

``megatron_specs(tree)`` gives the ``PartitionSpec`` of every array leaf of a model, or of
an optimizer state that mirrors it (Adam's moments sit at paths ending in the same names),
so a whole train step can be compiled with these layouts and XLA's partitioner inserts the
collectives. The heads must divide over the model devices (``check_heads``).
"""

import re

import equinox as eqx
import jax
from jax.sharding import PartitionSpec as P

COLUMN = ("qkv", "mlp_in")
ROW = ("output", "mlp_out")


def _names(path) -> list[str]:
    if isinstance(path, str):  # a keystr: ".blocks[0].attention.qkv.weight"
        return re.findall(r"\.(\w+)", path)
    return [getattr(k, "name", getattr(k, "key", None)) for k in path]


def spec_of(path, x, axis: str = "model") -> P:
    """The Megatron layout of the leaf at ``path`` (a ``jax.tree_util`` key path or its
    ``keystr``)."""
    names = _names(path)
    layer, kind = (names[-2], names[-1]) if len(names) >= 2 else (None, None)
    if layer in COLUMN:
        return P(axis) if kind == "bias" else P(axis, None)
    if layer in ROW and kind == "weight":
        return P(None, axis)
    return P()


def megatron_specs(tree, axis: str = "model"):
    """``tree`` with every array leaf (or ``ShapeDtypeStruct``, for a program compiled from
    shapes) replaced by its Megatron ``PartitionSpec``; other leaves None."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: spec_of(path, x, axis) if _is_array(x) else None, tree)


def _is_array(x) -> bool:
    return eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


def check_heads(heads: int, devices: int) -> None:
    """A one-line ValueError when ``heads`` do not divide over ``devices`` model devices:
    Megatron gives each device whole heads, so it stops at ``devices == heads``."""
    if devices < 1 or heads % devices:
        raise ValueError(f"{heads} heads do not divide over {devices} tensor-parallel devices; "
                         f"Megatron needs whole heads per device, so use a divisor of {heads}")


_BLOCK = re.compile(r"\.blocks\[(\d+)\]\.")


def megatron_layers(layout, axis: str = "model") -> list[bool]:
    """Per Transformer block, in order, whether ``layout`` (a ``lab.parallel.automap.Layout``
    or a mapping from parameter path to spec) is Megatron's there: the ``qkv`` and
    ``mlp_in`` weights column-parallel (``P(axis, None)``: output rows split)
    and the attention ``output`` and ``mlp_out`` weights row-parallel (``P(None, axis)``).
    Biases, LayerNorms and the rest are not looked at."""
    specs = dict(getattr(layout, "specs", layout))
    blocks: dict[int, bool] = {}
    for path, spec in specs.items():
        found = _BLOCK.search(path)
        if found is None or not path.endswith(".weight"):
            continue
        layer = path.removesuffix(".weight").rsplit(".", 1)[-1]
        want = {**dict.fromkeys(COLUMN, (axis, None)), **dict.fromkeys(ROW, (None, axis))}
        if layer in want:
            index = int(found[1])
            blocks[index] = blocks.get(index, True) and tuple(spec) + (None,) * (
                2 - len(spec)) == want[layer]
    return [blocks[i] for i in sorted(blocks)]


def is_megatron(layout, axis: str = "model") -> bool:
    """Megatron's layout in every block (and there is at least one)."""
    layers = megatron_layers(layout, axis)
    return bool(layers) and all(layers)
