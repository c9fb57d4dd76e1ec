"""Checkpoint checksums: a damaged newest checkpoint is passed over for the newest intact one, named in one
line; none intact is a one-sentence UsageError; a resumed run continues exactly from the intact chunk."""

import json

import jax
import numpy as np
import pytest
from flax import serialization

from longhorizon.errors import UsageError
from longhorizon.runner import checkpoint
from longhorizon.runner.run import RunSpec, train

TINY = {"num_envs": "4", "num_steps": "16", "num_minibatches": "2", "update_epochs": "1", "total_steps": "512",
        "hidden": "16,16"}  # as in test_runner.py, so the compiled programs are shared through the cache


def _state(seed: int) -> dict:
    return {"w": np.random.default_rng(seed).normal(size=4096).astype(np.float32), "step": np.int32(seed)}


def _damage(path, how: str) -> None:
    """Damage ``path`` in place: 2 KB zeroed or 4 KB of 0xFF in the middle (same size), or cut in half."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    if how == "zeroed":
        data[middle - 1024:middle + 1024] = bytes(2048)
    elif how == "ff":
        data[middle - 2048:middle + 2048] = b"\xff" * 4096
    else:
        data = data[:middle]
    path.write_bytes(bytes(data))


def _save_two(directory) -> None:
    for chunk in (1, 2):
        checkpoint.save(directory, chunk, _state(chunk), {"env_steps": 100 * chunk})


@pytest.mark.parametrize("how", ["zeroed", "ff", "truncated"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_older_one(tmp_path, capsys, how):
    _save_two(tmp_path)
    newest = tmp_path / "chunk_000002.msgpack"
    size = newest.stat().st_size
    _damage(newest, how)
    assert (newest.stat().st_size == size) == (how != "truncated")
    state, meta = checkpoint.restore(tmp_path, _state(0))
    np.testing.assert_array_equal(state["w"], _state(1)["w"])
    assert meta["chunk"] == 1 and meta["env_steps"] == 100  # the caller resumes from the chunk it got
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "chunk_000002.msgpack" in lines[0] and "chunk_000001.msgpack" in lines[0]
    assert checkpoint.latest_meta(tmp_path)["chunk"] == 2  # the index still says what was saved last


def test_every_checkpoint_damaged_is_a_usage_error_naming_them(tmp_path):
    _save_two(tmp_path)
    _damage(tmp_path / "chunk_000002.msgpack", "zeroed")
    _damage(tmp_path / "chunk_000001.msgpack", "ff")
    with pytest.raises(UsageError, match=r"chunk_000002\.msgpack, chunk_000001\.msgpack.*new folder"):
        checkpoint.restore(tmp_path, _state(0))


def test_the_index_records_checksums_and_keeps_two(tmp_path):
    for chunk in (1, 2, 3):
        checkpoint.save(tmp_path, chunk, _state(chunk), {"env_steps": chunk})
    index = json.loads((tmp_path / "latest.json").read_text())
    assert index["chunk"] == 3 and len(index["sha256"]) == 64 and [r["chunk"] for r in index["older"]] == [2]
    assert sorted(p.name for p in tmp_path.glob("chunk_*")) == ["chunk_000002.msgpack", "chunk_000003.msgpack"]
    assert "older" not in checkpoint.latest_meta(tmp_path)
    # a resumed run that saves an earlier chunk again drops the later records (a timeline it left)
    checkpoint.save(tmp_path, 2, _state(2), {"env_steps": 2})
    assert [r["chunk"] for r in json.loads((tmp_path / "latest.json").read_text())["older"]] == []
    assert sorted(p.name for p in tmp_path.glob("chunk_*")) == ["chunk_000002.msgpack"]


def test_a_checkpoint_without_checksum_is_read_unverified(tmp_path, capsys):
    (tmp_path / "chunk_000001.msgpack").write_bytes(serialization.to_bytes(_state(1)))  # as saved before checksums
    (tmp_path / "latest.json").write_text(json.dumps({"chunk": 1, "file": "chunk_000001.msgpack", "env_steps": 1}))
    state, meta = checkpoint.restore(tmp_path, _state(0))
    np.testing.assert_array_equal(state["w"], _state(1)["w"])
    assert meta["chunk"] == 1 and "unverified" in capsys.readouterr().err


def test_lm_load_params_falls_back_too(tmp_path, capsys):
    from longhorizon.lm.resume import load_params

    for step in (1, 2):
        checkpoint.save(tmp_path, step, {"params": _state(step), "opt_state": {}}, {"step": step})
    _damage(tmp_path / "chunk_000002.msgpack", "truncated")
    np.testing.assert_array_equal(load_params(tmp_path, _state(0))["w"], _state(1)["w"])
    assert "chunk_000001.msgpack" in capsys.readouterr().err


def _spec(out) -> RunSpec:
    return RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(TINY), seeds=2, out=str(out), num_chunks=4,
                   eval_episodes=10, quiet=True)


def _weights(run_dir):
    meta = checkpoint.latest_meta(run_dir / "checkpoints")
    return serialization.msgpack_restore((run_dir / "checkpoints" / meta["file"]).read_bytes())["agent"]["weights"]


@pytest.mark.slow
def test_resume_past_a_damaged_checkpoint_ends_as_an_uninterrupted_run(tmp_path, capsys):
    straight = train(_spec(tmp_path / "straight"))
    train(_spec(tmp_path / "split"), max_chunks=2)
    _damage(tmp_path / "split" / "checkpoints" / "chunk_000002.msgpack", "zeroed")
    capsys.readouterr()
    resumed = train(_spec(tmp_path / "split"), resume=True)
    err = capsys.readouterr().err
    assert "chunk_000002.msgpack" in err and "chunk_000001.msgpack (chunk 1)" in err
    for x, y in zip(jax.tree.leaves(_weights(tmp_path / "straight")), jax.tree.leaves(_weights(tmp_path / "split"))):
        np.testing.assert_array_equal(x, y)
    assert resumed["final_eval_return"] == straight["final_eval_return"]
    rows = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [r["chunk"] for r in rows] == [1, 2, 3, 4]  # chunk 2's row was written again, once
