"""One writer per results folder: a second run (or --resume) on a folder another live process
writes is refused naming that process; a lock left by a killed process is taken over."""

import json
import os
import signal
import subprocess
import sys

import pytest

from longhorizon.cli import main
from longhorizon.errors import UsageError
from longhorizon.runner.lock import FolderLock
from longhorizon.runner.run import RunSpec, train

TINY = {"num_envs": "4", "num_steps": "16", "num_minibatches": "2", "update_epochs": "1", "total_steps": "256",
        "hidden": "16,16"}

HOLD = """
import sys, time
from longhorizon.runner.lock import FolderLock
lock = FolderLock(sys.argv[1]).acquire()  # held until this process ends
print("holding", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock on tmp_path/run; yields (folder, process)."""
    folder = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "holding"
    yield folder, process
    if process.poll() is None:
        process.kill()
    process.wait()


def test_a_second_writer_is_refused_naming_the_first(holder, capsys):
    folder, process = holder
    with pytest.raises(UsageError, match=f"being written by another run \\(process {process.pid} "):
        train(RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(TINY), out=str(folder), quiet=True))
    code = main(["train", "ppo", "--env", "CartPole-v1", "--total-steps", "256", "--num-envs", "4", "--num-steps", "64",
                 "--out", str(folder), "--quiet"])
    message = capsys.readouterr().err.strip()
    assert code == 2 and message.count("\n") == 0 and str(process.pid) in message
    assert sorted(p.name for p in folder.iterdir()) == [".lock"]  # nothing written beside the other run


@pytest.mark.slow
def test_resume_in_a_second_terminal_is_refused(tmp_path):
    folder = tmp_path / "run"
    train(RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(TINY), out=str(folder), num_chunks=2, quiet=True))
    before = (folder / "metrics.jsonl").read_text()
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "holding"
        assert main(["train", "--resume", str(folder), "--quiet"]) == 2
        assert (folder / "metrics.jsonl").read_text() == before
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
def test_a_stale_lock_of_a_killed_process_is_taken_over(holder):
    folder, process = holder
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert (folder / ".lock").exists()  # the killed process left its lock file behind
    with FolderLock(folder):
        assert json.loads((folder / ".lock").read_text())["pid"] == os.getpid()
    summary = train(RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(TINY), out=str(folder), num_chunks=2,
                            quiet=True))
    assert summary["status"] == "completed"


def test_the_lock_is_released_when_a_run_ends(tmp_path):
    folder = tmp_path / "run"
    with FolderLock(folder):
        with pytest.raises(UsageError):  # a second open file is a second writer, even in one process
            FolderLock(folder).acquire()
    with FolderLock(folder):
        pass
