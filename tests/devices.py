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


def run(script: str, devices: int, *args: str, wait: bool = True, timeout: float = WAIT):
    """``script`` (dedented) in a new python that sees ``devices`` CPU devices: its stdout,
    or with ``wait=False`` the running process for :func:`finish`. It compiles as the test
    run does (tests/conftest.py: the run's cache, most optimisations off), so a script that
    compares its result with one computed in the test process compares programs compiled
    alike."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags.strip()}
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], cwd=ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return finish(process, timeout) if wait else process


def finish(process: subprocess.Popen, timeout: float = WAIT) -> str:
    """The stdout of ``process`` once it exits with status 0 (else its stderr's tail)."""
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return out
