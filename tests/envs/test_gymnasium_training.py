"""PPO trains end to end on a gymnasium environment through the CLI (results folder, two seeds as
two env groups), resumes from its checkpoint, and `eval --render` draws an episode to a GIF; a
gymnax environment object trains from Python through RunSpec."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from gymnax.environments.classic_control import CartPole  # noqa: E402

from longhorizon.runner.replay import load_run  # noqa: E402
from longhorizon.runner.run import RunSpec, spec_from_results, train  # noqa: E402

TINY = ["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1"]


def _cli(*args):
    env = {**os.environ, "LONGHORIZON_COMPILE_CACHE": "0"}
    return subprocess.run([sys.executable, "-m", "longhorizon.cli", *args], capture_output=True, text=True, env=env)


@pytest.mark.slow
def test_ppo_on_gymnasium_cartpole_through_the_cli_then_resume_and_render(tmp_path):
    out = tmp_path / "run"
    proc = _cli("train", "ppo", "--env", "gymnasium:CartPole-v1", "--seeds", "2", "--total-steps", "128",
                "--chunks", "2", "--out", str(out), "--quiet", *TINY)
    assert proc.returncode == 0, proc.stderr
    config = json.loads((out / "config.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert config["env"] == "gymnasium:CartPole-v1"
    assert summary["status"] == "completed" and summary["total_env_steps"] == 128
    assert len(summary["final_eval_return"]) == 2  # one greedy evaluation per seed
    assert all(1 <= r <= 500 for r in summary["final_eval_return"])  # CartPole: 1 per step, at most 500 steps
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["chunk"] for r in rows] == [1, 2] and rows[-1]["env_steps"] == 128

    # Resume: a run stopped after its first chunk continues from that checkpoint to the end.
    part = tmp_path / "part"
    spec = RunSpec(algo="ppo", env="gymnasium:CartPole-v1", seeds=2, num_chunks=2, out=str(part), quiet=True,
                   config_overrides={"total_steps": "128", "num_envs": "2", "num_steps": "16",
                                     "num_minibatches": "2", "update_epochs": "1"})
    first = train(spec, max_chunks=1)
    assert first["status"] == "stopped" and first["chunks_done"] == 1
    resumed = train(spec_from_results(part, quiet=True), resume=True)
    assert resumed["status"] == "completed" and resumed["chunks_done"] == 2 and resumed["total_env_steps"] == 128
    rows = [json.loads(line) for line in (part / "metrics.jsonl").read_text().splitlines()]
    assert [r["chunk"] for r in rows] == [1, 2]
    _, state = load_run(part)  # 4 updates in all: the resumed chunk counted on from the checkpoint's 2
    np.testing.assert_array_equal(state.update_step, [4, 4])

    gif = tmp_path / "episode.gif"
    proc = _cli("eval", str(out), "--episodes", "2", "--render", str(gif))
    assert proc.returncode == 0, proc.stderr
    from PIL import Image

    image = Image.open(gif)
    assert image.size == (600, 400) and image.n_frames > 1


@pytest.mark.slow
def test_a_gymnax_environment_object_trains_from_python(tmp_path):
    env = CartPole()
    spec = RunSpec(algo="ppo", env=env, env_params=env.default_params.replace(max_steps_in_episode=40),
                   num_chunks=1, out=str(tmp_path / "obj"), quiet=True,
                   config_overrides={"total_steps": "64", "num_envs": "2", "num_steps": "16",
                                     "num_minibatches": "2", "update_epochs": "1"})
    summary = train(spec)
    assert summary["status"] == "completed" and summary["env"] == "CartPole-v1"
    # The params given reach the environment: no evaluation episode outlasts the 40-step limit.
    assert all(1 <= r <= 40 for r in summary["final_eval_return"])
    assert np.isfinite(summary["final_eval_return_mean"])
