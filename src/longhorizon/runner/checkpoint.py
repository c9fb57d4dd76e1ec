"""Checkpoints: one msgpack file per saved chunk (flax.serialization), written atomically.

Why flax serialization and not orbax: a training state here is a few MB on one host; a single
synchronous msgpack file is simpler to make atomic (write + rename), has no background threads to
outlive a Ctrl-C, and restores bit-exactly into the template built by the algorithm's ``init``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax
from flax import serialization

from longhorizon.errors import UsageError

KEEP = 2


def _ckpt_name(chunk: int) -> str:
    return f"chunk_{chunk:06d}.msgpack"


def save(directory: str | os.PathLike, chunk: int, state: Any, meta: dict[str, Any]) -> Path:
    """Save ``state`` after ``chunk`` chunks; ``meta`` (JSON) goes to ``latest.json``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / _ckpt_name(chunk)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(serialization.to_bytes(jax.device_get(state)))
    os.replace(tmp, path)
    latest = directory / "latest.json"
    tmp_meta = directory / "latest.json.tmp"
    tmp_meta.write_text(json.dumps({"chunk": chunk, "file": path.name, **meta}, indent=2))
    os.replace(tmp_meta, latest)
    for old in sorted(directory.glob("chunk_*.msgpack"))[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def latest_meta(directory: str | os.PathLike) -> dict[str, Any] | None:
    latest = Path(directory) / "latest.json"
    if not latest.exists():
        return None
    try:
        return json.loads(latest.read_text())
    except json.JSONDecodeError:
        raise UsageError(f"checkpoint index {latest} is corrupt; delete it to resume from the newest chunk file or start a new run.") from None


def restore(directory: str | os.PathLike, template: Any) -> tuple[Any, dict[str, Any]]:
    """Restore the newest checkpoint into ``template`` (a state with the same structure)."""
    meta = latest_meta(directory)
    if meta is None:
        raise UsageError(f"no checkpoint in {directory}; the run stopped before its first chunk finished, so start it again without --resume.")
    path = Path(directory) / meta["file"]
    try:
        state = serialization.from_bytes(template, path.read_bytes())
    except Exception as error:  # msgpack raises several types on a damaged file
        raise UsageError(f"checkpoint {path} cannot be read ({type(error).__name__}); it does not match this configuration or is damaged.") from None
    return state, meta
