"""Run a python script in a fresh process that sees N simulated CPU devices.

The device count is fixed when jax starts, and a pytest process has already imported jax
with one device, so a test of sharded code runs its script with
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` in a new interpreter and checks
its exit status (the script asserts) and what it printed.
"""

import os
import subprocess
import sys
import textwrap

from tests.conftest import ROOT, WAIT


def run(script: str, devices: int, *args: str, wait: bool = True, timeout: float = WAIT,
        fast_compile: bool = False):
    """``script`` (dedented) in a new python that sees ``devices`` CPU devices: its stdout,
    or with ``wait=False`` the running process for :func:`finish`. ``fast_compile`` turns
    XLA's backend optimisations off (about half the compile time); a script that compares
    runs must then compute both of them itself, so they are compiled alike."""
    flags = f"--xla_force_host_platform_device_count={devices}"
    if fast_compile:
        flags += " --xla_backend_optimization_level=0"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags}
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], cwd=ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return finish(process, timeout) if wait else process


def finish(process: subprocess.Popen, timeout: float = WAIT) -> str:
    """The stdout of ``process`` once it exits with status 0 (else its stderr's tail)."""
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return out
