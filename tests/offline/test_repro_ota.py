"""`longhorizon repro ota --quick`: the files, and claims computed from the measured values."""

import json

import pytest

from longhorizon.repro import ota


@pytest.mark.slow
def test_quick_run_writes_files_and_claims_from_the_data(tmp_path):
    result = ota.run(str(tmp_path), quick=True)
    for name in ("README.md", "summary.json", "ota.png"):
        assert (tmp_path / name).stat().st_size > 0
    from longhorizon.repro import claims as C

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(summary) == [] and summary["quick"] is True and summary["claims"] == result["claims"]
    assert [c["verdict"] for c in summary["claims"]] == [C.QUICK]
    # the claim is recomputed from the stored per-seed accuracies
    assert [c.to_dict() for c in ota.judge(summary, quick=True)[0]] == summary["claims"]
    hiql, otan = summary["mechanism"]["arms"]
    assert hiql["arm"] == "HIQL" and otan["option_length"] == 5
    assert all(v is None or 0.0 <= v <= 1.0 for v in hiql["sign_accuracy"] + otan["sign_accuracy"])
    assert "--quick" in (tmp_path / "README.md").read_text()


def _row(dataset, agent, n, success):
    return {"dataset": dataset, "agent": agent, "option_length": n, "success_per_seed": [success - 0.01, success, success + 0.01],
            "success_mean": success, "updates_per_second": 50.0, "train_seconds": 1.0}


def test_success_runs_only_the_missing_arms_and_saves_after_each(tmp_path, monkeypatch):
    trained, saved = [], []

    def fake_train(spec):
        trained.append((spec.dataset, spec.agent, spec.config_overrides.get("option_length")))
        return {"final_success": [0.5, 0.5, 0.5], "final_success_mean": 0.5, "updates_per_second": 9.0,
                "train_seconds": 2.0}

    monkeypatch.setattr(ota, "train", fake_train)
    setup = ota.SuccessSetup(datasets=("pointmaze-large-stitch-v0",), option_lengths=(5, 3), updates=10)
    done = [_row("pointmaze-large-stitch-v0", "hiql", None, 0.1), _row("pointmaze-large-stitch-v0", "ota", 5, 0.2)]
    rows = ota.success(tmp_path, setup, done, save=lambda r: saved.append(len(r)), log=lambda *_: None)
    assert trained == [("pointmaze-large-stitch-v0", "ota", "3")]  # HIQL and n = 5 were already measured
    assert saved == [3] and rows[-1]["option_length"] == 3
    from longhorizon.repro import claims as C

    L = {"mechanism": None, "success": rows, "success_setup": {"datasets": list(setup.datasets), "option_lengths": [5, 3],
                                                               "updates": 10, "seeds": 3}}
    claims = {c.claim: c for c in ota.judge(L)[0]}
    # by hand: 0.2 vs 0.1 per seed (0.1 apart on every seed): the paired interval lies above 0
    assert claims["OTA beats HIQL on pointmaze-large-stitch-v0"].verdict == C.HOLDS
    assert claims["OTA n=3 beats HIQL on pointmaze-large-stitch-v0"].evidence["difference"] > 0.35


def test_run_keeps_the_saved_rows_of_the_same_scale_and_extends_the_table(tmp_path, monkeypatch):
    monkeypatch.setattr(ota, "train", lambda spec: (_ for _ in ()).throw(AssertionError("nothing should train")))
    before = ota.SuccessSetup(datasets=("pointmaze-giant-stitch-v0",), option_lengths=(5,), updates=10)
    rows = [_row("pointmaze-giant-stitch-v0", "hiql", None, 0.0), _row("pointmaze-giant-stitch-v0", "ota", 5, 0.0)]
    ota.write_results(tmp_path, ota.summarise(None, rows, before, quick=False))
    summary = ota.run(str(tmp_path), parts=("success",), success_setup=before)
    assert summary["success"] == rows and tuple(summary["success_setup"]["option_lengths"]) == (5,)
    from longhorizon.repro import claims as C

    (claim,) = summary["claims"]  # neither agent succeeded: OTA did not learn
    assert claim["claim"] == "OTA beats HIQL on pointmaze-giant-stitch-v0" and claim["verdict"] == C.NO_SIGNAL
    assert (tmp_path / "ota_success.png").stat().st_size > 0
    assert "OTA n=5" in (tmp_path / "README.md").read_text()


def test_success_claims_need_a_hiql_baseline_that_reaches_a_goal():
    """OTA above a HIQL that never reaches a goal is no signal (a crippled baseline); with HIQL above 0 it is judged."""
    from longhorizon.repro import claims as C

    def recorded(hiql):
        rows = [{"dataset": "d", "agent": "hiql", "option_length": None, "success_per_seed": hiql},
                {"dataset": "d", "agent": "ota", "option_length": 5, "success_per_seed": [0.3, 0.4, 0.5]}]
        return {"mechanism": None, "success": rows,
                "success_setup": {"datasets": ["d"], "option_lengths": [5], "updates": 10, "seeds": 3}}

    claims, arms = ota.judge(recorded([0.0, 0.0, 0.0]))
    assert claims[0].verdict == C.NO_SIGNAL and not arms["HIQL (d)"]["signal"]["moved"]
    assert "HIQL (d)" in claims[0].evidence["did_not_move"][0]
    claims, arms = ota.judge(recorded([0.1, 0.1, 0.2]))
    assert claims[0].verdict == C.HOLDS and arms["HIQL (d)"]["signal"]["moved"]
