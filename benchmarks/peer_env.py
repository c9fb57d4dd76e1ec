"""Separate virtual environments for peer libraries in benchmarks (created on first use).

Peers such as rejax need gymnax < 1.0 (5-value ``step``), which cannot live beside longhorizon's
gymnax 1.0; Stable-Baselines3 needs PyTorch. Each gets ``benchmarks/.venvs/NAME`` (git-ignored).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent / ".venvs"


def peer_python(name: str, requirements: list[str]) -> Path:
    """Path to the Python of a venv holding ``requirements``; builds it once (marker = hash)."""
    folder = ROOT / name
    python = folder / "bin" / "python"
    digest = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:16]
    marker = folder / f".installed-{digest}"
    if marker.exists():
        return python
    print(f"[peer_env] creating {folder} with {' '.join(requirements)} (one time)", file=sys.stderr, flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
    marker.write_text("\n".join(requirements) + "\n")
    return python


def peer_version(python: Path, package: str) -> str:
    out = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version('{package}'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"
