"""TensorBoard events (and W&B offline history) hold exactly the rows of metrics.jsonl (tiny PPO runs)."""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from tbparse import SummaryReader
from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
from tensorboard.util import tensor_util

from longhorizon.cli import main
from longhorizon.runner import checkpoint
from longhorizon.runner.loggers import scalars
from longhorizon.runner.run import RunSpec, train

# 4 envs x 16 steps = 64 steps per update, 6 updates in 3 chunks: rows at 128, 256, 384 env steps.
TINY = {"num_envs": "4", "num_steps": "16", "num_minibatches": "2", "update_epochs": "1", "total_steps": "384",
        "hidden": "16,16"}

# Row key -> tag, written out by hand so a wrong mapping in loggers.py fails here.
EXPECTED_TAGS = {
    "episode_return_mean": "charts/episodic_return", "episode_return_min": "charts/episodic_return_min",
    "episode_return_max": "charts/episodic_return_max", "episode_length_mean": "charts/episodic_length",
    "eval_return_mean": "charts/eval_return",
    "steps_per_second": "charts/SPS", "episodes": "charts/episodes", "chunk": "charts/chunk",
    "wall_seconds": "charts/wall_seconds", "updates": "charts/updates", "loss": "losses/loss",
    "policy_loss": "losses/policy_loss", "value_loss": "losses/value_loss", "entropy": "losses/entropy",
    "old_approx_kl": "losses/old_approx_kl", "approx_kl": "losses/approx_kl", "clipfrac": "losses/clipfrac",
    "explained_variance": "losses/explained_variance", "learning_rate": "charts/learning_rate",
}
PER_SEED = {"episode_return_per_seed": "charts/episodic_return_seed", "eval_return_per_seed": "charts/eval_return_seed"}


def spec(out, **kw):
    return RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(TINY), seeds=2, out=str(out), num_chunks=3,
                   eval_every=2, eval_episodes=2, quiet=True, **kw)


