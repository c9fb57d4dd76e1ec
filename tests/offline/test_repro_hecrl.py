"""`longhorizon repro hecrl --quick` writes its files, and its claims are computed from the measured rows."""

import json

import pytest

from longhorizon.repro import hecrl


def _row(blocks, moved, flat, sub, tasks=20):
    cell = lambda p: {"success_mean": p, "success_per_seed": [p - 0.02, p, p + 0.02], "subgoal_rate": 0.5}  # noqa: E731
    return {"blocks": blocks, "moved": moved, "tasks": tasks, "flat": cell(flat), "hecrl": cell(sub)}


def test_claims_follow_the_numbers():
    from longhorizon.repro import claims as C

    setup = {"methods": ["flat", "hecrl"], "updates": 10, "seeds": 3}
    verdicts = lambda rows: [c.verdict for c in hecrl.judge({"setup": setup, "rows": rows})[0]]  # noqa: E731
    # second verdict: the flat agent's success falls from one to two moved blocks (the largest block count, 2)
    assert verdicts([_row(2, 1, 0.9, 0.9), _row(2, 2, 0.1, 0.6)]) == [C.HOLDS, C.HOLDS]
    assert verdicts([_row(2, 1, 0.9, 0.9), _row(2, 2, 0.4, 0.4)]) == [C.INCONCLUSIVE, C.HOLDS]
    assert verdicts([_row(2, 1, 0.9, 0.9), _row(2, 2, 0.7, 0.1)]) == [C.CONTRADICTED, C.HOLDS]
    assert verdicts([_row(2, 1, 0.5, 0.5), _row(2, 2, 0.5, 0.5)]) == [C.INCONCLUSIVE, C.INCONCLUSIVE]  # flat in moved
    # the flat agent cannot do one move: no signal for both
    assert verdicts([_row(2, 1, 0.05, 0.05), _row(2, 2, 0.1, 0.6)]) == [C.NO_SIGNAL, C.NO_SIGNAL]
    three = [_row(3, 1, 0.9, 0.9), _row(3, 2, 0.5, 0.6), _row(3, 3, 0.1, 0.4)]
    assert verdicts(three) == [C.HOLDS, C.HOLDS]  # subgoals help; the flat agent's success falls with blocks moved


@pytest.mark.slow
def test_quick_run_writes_table_plot_and_verdict(tmp_path):
    from longhorizon.repro import claims as C

    summary = hecrl.run(str(tmp_path), quick=True, log=lambda *_: None)
    for name in ("README.md", "summary.json", "hecrl.png"):
        assert (tmp_path / name).stat().st_size > 0
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(saved) == [] and saved["quick"] is True and saved["claims"] == summary["claims"]
    assert [c["verdict"] for c in saved["claims"]] == [C.QUICK] * 2  # subgoals vs flat; the flat agent's horizon trend
    assert [p.name for p in (tmp_path / "curves").iterdir()] == ["gcivl_2_blocks.csv"]  # each agent's loss curve
    assert [c.to_dict() for c in hecrl.judge(saved, quick=True)[0]] == saved["claims"]  # recomputed from the written rows
    rows = saved["rows"]
    assert [(r["blocks"], r["moved"]) for r in rows] == [(2, 1), (2, 2)]
    for r in rows:
        for m in hecrl.QUICK.methods:
            assert len(r[m]["success_per_seed"]) == hecrl.QUICK.seeds
            assert all(0.0 <= p <= 1.0 for p in r[m]["success_per_seed"])
    assert "| blocks | moved |" in (tmp_path / "README.md").read_text()
