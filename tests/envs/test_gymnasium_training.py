"""PPO trains end to end on a gymnasium environment (results folder, two seeds as two env groups),
stops, resumes from its checkpoint through the CLI, and `eval --render` draws an episode to a GIF;
a gymnax environment object trains from Python through RunSpec."""

import importlib.util
import json

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from gymnax.environments.classic_control import CartPole  # noqa: E402

from longhorizon.cli import main  # noqa: E402
from longhorizon.runner.replay import load_run  # noqa: E402
from longhorizon.errors import UsageError  # noqa: E402
from longhorizon.runner.run import RunSpec, spec_from_results, train  # noqa: E402

TINY = {"total_steps": "128", "num_envs": "2", "num_steps": "16", "num_minibatches": "2", "update_epochs": "1"}


@pytest.mark.slow
def test_ppo_on_gymnasium_cartpole_stops_resumes_through_the_cli_and_renders(tmp_path, monkeypatch):
    monkeypatch.setenv("LONGHORIZON_COMPILE_CACHE", "0")  # keep the test session's compilation cache settings
    out = tmp_path / "run"
    spec = RunSpec(algo="ppo", env="gymnasium:CartPole-v1", seeds=2, num_chunks=2, out=str(out), quiet=True,
                   config_overrides=TINY)
    first = train(spec, max_chunks=1)
    assert first["status"] == "stopped" and first["chunks_done"] == 1
    from longhorizon.envs import make
    from longhorizon.envs.gymnasium import GROUPS

    spec_key = make("gymnasium:CartPole-v1").spec_key  # the finished run released its vector environments
    assert not [key for key in GROUPS._pools if key[0] == spec_key]

    # Resume through the command line: the saved config picks the host engine again.
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    config = json.loads((out / "config.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert config["env"] == "gymnasium:CartPole-v1" and config["engine"] == "host"
    assert summary["status"] == "completed" and summary["chunks_done"] == 2 and summary["total_env_steps"] == 128
    assert len(summary["final_eval_return"]) == 2  # one greedy evaluation per seed (env group)
    assert all(1 <= r <= 500 for r in summary["final_eval_return"])  # CartPole: 1 per step, at most 500 steps
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["chunk"] for r in rows] == [1, 2] and rows[-1]["env_steps"] == 128
    _, state = load_run(out)  # 4 updates in all: the resumed chunk counted on from the checkpoint's 2
    np.testing.assert_array_equal(state.update_step, [4, 4])

    gif = tmp_path / "episode.gif"
    assert main(["eval", str(out), "--episodes", "2", "--render", str(gif)]) == 0
    from PIL import Image

    image = Image.open(gif)
    assert image.size == (600, 400) and image.n_frames > 1

    mp4 = tmp_path / "episode.mp4"
    code = main(["eval", str(out), "--episodes", "1", "--render", str(mp4)])
    if importlib.util.find_spec("imageio_ffmpeg") is None:  # the `video` extra is not installed: refused up front
        assert code == 2 and not mp4.exists()
    else:
        assert code == 0 and mp4.stat().st_size > 1000


@pytest.mark.slow
def test_a_gymnax_environment_object_trains_from_python(tmp_path):
    env = CartPole()
    spec = RunSpec(algo="ppo", env=env, env_params=env.default_params.replace(max_steps_in_episode=40),
                   num_chunks=1, out=str(tmp_path / "obj"), quiet=True,
                   config_overrides={**TINY, "total_steps": "64"})
    summary = train(spec)
    assert summary["status"] == "completed" and summary["env"] == "CartPole-v1"
    # The params given reach the environment: no evaluation episode outlasts the 40-step limit.
    assert all(1 <= r <= 40 for r in summary["final_eval_return"])
    assert np.isfinite(summary["final_eval_return_mean"])
    # config.json marks the object, so the command line refuses to rebuild it (instead of the registry's CartPole).
    assert json.loads((tmp_path / "obj" / "config.json").read_text())["env"] == "object:CartPole-v1"
    with pytest.raises(UsageError, match="was a Python object given to RunSpec"):
        train(spec_from_results(tmp_path / "obj"), resume=True)
    assert train(spec, resume=True)["status"] == "completed"  # from Python, with the object, it resumes


@pytest.mark.slow
@pytest.mark.parametrize("algo, overrides", [
    ("pqn", {"total_steps": "256", "num_envs": "4", "num_steps": "32", "num_minibatches": "2", "update_epochs": "1"}),
    ("dqn", {"total_steps": "256", "num_envs": "2", "num_steps": "32", "learning_starts": "64", "buffer_size": "512",
             "gradient_steps": "2", "batch_size": "16"}),
    ("sqirl", {"total_steps": "1000", "num_envs": "2", "num_minibatches": "2", "update_epochs": "1"}),
])
def test_the_value_based_algorithms_train_on_gymnasium_unchanged(tmp_path, algo, overrides):
    """PQN, DQN and SQIRL (its time feature wrapping the env group) run their own modules on a
    gymnasium environment; every step they were asked for is taken and the greedy evaluation is a
    CartPole return (1 per step, at most 500)."""
    summary = train(RunSpec(algo=algo, env="gymnasium:CartPole-v1", num_chunks=1, out=str(tmp_path / algo), quiet=True,
                            config_overrides=overrides))
    assert summary["status"] == "completed" and summary["total_env_steps"] == int(overrides["total_steps"])
    assert all(1 <= r <= 500 for r in summary["final_eval_return"])
