"""The sampler protocol of the LM loop: state round-trips, the curriculum's gates by hand, refusals (no compilation)."""

import json

import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm import samplers
from longhorizon.lm.curricula import SGPOConfig
from longhorizon.lm.run import EvalSpec
from longhorizon.lm.tasks import TaskConfig, make_problems

SOURCE = samplers.TaskSource("chain", TaskConfig(names="split"), seed=3)


def _prompts(batch):
    items, sizes = batch
    return [p.prompt for p in items], sizes


class FakeTrainer:
    """``rollout`` as GRPOTrainer's, with each query's success rate fixed in advance (for sGPO's profile)."""

    def __init__(self, rates: dict[str, float]):
        self.rates, self.counters = rates, {"rollout_tokens": 0}

    def rollout(self, problems, group_sizes):
        ids = np.repeat(np.arange(len(problems)), group_sizes)
        rewards = np.concatenate([(np.arange(g) < round(self.rates[p.prompt] * g)).astype(float)
                                  for p, g in zip(problems, group_sizes)])
        self.counters["rollout_tokens"] += 10 * len(ids)
        return {"group_ids": ids, "rewards": rewards}


def _sgpo_spec(rates, **kw):
    pool = tuple(make_problems("chain", [1, 2], len(rates), seed=5))
    spec = samplers.SGPO(pool, SGPOConfig(profile_samples=4, min_group=2, max_group=8, unsolved_keep=kw.pop("keep", 1.0)),
                         samples_per_step=kw.pop("samples_per_step", 8), profile_batch=kw.pop("profile_batch", 3), seed=1)
    return spec, FakeTrainer({p.prompt: r for p, r in zip(pool, rates)})


def _built(spec):
    sampler = spec.build()
    if isinstance(spec, samplers.SGPO):
        sampler.prepare(FakeTrainer({p.prompt: r for p, r in zip(spec.pool, SGPO_RATES)}))
    return sampler


SGPO_RATES = [0.25, 0.5, 0.0, 0.75, 1.0, 0.25, 0.5, 0.0]
SPECS = {
    "fixed": samplers.FixedMix(SOURCE, (1, 2, 3)),
    "curriculum": samplers.Curriculum(SOURCE, (1, 2, 3), 2, samplers.Gate("train_reward", 0.5, window=2)),
    "scaler": samplers.Scaler(SOURCE, lo=1, hi=4, target=0.5),
    "pool": samplers.ShuffledPool(tuple(make_problems("chain", 1, 5, seed=2)), seed=4),
    "sgpo": _sgpo_spec(SGPO_RATES)[0],
}


@pytest.mark.parametrize("name", SPECS)
def test_state_round_trip_continues_the_same_draws(name):
    """Restoring a (JSON round-tripped) state into a fresh sampler continues exactly as the original."""
    rewards = iter([0.0, 1.0, 0.75, 0.25, 1.0, 0.0, 0.5, 1.0, 1.0, 0.0])
    a = _built(SPECS[name])
    for _ in range(3):
        a.sample(2)
        a.observe({"reward": next(rewards)}, None)
    state = json.loads(json.dumps(a.state()))
    b = SPECS[name].build()
    b.restore(state)
    for _ in range(4):
        r = next(rewards)
        assert _prompts(a.sample(2)) == _prompts(b.sample(2))
        assert a.observe({"reward": r}, None) == b.observe({"reward": r}, None)
    assert json.dumps(a.state()) == json.dumps(b.state())
    json.dumps(SPECS[name].describe())  # config.json can hold it


def test_steps_gate_runs_each_stage_its_length_and_the_last_forever():
    s = samplers.Curriculum(SOURCE, (1, 2, 3), 2).build()
    seen = []
    for _ in range(7):
        seen.append(s.sample(1)[0][0].horizon)
        s.observe({"reward": 1.0}, {"by_horizon": {1: 1.0, 2: 1.0, 3: 1.0}})  # a gate on steps reads neither
    assert seen == [1, 1, 2, 2, 3, 3, 3]


def test_train_reward_gate_averages_the_stage_window():
    """threshold 0.5, window 2: a stage ends once it ran 2 steps and its last 2 rewards average >= 0.5."""
    s = samplers.Curriculum(SOURCE, (1, 2, 3), 100, samplers.Gate("train_reward", 0.5, window=2)).build()
    stages = []
    for r in [1.0, 0.0, 0.2, 0.6, 0.6, 0.9, 0.9]:
        s.observe({"reward": r}, None)
        stages.append(s.schedule.horizon)
    # step 1: one step only (1.0); step 2: mean(1.0, 0.0) = 0.5 -> h=2; its window starts empty:
    # step 3: 0.2 alone; step 4: mean(0.2, 0.6) = 0.4; step 5: mean(0.6, 0.6) = 0.6 -> h=3, the last stage
    assert stages == [1, 2, 2, 2, 3, 3, 3]
    assert s.state()["rewards"] == [0.9, 0.9]  # the last stage keeps its window (it never ends)


