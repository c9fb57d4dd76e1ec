"""h1 curriculum, SCALER difficulty, sGPO planning (pure Python, no compilation)."""

import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.curricula import (
    AdaptiveDifficulty,
    HorizonCurriculum,
    SGPOConfig,
    batches_by_samples,
    sgpo_group_size,
    sgpo_plan,
)
from longhorizon.lm.tasks import make_problems, parse_horizons


def test_horizon_curriculum_schedule_and_threshold():
    c = HorizonCurriculum((1, 2, 3), steps_per_stage=2)
    seen = []
    for _ in range(7):
        seen.append(c.horizon)
        c.advance()
    assert seen == [1, 1, 2, 2, 3, 3, 3]  # the last stage never ends
    c = HorizonCurriculum((1, 2, 3), steps_per_stage=100, threshold=0.8, min_steps_per_stage=2)
    assert not c.advance(0.9)  # too early
    assert c.advance(0.85) and c.horizon == 2  # threshold passed after the minimum
    assert not c.advance(0.5) and c.horizon == 2
    with pytest.raises(UsageError):
        HorizonCurriculum(())


def test_adaptive_difficulty_moves_toward_target():
    d = AdaptiveDifficulty(target=0.5, rate=2.0, lo=1, hi=8, level=3.0)
    assert d.update(1.0) == 4.0  # too easy: harder
    assert d.update(0.0) == 3.0  # too hard: easier
    assert d.update(0.5) == 3.0
    d.level = 2.25
    draws = d.sample(np.random.default_rng(0), 4000)
    assert set(draws) == {2, 3} and abs(draws.mean() - 2.25) < 0.03
    assert AdaptiveDifficulty(level=50.0).level == 8.0


def test_sgpo_group_sizes_and_plan():
    cfg = SGPOConfig(profile_samples=8, min_group=2, max_group=16, unsolved_keep=0.5)
    assert [sgpo_group_size(p, cfg) for p in (0.0, 0.05, 0.125, 0.25, 0.5, 0.875)] == [16, 16, 8, 4, 2, 2]
    problems = make_problems("chain", 2, 8, seed=0)
    rates = [1.0, 0.0, 0.25, 0.875, 0.0, 0.5, 1.0, 0.125]
    plan, stats = sgpo_plan(problems, rates, cfg, np.random.default_rng(0))
    assert stats["dropped_solved"] == 2 and stats["unsolved"] == 2 and stats["kept_unsolved"] == 1
    assert stats["kept"] == 5
    order = [problems.index(p) for p, _ in plan]
    assert order[:4] == [3, 5, 2, 7]  # easy to hard: p = 0.875, 0.5, 0.25, 0.125, then the kept unsolved
    assert order[4] in (1, 4)
    assert [g for _, g in plan] == [2, 2, 4, 8, 16]
    with pytest.raises(UsageError):
        sgpo_plan(problems, rates[:3], cfg, np.random.default_rng(0))


def test_batches_by_samples_respect_budget():
    problems = make_problems("chain", 1, 5, seed=0)
    plan = list(zip(problems, [2, 4, 8, 16, 3]))
    batches = list(batches_by_samples(plan, 12))
    assert [sizes for _, sizes in batches] == [[2, 4], [8], [12], [3]]  # a group larger than a step is capped


def test_parse_horizons():
    assert parse_horizons("1-3") == [1, 2, 3]
    assert parse_horizons("1,4, 8") == [1, 4, 8]
    with pytest.raises(UsageError):
        parse_horizons("0")
    with pytest.raises(UsageError):
        parse_horizons("a-b")
