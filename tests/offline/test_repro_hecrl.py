"""`longhorizon repro hecrl --quick` writes its files, and its claims are computed from the measured rows."""

import json

from longhorizon.repro import hecrl


def _row(blocks, moved, flat, sub, tasks=20):
    cell = lambda p: {"success_mean": p, "success_per_seed": [p, p, p], "subgoal_rate": 0.5}
    return {"blocks": blocks, "moved": moved, "tasks": tasks, "flat": cell(flat), "hecrl": cell(sub)}


def test_claims_follow_the_numbers():
    setup = hecrl.Setup(blocks=(2,), seeds=3, methods=("flat", "hecrl"))
    key = "subgoal diffusion raises the flat agent's success on multi-block tasks (moved >= 2)"
    # moved >= 2 pools 60 episodes per arm: 0.1 -> 0.6 is far beyond 2 SE, 0.4 -> 0.42 is within it
    claims = hecrl.claims_from([_row(2, 1, 0.9, 0.9), _row(2, 2, 0.1, 0.6)], setup)
    assert claims[key].startswith("holds (HECRL 0.60 vs flat 0.10")
    assert hecrl.claims_from([_row(2, 1, 0.9, 0.9), _row(2, 2, 0.4, 0.42)], setup)[key].startswith("inconclusive")
    assert hecrl.claims_from([_row(2, 1, 0.9, 0.9), _row(2, 2, 0.7, 0.1)], setup)[key].startswith("contradicted")
    horizon = [k for k in claims if k.startswith("the flat agent's success falls")][0]
    assert claims[horizon].startswith("holds (0.90 -> 0.10)")


def test_quick_run_writes_table_plot_and_verdict(tmp_path):
    summary = hecrl.run(str(tmp_path), quick=True, log=lambda *_: None)
    for name in ("README.md", "summary.json", "hecrl.png"):
        assert (tmp_path / name).stat().st_size > 0
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["claims"] == summary["claims"] and saved["verdict"].startswith("hecrl: ")
    assert set(saved["claims"]) and all(v.split()[0] in ("holds", "contradicted", "inconclusive")
                                        for v in saved["claims"].values())
    assert saved["claims"] == hecrl.claims_from(saved["rows"], hecrl.QUICK)  # recomputed from the written rows
    rows = saved["rows"]
    assert [(r["blocks"], r["moved"]) for r in rows] == [(2, 1), (2, 2)]
    for r in rows:
        for m in hecrl.QUICK.methods:
            assert len(r[m]["success_per_seed"]) == hecrl.QUICK.seeds
            assert all(0.0 <= p <= 1.0 for p in r[m]["success_per_seed"])
    assert "| blocks | moved |" in (tmp_path / "README.md").read_text()
