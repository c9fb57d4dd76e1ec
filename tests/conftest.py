"""Test-session set-up: CPU only, a persistent compilation cache shared by the test processes (and kept
between runs) so identical programs (same config in several tests) compile once."""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import jax  # noqa: E402

_cache = Path(os.environ.get("LONGHORIZON_TEST_CACHE", Path(tempfile.gettempdir()) / "longhorizon-test-jax-cache"))
_cache.mkdir(parents=True, exist_ok=True)
jax.config.update("jax_compilation_cache_dir", str(_cache))
# programs that take half a second or more to compile (caching every program, 0 s, made the warm fast tier
# 192 -> 173 s, but writes ten times as many files)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
# the two xdist workers share the folder: a size limit makes JAX lock each read and write, so a worker never
# loads a program the other is still writing (unlocked, that crashed workers in CI: runner.command_line)
from longhorizon.runner.command_line import share_compilation_cache_safely  # noqa: E402

share_compilation_cache_safely(16 * 2**30)

from ray_fixture import ray_session  # noqa: E402,F401  (one Ray instance per test session, loopback only)
