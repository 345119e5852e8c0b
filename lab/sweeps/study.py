"""The sweep's Optuna study: storage, sampler and pruner from a :class:`SweepSpec`.

The study lives in Optuna's RDB storage: a SQLite file by default (nothing to start), or a
PostgreSQL URL (``postgresql://user@host/db``) that workers on many machines share. The
spec is stored with the study (``study.user_attrs["spec"]``), so a worker needs only the
storage URL and the study's name. The spec's ``trials`` are created up front as waiting
trials; each worker takes the next one until none is left, so the sweep has exactly that
many trials however many workers join (plus the retries of trials whose worker died).

Workers send a heartbeat while a trial runs; a trial whose heartbeat stops (its worker was
killed) is marked failed by the next worker that looks, and run again ``retries`` times.
"""

import os
import warnings
from pathlib import Path

import optuna
import sqlalchemy
from optuna.exceptions import ExperimentalWarning
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

from lab.sweeps.hypertrick import HyperTrickPruner, TrialSeededSampler
from lab.sweeps.spec import SweepSpec, load_spec

warnings.filterwarnings("ignore", category=ExperimentalWarning)  # heartbeats, the retry
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")

HEARTBEAT_SECONDS = int(os.environ.get("LAB_SWEEP_HEARTBEAT", 5))
GRACE_SECONDS = int(os.environ.get("LAB_SWEEP_GRACE", 30))
"""A running trial without a heartbeat for this long belongs to a dead worker (both can be
set through the environment, for tests)."""


def default_storage(out: str | Path, name: str) -> str:
    """``sqlite:///<out>/sweeps/<name>.db`` (absolute, so every process finds it)."""
    path = (Path(out) / "sweeps" / f"{name}.db").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def make_storage(url: str, retries: int = 0) -> RDBStorage:
    """Optuna RDB storage with heartbeats; SQLite waits for its lock instead of failing
    when several processes write at once."""
    if url.startswith("sqlite"):
        engine = {"connect_args": {"timeout": 120}}
    else:
        engine = {"pool_pre_ping": True}
    retry = RetryHeartbeatStaleTrialCallback(max_retry=retries)
    try:
        storage = RDBStorage(url, engine_kwargs=engine, heartbeat_interval=HEARTBEAT_SECONDS,
                             grace_period=GRACE_SECONDS, heartbeat_stale_trial_callback=retry)
    except Exception as err:  # a bad URL, a server that does not answer
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"cannot open the sweep storage {url!r}: {first}") from None
    if url.startswith("sqlite"):
        _serialize(storage.engine)
    return storage


def _serialize(engine: sqlalchemy.Engine) -> None:
    """Make every SQLite transaction take the write lock when it begins.

    Optuna makes "read a waiting trial, mark it running" atomic with ``SELECT ... FOR
    UPDATE``, which PostgreSQL honours and SQLite ignores; and Python's sqlite3 driver only
    opens a transaction at the first write, so two workers could both read the same waiting
    trial and both run it. With ``BEGIN IMMEDIATE`` the second waits for the first to commit
    (SQLAlchemy's documented recipe for SQLite transactions)."""

    @sqlalchemy.event.listens_for(engine, "connect")
    def _no_implicit_begin(connection, _):
        connection.isolation_level = None

    @sqlalchemy.event.listens_for(engine, "begin")
    def _begin_immediate(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the hooks are closed


def make_pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    """HyperTrick, or an Optuna pruner to compare against, over the spec's phases."""
    factor = max(2, round(1 / spec.survival)) if spec.survival < 1 else 2
    return {
        "hypertrick": lambda: HyperTrickPruner(spec.phases, spec.survival),
        "none": optuna.pruners.NopPruner,
        "successive_halving": lambda: optuna.pruners.SuccessiveHalvingPruner(
            min_resource=1, reduction_factor=factor),
        "hyperband": lambda: optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=spec.phases, reduction_factor=factor),
        "median": lambda: optuna.pruners.MedianPruner(n_startup_trials=max(1, spec.workers)),
    }[spec.pruner]()


