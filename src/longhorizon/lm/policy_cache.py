"""Trained policies kept on disk by the settings that made them, so reruns and other studies start from the same one.

A policy's parameters live in ``$LONGHORIZON_CACHE/KIND`` (default ``~/.cache/longhorizon/KIND``), in a file named
by a prefix and the first 12 hex digits of the SHA-1 of its settings as sorted JSON: any change to the settings
trains a new one. Put in the settings everything that changes the result (the JAX version too where float rounding
can flip what a short training run ends at).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable


def cache_folder(kind: str) -> Path:
    """``$LONGHORIZON_CACHE/KIND``, else ``~/.cache/longhorizon/KIND``."""
    return Path(os.environ.get("LONGHORIZON_CACHE", Path.home() / ".cache" / "longhorizon")) / kind


def cache_path(kind: str, prefix: str, settings: dict[str, Any]) -> Path:
    """Where the policy trained with ``settings`` is kept: ``cache_folder(kind) / f"{prefix}{digest}.msgpack"``."""
    from longhorizon.runner.results import to_jsonable

    key = json.dumps(to_jsonable(settings), sort_keys=True, default=str)
    return cache_folder(kind) / f"{prefix}{hashlib.sha1(key.encode()).hexdigest()[:12]}.msgpack"


def load_or_train(path: Path, template: Any, train: Callable[[], Any], log: Callable[[str], Any] | None = None) -> Any:
    """The parameters saved at ``path`` (restored into ``template``'s structure), else ``train()``'s, saved there
    through a temporary file and a rename (a crash never leaves half a file for the next run to load)."""
    import jax
    from flax import serialization

    if path.is_file():
        if log is not None:
            log(f"  policy from cache {path}")
        return serialization.from_bytes(template, path.read_bytes())
    params = train()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(serialization.to_bytes(jax.device_get(params)))
    os.replace(tmp, path)
    return params


def params_digest(params: Any) -> str:
    """The first 16 hex digits of the SHA-256 of ``params``' serialised bytes: which parameters a run started from."""
    import jax
    from flax import serialization

    return hashlib.sha256(serialization.to_bytes(jax.device_get(params))).hexdigest()[:16]
