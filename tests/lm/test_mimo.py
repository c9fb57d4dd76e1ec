"""MiMo's asynchronous-GRPO reproduction: the addition reward and throughput by hand, the two claims' rules on
recorded numbers made up to hit each verdict, and the quick run end to end (Ray on loopback)."""

from __future__ import annotations

import json

import pytest

from longhorizon.repro import claims as C
from longhorizon.repro import mimo

pytestmark = pytest.mark.xdist_group("ray")  # one Ray instance: keep these tests on one worker (--dist loadgroup)


def test_addition_rows_and_their_reward_by_hand():
    rows = mimo.addition_rows(3, seed=0)
    assert len(rows) == 3 and all(r["horizon"] == 1 for r in rows)
    text = rows[0]["prompt"][0]["content"]
    a, b = (int(x) for x in text.removeprefix("What is ").split("?")[0].split(" + "))
    assert 10 <= a <= 99 and 10 <= b <= 99 and rows[0]["answer"] == str(a + b)
    got = mimo.correct_answer(None, ["52 + 56 = 108", [{"role": "assistant", "content": "108 or 107"}], "no number"],
                              ["108", "108", "108"])
    assert got == [1.0, 0.0, 0.0]  # the last number counts


def test_throughput_skips_the_compiling_first_step_by_hand():
    curve = [{"step": 1, "step_s": 50.0, "generated_tokens": 100},
             {"step": 2, "step_s": 2.0, "generated_tokens": 300},
             {"step": 3, "step_s": 3.0, "generated_tokens": 400}]
    assert mimo.step_seconds(curve) == [2.0, 3.0]
    assert mimo.throughput(curve) == pytest.approx((400 - 100) / 5.0)


def _recorded(sync_steps, async_steps, sync_acc, async_acc, rising=True):
    def run(step_s, accuracy):
        curve = [{"step": 1, "step_s": 60.0, "reward": 0.1, "generated_tokens": 0}] + [
            {"step": k, "step_s": step_s, "reward": 0.1 + (0.05 * k if rising else 0), "generated_tokens": 100 * k}
            for k in range(2, 9)]
        return {"accuracy": accuracy, "curve": curve, "rewards": [r["reward"] for r in curve]}

    return {"setup": {"steps": 8}, "base": {"accuracy": 0.1},
            "results": {"sync": [run(s, a) for s, a in zip(sync_steps, sync_acc)],
                        "async-1": [run(async_steps[0], async_acc[0])],  # the sweep arms: judged by no claim
                        "async-2": [run(s, a) for s, a in zip(async_steps, async_acc)]}}


def test_the_claims_rules_give_each_verdict():
    fast = _recorded([20, 21, 22], [14, 15, 14.5], [0.70, 0.72, 0.68], [0.71, 0.70, 0.69])
    speed, accuracy = (c.verdict for c in mimo.judge(fast)[0])
    assert (speed, accuracy) == (C.HOLDS, C.HOLDS)
    slow = _recorded([20, 21, 22], [26, 27, 28], [0.70, 0.72, 0.68], [0.40, 0.42, 0.41])
    assert [c.verdict for c in mimo.judge(slow)[0]] == [C.CONTRADICTED, C.CONTRADICTED]
    two_seeds = _recorded([20, 21], [14, 15], [0.70, 0.72], [0.71, 0.70])
    assert [c.verdict for c in mimo.judge(two_seeds)[0]] == [C.INCONCLUSIVE, C.INCONCLUSIVE]
    flat = _recorded([20, 21, 22], [14, 15, 14.5], [0.1, 0.1, 0.1], [0.1, 0.1, 0.1], rising=False)
    assert [c.verdict for c in mimo.judge(flat)[0]] == [C.NO_SIGNAL, C.NO_SIGNAL]  # neither arm learned
    assert [c.verdict for c in mimo.judge(fast, quick=True)[0]] == [C.QUICK, C.QUICK]


@pytest.mark.slow
def test_the_quick_run_writes_a_judged_folder_and_reads_finished_arms_back(tmp_path, ray_session, capsys):
    summary = mimo.run(str(tmp_path), quick=True)
    assert [c["verdict"] for c in summary["claims"]] == [C.QUICK, C.QUICK] and not C.validate_summary(summary)
    for name in ("summary.json", "README.md", "curves.png"):
        assert (tmp_path / name).exists(), name
    finished = json.loads((tmp_path / "partial" / "async-2-seed0.json").read_text())["result"]
    assert all(0 <= row["staleness"] <= 2 for row in finished["curve"])
    capsys.readouterr()
    mimo.run(str(tmp_path), quick=True)
    assert capsys.readouterr().out.count("read back from") == 3  # the base and both arms
