"""Data-parallel (and optionally model-parallel) training with JAX's own sharding.

The same training step runs on one CPU, on 8 simulated CPU devices, on one GPU or on
many GPUs across hosts. Nothing here distributes anything by hand: arrays carry a
``jax.sharding.NamedSharding`` over a 2-D device mesh with axes ``("data", "model")``
and XLA's partitioner inserts the collectives.

- ``mesh(devices, model=1)``: the first ``devices`` devices (all by default, on every
  host after ``jax.distributed.initialize``) as a ``data x model`` grid.
  ``mesh_or_none(devices, model)`` is None for one device (no sharding at all);
  ``first_devices(devices, platform)`` the devices themselves, or a one-line error.
- ``shard_batch(batch, mesh)``: the leading axis of every leaf split over ``"data"``.
  Each process passes its own rows; on one host that is the whole batch.
- ``shard_params(tree, mesh, layout=None)``: parameters (or optimizer state) replicated,
  except that with a ``model`` axis above 1 each weight matrix is split over it along its
  larger axis (``eqx.nn.Linear.weight`` has shape ``(out, in)``), when that axis divides:
  the shape heuristic ``param_spec``. A ``layout`` found by the automatic partitioner
  (``lab.parallel.search``) replaces the heuristic here and in ``constrain_params`` and
  ``data_parallel``.
  ``replicate(tree, mesh)`` replicates everything.
- ``constrain_batch(tree, mesh)`` and ``constrain_params(tree, mesh)``: the same layouts
  as sharding constraints inside a jitted function (a training loop in ``lax.scan``);
  the identity when ``mesh`` is None, which is how the training code in ``lab.train``
  takes an optional mesh. ``check_devices`` validates a notebook's ``devices`` parameter.
- ``data_parallel(step, mesh)``: ``step(model, opt_state, batch) -> (model, opt_state,
  metrics)`` compiled with those shardings. A loss that averages over the batch is then a
  mean over the global batch, so its gradient is reduced across devices by XLA: the
  step needs no ``psum`` and equals the single-device step up to float rounding.

Example (``step`` is any pure Equinox/optax step, e.g. the one in ``tests/test_parallel.py``)::

    m = parallel.mesh()                                   # all devices, data-parallel
    model = parallel.shard_params(model, m)
    opt_state = parallel.shard_params(optimizer.init(eqx.filter(model, eqx.is_array)), m)
    train_step = parallel.data_parallel(step, m)
    model, opt_state, metrics = train_step(model, opt_state, parallel.shard_batch(batch, m))

Simulated devices on CPU: set ``XLA_FLAGS=--xla_force_host_platform_device_count=8``
before jax is imported.

Several hosts: start one process per host with the same coordinator address (host 0's
address and a free port), the number of processes, and each process's own id::

    # on host 0                                  # on host 1
    LAB_COORDINATOR=10.0.0.1:1234 \\              LAB_COORDINATOR=10.0.0.1:1234 \\
    LAB_NUM_PROCESSES=2 LAB_PROCESS_ID=0 \\       LAB_NUM_PROCESSES=2 LAB_PROCESS_ID=1 \\
    python train.py                              python train.py

where ``train.py`` calls ``parallel.initialize_distributed()`` before any other jax call
(or passes the three values as arguments). Every process then runs the same program:
``mesh()`` spans the devices of all hosts, each process feeds ``shard_batch`` its own
rows of the global batch (same model seed everywhere), and replicated results such as
the metrics can be read on every process. On CPU the cross-process collectives use gloo
(``jax_cpu_collectives_implementation``, the default in jax 0.10).
"""

import functools
import os
import subprocess
import sys
from collections.abc import Callable

import equinox as eqx
import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

SIMULATE = "XLA_FLAGS=--xla_force_host_platform_device_count=N"
BATCH = PartitionSpec("data")  # leading (batch) axis split over the data devices
REPLICATED = PartitionSpec()  # a full copy on every device


def initialize_distributed(coordinator: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None) -> None:
    """Join a multi-host run: ``jax.distributed.initialize`` with the coordinator address
    (``"host:port"`` of process 0), the number of processes and this process's id. Each
    value not given is read from ``LAB_COORDINATOR``, ``LAB_NUM_PROCESSES`` and
    ``LAB_PROCESS_ID``. Call it once, before any other jax call."""
    coordinator = coordinator or os.environ["LAB_COORDINATOR"]
    if num_processes is None:
        num_processes = int(os.environ["LAB_NUM_PROCESSES"])
    if process_id is None:
        process_id = int(os.environ["LAB_PROCESS_ID"])
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                               process_id=process_id)


