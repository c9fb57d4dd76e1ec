"""The one results-folder format every longhorizon run writes.

A results folder holds ``config.json`` (fully resolved), ``metrics.jsonl`` (one JSON
object per line, appended as training goes), ``summary.json`` (written at the end),
``curve.png`` and ``checkpoints/``. Writes are atomic (temp file + rename) so a crash
never leaves a half-written JSON file behind.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np


def to_jsonable(value: Any) -> Any:
    """Convert numpy/JAX scalars and arrays, dataclasses and paths to plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        array = np.asarray(value)
        if array.ndim == 0:
            return to_jsonable(array.item())
        return [to_jsonable(v) for v in array.tolist()]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    return value


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` via a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(to_jsonable(obj), indent=2) + "\n")
    os.replace(tmp, path)


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def read_metrics(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """The complete rows of a results folder's ``metrics.jsonl`` (none without one); a torn last line (a crash
    mid-write) is skipped."""
    path = Path(folder) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def finished_run(folder: str | os.PathLike, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The summary of the run that finished in ``folder``, so that a rerun of a study reads it instead of training
    again; ``None`` when no run finished there. ``settings``: ``config.json`` keys and the values the run must have
    been given; a finished run with other values is a UsageError (never overwritten: it may be someone's result).
    The folder of an interrupted run (metrics but no summary) is removed, so the caller starts it afresh."""
    import shutil

    from longhorizon.errors import UsageError
    from longhorizon.runner.lock import refuse_if_held

    folder = Path(folder)
    if not (folder / "summary.json").exists():
        if (folder / "metrics.jsonl").exists():
            refuse_if_held(folder)  # not a run that is still being written
            shutil.rmtree(folder)
        return None
    config = read_json(folder / "config.json")
    other = [key for key, value in settings.items() if config.get(key) != to_jsonable(value)]
    if other:
        raise UsageError(f"{folder} holds a run with other settings ({', '.join(other)}); remove it or choose "
                         "another folder.")
    return read_json(folder / "summary.json")


class ResultsDir:
    """A run's results folder; creates it on construction."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.checkpoints = self.root / "checkpoints"

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def metrics_path(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def summary_path(self) -> Path:
        return self.root / "summary.json"

    @property
    def curve_path(self) -> Path:
        return self.root / "curve.png"

    def write_config(self, config: dict[str, Any]) -> None:
        write_json_atomic(self.config_path, config)

    def append_metrics(self, row: dict[str, Any]) -> dict[str, Any]:
        """Append ``row`` stamped with the wall-clock ``time``; returns it as written (for the live loggers)."""
        row = to_jsonable({"time": time.time(), **row})
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return row

    def read_metrics(self) -> list[dict[str, Any]]:
        """All complete metric rows (:func:`read_metrics`)."""
        return read_metrics(self.root)

    def truncate_metrics(self, max_step: float, key: str = "env_steps") -> None:
        """Drop rows beyond ``max_step`` (used on resume so the log matches the checkpoint)."""
        rows = [r for r in self.read_metrics() if r.get(key, 0) <= max_step]
        tmp = self.metrics_path.with_name("metrics.jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, self.metrics_path)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json_atomic(self.summary_path, summary)
