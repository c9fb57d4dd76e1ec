"""Keeping a long-lived process under the kernel's limit on memory mappings.

Every program XLA compiles for the CPU stays mapped (about three mappings each) for as long as JAX's caches
hold it, and Linux allows a process ``vm.max_map_count`` mappings (65,530 by default). A process that
compiles tens of thousands of programs (a test worker, a reproduction that trains many arms in one process)
then gets a failed ``mmap`` deep inside XLA, which shows up as a segfault in compile, in
``executable.serialize`` or in a cache read, far from its cause. Dropping JAX's in-memory caches when the
count nears the limit frees those mappings; the next call of a function recompiles it.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_MAP_LIMIT = 65_530  # Linux's default vm.max_map_count
# release at three quarters of the limit: the largest rise in one test of the suite was 4,800 mappings (a quick
# real-model reproduction), so the last quarter (16,000) leaves room; every release costs recompiles
SHARE_OF_LIMIT = 0.75


def mapping_count() -> int | None:
    """How many memory mappings this process holds (None where ``/proc`` does not say)."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return None


def mapping_limit() -> int:
    """The kernel's limit on one process's memory mappings."""
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text().strip())
    except (OSError, ValueError):
        return DEFAULT_MAP_LIMIT


def release_compiled_programs_if_near_limit(share: float = SHARE_OF_LIMIT) -> bool:
    """Clear JAX's compilation caches when this process holds more than ``share`` of its mapping limit;
    whether it did. Cheap enough to call before every run or test (one read of ``/proc/self/maps``)."""
    count = mapping_count()
    if count is None or count < share * mapping_limit():
        return False
    import gc

    import jax

    jax.clear_caches()
    gc.collect()
    return True
