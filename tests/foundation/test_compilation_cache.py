"""The persistent compilation cache is safe to share between processes: its size limit turns on JAX's file lock."""

import jax

from longhorizon.runner.command_line import CACHE_BYTES, setup_compilation_cache


def test_the_cli_cache_has_a_size_limit_so_jax_locks_its_files(tmp_path, monkeypatch):
    saved = {k: getattr(jax.config, k) for k in ("jax_compilation_cache_dir", "jax_compilation_cache_max_size",
                                                 "jax_persistent_cache_min_compile_time_secs",
                                                 "jax_persistent_cache_min_entry_size_bytes")}
    try:
        monkeypatch.setenv("LONGHORIZON_COMPILE_CACHE", str(tmp_path / "jax"))
        setup_compilation_cache()
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "jax")
        # -1 (JAX's default) means no limit, and then no lock around reads and writes
        assert jax.config.jax_compilation_cache_max_size == CACHE_BYTES > 0
    finally:
        for key, value in saved.items():
            jax.config.update(key, value)


def test_the_cli_leaves_the_cache_off_on_cpu_unless_asked(monkeypatch):
    saved = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.delenv("LONGHORIZON_COMPILE_CACHE", raising=False)
        setup_compilation_cache()  # the tests run on CPU: serialize() segfaulted there, so no cache by default
        assert jax.config.jax_compilation_cache_dir is None
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)
