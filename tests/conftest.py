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
# every program, however small: the tests compile thousands of small ones (eager ops, tiny models) that a
# warm cache loads faster than XLA compiles them (warm fast tier: 192 s -> 173 s on 2 cores; its tests/lm 50 -> 22 s)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

from ray_fixture import ray_session  # noqa: E402,F401  (one Ray instance per test session, loopback only)
