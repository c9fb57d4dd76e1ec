"""The results folder's readers."""

import json

import pytest

from longhorizon.runner.results import ResultsDir, read_metrics


def test_read_metrics_skips_a_torn_last_line_and_reads_nothing_without_a_file(tmp_path):
    assert read_metrics(tmp_path) == []
    rows = [{"chunk": 1, "env_steps": 64}, {"chunk": 2, "env_steps": 128}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"chunk": 3, "env_st')
    assert read_metrics(tmp_path) == rows
    assert ResultsDir(tmp_path).read_metrics() == rows


def test_finished_run_is_read_back_only_with_the_same_settings(tmp_path):
    from longhorizon.errors import UsageError
    from longhorizon.runner.results import finished_run, write_json_atomic

    run = tmp_path / "run"
    assert finished_run(run, {"seeds": 2}) is None  # nothing there yet
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"chunk": 1}\n')
    assert finished_run(run, {"seeds": 2}) is None and not run.exists()  # interrupted: removed, to start afresh
    write_json_atomic(run / "config.json", {"seeds": 2, "config_overrides": {"hidden": "64,64"}, "widths": [64, 64]})
    write_json_atomic(run / "summary.json", {"status": "finished"})
    settings = {"seeds": 2, "config_overrides": {"hidden": "64,64"}, "widths": (64, 64)}
    assert finished_run(run, settings) == {"status": "finished"}
    with pytest.raises(UsageError, match=r"other settings \(seeds\)"):
        finished_run(run, {**settings, "seeds": 3})
    assert (run / "summary.json").exists()  # a finished run is never removed