def mesh(devices: int | None = None, model: int = 1) -> Mesh:
    """The first ``devices`` devices (all, across hosts, by default) as a grid with axes
    ``("data", "model")`` of shape ``(devices // model, model)``.

    The axes are ``AxisType.Auto``: XLA's partitioner decides the sharding of everything
    that is not annotated (``jax.make_mesh`` defaults to explicit axes in jax 0.10)."""
    chosen = first_devices(devices)
    devices = len(chosen)
    if model < 1 or devices % model:
        raise ValueError(f"the model axis ({model}) must divide the {devices} devices")
    return jax.make_mesh((devices // model, model), ("data", "model"),
                         axis_types=(AxisType.Auto, AxisType.Auto), devices=chosen)


def first_devices(devices: int | None = None, platform: str | None = None) -> list:
    """The first ``devices`` devices of ``platform`` (the default backend's if None; all of
    them if ``devices`` is None); a one-line ValueError when there are fewer."""
    available = jax.devices(platform)
    devices = len(available) if devices is None else devices
    if not 1 <= devices <= len(available):
        raise ValueError(f"asked for {devices} devices but there are {len(available)} "
                         f"({available[0].platform}); on CPU, simulate more with {SIMULATE} "
                         "set before jax is imported")
    return available[:devices]


def mesh_or_none(devices: int, model: int = 1) -> Mesh | None:
    """``mesh(devices, model)``, or None for one device: the training code then adds no
    sharding at all, so a one-device run is exactly the unsharded program. The experiments'
    ``Setup.mesh()`` is this."""
    return None if devices == 1 else mesh(devices, model)


def param_spec(x, model: int) -> PartitionSpec:
    """Replicated, except a matrix when the ``model`` axis is above 1: its larger axis (the
    output axis on a tie) is split over ``"model"`` if it divides. For ``eqx.nn.Linear``'s
    ``(out, in)`` weight that is column parallelism for a wide output (SAC-AE's decoder
    projection 50 -> 39,200) and row parallelism for a wide input (its encoder projection
    39,200 -> 50, whose partial products XLA then sums across the model devices)."""
    if model > 1 and np.ndim(x) == 2:
        rows, cols = np.shape(x)
        if rows >= cols and rows % model == 0:
            return PartitionSpec("model")
        if cols % model == 0:
            return PartitionSpec(None, "model")
        if rows % model == 0:
            return PartitionSpec("model")
    return REPLICATED


def available_devices() -> tuple[int, str]:
    """How many devices jax sees here, and their platform. Where this process has not
    started a jax backend yet (the runner checking a notebook's parameters), a child
    process counts them: starting one here would hold GPU memory the notebook needs."""
    if _backends_started():
        return len(jax.devices()), jax.devices()[0].platform
    return _count_in_child()


def _backends_started() -> bool:
    """Whether this process has started a jax backend. jax has no public call for this;
    where its private one moves, the answer is False and the devices are counted in a child
    process, which is correct either way, only slower."""
    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:
        return False
    return backends_are_initialized()


@functools.cache
def _count_in_child() -> tuple[int, str]:
    code = "import jax; print(len(jax.devices()), jax.devices()[0].platform)"
    env = os.environ | {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300, check=True)
    count, platform = out.stdout.split()
    return int(count), platform


def check_devices(devices: int, model: int = 1, **divide: int) -> None:
    """Raise a one-line ValueError, before any work, when ``devices`` (and the ``model``
    axis) cannot be laid out here, or when one of the named sizes (``batch_size=100``,
    ``seeds=5``, ...) does not divide over the ``devices // model`` data devices."""
    if devices < 1:
        raise ValueError(f"devices must be at least 1, got {devices}")
    if devices > 1:
        count, platform = available_devices()
        if devices > count:
            raise ValueError(f"asked for {devices} devices but there are {count} ({platform}); "
                             f"on CPU, simulate more with {SIMULATE} set before jax is imported")
    if model < 1 or devices % model:
        raise ValueError(f"the model axis ({model}) must divide the {devices} devices")
    data = devices // model
    for name, size in divide.items():
        if size % data:
            raise ValueError(f"{name} {size} does not divide over {data} data devices; use a "
                             f"multiple of {data} or fewer devices")


def _arrays(fn: Callable, tree):
    """``fn`` on every array leaf of ``tree``; other leaves (activations, sizes) kept."""
    return jax.tree.map(lambda x: fn(x) if eqx.is_array(x) else x, tree)


def shard_batch(batch, mesh: Mesh):
    """Every array leaf of ``batch`` as a global array split over ``"data"`` along its
    leading axis (rows of a batch, seeds, members of a population). With several processes
    each passes its own rows (process ``i`` holds the ``i``-th block of the global batch);
    the global batch must divide over the data devices."""
    data = mesh.shape["data"]
    sharding = NamedSharding(mesh, BATCH)

    def put(x):
        rows = np.shape(x)[0] * jax.process_count()
        if rows % data:
            raise ValueError(f"a batch of {rows} does not divide over {data} data devices; "
                             f"use a multiple of {data}")
        if jax.process_count() == 1:
            return jax.device_put(x, sharding)  # also takes typed PRNG keys
        return jax.make_array_from_process_local_data(sharding, np.asarray(x))

    return _arrays(put, batch)


def _spec(mesh: Mesh, layout) -> Callable:
    """``(path, leaf) -> PartitionSpec``: ``layout.spec`` (a layout found by
    ``lab.parallel.search``), or ``param_spec`` when ``layout`` is None."""
    if layout is not None:
        return layout.spec
    model = mesh.shape["model"]
    return lambda path, x: param_spec(x, model)


def _laid_out(fn: Callable, tree, mesh: Mesh, layout):
    """``fn(x, NamedSharding)`` on every array leaf of ``tree``, placed by ``_spec``."""
    spec = _spec(mesh, layout)
    return jax.tree_util.tree_map_with_path(
        lambda p, x: fn(x, NamedSharding(mesh, spec(p, x))) if eqx.is_array(x) else x, tree)


def shard_params(tree, mesh: Mesh, layout=None):
    """Array leaves of ``tree`` (a model or an optimizer state) placed by ``param_spec``:
    replicated, with the matrices split over ``"model"`` when that axis is above 1; or by
    ``layout`` (``lab.parallel.automap.Layout``, e.g. a search's result) when given.
    Every process passes the same values."""
    return _laid_out(jax.device_put, tree, mesh, layout)


def replicate(tree, mesh: Mesh):
    """A full copy of every array leaf of ``tree`` on every device of ``mesh``."""
    return _arrays(lambda x: jax.device_put(x, NamedSharding(mesh, REPLICATED)), tree)


def constrain_batch(tree, mesh: Mesh | None):
    """Inside jit: every array leaf of ``tree`` split over ``"data"`` along its leading
    axis (``with_sharding_constraint``). The identity when ``mesh`` is None, so training
    code takes an optional mesh and runs unchanged on one device."""
    if mesh is None:
        return tree
    return _arrays(lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, BATCH)),
                   tree)


