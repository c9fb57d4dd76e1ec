"""Engines: what runs an algorithm's ``collect -> learn`` for every seed, one chunk of updates at a time.

:class:`Engine` is the protocol the runner drives (:mod:`longhorizon.runner.run`); the fused
(:mod:`~longhorizon.engine.fused`), host (:mod:`~longhorizon.engine.host`) and Ray
(:mod:`~longhorizon.engine.ray`) engines implement it. Its optional parts have defaults here, so the
runner calls them on any engine without asking whether they exist.
"""

from __future__ import annotations

from typing import Any


class Engine:
    """Trains ``num_seeds`` independent agents of one algorithm in chunks of ``updates_per_chunk`` updates.

    Required: ``init(seed) -> state`` (every seed's initial training state), ``compile(state) ->
    seconds`` and ``run_chunk(state, num_updates=None) -> (state, per-seed metrics on host)``.
    Defaults an engine may override: ``num_devices`` (local devices the seeds are sharded over),
    ``row_seeds`` (the seed index each row of the state trains, ``None``: row ``i`` is seed ``i``;
    a sweep's rows repeat seeds, one per setting) and :meth:`close`.
    """

    name = "engine"
    num_seeds: int
    updates_per_chunk: int
    num_devices: int = 1
    row_seeds: list[int] | None = None

    def init(self, seed: int) -> Any:
        raise NotImplementedError

    def compile(self, state: Any) -> float:
        raise NotImplementedError

    def run_chunk(self, state: Any, num_updates: int | None = None) -> tuple[Any, dict]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the engine holds (workers, host environments); nothing by default."""
