"""What the LM run spine (:func:`longhorizon.lm.run.run_rl`) asks of a trainer, a sampler and an agent's rollout.

Each is a small base class: the required methods raise ``NotImplementedError``, the optional ones
have defaults that do nothing, so the spine calls them on any implementation without asking whether
they exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Trainer:
    """One optimiser step per call of :meth:`step`; the spine checkpoints ``params``, ``counters`` and
    the attributes a spec names (``Parts.arrays``), and restores them on resume.

    Optional: ``samples_itself`` (True when the trainer draws its own items ahead of the steps, as
    asynchronous agent workers do; the spine then passes none) and :meth:`close`."""

    params: Any
    counters: dict[str, int]
    samples_itself: bool = False

    def step(self, items: Sequence, sizes: Sequence[int] | None = None) -> dict:
        """Train on ``items`` (group sizes ``sizes``, None: the configured one each); returns the step's metrics."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the trainer holds (rollout workers); nothing by default."""


class Sampler:
    """What the spine trains on next (:mod:`longhorizon.lm.samplers` describes the protocol and its
    implementations): ``sample``, ``observe``, ``state``/``restore`` and ``describe`` are required;
    :meth:`prepare` is optional (its pass, when it takes time, is named by ``preparation`` for the progress
    display)."""

    preparation: str | None = None

    def sample(self, n: int) -> tuple[list, list[int] | None]:
        raise NotImplementedError

    def observe(self, metrics: dict, evaluation: dict | None) -> dict:
        raise NotImplementedError

    def state(self) -> dict:
        raise NotImplementedError

    def restore(self, state: dict) -> None:
        raise NotImplementedError

    def describe(self) -> dict:
        raise NotImplementedError

    def prepare(self, trainer: Trainer) -> dict | None:
        """A one-off pass before the first step of a fresh run (sGPO's profile); its record goes to
        ``sampler.json`` and ``summary.json``. None by default: nothing to prepare, nothing recorded."""
        return None


class AgentRollout:
    """Episodes of an agent's environment (:class:`longhorizon.lm.agents.trainer.AgentTrainer`'s ``rollout``).

    ``run(params, rows, group_size, key, version=0, uid_prefix="")`` returns ``len(rows) * group_size``
    trajectories, grouped by row. Optional: ``samples_itself`` (the rollout pulls its own task rows,
    asynchronous workers), ``branched_from`` (per trajectory of the last run, where it branched off another,
    in :func:`longhorizon.lm.agents.tree.build_tree`'s form; tree credit reads it) and :meth:`close`."""

    samples_itself: bool = False
    branched_from: Sequence[tuple[int, int] | None] | None = None

    def run(self, params, rows: Sequence[dict], group_size: int, key, version: int = 0, uid_prefix: str = "") -> list:
        raise NotImplementedError

    def close(self) -> None:
        """Stop the rollout's workers; nothing by default."""