def test_heldout_gate_reads_the_stage_horizon_at_evaluations_only():
    s = samplers.Curriculum(SOURCE, (1, 2), 50, samplers.Gate("heldout_accuracy", 0.8)).build()
    s.observe({"reward": 1.0}, None)  # no evaluation at this step: nothing to compare
    s.observe({"reward": 1.0}, {"by_horizon": {1: 0.7, 2: 0.9}})  # another horizon's accuracy does not count
    assert s.schedule.horizon == 1
    s.observe({"reward": 0.0}, {"by_horizon": {1: 0.8, 2: 0.0}})
    assert s.schedule.horizon == 2


def test_gates_that_cannot_act_are_refused():
    held = EvalSpec(tuple(make_problems("chain", [1, 2], 4, seed=0)), 30, 20, every=2)
    heldout = samplers.Curriculum(SOURCE, (1, 2, 3), 10, samplers.Gate("heldout_accuracy", 0.8))
    with pytest.raises(UsageError, match="periodic evaluations"):
        heldout.check(40, None)
    with pytest.raises(UsageError, match="periodic evaluations"):
        heldout.check(40, EvalSpec(held.problems, 30, 20, every=0))
    samplers.Curriculum(SOURCE, (1, 2), 10, samplers.Gate("heldout_accuracy", 0.8)).check(40, held)
    with pytest.raises(UsageError, match=r"horizon \[3\]"):  # stage h=3 is not the last: its gate reads h=3
        samplers.Curriculum(SOURCE, (1, 3, 4), 10, samplers.Gate("heldout_accuracy", 0.8)).check(40, held)
    with pytest.raises(UsageError, match="h=3 would start after"):
        samplers.Curriculum(SOURCE, (1, 2, 3), 5).check(10, None)
    samplers.Curriculum(SOURCE, (1, 2, 3), 5, samplers.Gate("train_reward", 0.5)).check(10, None)  # may end early
    for bad in (dict(on="train_reward"), dict(on="steps", threshold=0.5), dict(on="reward", threshold=0.5),
                dict(on="train_reward", threshold=0.5, window=0)):
        with pytest.raises(UsageError):
            samplers.Gate(**bad)


def test_scaler_moves_its_level_with_the_training_reward():
    s = samplers.Scaler(SOURCE, lo=1, hi=4, target=0.5, rate=2.0).build()
    assert {p.horizon for p in s.sample(20)[0]} == {1}
    assert s.observe({"reward": 1.0}, None) == {"difficulty": 2.0}
    assert {p.horizon for p in s.sample(20)[0]} == {2}
    assert s.observe({"reward": 0.25}, None) == {"difficulty": 1.5}


def test_shuffled_pool_is_epochs_of_permutations():
    """The order is the concatenation of permutations drawn one after another from default_rng(seed)."""
    items = tuple(range(5))
    s = samplers.ShuffledPool(items, seed=7).build()
    rng = np.random.default_rng(7)
    expected = np.concatenate([rng.permutation(5) for _ in range(3)]).tolist()
    got = [x for _ in range(5) for x in s.sample(3)[0]]
    assert got == expected
    assert s.observe({}, None) == {"epoch": 2}


def test_sgpo_plan_sizes_orders_and_repeats():
    spec, trainer = _sgpo_spec(SGPO_RATES, keep=0.5)
    s = spec.build()
    record = s.prepare(trainer)
    assert record["success_rates"] == SGPO_RATES and trainer.counters["rollout_tokens"] == 8 * 4 * 10
    assert record["stats"]["profiling_tokens"] == 320 and record["stats"]["dropped_solved"] == 1
    batches = [s.sample(99) for _ in range(len(s.batches) + 1)]
    sizes = [g for _, gs in batches[:-1] for g in gs]
    assert sizes == [2, 2, 2, 4, 4, 8]  # p = 0.75, 0.5, 0.5, 0.25, 0.25, then one kept never-solved (p = 0)
    assert all(sum(gs) <= 8 for _, gs in batches)
    assert _prompts(batches[-1]) == _prompts(batches[0])  # the plan repeats


def test_an_empty_sgpo_plan_is_a_usage_error():
    spec, trainer = _sgpo_spec([1.0, 1.0, 0.0, 0.0], keep=0.0)
    with pytest.raises(UsageError, match="kept no query of 4 \\(2 solved, 2 never solved"):
        spec.build().prepare(trainer)
    with pytest.raises(UsageError, match="kept no query"):
        spec.build().restore({"success_rates": [1.0, 1.0, 0.0, 0.0], "stats": None, "next": 0})
    with pytest.raises(UsageError, match="pool is empty"):
        samplers.SGPO((), SGPOConfig(), samples_per_step=8)
