"""Checkpoints: a pytree of arrays on disk, behind a one-line JSON header.

``save(path, tree, **info)`` writes to a temporary file next to ``path`` and renames it
into place, so an interrupted save never leaves a half-written checkpoint behind.
``load(path, like)`` reads the arrays into the structure of ``like`` (a pytree of the same
shapes, e.g. a freshly initialised model) and returns them with the header. Typed random
keys (``jax.random.key``) are stored as their raw key data and rebuilt on load.

``Kept(folder)`` keeps JSON results (a measurement, a compiled program's bytes) one file per
key, so that a run stopped at a deadline and resumed reads back what it finished instead of
making it again.
"""

import hashlib
import inspect
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _unwrap_keys(tree: Any) -> Any:
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _rewrap_keys(tree: Any, like: Any) -> Any:
    return jax.tree.map(
        lambda x, ref: jax.random.wrap_key_data(x, impl=jax.random.key_impl(ref))
        if _is_key(ref) else x, tree, like)


def save(path: str | Path, tree: Any, **info: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(json.dumps(info, sort_keys=True).encode() + b"\n")
        eqx.tree_serialise_leaves(f, _unwrap_keys(tree))
    os.replace(tmp, path)
    return path


def read_info(path: str | Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return json.loads(f.readline())


def load(path: str | Path, like: Any) -> tuple[Any, dict[str, Any]]:
    with open(path, "rb") as f:
        info = json.loads(f.readline())
        try:
            tree = _rewrap_keys(eqx.tree_deserialise_leaves(f, _unwrap_keys(like)), like)
        except Exception as error:  # a shape or structure mismatch
            raise ValueError(f"checkpoint {path} does not fit this model ({error}); delete it "
                             "or point to another file") from None
    return tree, info


def resume(path: str | Path | None, like: Any, **header: Any) -> tuple[Any, dict] | None:
    """The saved state at ``path`` if there is one, as ``load`` returns it; None when
    ``path`` is None or does not exist. A checkpoint whose header differs from ``header``
    (another configuration, key or model) is refused, naming what differs, and left as it is.
    """
    if path is None or not Path(path).exists():
        return None
    info = read_info(path)
    changed = [k for k in header if info.get(k) != header[k]]
    if changed:
        raise ValueError(f"checkpoint {path} was written with a different "
                         f"{' and '.join(changed)}; delete it or choose another path")
    return load(path, like)


def fingerprint(tree: Any) -> str:
    """The type and leaf shapes of a model: what must match for a checkpoint to fit."""
    shapes = [list(leaf.shape) for leaf in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]
    return f"{type(tree).__name__}{shapes}"


def sources(*modules: Any) -> list[str]:
    """The sha256 of each module's source: part of a kept result's name, so that an edit to
    the code that made it makes it again."""
    return [hashlib.sha256(inspect.getsource(m).encode()).hexdigest() for m in modules]


def folder(name: str, *parts: Any) -> Path:
    """``default_dir() / name / <digest>``: the folder of one computation's kept results
    (``Kept``), named by a digest of ``parts`` (what defines the results besides each one's
    key: ``sources`` of the code, a ``digest`` of the data, other settings) and of what every
    result depends on: jax's, Equinox's and Optax's versions, ``XLA_FLAGS`` and the default
    device's kind. A change in any of them starts a new folder: nothing is read back across
    it."""
    import optax

    key = json.dumps([jax.__version__, eqx.__version__, optax.__version__,
                      os.environ.get("XLA_FLAGS", ""), jax.devices()[0].device_kind, *parts],
                     sort_keys=True, default=str)
    return default_dir() / name / hashlib.sha256(key.encode()).hexdigest()[:16]


def digest(*trees: Any) -> str:
    """The sha256 of the arrays in ``trees`` (each one's dtype, shape and bytes, in order):
    a data set's or a frozen model's part of a folder's name or a key."""
    hashed = hashlib.sha256()
    for leaf in jax.tree.leaves(trees):
        if eqx.is_array(leaf):
            array = np.ascontiguousarray(leaf)
            hashed.update(f"{array.dtype}{array.shape}".encode() + array.tobytes())
    return hashed.hexdigest()


def default_dir() -> Path:
    """Where experiments keep checkpoints: ``$LAB_CHECKPOINT_DIR`` or
    ``~/.cache/lab/checkpoints``. Rerunning a notebook resumes from here."""
    return Path(os.environ.get("LAB_CHECKPOINT_DIR")
                or Path.home() / ".cache" / "lab" / "checkpoints")


class Kept:
    """JSON-able results kept in ``folder``, one file per key. ``kept(key, make)`` returns
    the value kept under ``key`` (any JSON-able value: the file's name is a digest of it and
    the file holds it too, checked on reading) or calls ``make()``, keeps its value and
    returns it; ``loaded`` and ``made`` count the two. ``folder`` None keeps nothing (every
    call makes). The folder must belong to one computation: name it by everything that
    defines the results and the key does not hold (versions, devices, ``sources``). Files
    are written whole, then renamed, so a run stopped mid-write leaves none half-written."""

    def __init__(self, folder: str | Path | None):
        self.folder = None if folder is None else Path(folder)
        self.loaded, self.made = 0, 0

    def path(self, key: Any, prefix: str = "") -> Path:
        name = hashlib.sha256(_key(key).encode()).hexdigest()[:32]
        return self.folder / f"{prefix}{name}.json"

    def __call__(self, key: Any, make: Callable[[], Any], prefix: str = "") -> Any:
        if self.folder is None:
            self.made += 1
            return make()
        path = self.path(key, prefix)
        if path.exists():
            kept = json.loads(path.read_text())
            if kept["key"] == _key(key):
                self.loaded += 1
                return kept["value"]
        value = make()
        self.made += 1
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f".{path.name}.{os.getpid()}.part")
        part.write_text(json.dumps({"key": _key(key), "value": value,
                                    "measured": time.strftime("%Y-%m-%d %H:%M:%S %Z")}))
        os.replace(part, path)
        return value


def to_json(value: Any) -> Any:
    """``value`` as JSON, its arrays and numpy scalars tagged with their dtype (and arrays
    with their shape), tuples tagged: ``from_json`` gives back the same values exactly
    (a float as its shortest repr; NaN and infinities as JSON's extensions)."""
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"a kept value's keys must be strings, got {list(value)}")
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [to_json(v) for v in value]}
    if isinstance(value, (np.ndarray, jax.Array)):
        array = np.asarray(value)
        return {"__array__": array.tolist(), "dtype": str(array.dtype),
                "shape": list(array.shape)}
    if isinstance(value, np.generic):
        return {"__scalar__": value.item(), "dtype": str(value.dtype)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a kept value holds a {type(value).__name__}, which JSON cannot keep")


def from_json(value: Any) -> Any:
    """The value ``to_json`` wrote, its arrays, numpy scalars and tuples as they were."""
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        return np.asarray(value["__array__"], value["dtype"]).reshape(value["shape"])
    if "__scalar__" in value:
        return np.dtype(value["dtype"]).type(value["__scalar__"])
    if "__tuple__" in value:
        return tuple(from_json(v) for v in value["__tuple__"])
    return {k: from_json(v) for k, v in value.items()}


def _key(key: Any) -> str:
    return json.dumps(key, sort_keys=True, default=str)
