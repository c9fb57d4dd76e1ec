"""Runner: results folder, exact resume, Ctrl-C and NaN handling (tiny PPO runs)."""

import json
import signal

import jax
import numpy as np
import pytest
from flax import serialization

from longhorizon.engine.fused import FusedEngine
from longhorizon.errors import TrainingDiverged, UsageError
from longhorizon.runner import checkpoint
from longhorizon.runner.evaluate import evaluate
from longhorizon.runner.interrupts import Interrupted
from longhorizon.runner.replay import load_run
from longhorizon.runner.run import RunSpec, train

TINY = {"num_envs": "4", "num_steps": "16", "num_minibatches": "2", "update_epochs": "1", "total_steps": "512",
        "hidden": "16,16"}


def spec(out, **kw):
    return RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(TINY), seeds=2, out=str(out), num_chunks=4,
                   eval_episodes=10, quiet=True, **kw)


def _weights(run_dir):
    meta = checkpoint.latest_meta(run_dir / "checkpoints")
    return serialization.msgpack_restore((run_dir / "checkpoints" / meta["file"]).read_bytes())["agent"]["weights"]


def test_results_folder_and_summary(tmp_path):
    summary = train(spec(tmp_path / "run"))
    run = tmp_path / "run"
    for name in ("config.json", "metrics.jsonl", "summary.json", "curve.png", "checkpoints/latest.json"):
        assert (run / name).exists(), name
    saved = json.loads((run / "summary.json").read_text())
    for key in ("algo", "env", "seeds", "total_env_steps", "final_eval_return", "steps_per_second",
                "compile_seconds", "wall_seconds"):
        assert key in saved
    assert saved["total_env_steps"] == 512 and len(saved["final_eval_return"]) == 2
    # The reported returns are the final checkpoint's greedy policy evaluated on 10 episodes (CartPole pays
    # +1 per step, so each is a mean of 10 whole returns) with the last chunk's evaluation key.
    assert all(1 <= r <= 500 and (10 * r) == pytest.approx(round(10 * r), abs=1e-3) for r in saved["final_eval_return"])
    loaded, state = load_run(run)
    again = evaluate(loaded.algo, state, loaded.env, jax.random.fold_in(jax.random.PRNGKey(0 + 10_000), 4), 10)
    assert again == saved["final_eval_return"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["env_steps"] for r in rows] == [128, 256, 384, 512]
    # one final evaluation, recorded everywhere: without --eval-every only the last row carries it
    assert [("eval_return_mean" in r) for r in rows] == [False, False, False, True]
    assert rows[-1]["eval_return_per_seed"] == saved["final_eval_return"]
    assert rows[-1]["eval_return_mean"] == pytest.approx(saved["final_eval_return_mean"])
    assert {"episode_return_mean", "episode_return_min", "episode_return_max", "loss", "steps_per_second",
            "wall_seconds"} <= set(rows[-1])
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["num_envs"] == 4 and config["config"]["learning_rate"] == 2.5e-4  # fully resolved
    assert summary["status"] == "completed"
    with pytest.raises(UsageError, match="already holds a run"):
        train(spec(run))


@pytest.mark.slow
def test_resume_ends_with_the_same_parameters(tmp_path):
    train(spec(tmp_path / "straight"))
    train(spec(tmp_path / "split"), max_chunks=2)
    assert checkpoint.latest_meta(tmp_path / "split" / "checkpoints")["chunk"] == 2
    summary = train(spec(tmp_path / "split"), resume=True)
    assert summary["total_env_steps"] == 512
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "split")
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
    rows = (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 4  # no duplicated rows after resuming


@pytest.mark.slow
def test_ctrl_c_saves_the_last_finished_chunk(tmp_path, monkeypatch):
    real = FusedEngine.run_chunk
    calls = {"n": 0}

    def interrupt_third(self, state, num_updates=None):
        calls["n"] += 1
        if calls["n"] == 3:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C while chunk 3 runs: it finishes and is saved
        return real(self, state, num_updates)

    monkeypatch.setattr(FusedEngine, "run_chunk", interrupt_third)
    with pytest.raises(Interrupted, match=r"chunk 3 of 4 is saved") as stop:
        train(spec(tmp_path / "run"))
    assert f"longhorizon train --resume {tmp_path / 'run'}" in str(stop.value)
    assert checkpoint.latest_meta(tmp_path / "run" / "checkpoints")["chunk"] == 3
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "interrupted"
    monkeypatch.setattr(FusedEngine, "run_chunk", real)
    assert train(spec(tmp_path / "run"), resume=True)["status"] == "completed"


def test_nan_stops_with_the_chunk_named_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    real = FusedEngine.run_chunk
    calls = {"n": 0}

    def poison_third(self, state, num_updates=None):
        calls["n"] += 1
        new_state, metrics = real(self, state, num_updates)
        if calls["n"] == 3:
            metrics = {**metrics, "finite": np.array([True, False])}
        return new_state, metrics

    monkeypatch.setattr(FusedEngine, "run_chunk", poison_third)
    with pytest.raises(TrainingDiverged, match="chunk 3"):
        train(spec(tmp_path / "run"))
    assert checkpoint.latest_meta(tmp_path / "run" / "checkpoints")["chunk"] == 2


@pytest.mark.slow
def test_engine_flags_real_nan_in_parameters(tmp_path):
    from longhorizon.runner.run import Run

    run = Run(RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(TINY), seeds=1, out=str(tmp_path / "r"),
                      num_chunks=4, quiet=True))
    state = run.engine.init(0)
    poisoned = jax.tree.map(lambda w: w * np.nan, state.agent.weights)
    _, metrics = run.engine.run_chunk(state.replace(agent=state.agent.replace(weights=poisoned)))
    assert not bool(np.all(metrics["finite"]))
