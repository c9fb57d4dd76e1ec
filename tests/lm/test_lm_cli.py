"""`longhorizon lm sft|rl|eval` end to end on a tiny model (seconds of compute)."""

import json

import pytest
import typer
from typer.testing import CliRunner

from longhorizon.lm.cli import register

TINY = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2"]


def _app():
    app = typer.Typer()

    @app.callback()
    def main():  # a group, so "lm" is a sub-command as in the real CLI
        pass

    register(app)
    return app


@pytest.mark.slow
def test_sft_rl_eval_write_results_folders(tmp_path):
    app, runner = _app(), CliRunner()
    base, tuned = tmp_path / "base", tmp_path / "rl"
    r = runner.invoke(app, ["lm", "sft", "--out", str(base), "--steps", "4", "--batch-size", "8", "--horizons", "1",
                            "--eval-horizons", "1-2", "--eval-problems", "8", *TINY])
    assert r.exit_code == 0, r.output
    for name in ("config.json", "metrics.jsonl", "summary.json", "curve.png"):
        assert (base / name).exists(), name
    r = runner.invoke(app, ["lm", "rl", "--init", str(base), "--out", str(tuned), "--steps", "2", "--horizons", "1-2",
                            "--curriculum", "--prompts-per-step", "2", "--num-generations", "4", "--beta", "0.04",
                            "--eval-horizons", "1-2", "--eval-problems", "4", "--eval-every", "1"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in (tuned / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2] and "eval_accuracy" in rows[0]  # step 0: the base
    assert [row["horizon"] for row in rows[1:]] == [1, 2]  # one stage per horizon
    summary = json.loads((tuned / "summary.json").read_text())
    assert set(summary["eval"]["by_horizon"]) == {"1", "2"} and summary["training_tokens"] > 0
    scaler = tmp_path / "scaler"
    r = runner.invoke(app, ["lm", "rl", "--init", str(base), "--out", str(scaler), "--steps", "2", "--horizons", "1-2",
                            "--scaler-target", "0.5", "--prompts-per-step", "2", "--num-generations", "4", "--beta", "0.04",
                            "--eval-horizons", "1-2", "--eval-problems", "4"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in (scaler / "metrics.jsonl").read_text().splitlines()]
    assert all("difficulty" in row for row in rows[1:])
    r = runner.invoke(app, ["lm", "eval", "--init", str(tuned), "--horizons", "1-2", "--problems", "4"])
    assert r.exit_code == 0, r.output
    assert "accuracy" in r.output


def test_bad_input_is_a_usage_error(tmp_path):
    from longhorizon.errors import UsageError

    r = CliRunner().invoke(_app(), ["lm", "rl", "--init", str(tmp_path), "--out", str(tmp_path / "x")])
    assert isinstance(r.exception, UsageError) and "config.json" in str(r.exception)
    r = CliRunner().invoke(_app(), ["lm", "sft", "--out", str(tmp_path / "y"), "--horizons", "x-y", *TINY])
    assert isinstance(r.exception, UsageError)


def test_curriculum_gates_that_cannot_act_are_refused(tmp_path):
    """--advance-at must say what it compares, and gate options need --curriculum (before any policy is read)."""
    from longhorizon.errors import UsageError

    rl = ["lm", "rl", "--init", str(tmp_path), "--out", str(tmp_path / "x")]
    for extra, message in ((["--curriculum", "--advance-at", "0.5"], "--advance-on"),
                           (["--curriculum", "--advance-on", "train_reward"], "--advance-at"),
                           (["--advance-on", "train_reward", "--advance-at", "0.5"], "--curriculum"),
                           (["--curriculum", "--gate-window", "3"], "--gate-window")):
        r = CliRunner().invoke(_app(), [*rl, *extra])
        assert isinstance(r.exception, UsageError) and message in str(r.exception), (extra, r.exception)


def test_rollout_worker_options_that_cannot_act_are_refused(tmp_path):
    from longhorizon.errors import UsageError

    rl = ["lm", "rl", "--init", str(tmp_path), "--out", str(tmp_path / "x")]
    for extra, message in ((["--mode", "async"], "--mode applies to Ray rollout workers; add --actors N"),
                           (["--actors", "2", "--max-staleness", "2"], "--max-staleness bounds asynchronous batches"),
                           (["--rollout-is-cap", "3"], "add one of them or drop it"),
                           (["--actors", "0", "--mode", "async"], "add --actors N")):
        r = CliRunner().invoke(_app(), [*rl, *extra])
        assert isinstance(r.exception, UsageError) and message in str(r.exception), (extra, r.exception)
