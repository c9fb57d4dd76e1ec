"""Defects a new user met in the RL core (issue 36): a host-env sweep, start-up Ctrl-C, the lock's holder,
one final evaluation, a completed run resumed. Each test failed on the code before its fix."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from longhorizon.cli import main
from longhorizon.engine.fused import FusedEngine
from longhorizon.runner import checkpoint
from longhorizon.runner.interrupts import Interrupted
from longhorizon.runner.run import RunSpec, train

TINY = {"num_envs": "4", "num_steps": "16", "num_minibatches": "2", "update_epochs": "1", "total_steps": "512",
        "hidden": "16,16"}
TINY_FLAGS = [arg for k, v in TINY.items() for arg in (f"--{k.replace('_', '-')}", v)]


def spec(out, **kw):
    return RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(TINY), seeds=2, out=str(out), num_chunks=4,
                   eval_episodes=4, quiet=True, **kw)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------ 1. a sweep over a host-stepped environment
@pytest.mark.parametrize("dry_run", [True, False])
def test_sweep_refuses_a_host_stepped_environment_in_one_sentence(tmp_path, capsys, dry_run):
    pytest.importorskip("gymnasium")
    args = ["sweep", "ppo", "--env", "gymnasium:CartPole-v1", "--grid", "learning_rate=1e-4,3e-4",
            "--total-steps", "512", "--out", str(tmp_path / "sweep")] + (["--dry-run"] if dry_run else [])
    assert main(args) == 2
    assert "stepped on the host" in one_line_error(capsys)
    assert not (tmp_path / "sweep").exists()  # refused before anything was written


# ------------------------------------------------------------------ 3. Ctrl-C says what was saved, exit 130
def test_ctrl_c_while_compiling_saves_nothing_says_so_and_exits_130(tmp_path, capsys, monkeypatch):
    real = FusedEngine.compile

    def interrupted_compile(self, state):
        signal.raise_signal(signal.SIGINT)  # a real Ctrl-C while XLA compiles the chunk
        return real(self, state)

    monkeypatch.setattr(FusedEngine, "compile", interrupted_compile)
    out = tmp_path / "run"
    args = ["train", "ppo", "--env", "CartPole-v1", "--seeds", "2", "--chunks", "4", "--quiet", "--out", str(out),
            *TINY_FLAGS]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert "nothing was saved" in err and "checkpoint saved" not in err
    assert checkpoint.latest_meta(out / "checkpoints") is None
    monkeypatch.setattr(FusedEngine, "compile", real)
    assert main(args) == 0  # "run the same command again" works, as the message says


@pytest.mark.slow
def test_ctrl_c_in_a_later_chunk_names_the_chunk_saved_and_resume_finishes(tmp_path, capsys, monkeypatch):
    real = FusedEngine.run_chunk
    calls = {"n": 0}

    def interrupt_second(self, state, num_updates=None):
        calls["n"] += 1
        if calls["n"] == 2:
            signal.raise_signal(signal.SIGINT)
        return real(self, state, num_updates)

    monkeypatch.setattr(FusedEngine, "run_chunk", interrupt_second)
    out = tmp_path / "run"
    assert main(["train", "ppo", "--env", "CartPole-v1", "--seeds", "2", "--chunks", "4", "--quiet", "--out", str(out),
                 *TINY_FLAGS]) == 130
    err = capsys.readouterr().err
    assert f"chunk 2 of 4 is saved" in err and f"--resume {out}" in err
    assert checkpoint.latest_meta(out / "checkpoints")["chunk"] == 2
    monkeypatch.setattr(FusedEngine, "run_chunk", real)
    assert main(["train", "--resume", str(out), "--quiet"]) == 0


@pytest.mark.slow
def test_a_second_ctrl_c_aborts_at_once_keeping_what_was_saved(tmp_path):
    real = FusedEngine.run_chunk
    calls = {"n": 0}

    def interrupt_twice_in_third(self, state, num_updates=None):
        calls["n"] += 1
        if calls["n"] == 3:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
        return real(self, state, num_updates)

    FusedEngine.run_chunk = interrupt_twice_in_third
    try:
        with pytest.raises(Interrupted, match="chunk 2 of 4 is saved"):
            train(spec(tmp_path / "run"))
    finally:
        FusedEngine.run_chunk = real
    assert checkpoint.latest_meta(tmp_path / "run" / "checkpoints")["chunk"] == 2


@pytest.mark.slow
def test_evolve_drift_ctrl_c_keeps_the_finished_generation_and_exits_130(tmp_path, capsys, monkeypatch):
    from longhorizon.evolution import meta_ppo

    real = meta_ppo.EnvMetaTrainer.generation

    def interrupted_generation(self):
        signal.raise_signal(signal.SIGINT)
        return real(self)

    monkeypatch.setattr(meta_ppo.EnvMetaTrainer, "generation", interrupted_generation)
    out = tmp_path / "drift"
    code = main(["evolve", "drift", "--lifetimes", "2", "--seeds", "1", "--population", "2", "--generations", "3",
                 "--out", str(out)])
    assert code == 130
    err = capsys.readouterr().err
    assert "chunk 1 of 3 is saved" in err and f"evolve drift --resume {out}" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["generations_done"] == 1 and (out / "drift.npz").exists()
    monkeypatch.setattr(meta_ppo.EnvMetaTrainer, "generation", real)
    assert main(["evolve", "drift", "--resume", str(out)]) == 0  # the advice works: the run continues
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and len(summary["mean_fitness"]) == 3


# ------------------------------------------------------------------ 5. the lock names its holder first
def _hold_lock(folder: Path) -> subprocess.Popen:
    code = ("import sys, time; from longhorizon.runner.lock import FolderLock; lock = FolderLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.slow
def test_a_folder_in_use_names_its_holder_whichever_command_is_used(tmp_path, capsys):
    out = tmp_path / "run"
    train(spec(out), max_chunks=1)  # a run with a saved chunk, as a live run would have after its first chunk
    holder = _hold_lock(out)
    try:
        for args in (["train", "ppo", "--env", "CartPole-v1", "--out", str(out), *TINY_FLAGS],
                     ["train", "--resume", str(out)], ["train", "--resume", str(out), "--dry-run"]):
            assert main(args) == 2, args
            err = one_line_error(capsys)
            assert f"process {holder.pid}" in err and "being written by another run" in err, err
    finally:
        holder.kill()
        holder.wait()
    assert main(["train", "--resume", str(out), "--quiet"]) == 0  # the holder gone, the advice works


# ------------------------------------------------------------------ 6. one final evaluation, recorded everywhere
def test_the_final_evaluation_is_the_same_number_everywhere_and_a_completed_run_is_not_rewritten(tmp_path, capsys):
    from tbparse import SummaryReader

    out = tmp_path / "run"
    summary = train(spec(out, eval_every=3))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [("eval_return_mean" in r) for r in rows] == [False, False, True, True]
    assert rows[-1]["eval_return_per_seed"] == summary["final_eval_return"]
    saved = json.loads((out / "summary.json").read_text())
    assert saved["final_eval_return"] == summary["final_eval_return"]
    scalars = SummaryReader(str(out / "tensorboard")).scalars
    final_tb = scalars[(scalars.tag == "charts/eval_return") & (scalars.step == 512)].value.tolist()
    assert final_tb == pytest.approx([saved["final_eval_return_mean"]])

    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    mtime = (out / "summary.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert "finished run" in capsys.readouterr().err
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".lock"}
    assert after == before and (out / "summary.json").stat().st_mtime_ns == mtime


# ------------------------------------------------------------------ 3. real SIGINTs at several moments
@pytest.mark.slow
@pytest.mark.parametrize("moment", ["import", "compile", "later-chunk"])
def test_sigint_at_any_moment_exits_130_and_the_message_matches_the_folder(tmp_path, moment):
    out = tmp_path / "run"
    env = {**os.environ, "LONGHORIZON_COMPILE_CACHE": "0", "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "longhorizon", "train", "ppo", "--env", "CartPole-v1", "--seeds", "2", "--quiet",
           "--out", str(out), "--num-envs", "8", "--num-steps", "64", "--total-steps", "2000000", "--chunks", "200"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    marker = {"import": None, "compile": out / "config.json", "later-chunk": out / "checkpoints" / "latest.json"}[moment]
    deadline = time.time() + 240
    if marker is None:
        time.sleep(0.5)  # the interpreter is importing JAX and the CLI
    else:
        while not marker.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "pure virtual" not in err, err
    saved = checkpoint.latest_meta(out / "checkpoints") if out.exists() else None
    if saved is None:
        assert "nothing was saved" in err or "not saved" in err, err
    else:
        assert re.search(rf"chunk {saved['chunk']} of \d+ is saved", err), err
        assert saved["chunk"] >= 1
