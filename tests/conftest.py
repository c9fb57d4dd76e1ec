"""Test-session set-up: CPU only, headless pygame, one Ray instance per session; a persistent compilation
cache only when LONGHORIZON_TEST_CACHE names one (see below)."""

import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import jax  # noqa: E402

# No persistent compilation cache by default (a cold CI machine starts empty anyway); LONGHORIZON_TEST_CACHE=DIR
# turns it on, shared by the workers and locked (runner.command_line.share_compilation_cache_safely).
if os.environ.get("LONGHORIZON_TEST_CACHE"):
    from longhorizon.runner.command_line import share_compilation_cache_safely  # noqa: E402

    _cache = Path(os.environ["LONGHORIZON_TEST_CACHE"])
    _cache.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(_cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    share_compilation_cache_safely(16 * 2**30)

from ray_fixture import ray_session  # noqa: E402,F401  (one Ray instance per test session, loopback only)

import pytest  # noqa: E402

from longhorizon.runner.compiled_programs import release_compiled_programs_if_near_limit  # noqa: E402


@pytest.fixture(autouse=True)
def _compiled_programs_within_the_mapping_limit():
    """A worker runs hundreds of tests and JAX keeps every program they compiled mapped (about three
    mappings each): past ``vm.max_map_count`` (65,530) an mmap fails inside XLA and the worker segfaults
    in compile or serialize, which is what crashed the cold CI runs of 2026-12-07 at about 85%."""
    release_compiled_programs_if_near_limit()
    yield
