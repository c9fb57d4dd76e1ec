"""`longhorizon horizon`: the report, its JSON, and one-sentence usage errors with exit code 2."""

import json

import numpy as np
import pytest

from longhorizon.cli import main
from longhorizon.tabular.mdp import TabularMDP, save_npz

REQUIRED = {"num_states", "num_actions", "horizon", "min_k", "epw", "effective_horizon_simple",
            "effective_horizon_tight", "optimal_return", "random_return"}


def _run(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_report_and_json_for_the_bridge_fixture(key_corridor_path, tmp_path, capsys):
    out = tmp_path / "report.json"
    code, stdout, _ = _run(["horizon", str(key_corridor_path), "--no-tight", "--json", str(out)], capsys)
    assert code == 0
    assert "min k" in stdout and "effective planning window" in stdout and "PPO/DQN" in stdout
    report = json.loads(out.read_text())
    assert REQUIRED <= set(report)
    assert (report["num_states"], report["num_actions"], report["horizon"]) == (168, 6, 100)
    assert (report["min_k"], report["epw"], report["effective_horizon_simple"]) == (1, 15, 16.0)
    assert report["effective_horizon_tight"] is None  # --no-tight
    assert report["optimal_return"] == 1.0


def test_sticky_report(key_corridor_path, tmp_path, capsys):
    out = tmp_path / "sticky.json"
    code, _, _ = _run(["horizon", str(key_corridor_path), "--sticky", "0.25", "--json", str(out), "-q"], capsys)
    assert code == 0
    report = json.loads(out.read_text())
    assert report["num_states"] == 967 and report["num_states_tabular"] == 962
    assert report["random_return"] == pytest.approx(0.0010069, abs=5e-8)
    assert report["optimal_return"] == pytest.approx(1.0)
    assert (report["min_k"], report["epw"]) == (1, 16)
    assert report["effective_horizon_simple"] is None and report["effective_horizon_tight"] is None


def test_tight_bound_and_environment_ids(tmp_path, capsys):
    trans = np.array([[1, 3], [2, 3], [-1, 3], [3, 3]])
    rew = np.zeros((4, 2))
    rew[2, 0] = 1.0
    path = tmp_path / "corridor.npz"
    save_npz(TabularMDP.deterministic(trans, rew, horizon=3), path)
    out = tmp_path / "corridor.json"
    assert _run(["horizon", str(path), "--json", str(out), "-q"], capsys)[0] == 0
    report = json.loads(out.read_text())
    assert report["horizon"] == 3 and report["effective_horizon_tight"] is not None
    assert 1.0 <= report["effective_horizon_tight"] <= report["effective_horizon_simple"] + 1e-9

    out = tmp_path / "minigrid.json"
    code, _, _ = _run(["horizon", "MiniGrid-KeyCorridorS3R1-v0", "--no-tight", "--json", str(out), "-q"], capsys)
    assert code == 0
    report = json.loads(out.read_text())
    assert (report["num_states"], report["min_k"], report["optimal_return"]) == (156, 1, 1.0)


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["horizon", "missing/consolidated.npz"], "does not exist"),
        (["horizon", "NoSuchEnv-v0"], "unknown environment"),
        (["horizon", "MiniGrid-KeyCorridorS3R1-v0", "--max-states", "10"], "raise --max-states"),
        (["horizon", "MiniGrid-KeyCorridorS3R1-v0", "--sticky", "1.5"], "--sticky"),
        (["horizon", "MiniGrid-KeyCorridorS3R1-v0", "--horizon", "0"], "--horizon"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, phrase, capsys):
    code, _, err = _run(args, capsys)
    assert code == 2
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and phrase in lines[0] and "Traceback" not in err


def test_malformed_npz_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    np.savez(bad, transitions=np.array([[0, 7]]), rewards=np.array([[0.0, np.nan]]))
    code, _, err = _run(["horizon", str(bad)], capsys)
    assert code == 2 and "malformed" in err and "Traceback" not in err
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(b"PK\x03\x04garbage")
    code, _, err = _run(["horizon", str(truncated)], capsys)
    assert code == 2 and "not a readable .npz archive" in err
