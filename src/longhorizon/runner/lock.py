"""One writer per results folder.

A run holds an exclusive ``flock`` on ``FOLDER/.lock`` for as long as it writes there, and records
its process id, host and start time in the file so a refused second writer can say who holds it.
The kernel releases the lock when the holder exits, however it exits: a lock file left behind by a
killed process is stale and the next run simply takes it over (no timeouts, no guessing from pids).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from longhorizon.errors import UsageError

LOCK_NAME = ".lock"


class FolderLock:
    """``with FolderLock(folder): ...`` writes to ``folder`` as its only writer, or raises UsageError."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self._file = None

    def acquire(self) -> "FolderLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _describe(handle.read())
            handle.close()
            raise _busy(self.folder, holder) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}))
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def refuse_if_held(folder: str | os.PathLike) -> None:
    """Raise UsageError naming the live process that writes ``folder``, if another one does.

    Checked before any other test of the folder (does it hold a run? a checkpoint?), so a second
    command on a folder in use always names its holder rather than giving advice that a live run
    makes wrong. This process's own lock does not count.
    """
    path = Path(folder) / LOCK_NAME
    if not path.exists():
        return
    with open(path) as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = handle.read()
            try:
                if int(json.loads(text)["pid"]) == os.getpid():
                    return  # held by this process (the run that is checking its own folder)
            except (ValueError, KeyError, TypeError):
                pass
            raise _busy(Path(folder), _describe(text)) from None
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _busy(folder: Path, holder: str) -> UsageError:
    return UsageError(f"{folder} is being written by another run ({holder}); wait for it to finish "
                      f"or stop it, or choose another --out.")


def _describe(text: str) -> str:
    try:
        holder = json.loads(text)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder["started"])))
        return f"process {holder['pid']} on {holder['host']}, started {started}"
    except (ValueError, KeyError, TypeError):
        return "a process that is still running"
