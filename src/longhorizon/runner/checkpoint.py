"""Checkpoints: one msgpack file per saved chunk (flax.serialization), written atomically and checksummed.

Why flax serialization and not orbax: a training state here is a few MB on one host; a single
synchronous msgpack file is simpler to make atomic (write + rename), has no background threads to
outlive a Ctrl-C, and restores bit-exactly into the template built by the algorithm's ``init``.

Why a checksum: msgpack decodes many damaged files without complaint (zeroed or overwritten bytes
of the same length become other numbers), so a damaged file would resume silently into another
run. The index ``latest.json`` is therefore the one record of what was saved: the newest
checkpoint's record (``chunk``, ``file``, ``sha256`` of the file's bytes and the caller's meta) at
the top level, as before, and the records of the older kept checkpoints under ``"older"`` (newest
first). It is replaced atomically after the file it names is in place, so the index never names a
file that is not whole; files it no longer names are deleted after it is written.

:func:`restore` reads the newest checkpoint whose bytes match their checksum; when a newer one is
damaged it says so in one line on stderr and returns the older one's meta, so a resumed run
continues from that chunk. Indexes written before checksums existed name one file without a
``sha256``: it is read as before and said to be unverified.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import jax
from flax import serialization

from longhorizon.errors import UsageError

KEEP = 2


def _ckpt_name(chunk: int) -> str:
    return f"chunk_{chunk:06d}.msgpack"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def save(directory: str | os.PathLike, chunk: int, state: Any, meta: dict[str, Any]) -> Path:
    """Save ``state`` after ``chunk`` chunks with its checksum; ``meta`` (JSON) goes to ``latest.json``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / _ckpt_name(chunk)
    data = serialization.to_bytes(jax.device_get(state))
    _write_atomic(path, data)
    record = {"chunk": chunk, "file": path.name, "sha256": hashlib.sha256(data).hexdigest(), **meta}
    previous = _records(directory) if (directory / "latest.json").exists() else []
    # records of later chunks are of a timeline this run left (it resumed from an earlier chunk)
    older = [r for r in previous if r["chunk"] < chunk and (directory / r["file"]).exists()][:KEEP - 1]
    _write_atomic(directory / "latest.json", json.dumps({**record, "older": older}, indent=2).encode())
    kept = {path.name} | {r["file"] for r in older}
    for stale in directory.glob("chunk_*.msgpack"):
        if stale.name not in kept:
            stale.unlink(missing_ok=True)
    return path


def _records(directory: Path) -> list[dict[str, Any]]:
    """The index's checkpoint records, newest first."""
    latest = directory / "latest.json"
    try:
        index = json.loads(latest.read_text())
    except json.JSONDecodeError:
        raise UsageError(f"checkpoint index {latest} is corrupt; delete it to resume from the newest chunk file or start a new run.") from None
    older = index.pop("older", [])
    return [index, *older]


def latest_meta(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The newest checkpoint's record (``chunk``, ``file``, ``sha256`` and its meta), or None when none is saved.

    Read from the index alone (no file is opened or verified): it says whether a checkpoint exists.
    """
    if not (Path(directory) / "latest.json").exists():
        return None
    return _records(Path(directory))[0]


def read_verified(directory: str | os.PathLike) -> tuple[bytes, dict[str, Any], bool]:
    """``(bytes, record, verified)`` of the newest checkpoint whose bytes match their checksum.

    A damaged newer checkpoint is named with the one used in one line on stderr; when none is
    intact a :class:`UsageError` names them. ``verified`` is False for a checkpoint saved before
    checksums existed (read as is).
    """
    directory = Path(directory)
    if not (directory / "latest.json").exists():
        raise UsageError(f"no checkpoint in {directory}; the run stopped before its first chunk finished, so start it again without --resume.")
    damaged = []
    for record in _records(directory):
        path = directory / record["file"]
        data = path.read_bytes() if path.exists() else None
        if data is not None and "sha256" not in record:
            print(f"checkpoint {path} has no checksum (saved by an older longhorizon), so it is read unverified.", file=sys.stderr)
            return data, record, False
        if data is not None and hashlib.sha256(data).hexdigest() == record["sha256"]:
            if damaged:
                print(f"checkpoint {' and '.join(damaged)} in {directory} is damaged (its bytes do not match the "
                      f"checksum saved with it), so {path.name} (chunk {record['chunk']}) is used instead.", file=sys.stderr)
            return data, record, True
        damaged.append(path.name)
    raise UsageError(f"every checkpoint in {directory} is damaged ({', '.join(damaged)}: missing or not matching the "
                     "checksum saved with it); restore them from a backup or start the run again in a new folder.")


def restore(directory: str | os.PathLike, template: Any) -> tuple[Any, dict[str, Any]]:
    """Restore the newest intact checkpoint into ``template`` (a state with the same structure).

    Returns ``(state, record)``; the record's ``chunk`` (and meta) is that of the checkpoint read,
    which is older than the newest when the newest is damaged.
    """
    data, record, verified = read_verified(directory)
    path = Path(directory) / record["file"]
    try:
        state = serialization.from_bytes(template, data)
    except Exception as error:  # msgpack raises several types on a foreign or damaged file
        raise UsageError(f"checkpoint {path} cannot be read ({type(error).__name__}); it does not match this "
                         f"configuration{'' if verified else ' or is damaged'}.") from None
    return state, record
