"""`longhorizon offline train`: the CLI builds an OfflineSpec, runs the one offline loop, resumes from a folder."""

from __future__ import annotations

import json

import pytest

from longhorizon.cli import main

TINY = ["--set", "hidden=32,32", "--set", "batch_size=32"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "pointmaze-medium-stitch-v0.npz"
    assert main(["offline", "make-dataset", "pointmaze-medium-stitch-v0", "--out", str(out), "--size", "400",
                 "--workers", "1"]) == 0
    return out


def test_dry_run_resolves_the_agent_config_and_writes_nothing(tmp_path, dataset, capsys):
    out = tmp_path / "run"
    args = ["offline", "train", "ota", "--dataset", str(dataset), "--set", "option_length=3", "--out", str(out), "--dry-run"]
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["agent"] == "ota" and plan["config"]["option_length"] == 3 and plan["out"] == str(out)
    assert not out.exists()


def test_a_run_writes_its_folder_and_resume_takes_only_the_saved_config(tmp_path, dataset, capsys):
    out = tmp_path / "run"
    args = ["offline", "train", "gcbc", "--dataset", str(dataset), "--num-updates", "20", "--chunks", "2",
            "--out", str(out), "--quiet", *TINY]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["updates"] == 20
    assert (out / "metrics.jsonl").read_text().count("\n") == 2 and (out / "curve.png").is_file()
    capsys.readouterr()
    assert main(["offline", "train", "--resume", str(out), "--seeds", "3"]) == 2
    assert "--seeds cannot be changed when resuming" in capsys.readouterr().err
    assert main(["offline", "train", "--resume", str(out), "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["agent"] == "gcbc"


@pytest.mark.parametrize("args, message", [
    (["offline", "train", "gcbc"], "needs an agent and a dataset"),
    (["offline", "train", "sac", "--dataset", "pointmaze-giant-stitch-v0"], "sac"),
    (["offline", "train", "gcbc", "--dataset", "pointmaze-giant-stitch-v0", "--eval-tasks", "one"], "--eval-tasks"),
    (["offline", "train", "gcbc", "--dataset", "pointmaze-giant-stitch-v0", "--set", "nope=1"], "nope"),
    (["offline", "train", "--resume", "no-such-folder"], "config.json"),
])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(args + ["--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
