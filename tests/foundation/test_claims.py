"""The claims module: every rule on constructed numbers, checked against values computed by hand."""

import csv
import json
import math

import numpy as np
import pytest

pytest.importorskip("scipy")

from longhorizon.repro import claims as C

T2 = 4.302653  # t_{0.975, 2}
T4 = 2.776445  # t_{0.975, 4}


def test_t_quantiles_by_table():
    assert C.t_quantile(2) == pytest.approx(T2, abs=1e-6)
    assert C.t_quantile(4) == pytest.approx(T4, abs=1e-6)


def test_paired_difference_by_hand_three_seeds_straddling_zero_is_inconclusive():
    # d = [1, 2, 3]: mean 2, sd 1, se 1/sqrt(3); half-width 4.303 / sqrt(3) = 2.484 -> (-0.484, 4.484)
    c = C.difference([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    low, high = c.evidence["interval"]
    assert c.evidence["difference"] == pytest.approx(2.0)
    assert low == pytest.approx(2.0 - T2 / math.sqrt(3), abs=1e-5) and low == pytest.approx(-0.4841, abs=1e-4)
    assert high == pytest.approx(4.4841, abs=1e-4)
    assert c.verdict == C.INCONCLUSIVE and "contains the margin" in c.evidence["reason"]


def test_paired_difference_holds_and_is_contradicted_by_hand():
    # d = [2, 3, 4]: mean 3, interval 3 -+ 2.484 = (0.516, 5.484): above 0, below 1 is not
    c = C.difference([2.0, 3.0, 4.0], [0.0, 0.0, 0.0])
    assert c.verdict == C.HOLDS and c.evidence["interval"][0] == pytest.approx(0.5159, abs=1e-4)
    assert C.difference([2.0, 3.0, 4.0], [0.0, 0.0, 0.0], margin=1.0).verdict == C.INCONCLUSIVE
    assert C.difference([0.0, 0.0, 0.0], [2.0, 3.0, 4.0]).verdict == C.CONTRADICTED
    # lower is better (a cost): a's cost lower by [2, 3, 4] holds
    assert C.difference([0.0, 0.0, 0.0], [2.0, 3.0, 4.0], higher_is_better=False).verdict == C.HOLDS


def test_two_seed_difference_is_never_holds():
    c = C.difference([10.0, 10.1], [0.0, 0.1])  # a huge, steady gain, but 2 seeds
    assert c.verdict == C.INCONCLUSIVE and "2 seed(s)" in c.evidence["reason"]
    assert C.difference([10.0], [0.0]).verdict == C.INCONCLUSIVE


def test_welch_difference_by_hand():
    # a = [1,2,3], b = [4,5,6]: s^2/n = 1/3 each, se = sqrt(2/3), df = (2/3)^2 / (2 (1/3)^2 / 2) = 4
    c = C.difference([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], paired=False)
    half = T4 * math.sqrt(2 / 3)
    assert c.evidence["interval"] == pytest.approx([-3 - half, -3 + half], abs=1e-5)
    assert c.verdict == C.CONTRADICTED


def test_one_sample_difference_against_a_fixed_reference():
    # win rates [0.55, 0.6, 0.65] vs 1/2: d mean 0.1, sd 0.05, half 4.303 * 0.05 / sqrt(3) = 0.1242
    c = C.difference([0.55, 0.6, 0.65], 0.5)
    assert c.evidence["interval"] == pytest.approx([0.1 - 0.12421, 0.1 + 0.12421], abs=1e-4)
    assert c.verdict == C.INCONCLUSIVE


def test_trend_by_hand_and_a_flat_relation_never_holds():
    x = np.arange(4.0)
    rows = lambda slopes: np.stack([s * x + 1.0 for s in slopes])  # noqa: E731
    c = C.trend(x, rows([2.0, 3.0, 4.0]))  # slopes 2, 3, 4: (0.516, 5.484)
    assert c.verdict == C.HOLDS and c.evidence["slope"] == pytest.approx(3.0)
    assert c.evidence["interval"] == pytest.approx([3 - T2 / math.sqrt(3), 3 + T2 / math.sqrt(3)], abs=1e-5)
    assert C.trend(x, rows([2.0, 3.0, 4.0]), direction="decreasing").verdict == C.CONTRADICTED
    assert C.trend(x, -rows([2.0, 3.0, 4.0]), direction="decreasing").verdict == C.HOLDS
    assert C.trend(x, rows([2.0, 3.0, 4.0]), direction="decreasing", margin=6.0).verdict == C.HOLDS  # slope < 6
    flat = rows([-0.1, 0.0, 0.1])  # no relation: the interval contains 0
    assert C.trend(x, flat).verdict == C.INCONCLUSIVE
    assert C.trend(x, flat, direction="decreasing").verdict == C.INCONCLUSIVE
    exactly_flat = np.ones((5, 4))
    assert C.trend(x, exactly_flat).verdict == C.INCONCLUSIVE  # slope exactly 0 is not above 0
    # a flat claim: |slope| < 0.5 holds (interval 0 -+ 0.248); |slope| < 0.1 is undecided
    assert C.trend(x, flat, direction="flat", margin=0.5).verdict == C.HOLDS
    assert C.trend(x, flat, direction="flat", margin=0.1).verdict == C.INCONCLUSIVE
    assert C.trend(x, rows([2.0, 3.0, 4.0]), direction="flat", margin=0.1).verdict == C.CONTRADICTED
    assert C.trend(x, rows([2.0, 3.0])).verdict == C.INCONCLUSIVE  # 2 seeds


def test_agreement_uses_the_stated_tolerance():
    assert C.agreement([1.0, 2.0], [1.0, 2.0005], tolerance=1e-3).verdict == C.HOLDS
    c = C.agreement(0.9, 1.0, tolerance=0.05)
    assert c.verdict == C.CONTRADICTED and c.evidence["error"] == pytest.approx(0.1)


def test_a_collapsed_run_is_no_signal_naming_the_arm():
    flat = np.zeros((3, 16))  # three seeds, reward 0 throughout
    signal = C.arm_signal("GRPO", flat, eval_start=0.1, eval_end=[0.1, 0.1, 0.1])
    assert not signal["moved"] and signal["change"] == 0.0
    ruling = C.difference([0.3, 0.4, 0.5], [0.0, 0.0, 0.0])  # would hold
    c = C.judge("A beats GRPO", ruling, depends_on=[signal])
    assert c.verdict == C.NO_SIGNAL and c.evidence["rule_verdict"] == C.HOLDS
    assert c.evidence["did_not_move"] and "GRPO" in c.evidence["did_not_move"][0]


def test_arm_signal_moves_by_interval_or_by_evaluation():
    # last minus first window (window 1): [1, 1.2, 0.8], mean 1, half 4.303 * 0.2 / sqrt(3) = 0.497 > 0
    rising = np.array([[0, 0, 1, 1], [0, 0, 1.2, 1.2], [0, 0, 0.8, 0.8]])
    s = C.arm_signal("a", rising)
    assert s["moved"] and s["interval"][0] == pytest.approx(1 - 0.4969, abs=1e-3)
    noisy = np.array([[0, 0, 1, 1], [0, 0, -1, -1], [0, 0, 0.3, 0.3]])  # changes 1, -1, 0.3: interval contains 0
    assert not C.arm_signal("a", noisy)["moved"]
    assert C.arm_signal("a", noisy, eval_start=0.2, eval_end=[0.3, 0.4, 0.2])["moved"]  # the evaluation rose
    assert not C.arm_signal("a", eval_start=0.2, eval_end=[0.2, 0.2])["moved"]
    falling_cost = np.array([[5, 5, 1, 1]] * 3) + np.array([[0], [0.1], [0.2]]) * np.arange(4)
    assert C.arm_signal("a", falling_cost, higher_is_better=False, what="cost")["moved"]


def test_group_task_and_baseline_gates():
    assert not C.group_signal("GRPO", 0.3)["moved"] and C.group_signal("GRPO", 0.5)["moved"]
    gate = C.task_floor("agents", [0.05, 0.1, 0.0], floor=0.5)
    assert not gate["moved"] and "below the floor" in gate["what"]
    assert not C.baseline_signal("PPO", [-1200, -1250, -1210], -1220, what="a random policy")["moved"]
    cost = C.judge("w lowers cost", C.difference([0.1, 0.1, 0.1], [0.3, 0.31, 0.29], higher_is_better=False),
                   depends_on=[gate])
    assert cost.verdict == C.NO_SIGNAL


def test_quick_run_is_not_judged():
    c = C.judge("x", C.difference([2.0, 3.0, 4.0], [0.0, 0.0, 0.0]), quick=True)
    assert c.verdict == C.QUICK
    c = C.judge("x", C.difference([2.0, 3.0, 4.0], [0.0] * 3), depends_on=[C.group_signal("g", 0.0)], quick=True)
    assert c.verdict == C.QUICK


def _summary(**over):
    claim = C.judge("a beats b", C.difference([2.0, 3.0, 4.0], [0.0, 0.0, 0.0]))
    arms = {"a": {"steps": 100, "seeds": 3, "signal": C.arm_signal("a", eval_start=0.0, eval_end=[1, 2, 3])}}
    kwargs = dict(paper="P", claims=[claim], arms=arms, scale="tiny", quick=False, command="longhorizon repro p",
                  wall_seconds=1.5)
    kwargs.update(over)
    return C.summary(**kwargs)


def test_summary_follows_the_schema_and_survives_json():
    s = json.loads(json.dumps(_summary()))
    assert C.validate_summary(s) == [] and s["claims"][0]["verdict"] == C.HOLDS
    assert isinstance(s["commit"], str) and s["commit"]


def test_validate_summary_names_each_departure():
    good = json.loads(json.dumps(_summary()))
    assert "missing key 'paper'" in C.validate_summary({k: v for k, v in good.items() if k != "paper"})
    bad = json.loads(json.dumps(good))
    bad["claims"][0]["verdict"] = "held"
    assert any("not one of" in p for p in C.validate_summary(bad))
    bad = json.loads(json.dumps(good))
    bad["quick"] = True  # a quick run with a holds verdict
    assert any("not one of quick run" in p for p in C.validate_summary(bad))
    bad = json.loads(json.dumps(good))
    bad["claims"][0]["evidence"]["seeds"] = 2
    assert any("from 2 seed(s)" in p for p in C.validate_summary(bad))
    bad = json.loads(json.dumps(good))
    bad["claims"][0]["verdict"] = C.NO_SIGNAL
    assert any("did_not_move" in p for p in C.validate_summary(bad))
    bad = json.loads(json.dumps(good))
    del bad["arms"]["a"]["signal"]
    assert any("steps, seeds and signal" in p for p in C.validate_summary(bad))
    with pytest.raises(ValueError, match="claims schema"):
        C.summary(paper="P", claims=[], arms={}, scale="", quick=False, command="", wall_seconds=None)


def test_report_write_refuses_a_summary_that_departs_from_the_schema(tmp_path):
    from longhorizon.repro.report import write

    good = _summary()
    write(tmp_path / "ok", good, ["# ok"])
    assert json.loads((tmp_path / "ok" / "summary.json").read_text())["paper"] == "P"
    with pytest.raises(ValueError, match="claims schema"):
        write(tmp_path / "bad", {**good, "quick": "no"}, ["# bad"])
    write(tmp_path / "legacy", {"verdict": "v"}, ["# legacy"])  # not in the schema: written as before


def test_write_curve_keeps_every_column(tmp_path):
    path = C.write_curve(tmp_path, "TreeOPSD (tree credit)", [{"step": 0, "reward": 0.1},
                                                                {"step": 1, "reward": 0.2, "kl": np.float32(0.01)}])
    assert path == tmp_path / "curves" / "TreeOPSD_tree_credit.csv"
    rows = list(csv.DictReader(path.open()))
    assert rows == [{"step": "0", "reward": "0.1", "kl": ""}, {"step": "1", "reward": "0.2", "kl": "0.009999999776482582"}]


def test_combine_bootstrap_interval_and_the_shared_helpers():
    holds, against = C.difference([2.0, 3.0, 4.0], [0.0] * 3), C.difference([0.0] * 3, [2.0, 3.0, 4.0])
    both = C.combine({"a": holds, "b": holds}, "part")
    assert both.verdict == C.HOLDS and both.evidence["seeds"] == 3 and "at every part" in both.rule
    assert C.combine({"a": holds, "b": against}, "part").verdict == C.CONTRADICTED
    assert C.combine({"a": holds, "b": against}, "part", unanimous=True).verdict == C.INCONCLUSIVE  # every part must
    below = lambda lo, hi, seeds=5: C.bootstrap_interval(lo, hi, 0.65, below=True, seeds=seeds, how="x").verdict  # noqa: E731
    assert (below(0.4, 0.6), below(0.7, 0.8), below(0.6, 0.7)) == (C.HOLDS, C.CONTRADICTED, C.INCONCLUSIVE)
    assert below(0.4, 0.6, seeds=2) == below(float("nan"), float("nan")) == C.INCONCLUSIVE
    assert C.undecidable("why", x=1).to_dict()["evidence"] == {"reason": "why", "x": 1}
    arm = C.arm(10.0, 3, {"moved": True}, {"moved": False})
    assert arm["steps"] == 10 and arm["signal"]["moved"] is False and len(arm["signal"]["tests"]) == 2
    assert C.not_applied("exact", "closed form")["moved"] is True
    assert C.as_recorded({1: np.float32(0.5), "a": (np.int64(2), np.nan)}) == {"1": 0.5, "a": [2, None]}


def test_demote_makes_only_the_named_verdicts_inconclusive_and_keeps_what_the_rule_said():
    against = C.difference([-1.0, -1.1, -0.9], 0.0)
    assert against.verdict == C.CONTRADICTED
    demoted = C.demote(against, "an upper bound", "why not")
    assert (demoted.verdict, demoted.evidence["rule_verdict"], demoted.evidence["reason"]) == (C.INCONCLUSIVE, C.CONTRADICTED, "why not")
    assert demoted.rule == against.rule + "; an upper bound" and demoted.evidence["interval"] == against.evidence["interval"]
    holds = C.difference([1.0, 1.1, 0.9], 0.0)
    assert C.demote(holds, "an upper bound", "why not") is holds  # only a contradiction by default
    assert C.demote(holds, "censored", "why", verdicts=(C.HOLDS, C.CONTRADICTED)).verdict == C.INCONCLUSIVE