def rows_of(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def expected_points(rows):
    """{tag: [(step, value), ...]} from metrics.jsonl by the hand-written mapping above."""
    points = {}
    for row in rows:
        for key, value in row.items():
            if key in EXPECTED_TAGS and value is not None:
                points.setdefault(EXPECTED_TAGS[key], []).append((row["env_steps"], value))
            elif key in PER_SEED:
                for i, v in enumerate(value):
                    points.setdefault(f"{PER_SEED[key]}{i}", []).append((row["env_steps"], v))
            else:
                assert key in ("time", "env_steps"), f"row key {key} has no expected tag in this test"
    return points


def tensorboard_points(run):
    """{tag: [(step, value, wall_time), ...]} as the TensorBoard server shows the folder (``--load_fast=false``).

    TensorBoard's own loader, all event files of the folder as one run; tbparse reads each event file
    on its own, so it cannot show how a restart marker in a resumed session's file hides the
    interrupted session's later points.
    """
    events = plugin_event_accumulator.EventAccumulator(str(run / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    return {tag: [(e.step, tensor_util.make_ndarray(e.tensor_proto).item(), e.wall_time) for e in events.Tensors(tag)]
            for tag in events.Tags()["tensors"] if events.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"}


def legacy_steps(run, tag):
    """The steps of ``tag`` as TensorBoard's older loader (the one tbparse builds on) shows the folder."""
    events = event_accumulator.EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return [e.step for e in events.Scalars(tag)]


def assert_same_points(expected, got):
    assert set(got) == set(expected)
    for tag, points in expected.items():
        assert [s for s, *_ in got[tag]] == [s for s, _ in points], tag  # same steps, each once
        # Event files store float32.
        np.testing.assert_allclose([v for _, v, *_ in got[tag]], [v for _, v in points], rtol=1e-6, err_msg=tag)


@pytest.mark.slow
def test_events_hold_every_metrics_row_at_env_steps(tmp_path):
    run = tmp_path / "run"
    train(spec(run))
    rows = rows_of(run)
    assert [r["env_steps"] for r in rows] == [128, 256, 384]
    expected = expected_points(rows)
    assert [s for s, _ in expected["charts/eval_return"]] == [256, 384]  # eval after chunk 2 and the last chunk
    got = tensorboard_points(run)
    assert_same_points(expected, got)
    for step, _, wall_time in got["charts/SPS"]:  # events carry the row's wall-clock time
        assert wall_time == pytest.approx(next(r["time"] for r in rows if r["env_steps"] == step), abs=1e-3)

    reader = SummaryReader(str(run / "tensorboard"))
    text = reader.text
    assert list(text.tag) == ["config"]
    config = json.loads((run / "config.json").read_text())
    assert json.loads("\n".join(line[4:] for line in text.value[0].splitlines())) == config
    hparams = dict(zip(reader.hparams.tag, reader.hparams.value))
    assert hparams["num_envs"] == 4 and hparams["learning_rate"] == pytest.approx(2.5e-4) and hparams["algo"] == "ppo"


@pytest.mark.slow
def test_resume_after_a_crash_shows_each_step_once(tmp_path, monkeypatch):
    real_save = checkpoint.save

    def crash_before_saving_chunk_2(directory, chunk, state, meta):
        if chunk == 2:  # the row for 256 steps is logged, its checkpoint never written
            raise RuntimeError("killed")
        return real_save(directory, chunk, state, meta)

    run = tmp_path / "run"
    monkeypatch.setattr(checkpoint, "save", crash_before_saving_chunk_2)
    with pytest.raises(RuntimeError, match="killed"):
        train(spec(run))
    first_session = tensorboard_points(run)
    assert [s for s, *_ in first_session["charts/SPS"]] == [128, 256]
    monkeypatch.setattr(checkpoint, "save", real_save)

    train(spec(run), resume=True)
    rows = rows_of(run)
    assert [r["env_steps"] for r in rows] == [128, 256, 384]
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 2  # one event file per session
    # Each step once, with the resumed session's values at 256 (its timings differ from the crashed one's).
    assert_same_points(expected_points(rows), tensorboard_points(run))
    assert legacy_steps(run, "charts/SPS") == [128, 256, 384]


def test_wandb_without_wandb_installed_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now raises ImportError
    argv = ["train", "ppo", "--env", "CartPole-v1", "--wandb", "demo", "--out", str(tmp_path / "run"), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'longhorizon[wandb]'" in err and err.count("\n") == 0 and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # refused before anything was built or written


def read_wandb_history(path):
    """The ``history`` records of a W&B ``.wandb`` file as dicts.

    The file is a 7-byte header (``:W&B``, magic, version) followed by LevelDB-style log records in
    32 KiB blocks: crc (4 bytes), length (2, little-endian), type (1: full, 2: first, 3: middle,
    4: last), payload; a block tail shorter than a record header is zero padding.
    """
    from wandb.proto import wandb_internal_pb2

    data, block, pos, parts, history = path.read_bytes(), 32768, 7, [], []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        if length == 0 and kind == 0:
            break
        parts.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            if record.WhichOneof("record_type") == "history":
                history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in record.history.item})
    return history


@pytest.mark.slow
def test_wandb_offline_run_logs_the_same_rows(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    train(spec(run, wandb="longhorizon-test"))
    files = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    history = read_wandb_history(files[0])
    rows = rows_of(run)
    assert [h["_step"] for h in history] == [r["env_steps"] for r in rows]
    for row, logged in zip(rows, history):
        want = scalars(row)
        assert {k: v for k, v in logged.items() if not k.startswith("_")} == pytest.approx(want)


# CleanRL's tags (cleanrl/ppo.py and ppo_continuous_action.py; cleanrl/dqn.py), written out by hand: a run of our
# PPO or DQN must write each of them, under that name only.
CLEANRL_TAGS = {
    "ppo": ["charts/episodic_return", "charts/episodic_length", "charts/learning_rate", "losses/value_loss",
            "losses/policy_loss", "losses/entropy", "losses/old_approx_kl", "losses/approx_kl", "losses/clipfrac",
            "losses/explained_variance", "charts/SPS"],
    "dqn": ["charts/episodic_return", "charts/episodic_length", "losses/td_loss", "losses/q_values", "charts/SPS"],
}
OLD_NAMES = ["losses/clip_fraction", "losses/q_mean", "losses/episode_length_sum", "losses/episode_length_mean"]
CLEANRL_RUNS = {  # tiny CartPole runs (episodes of at most 10 steps, so every chunk ends some)
    "ppo": dict(TINY, total_steps="128"),
    "dqn": {"num_envs": "2", "num_steps": "8", "gradient_steps": "2", "batch_size": "8", "buffer_size": "64",
            "learning_starts": "16", "hidden": "16,16", "total_steps": "64"},
}


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_runs_write_cleanrls_tags(algo, tmp_path):
    run = tmp_path / algo
    train(RunSpec(algo=algo, env="CartPole-v1", config_overrides=dict(CLEANRL_RUNS[algo]),
                  env_overrides={"max_steps_in_episode": 10}, seeds=1, out=str(run), num_chunks=2, quiet=True))
    rows = rows_of(run)
    tags = set().union(*(scalars(row) for row in rows[1:]))  # the last chunk: every learner has started
    assert [tag for tag in CLEANRL_TAGS[algo] if tag not in tags] == []
    assert [tag for tag in OLD_NAMES if tag in tags] == []
    lengths = [row["episode_length_mean"] for row in rows]
    assert all(1 <= length <= 10 for length in lengths)  # CartPole capped at 10 steps
    docs = (Path(__file__).parents[2] / "docs" / "logging.md").read_text()
    assert [tag for tag in CLEANRL_TAGS[algo] if f"`{tag}`" not in docs] == []
