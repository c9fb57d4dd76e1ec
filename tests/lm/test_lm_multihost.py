"""Multi-process LM runs (longhorizon.lm.processes): two processes of two virtual CPU devices each, joined by
jax.distributed over loopback, train as one process of four devices does; a launch that is partial, malformed or
cannot reach its coordinator stops with one sentence. The processes run from tests/lm/multihost_check.py, which
moves itself into a network namespace with only ``lo`` (root needed, as for the Ray tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.processes import Launch

CHECK = Path(__file__).with_name("multihost_check.py")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a private network namespace needs root")


def _check(tmp_path, mode: str) -> dict:
    done = subprocess.run([sys.executable, str(CHECK), str(tmp_path), mode], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_root
@pytest.mark.slow
def test_two_processes_train_as_one_process_of_four_devices(tmp_path):
    """`lm rl --mesh fsdp=4` for two steps: 2 processes x 2 devices against 1 process x 4 devices: the same metrics
    (float32 summation order: 1e-5 relative) and parameters (1e-7 at lr 1e-6); process 1 keeps its own results
    folder under OUT/process-1 (lock, metrics, no checkpoints: those are orbax's multi-host ones in OUT), and the
    launch options are not recorded as settings of the run."""
    report = _check(tmp_path, "equal")
    assert report["codes"] == [0, 0], report
    for key, value in report["one"].items():
        assert report["multi"][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
        assert report["process_1_metrics"][key] == report["multi"][key], key
    assert report["max_param_difference"] < 1e-7
    assert "checkpoints" not in report["process_1_folder"] and "metrics.jsonl" in report["process_1_folder"]
    assert report["config_has_launch"] is False


@needs_root
@pytest.mark.slow
def test_a_ctrl_c_on_one_process_stops_all_and_the_run_resumes_on_one_process(tmp_path):
    """Two processes, Ctrl-C on process 1 only after step 1 of 2: both stop at that step (exit 130, one metrics
    row) and save it; one process of 4 devices resumes it and ends where two steps straight end (parameters within
    1e-7 at lr 1e-6, metrics to 1e-5)."""
    report = _check(tmp_path, "resume")
    assert report["codes"] == [130, 130] and report["rows_after_stop"] == 1, report
    assert report["resumed_code"] == 0, report
    for key, value in report["straight"].items():
        assert report["resumed"][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    assert report["max_param_difference"] < 1e-7


@needs_root
def test_unreachable_coordinator_stops_with_one_sentence(tmp_path):
    """Process 1 of 2 whose coordinator never answers exits with code 2 after the join timeout (5 s here), saying
    what to start; no hang, no C++ abort."""
    report = _check(tmp_path, "unreachable")
    assert report["code"] == 2, report
    assert report["seconds"] < 60
    assert "could not reach the others through the coordinator" in report["stderr"]
    assert "Traceback" not in report["stderr"] and "Check failure" not in report["stderr"]


@pytest.mark.parametrize("options, words", [
    ({"coordinator_address": "127.0.0.1:1234", "num_processes": 2}, "--process-id is missing"),
    ({"coordinator_address": "localhost", "num_processes": 2, "process_id": 0}, "is not HOST:PORT"),
    ({"coordinator_address": "h:1", "num_processes": 2, "process_id": 2}, "outside 0..1"),
    ({"coordinator_address": "h:1", "num_processes": 2, "process_id": -1}, "outside 0..1"),
])
def test_a_partial_or_malformed_launch_is_refused(options, words):
    with pytest.raises(UsageError, match=words):
        Launch.of(options).check()


def test_one_process_needs_no_launch(monkeypatch):
    Launch.of({}).check()  # nothing given: a one-process run
    monkeypatch.setenv("LONGHORIZON_JOIN_TIMEOUT_S", "soon")
    with pytest.raises(UsageError, match="LONGHORIZON_JOIN_TIMEOUT_S=soon"):
        Launch.of({})


@pytest.mark.parametrize("command", [["rl"], ["agent", "--env", "search"]])
def test_launch_options_reach_the_command_line(tmp_path, capsys, command):
    """A partial launch given to `lm rl` or `lm agent` is refused before anything loads (exit 2, one sentence)."""
    from longhorizon.cli import main

    extra = ["--dataset", "examples/lm/chains.jsonl", "--reward-funcs", "examples/lm/rewards.py:correct_answer"] \
        if command == ["rl"] else []
    code = main(["lm", *command, "--model", "tiny-random", *extra, "--num-processes", "2", "--out", str(tmp_path / "r")])
    assert code == 2
    assert "--coordinator-address, --process-id is missing" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