def make_sampler(spec: SweepSpec, worker: int = 0) -> optuna.samplers.BaseSampler:
    """Random search seeded per trial (the same configurations for every pruner), or TPE
    seeded per worker (one seed in every worker would make them propose the same points)."""
    if spec.sampler == "random":
        return TrialSeededSampler(spec.seed)
    return optuna.samplers.TPESampler(seed=spec.seed * 1000 + worker)


def create(spec: SweepSpec, storage_url: str) -> optuna.Study:
    """Create the study and its waiting trials; refuses a name already taken in the storage
    (nothing of an earlier sweep is touched: pick another name or delete the study)."""
    storage = make_storage(storage_url, spec.retries)
    if spec.name in optuna.get_all_study_names(storage):
        raise ValueError(f"a study named {spec.name!r} already exists in {storage_url}; "
                         "choose another name, or join it with `python -m lab sweep worker`")
    study = optuna.create_study(storage=storage, study_name=spec.name,
                                direction=spec.direction, sampler=make_sampler(spec),
                                pruner=make_pruner(spec))
    study.set_user_attr("spec", spec.as_dict())
    for _ in range(spec.trials):
        study.enqueue_trial({}, skip_if_exists=False)
    return study


def read_spec(storage_url: str, name: str, *, check_notebook: bool = True) -> SweepSpec:
    """The spec stored with study ``name``; a worker checks it against its own copy of the
    notebook (``check_notebook``), a trial's kernel need not."""
    plain = make_storage(storage_url)
    names = optuna.get_all_study_names(plain)
    if name not in names:
        raise ValueError(f"no study named {name!r} in {storage_url}; studies there: "
                         f"{', '.join(sorted(names)) or 'none'}")
    raw = optuna.load_study(study_name=name, storage=plain).user_attrs.get("spec")
    if raw is None:
        raise ValueError(f"study {name!r} was not created by `lab sweep` (it has no spec)")
    return load_spec(raw, check_notebook=check_notebook)


def open_study(storage: RDBStorage, name: str, spec: SweepSpec, worker: int = 0
               ) -> optuna.Study:
    """Study ``name`` in ``storage`` (from ``make_storage``) with the spec's sampler and
    pruner. The caller keeps ``storage``: heartbeats and trial ids are the storage's."""
    return optuna.load_study(study_name=name, storage=storage,
                             sampler=make_sampler(spec, worker), pruner=make_pruner(spec))


def load(storage_url: str, name: str, worker: int = 0, *, check_notebook: bool = True
         ) -> tuple[optuna.Study, SweepSpec]:
    """The study and its spec, with the spec's sampler and pruner (``read_spec``)."""
    spec = read_spec(storage_url, name, check_notebook=check_notebook)
    return open_study(make_storage(storage_url, spec.retries), name, spec, worker), spec


def trial_id(storage: RDBStorage, name: str, number: int) -> int:
    """The id in ``storage`` of trial ``number`` of study ``name``: heartbeats and
    ``storage.get_trial`` take the id, which Optuna's ``Trial`` keeps private (its number is
    public and unique within the study)."""
    study_id = storage.get_study_id_from_name(name)
    return storage.get_trial_id_from_study_id_trial_number(study_id, number)


def expected_survivors(spec: SweepSpec) -> float:
    """HyperTrick's expected number of trials that run every phase: N r^(Np - 1)."""
    return spec.trials * spec.survival ** (spec.phases - 1)


def phases_reached(trial) -> int:
    """The last phase a trial reported (0 when it reported none)."""
    return max(trial.intermediate_values, default=0)


def compute(trials, phases: int) -> float:
    """Training done, in whole trials: phases reached summed over trials, over ``phases``."""
    return sum(phases_reached(t) for t in trials) / phases

