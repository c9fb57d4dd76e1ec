"""Checksums of LM run checkpoints (orbax steps): a damaged newest step is passed over for the newest intact
one, named in one line; none intact is a one-sentence UsageError."""

import json

import jax
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.run_checkpoint import CHECKSUM, RunCheckpoints, steps


def _state(seed: int):
    params = {"w": np.random.default_rng(seed).normal(size=4096).astype(np.float32)}
    return params, {"key": np.asarray(jax.random.PRNGKey(seed))}


def _biggest(step_dir):
    return max((p for p in step_dir.rglob("*") if p.is_file() and p.name != CHECKSUM), key=lambda p: p.stat().st_size)


def _damage(path, how: str) -> None:
    """2 KB zeroed or 4 KB of 0xFF in the middle of the step's biggest file (same size), or that file cut in half."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    assert len(data) > 4096  # the parameters' array data (15 KB)
    if how == "zeroed":
        data[middle - 1024:middle + 1024] = bytes(2048)
    elif how == "ff":
        data[middle - 2048:middle + 2048] = b"\xff" * 4096
    else:
        data = data[:middle]
    path.write_bytes(bytes(data))


def _save(directory, *saved):
    with RunCheckpoints(directory) as store:
        for step in saved:
            store.save(step, *_state(step), {"step": step})


@pytest.mark.parametrize("how", ["zeroed", "ff", "truncated"])
def test_a_damaged_newest_step_falls_back_to_the_older_one(tmp_path, capsys, how):
    _save(tmp_path, 1, 2)
    assert len(json.loads((tmp_path / "2" / CHECKSUM).read_text())["sha256"]) == 64
    _damage(_biggest(tmp_path / "2"), how)
    with RunCheckpoints(tmp_path, read_only=True) as store:  # --init and evaluation: nothing is deleted
        np.testing.assert_array_equal(store.restore_params(_state(0)[0])["w"], _state(1)[0]["w"])
    assert steps(tmp_path) == [1, 2]
    with RunCheckpoints(tmp_path) as store:  # --resume: continues from step 1 and saves step 2 again
        params, _, meta = store.restore(*_state(0))
        np.testing.assert_array_equal(params["w"], _state(1)[0]["w"])
        assert meta["step"] == 1
        store.save(2, *_state(2), {"step": 2})
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all("step 2" in line and "step 1 is used" in line for line in lines)
    with RunCheckpoints(tmp_path, read_only=True) as store:
        assert store.restore(*_state(0))[2]["step"] == 2


def test_every_step_damaged_is_a_usage_error_naming_them(tmp_path):
    _save(tmp_path, 1, 2)
    _damage(_biggest(tmp_path / "1"), "zeroed")
    _damage(_biggest(tmp_path / "2"), "truncated")
    with RunCheckpoints(tmp_path, read_only=True) as store, \
            pytest.raises(UsageError, match="step 2, 1 in .* is damaged .* no intact step is left"):
        store.restore(*_state(0))
