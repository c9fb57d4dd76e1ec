"""CLI: usage errors exit 2 with one sentence and no traceback, before anything compiles."""

import json
import subprocess
import sys

import pytest

from longhorizon.cli import main


@pytest.mark.parametrize("argv, needle", [
    (["train", "ppo", "--env", "CartPol-v1"], "did you mean CartPole-v1"),
    (["train", "ppx", "--env", "CartPole-v1"], "unknown algorithm 'ppx'"),
    (["train", "ppo", "--env", "CartPole-v1", "--learning-rate", "-0.1"], "--learning-rate must be positive"),
    (["train", "ppo", "--env", "CartPole-v1", "--num-minibatches", "7"], "does not divide num_envs x num_steps"),
    (["train", "ppo", "--env", "CartPole-v1", "--lerning-rate", "3e-4"], "did you mean --learning-rate"),
    (["train", "ppo", "--env", "CartPole-v1", "--num-envs", "many"], "expects a value of type int"),
    (["train", "ppo", "--env", "CartPole-v1", "--gamma", "1.5"], "--gamma must lie in [0, 1]"),
    (["train", "ppo", "--env", "CartPole-v1", "--activation", "sigmoidal"], "--activation must be one of"),
    (["train", "ppo"], "missing --env"),
    (["train", "ppo", "--env", "CartPole-v1", "--env-arg", "horizon"], "--env-arg 'horizon' is not KEY=VALUE"),
    (["train", "ppo", "--env", "CartPole-v1", "--env-arg", "wind=3"], "'wind' is not a setting of environment"),
    (["train", "sqirl", "--env", "no/such/mdp.npz", "--env-arg", "horizon=10"], "does not exist"),
    (["eval", "/nonexistent/run"], "not a longhorizon results folder"),
    (["plot", "/nonexistent/run"], "has no metrics.jsonl"),
])
def test_usage_errors_exit_2_with_one_sentence(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert err.count("\n") == 0 and "Traceback" not in err


@pytest.mark.parametrize("path, needles", [
    ("json:dumps", ("'json:dumps'", "TypeError", "factory")),  # importable, but calling it raises
    ("os:getcwd", ("'os:getcwd'", "returned a str", "not a gymnax-style environment")),  # returns a non-environment
])
def test_an_import_path_whose_factory_fails_is_one_sentence(path, needles, capsys):
    assert main(["train", "ppo", "--env", path, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and err.count("\n") == 0 and "Traceback" not in err
    for needle in needles:
        assert needle in err


@pytest.mark.slow
def test_console_script_exit_code_and_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "longhorizon.cli", "train", "ppo", "--env", "Breakout"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Breakout-MinAtar" in proc.stderr and "Traceback" not in proc.stderr


def test_envs_lists_every_gymnax_environment(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    for env_id in ("CartPole-v1", "Breakout-MinAtar", "DeepSea-bsuite", "MemoryChain-bsuite", "FourRooms-misc"):
        assert env_id in out
    assert "Discrete(2)" in out


@pytest.mark.slow
def test_train_eval_plot_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "ppo", "--env", "CartPole-v1", "--total-steps", "512", "--num-envs", "4", "--num-steps",
            "16", "--num-minibatches", "2", "--update-epochs", "1", "--hidden", "16,16", "--chunks", "2",
            "--out", str(out), "--quiet"]
    assert main([*argv, "--dry-run"]) == 0 and not out.exists()
    plan = json.loads(capsys.readouterr().out)
    code = main(argv)
    assert code == 0 and (out / "curve.png").exists()
    # the dry run printed the config.json that the run then wrote
    assert plan.pop("out") == str(out) and plan.pop("quiet") is True and plan.pop("wandb") is None
    assert plan == json.loads((out / "config.json").read_text())
    assert main(["eval", str(out), "--episodes", "3", "--render", str(tmp_path / "episode.gif")]) == 0
    assert "mean return over 3 episodes" in capsys.readouterr().out
    assert (tmp_path / "episode.gif").read_bytes()[:3] == b"GIF"
    assert main(["plot", str(out), str(out), "--out", str(tmp_path / "both.png")]) == 0
    assert (tmp_path / "both.png").stat().st_size > 1000
    # resuming rebuilds the same run from the folder (with every field given, as config_overrides records)
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--dry-run"]) == 0
    resumed = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in resumed.items() if k not in ("out", "quiet", "wandb", "config_overrides")} == \
        {k: v for k, v in plan.items() if k != "config_overrides"}
    assert main(["eval", str(out), "--episodes", "3", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 3
    # a new run may not take the folder over; the refusal comes before anything compiles
    assert main(["train", "ppo", "--env", "CartPole-v1", "--out", str(out), "--dry-run"]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_dry_run_compiles_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from longhorizon.engine.fused import FusedEngine

    def refuse(*args, **kwargs):
        raise AssertionError("a dry run must not initialise, compile or run the engine")

    for name in ("init", "compile", "run_chunk"):
        monkeypatch.setattr(FusedEngine, name, refuse)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "dqn", "--env", "CartPole-v1", "--seeds", "3", "--eval-every", "5", "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["algo"] == "dqn" and plan["seeds"] == 3 and plan["eval_every"] == 5
    assert plan["out"].startswith("runs/dqn-CartPole-v1-")
    assert list(tmp_path.iterdir()) == []  # not even the default results folder
    assert main(["train", "--resume", str(tmp_path / "none"), "--dry-run"]) == 2
    assert "not a longhorizon results folder" in capsys.readouterr().err
