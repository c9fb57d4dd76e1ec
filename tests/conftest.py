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
# programs that take half a second or more to compile; caching every program (0 s) made the warm fast tier
# 192 -> 173 s but the cold CI run of 2026-12-07 crashed a worker (segfault) with it, so the tested setting stays
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

from ray_fixture import ray_session  # noqa: E402,F401  (one Ray instance per test session, loopback only)
