"""Curricula and rollout budgets for language-model RL.

* :class:`HorizonCurriculum` (h1): stages of increasing horizon; advance after a fixed number
  of RL steps, or earlier once held-out accuracy at the current stage passes a threshold.
* :class:`AdaptiveDifficulty` (SCALER-style): a continuous difficulty moved toward a target
  success rate, ``d <- clip(d + rate * (success - target), lo, hi)``; the horizon is
  ``floor(d)`` or ``floor(d) + 1`` with probability ``d - floor(d)``.
* sGPO (:func:`sgpo_plan`): one profiling pass of ``k`` samples per query under the initial
  policy gives a success rate ``p``; queries with ``p = 1`` are dropped as trivially solved,
  unsolved ones (``p = 0``) are subsampled, the group size is ``clip(round(1 / p), G_min, G_max)``
  (``G_max`` for unsolved), and queries are ordered easy to hard (descending ``p``).

SLCA's per-segment credit is :func:`longhorizon.lm.grpo.segment_advantages`, next to the group advantages it uses.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.tasks import Problem


# ----------------------------------------------------------------------------- h1 curriculum


@dataclasses.dataclass
class HorizonCurriculum:
    """Stages of horizons; ``steps_per_stage`` RL steps each unless ``threshold`` is passed earlier.

    ``threshold=None`` gives a pure schedule. The last stage never ends.
    """

    stages: Sequence[int] = (1, 2, 3, 4, 5)
    steps_per_stage: int = 50
    threshold: float | None = None
    min_steps_per_stage: int = 0
    stage: int = 0
    steps_in_stage: int = 0

    def __post_init__(self):
        if not self.stages or any(int(h) < 1 for h in self.stages):
            raise UsageError(f"curriculum stages {list(self.stages)} must be a non-empty list of positive horizons.")
        if self.steps_per_stage < 1:
            raise UsageError(f"steps_per_stage={self.steps_per_stage} must be positive.")

    @property
    def horizon(self) -> int:
        return int(self.stages[self.stage])

    @property
    def last(self) -> bool:
        return self.stage == len(self.stages) - 1

    def advance(self, held_out_accuracy: float | None = None) -> bool:
        """Count one RL step; return True if the curriculum moved to the next stage."""
        self.steps_in_stage += 1
        if self.last:
            return False
        passed = (
            self.threshold is not None
            and held_out_accuracy is not None
            and held_out_accuracy >= self.threshold
            and self.steps_in_stage >= self.min_steps_per_stage
        )
        if passed or self.steps_in_stage >= self.steps_per_stage:
            self.stage += 1
            self.steps_in_stage = 0
            return True
        return False


# ----------------------------------------------------------------------------- SCALER


@dataclasses.dataclass
class AdaptiveDifficulty:
    """Move a difficulty level toward ``target`` success: ``d += rate * (success - target)``."""

    target: float = 0.5
    rate: float = 2.0
    lo: float = 1.0
    hi: float = 8.0
    level: float = 1.0

    def __post_init__(self):
        if not 0.0 < self.target < 1.0:
            raise UsageError(f"target success rate {self.target} must be strictly between 0 and 1.")
        if self.lo > self.hi:
            raise UsageError(f"difficulty range [{self.lo}, {self.hi}] is empty; make lo <= hi.")
        self.level = float(np.clip(self.level, self.lo, self.hi))

    def update(self, success_rate: float) -> float:
        self.level = float(np.clip(self.level + self.rate * (success_rate - self.target), self.lo, self.hi))
        return self.level

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` integer difficulties whose mean is ``level``."""
        base = math.floor(self.level)
        frac = self.level - base
        return np.minimum(base + (rng.random(n) < frac), math.floor(self.hi)).astype(int)


# ----------------------------------------------------------------------------- sGPO


@dataclasses.dataclass(frozen=True)
class SGPOConfig:
    profile_samples: int = 8  # k samples per query in the profiling pass
    min_group: int = 2
    max_group: int = 16
    unsolved_keep: float = 0.25  # fraction of never-solved queries kept
    drop_solved: bool = True

    def __post_init__(self):
        if self.profile_samples < 1:
            raise UsageError(f"profile_samples={self.profile_samples} must be positive.")
        if not 2 <= self.min_group <= self.max_group:
            raise UsageError(f"group bounds [{self.min_group}, {self.max_group}] need 2 <= min_group <= max_group.")
        if not 0.0 <= self.unsolved_keep <= 1.0:
            raise UsageError(f"unsolved_keep={self.unsolved_keep} must be in [0, 1].")


def sgpo_group_size(success_rate: float, cfg: SGPOConfig) -> int:
    """``clip(round(1 / p), min_group, max_group)``; ``max_group`` when ``p = 0``."""
    if success_rate <= 0:
        return cfg.max_group
    return int(np.clip(round(1.0 / success_rate), cfg.min_group, cfg.max_group))


def sgpo_plan(
    problems: Sequence[Problem], success_rates: Sequence[float], cfg: SGPOConfig, rng: np.random.Generator
) -> tuple[list[tuple[Problem, int]], dict]:
    """Filter, size and order queries from their profiled success rates.

    Returns ``(plan, stats)``: ``plan`` is ``[(problem, group_size), ...]`` easy to hard.
    """
    rates = np.asarray(success_rates, np.float64)
    if len(rates) != len(problems):
        raise UsageError(f"got {len(rates)} success rates for {len(problems)} problems; profile every problem once.")
    solved = rates >= 1.0
    unsolved = rates <= 0.0
    keep = ~(solved & cfg.drop_solved) & ~unsolved
    unsolved_idx = np.flatnonzero(unsolved)
    n_keep_unsolved = int(round(cfg.unsolved_keep * len(unsolved_idx)))
    keep[rng.choice(unsolved_idx, n_keep_unsolved, replace=False) if n_keep_unsolved else []] = True
    idx = np.flatnonzero(keep)
    idx = idx[np.argsort(-rates[idx], kind="stable")]  # easy (high p) first
    plan = [(problems[i], sgpo_group_size(rates[i], cfg)) for i in idx]
    stats = {
        "queries": len(problems),
        "dropped_solved": int((solved & cfg.drop_solved).sum()),
        "unsolved": int(unsolved.sum()),
        "kept_unsolved": n_keep_unsolved,
        "kept": len(plan),
        "mean_group": float(np.mean([g for _, g in plan])) if plan else 0.0,
    }
    return plan, stats


def batches_by_samples(plan: Sequence[tuple[Problem, int]], samples_per_step: int) -> Iterator[tuple[list[Problem], list[int]]]:
    """Consecutive slices of ``plan`` whose group sizes sum to at most ``samples_per_step``."""
    problems, sizes = [], []
    for p, g in plan:
        if sizes and sum(sizes) + g > samples_per_step:
            yield problems, sizes
            problems, sizes = [], []
        problems.append(p)
        sizes.append(min(g, samples_per_step))
    if problems:
        yield problems, sizes
