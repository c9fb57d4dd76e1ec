"""The layer-streamed update's tests (tests/lm/test_offload.py), run in a process of their own (why: there)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_the_offload_tests_pass_in_their_own_process():
    env = {**os.environ, "LONGHORIZON_OFFLOAD_TESTS": "1", "JAX_PLATFORMS": "cpu"}
    env.pop("LONGHORIZON_TEST_CACHE", None)
    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(here / "test_offload.py")], env=env, cwd=here.parents[1], capture_output=True,
                          text=True, timeout=1000)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout.splitlines()[-1], done.stdout[-500:]
