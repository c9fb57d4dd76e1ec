"""The guard that keeps a long-lived process under the kernel's limit on memory mappings."""

import jax
import jax.numpy as jnp

from longhorizon.runner import compiled_programs


def _compile_and_keep(n: int) -> list:
    kept = []
    x = jnp.ones((8, 8))
    for i in range(n):
        f = jax.jit(lambda a, i=i: jnp.tanh(a @ a + i).sum() * (i + 2))
        f(x).block_until_ready()
        kept.append(f)
    return kept


def test_counts_this_processs_mappings():
    count = compiled_programs.mapping_count()
    assert count is not None and count > 10
    assert compiled_programs.mapping_limit() >= count


def test_compiled_programs_are_released_only_past_the_share_of_the_limit(monkeypatch):
    kept = _compile_and_keep(40)  # noqa: F841  (the jitted functions stay alive: only their caches go)
    before = compiled_programs.mapping_count()
    monkeypatch.setattr(compiled_programs, "mapping_limit", lambda: 10 * before)
    assert not compiled_programs.release_compiled_programs_if_near_limit()
    assert compiled_programs.mapping_count() >= before - 5
    monkeypatch.setattr(compiled_programs, "mapping_limit", lambda: before)
    assert compiled_programs.release_compiled_programs_if_near_limit(share=0.9)
    after = compiled_programs.mapping_count()
    assert after <= before - 2 * 40, (before, after)  # about three mappings a program were freed


def test_nothing_is_released_where_proc_is_missing(monkeypatch):
    monkeypatch.setattr(compiled_programs, "mapping_count", lambda: None)
    assert not compiled_programs.release_compiled_programs_if_near_limit()
