"""The results folder's readers."""

import json

from longhorizon.runner.results import ResultsDir, read_metrics


def test_read_metrics_skips_a_torn_last_line_and_reads_nothing_without_a_file(tmp_path):
    assert read_metrics(tmp_path) == []
    rows = [{"chunk": 1, "env_steps": 64}, {"chunk": 2, "env_steps": 128}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"chunk": 3, "env_st')
    assert read_metrics(tmp_path) == rows
    assert ResultsDir(tmp_path).read_metrics() == rows
