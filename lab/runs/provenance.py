"""Where a run came from: code version, library versions, devices, host, times."""

import os
import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lab.runs.params import Resolution

PACKAGES = ("jax", "jaxlib", "equinox", "optax", "papermill")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _git(folder: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state(folder: Path) -> dict[str, Any]:
    """The commit checked out at ``folder`` and whether tracked files differ from it."""
    commit = _git(folder, "rev-parse", "HEAD")
    status = _git(folder, "status", "--porcelain", "--untracked-files=no")
    if commit is None or status is None:
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(status)}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


# the variables that decide which devices JAX sees; runs in one process with the same values
# share one answer
_DEVICE_VARIABLES = ("JAX_", "XLA_", "CUDA_", "NVIDIA_", "TPU_", "ROCR_", "HIP_")
_devices_seen: dict[tuple, list[str]] = {}


def jax_devices() -> list[str]:
    """The JAX devices, asked in a child process: importing jax in the runner would make it
    hold GPU memory that the notebook's kernel needs. Only for a run whose kernel did not say
    (:func:`lab.runs.kernel.devices`: it stopped before its last cell). Asked once per
    process and device environment (about 1.2 s each time here); a failed answer is asked
    again."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_DEVICE_VARIABLES)))
    if key in _devices_seen:
        return list(_devices_seen[key])
    code = ("import jax; print('\\n'.join(f'{d.platform}:{d.id} {d.device_kind}' "
            "for d in jax.devices()))")
    env = os.environ | {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, timeout=120, check=True)
    except (OSError, subprocess.SubprocessError) as err:
        return [f"unknown ({type(err).__name__})"]
    _devices_seen[key] = out.stdout.splitlines()
    return list(_devices_seen[key])


def collect(notebook: Path, resolution: "Resolution") -> dict[str, Any]:
    """Everything known about a run before it starts; the runner adds status and times, and
    the devices the kernel saw (``jax_devices``) when it ends.
    ``parameters`` are the effective values (notebook default < preset < explicit value),
    ``parameter_sources`` where each came from, ``overrides`` the explicit ones."""
    parameters = resolution.values
    seed = next((parameters[k] for k in ("seed", "seeds") if k in parameters), None)
    return {
        "notebook": notebook.name,
        "notebook_path": str(notebook),
        "preset": resolution.preset,
        "parameters": parameters,
        "parameter_sources": resolution.sources,
        "overrides": resolution.explicit,
        "seed": seed,
        "git": git_state(notebook.resolve().parent),
        "versions": {"python": platform.python_version()}
        | {name: _version(name) for name in PACKAGES},
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python_executable": sys.executable,
    }