def constrain_params(tree, mesh: Mesh | None, layout=None):
    """Inside jit: every array leaf of ``tree`` laid out by ``param_spec`` (replicated on a
    data-only mesh), or by ``layout`` when given. The identity when ``mesh`` is None."""
    if mesh is None:
        return tree
    return _laid_out(jax.lax.with_sharding_constraint, tree, mesh, layout)


def data_parallel(step: Callable, mesh: Mesh, layout=None) -> Callable:
    """``step(model, opt_state, batch) -> (model, opt_state, metrics)``, jitted with the
    batch split over ``"data"``, the model and optimizer state laid out by ``param_spec``
    (replicated on a data-only mesh) or by ``layout``, and the metrics replicated.

    ``step`` is written for one device: its loss averages over ``batch``, and XLA turns
    that mean over the sharded batch into a cross-device reduction of the gradients."""

    @eqx.filter_jit
    def parallel_step(model, opt_state, batch):
        def place(tree):
            return constrain_params(tree, mesh, layout)

        model, opt_state = place(model), place(opt_state)
        model, opt_state, metrics = step(model, opt_state, constrain_batch(batch, mesh))
        metrics = _arrays(lambda x: jax.lax.with_sharding_constraint(
            x, NamedSharding(mesh, REPLICATED)), metrics)
        return place(model), place(opt_state), metrics

    return parallel_step
