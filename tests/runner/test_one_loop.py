"""Every training command goes through the runner's one loop, so every family passes the same tests:
a folder in use is refused naming its holder; Ctrl-C saves the finished chunk and says how to continue;
a damaged newest checkpoint is skipped for the older one; and the resumed run ends in exactly the state
of an uninterrupted one. Families: control (`train`), offline (`offline train`), ES (`evolve drift`) and
language models (`lm sft --dataset` on a tiny GGUF model; `lm rl` runs the same loop with the same
checkpoints)."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import jax
import numpy as np
import pytest
from flax import serialization

from longhorizon.cli import main
from longhorizon.runner import checkpoint
from longhorizon.runner.progress import ChunkProgress

CONTROL_TINY = ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1",
                "--total-steps", "512", "--hidden", "16,16"]


def _damage_msgpack(checkpoints: Path) -> None:
    newest = checkpoints / "chunk_000002.msgpack"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))


def _msgpack_state(folder: Path):
    """The newest checkpoint's state, as plain nested arrays."""
    meta = checkpoint.latest_meta(folder / "checkpoints")
    return serialization.msgpack_restore((folder / "checkpoints" / meta["file"]).read_bytes())


def _damage_orbax(checkpoints: Path) -> None:
    biggest = max((p for p in (checkpoints / "2").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(biggest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    biggest.write_bytes(bytes(data))


def _orbax_state(folder: Path):
    from longhorizon.lm.run_checkpoint import RunCheckpoints

    with RunCheckpoints(folder / "checkpoints", read_only=True) as store:
        params, arrays, _ = store.restore()
    return {"params": params, "arrays": arrays}


@dataclasses.dataclass(frozen=True)
class Family:
    start: Callable[[Path, Path], list[str]]  # (folder, scratch) -> argv of a new run of 3 chunks
    resume: list[str]  # argv after the folder to continue it
    step_key: str
    saved: str = "chunk 2 of 3 is saved"  # what the Ctrl-C message says was saved
    damage: Callable[[Path], None] = _damage_msgpack  # damage the checkpoint of chunk 2
    passed_over: tuple[str, ...] = ("chunk_000002.msgpack", "is damaged", "(chunk 1) is used instead")
    state: Callable[[Path], object] = _msgpack_state


def _line_dataset(scratch: Path) -> Path:
    """A tiny offline dataset: three straight trajectories on a line."""
    path = scratch / "line.npz"
    if not path.exists():
        lengths = (6, 5, 7)
        traj = np.concatenate([np.full(n, k) for k, n in enumerate(lengths)])
        idx = np.arange(len(traj), dtype=np.float32)
        np.savez(path, observations=np.stack([idx, 10.0 * traj], 1), next_observations=np.stack([idx + 1, 10.0 * traj], 1),
                 actions=np.ones((len(traj), 2), np.float32), terminals=np.concatenate([np.eye(n)[-1] for n in lengths]))
    return path


def _lm_start(out: Path, scratch: Path) -> list[str]:
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from tiny_gguf import write_gguf  # tests/tiny_gguf.py

    rows = scratch / "sft.jsonl"
    if not rows.exists():
        rows.write_text("".join(json.dumps(r) + "\n" for r in ({"prompt": "hello ", "completion": "world"},
                                                               {"prompt": "he", "completion": "llo"})))
        write_gguf(scratch / "tiny.gguf")
    return ["lm", "sft", "--model", str(scratch / "tiny.gguf"), "--dataset", str(rows), "--max-steps", "3",
            "--per-device-train-batch-size", "2", "--learning-rate", "1e-3", "--checkpoint-every", "1",
            "--out", str(out)]


FAMILIES = {
    "control": Family(lambda out, _: ["train", "ppo", "--env", "CartPole-v1", *CONTROL_TINY, "--seeds", "2", "--chunks",
                                      "3", "--eval-episodes", "2", "--quiet", "--out", str(out)],
                      ["train", "--resume"], "env_steps"),
    "offline": Family(lambda out, scratch: ["offline", "train", "gcbc", "--dataset", str(_line_dataset(scratch)),
                                            "--num-updates", "30", "--chunks", "3", "--set", "hidden=16,16",
                                            "--set", "batch_size=8", "--quiet", "--out", str(out)],
                      ["offline", "train", "--resume"], "step"),
    "evolve": Family(lambda out, _: ["evolve", "drift", "--lifetimes", "2", "--seeds", "1", "--population", "2",
                                     "--generations", "3", "--out", str(out)],
                     ["evolve", "drift", "--resume"], "step"),
    "lm": Family(_lm_start, ["lm", "sft", "--resume"], "step", saved="checkpoint saved at step 2", damage=_damage_orbax,
                 passed_over=("step 2", "is damaged", "step 1 is used"), state=_orbax_state),
}
# the families whose three runs take more than a few seconds on 2 cores
SLOW = {"control", "evolve", "lm"}
PARAMS = [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in FAMILIES]


def test_a_folder_in_use_is_refused_naming_its_holder_in_every_family(tmp_path, capsys):
    code = ("import sys, time; from longhorizon.runner.lock import FolderLock; lock = FolderLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); time.sleep(120)")
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for name, family in FAMILIES.items():
            assert main(family.start(out, tmp_path)) == 2, name
            err = capsys.readouterr().err
            assert f"process {holder.pid}" in err and "being written by another run" in err, (name, err)
    finally:
        holder.kill()
        holder.wait()
    assert not (out / "config.json").exists()


@pytest.mark.parametrize("name", PARAMS)
def test_ctrl_c_then_a_damaged_checkpoint_then_resume_ends_as_an_uninterrupted_run(name, tmp_path, capsys, monkeypatch):
    family = FAMILIES[name]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(family.start(whole, tmp_path)) == 0

    real, calls = ChunkProgress.update, []

    def ctrl_c_in_the_second_chunk(self, completed, row):
        real(self, completed, row)
        calls.append(completed)
        if len(calls) == 2:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C: the loop stops once this chunk is saved

    monkeypatch.setattr(ChunkProgress, "update", ctrl_c_in_the_second_chunk)
    capsys.readouterr()
    assert main(family.start(cut, tmp_path)) == 130
    err = capsys.readouterr().err
    assert family.saved in err and f"{' '.join(family.resume)} {cut}" in err, err
    assert json.loads((cut / "summary.json").read_text())["status"] == "interrupted"
    assert main(family.start(cut, tmp_path)) == 2  # a new run may not overwrite it
    assert "already holds" in capsys.readouterr().err
    monkeypatch.setattr(ChunkProgress, "update", real)

    family.damage(cut / "checkpoints")
    assert main([*family.resume, str(cut)]) == 0
    err = capsys.readouterr().err
    assert all(words in err for words in family.passed_over), err

    summary = json.loads((cut / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["chunks_done"] == 3
    rows = [json.loads(line) for line in (cut / "metrics.jsonl").read_text().splitlines()]
    whole_rows = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    assert [r[family.step_key] for r in rows] == [r[family.step_key] for r in whole_rows]  # chunk 2 was redone once
    for key in ("chunk", family.step_key, "wall_seconds", "time"):
        assert all(key in r for r in rows), key
    jax.tree.map(np.testing.assert_array_equal, family.state(cut), family.state(whole))
    for shared in ("status", "chunks_done", "final_eval_return", "compile_seconds", "train_seconds", "wall_seconds",
                   "results"):
        assert shared in summary, shared
    assert (cut / "curve.png").is_file() and (cut / "config.json").is_file()
