"""`train --config FILE`: a YAML/JSON file sets any run option or algorithm field; flags override it;
a run's own config.json can be passed back."""

from __future__ import annotations

import json

import pytest

from longhorizon.cli import main


def dry(argv, capsys) -> dict:
    capsys.readouterr()
    code = main([*argv, "--dry-run"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_yaml_file_sets_run_options_and_algorithm_fields(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("algo: ppo\nenv: CartPole-v1\nseeds: 3\nlearning-rate: 0.001\nhidden: [32, 16]\n"
                    "total_steps: 8192\neval_every: 2\ntarget_return: 450\nenv_arg: [max_steps_in_episode=200]\n")
    plan = dry(["train", "--config", str(path), "--out", str(tmp_path / "r")], capsys)
    assert plan["algo"] == "ppo" and plan["env"] == "CartPole-v1" and plan["seeds"] == 3
    assert plan["config"]["learning_rate"] == 0.001 and plan["config"]["hidden"] == [32, 16]
    assert plan["config"]["total_steps"] == 8192 and plan["num_updates"] == 8192 // (4 * 128)
    assert plan["eval_every"] == 2 and plan["target_return"] == 450.0
    assert plan["env_overrides"] == {"max_steps_in_episode": 200}


def test_flags_override_the_file(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("algo: ppo\nenv: CartPole-v1\nseeds: 3\nlearning_rate: 0.001\nnum_envs: 8\n"
                    "env_overrides: {max_steps_in_episode: 200}\n")
    plan = dry(["train", "pqn", "--config", str(path), "--seeds", "2", "--learning-rate", "0.002",
                "--env-arg", "gravity=9.0", "--out", str(tmp_path / "r")], capsys)
    assert plan["algo"] == "pqn" and plan["seeds"] == 2  # the flags win
    assert plan["config"]["learning_rate"] == 0.002
    assert plan["config"]["num_envs"] == 8  # what the flags leave alone comes from the file
    assert plan["env_overrides"] == {"max_steps_in_episode": 200, "gravity": 9.0}


def test_a_runs_config_json_round_trips(tmp_path, capsys):
    """The config.json a run writes, passed back with --config, resolves to the same run."""
    argv = ["train", "ppo", "--env", "CartPole-v1", "--total-steps", "4096", "--seeds", "2", "--chunks", "4",
            "--num-envs", "8", "--hidden", "32,32", "--eval-every", "2", "--env-arg", "max_steps_in_episode=100"]
    first = dry([*argv, "--out", str(tmp_path / "a")], capsys)
    config_json = {k: v for k, v in first.items() if k not in ("out", "quiet", "wandb")}  # what train writes
    (tmp_path / "config.json").write_text(json.dumps(config_json))
    again = dry(["train", "--config", str(tmp_path / "config.json"), "--out", str(tmp_path / "b")], capsys)
    # config_overrides records which fields were given: here every field, from the file
    drop = ("out", "config_overrides")
    assert {k: v for k, v in again.items() if k not in drop} == {k: v for k, v in first.items() if k not in drop}
    assert again["config_overrides"]["hidden"] == "32,32"


def test_config_json_with_a_derived_value_edited_is_refused(tmp_path, capsys):
    first = dry(["train", "ppo", "--env", "CartPole-v1", "--total-steps", "4096", "--out", str(tmp_path / "a")], capsys)
    first.pop("out")
    first["updates_per_chunk"] += 1  # derived from total_steps, num_envs, num_steps and chunks: not a setting
    (tmp_path / "config.json").write_text(json.dumps(first))
    assert main(["train", "--config", str(tmp_path / "config.json"), "--dry-run"]) == 2
    assert "records updates_per_chunk" in capsys.readouterr().err


@pytest.mark.parametrize("text, needle", [
    ("algo: ppo\nenv: CartPole-v1\nlerning_rate: 0.1\n", "sets 'lerning_rate', which is neither a run option nor a "
                                                         "setting of ppo; did you mean 'learning_rate'?"),
    ("algo: ppo\nenv: CartPole-v1\nseeds: many\n", "sets seeds to 'many', which is not of type int"),
    ("algo: ppo\nenv: CartPole-v1\nresume: runs/x\n", "sets 'resume', which only the command line can give"),
    ("algo: ppo\nenv: [CartPole\n", "is not valid YAML (line"),
    ("- ppo\n- CartPole-v1\n", "must hold a mapping of settings"),
    ("algo: ppo\nenv: CartPole-v1\nray: {workers: 2}\n", "sets ray.workers, which is not a Ray option"),
    ("algo: ppo\nenv: CartPole-v1\ngamma: 1.5\n", "--gamma must lie in [0, 1]"),
])
def test_bad_files_are_usage_errors(tmp_path, capsys, text, needle):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    assert main(["train", "--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.strip().count("\n") == 0 and "Traceback" not in err


def test_missing_file_is_a_usage_error(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "none.yaml"), "--dry-run"]) == 2
    assert "does not exist" in capsys.readouterr().err
