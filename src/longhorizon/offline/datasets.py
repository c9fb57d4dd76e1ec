"""OGBench datasets: the ``.npz`` format, loading and generating into a cache (the names we can generate are
those of :data:`longhorizon.offline.datagen.RECIPES`).

The datasets are **locally generated with OGBench's recipe** (``offline.datagen``), not OGBench's
published files: same environments, controllers, noise, episode counts and lengths, different random
draws. Baselines must be rerun on them, not quoted. A user's downloaded OGBench files load through the
same path: ``load_dataset("path/to/pointmaze-giant-stitch-v0.npz")``.

**File format** (OGBench's, ``R`` rows = episodes x length): ``observations [R, obs]`` float32,
``actions [R, act]`` float32, ``terminals [R]`` bool (True at each episode's last row, whose action has
no successor), ``qpos``/``qvel [R, .]`` float32. ``NAME.npz`` holds the training split, ``NAME-val.npz``
the validation split (a tenth of the episodes).

**Loaded format** (OGBench's ``load_dataset(compact_dataset=False)``): the last row of each episode is
dropped, leaving ``N = R - episodes`` transitions:

* ``observations [N, obs]``, ``actions [N, act]``, ``next_observations [N, obs]`` (the true successor);
* ``terminals [N]`` float32, 1 at each trajectory's last transition;
* ``valids [N]`` float32: 1 where ``next_observations[i]`` is the successor of ``observations[i]`` in the
  same trajectory, 0 where it belongs to another. In this format every row is a real transition, so it is
  all ones; it is there for code written for OGBench's compact format (which keeps the final rows, 0 there).
  Use ``terminals`` for trajectory boundaries: ``observations[i + 1]`` starts another trajectory where it is 1;
* ``qpos``/``qvel [N, .]`` when the file has them.
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.offline.datagen import RECIPES, recipe

SPLITS = ("train", "val")
REQUIRED = ("observations", "actions", "terminals")


def cache_dir() -> Path:
    """``$LONGHORIZON_CACHE/ogbench``, else ``$XDG_CACHE_HOME/longhorizon/ogbench``, else ``~/.cache/longhorizon/ogbench``."""
    if os.environ.get("LONGHORIZON_CACHE"):
        return Path(os.environ["LONGHORIZON_CACHE"]) / "ogbench"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "longhorizon" / "ogbench"


def cached_path(name: str, *, size: int | None = None, seed: int = 0, cache: Path | None = None,
                split: str = "train") -> Path:
    """Where ``make_dataset(name, size=size, seed=seed)`` keeps a split in the cache.

    OGBench's default size and seed 0 give OGBench's file names (``NAME.npz``, ``NAME-val.npz``); other
    sizes are named by the transitions they hold (whole episodes), so sizes that round alike share a file.
    """
    spec = recipe(name)
    episodes = spec.episodes_for(size)[0]
    default = episodes == spec.episodes
    stem = name if default and seed == 0 else \
        f"{name}-size{'full' if default else episodes * (spec.length - 1)}-seed{seed}"
    return Path(cache or cache_dir()) / (f"{stem}-val.npz" if split == "val" else f"{stem}.npz")


def val_path(path: Path) -> Path:
    """OGBench's validation file beside a training file: ``X.npz`` -> ``X-val.npz``."""
    return path.with_name(path.name[:-len(".npz")] + "-val.npz") if path.name.endswith(".npz") else Path(f"{path}-val")


def make_dataset(name: str, out: str | Path | None = None, *, size: int | None = None, seed: int = 0,
                 workers: int | None = None, progress: bool = True, cache: Path | None = None) -> Path:
    """Generate dataset ``name`` with OGBench's recipe into ``out`` (default: the cache) and its ``-val`` file.

    ``size``: training transitions (rounded up to whole episodes; default OGBench's: 1,000,000, i.e.
    1000 episodes of 1001 rows, for ``pointmaze-large-navigate-v0``). Returns the training file's path. Nothing is written until both splits are
    collected; each file appears by an atomic rename.
    """
    from longhorizon.offline.datagen import collect, save_npz

    spec = recipe(name)
    out = Path(out) if out is not None else cached_path(name, size=size, seed=seed, cache=cache)
    check_make_args(out, size, seed, workers)
    train, val = collect(spec, spec.episodes_for(size), seed=seed, workers=workers, progress=progress,
                         description=name)
    save_npz(val_path(out), val)
    save_npz(out, train)  # last: a training file present means both splits are complete
    return out


def check_make_args(out: Path, size: int | None, seed: int, workers: int | None) -> None:
    """make_dataset's arguments, checked before anything runs."""
    if not out.name.endswith(".npz"):
        raise UsageError(f"--out {out} must end with .npz (OGBench's format); write e.g. --out data/{out.name}.npz.")
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder; give a file name such as {out / 'dataset.npz'}.")
    if size is not None and size < 1:
        raise UsageError(f"--size must be at least 1 transition (got {size}); pass e.g. --size 100000.")
    if seed < 0:
        raise UsageError(f"--seed must be a non-negative integer (got {seed}).")
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1 (got {workers}); pass 2 for two processes.")
    existing = next(p for p in (out.absolute(), *out.absolute().parents) if p.exists())
    if existing != out.absolute() and (not existing.is_dir() or not os.access(existing, os.W_OK)):
        raise UsageError(f"cannot write {out} ({existing} is not a writable folder); choose another --out "
                         "or set LONGHORIZON_CACHE to a writable folder.")


def load_dataset(name_or_path: str | Path, *, size: int | None = None, seed: int = 0,
                 cache_dir: Path | None = None, split: str = "train", env: str | None = None
                 ) -> dict[str, np.ndarray]:
    """A dataset by name (generated into the cache on first use) or from an OGBench ``.npz`` path.

    Returns the loaded format of the module docstring. ``split="val"`` reads the ``-val`` file. With
    ``env`` (a dataset name such as ``"pointmaze-giant-stitch-v0"``), or for a path whose file name is a
    dataset name, the observation and action sizes are checked against that environment.
    """
    if split not in SPLITS:
        raise UsageError(f"unknown split '{split}'; use 'train' or 'val'.")
    text = str(name_or_path)
    if text.endswith(".npz") or os.sep in text or Path(text).expanduser().exists():
        path = Path(text).expanduser()
        path = path if split == "train" else val_path(path)
        if size is not None:
            raise UsageError(f"size={size} applies to generated datasets, not to the file {path}; drop it.")
        stem = path.name.removesuffix(".npz").removesuffix("-val")
        env = env or (stem if stem in RECIPES else None)
    else:
        path = cached_path(text, size=size, seed=seed, cache=cache_dir, split=split)
        env = env or text
        if not path.exists():
            train = cached_path(text, size=size, seed=seed, cache=cache_dir)
            print(f"generating {text} with OGBench's recipe into {train.parent} (once; "
                  f"`longhorizon offline make-dataset {text}` does the same)", file=sys.stderr, flush=True)
            make_dataset(text, train, size=size, seed=seed)
    data = transitions(read_npz(path))
    if env is not None:
        check_matches_env(data, env, source=path)
    return data


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The raw rows of an OGBench ``.npz`` file, validated (keys, lengths, terminals, finite values)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"dataset file {path} does not exist; check the path or generate it with "
                         "`longhorizon offline make-dataset NAME --out PATH`.")
    try:
        with np.load(path, allow_pickle=False) as file:
            rows = {k: file[k] for k in file.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise UsageError(f"{path} is not a readable .npz file ({type(error).__name__}); "
                         "regenerate it or download it again.") from None
    missing = [k for k in REQUIRED if k not in rows]
    if missing:
        raise UsageError(f"{path} lacks the key(s) {', '.join(missing)} of OGBench's format "
                         f"(it has {', '.join(sorted(rows)) or 'none'}); pass an OGBench dataset file.")
    lengths = {k: len(v) for k, v in rows.items() if np.ndim(v) >= 1}
    if len(set(lengths.values())) > 1:
        raise UsageError(f"{path} has arrays of different lengths ({', '.join(f'{k} {n}' for k, n in lengths.items())}); "
                         "every key needs one row per step: regenerate the file.")
    obs, actions, terminals = rows["observations"], rows["actions"], rows["terminals"]
    if len(obs) == 0 or obs.ndim < 2 or actions.ndim not in (1, 2) or terminals.ndim != 1:
        raise UsageError(f"{path} has observations {obs.shape}, actions {actions.shape}, terminals {terminals.shape}; "
                         "expected [R, obs], [R, act] and [R] with R > 0.")
    if not np.isin(terminals, (0, 1)).all() or not terminals[-1]:
        raise UsageError(f"{path}'s terminals must be 0/1 with a 1 on the last row (each episode's end); "
                         "regenerate the file.")
    for key in ("observations", "actions"):
        if np.issubdtype(rows[key].dtype, np.floating) and not np.isfinite(rows[key]).all():
            raise UsageError(f"{path} has NaN or Inf in {key}; regenerate the file.")
    return rows


def transitions(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Raw rows -> the loaded format: drop each episode's last row, add ``next_observations`` and ``valids``.

    A row ``i`` with ``terminals[i] = 0`` is a transition ``(s_i, a_i, s_{i+1})``; ``terminals[i] = 1``
    marks a final observation, which has no successor. The new ``terminals`` is 1 at the transition that
    precedes a final observation.
    """
    raw_terminals = np.asarray(rows["terminals"], dtype=bool)
    keep = ~raw_terminals
    after = np.concatenate([[False], keep[:-1]])  # rows that follow a kept row: its next observation
    terminals = np.concatenate([raw_terminals[1:], [True]])[keep].astype(np.float32)
    obs = rows["observations"]
    obs = obs if obs.dtype == np.uint8 else obs.astype(np.float32, copy=False)
    out = {"observations": obs[keep], "actions": rows["actions"][keep].astype(
               np.float32 if np.issubdtype(rows["actions"].dtype, np.floating) else rows["actions"].dtype, copy=False),
           "next_observations": obs[after], "terminals": terminals, "valids": np.ones_like(terminals)}
    for key in ("qpos", "qvel", "button_states"):
        if key in rows:
            out[key] = rows[key][keep]
    if len(out["observations"]) == 0:
        raise UsageError("the dataset has no transitions (every episode is a single row); regenerate it.")
    return out


def check_matches_env(data: dict[str, np.ndarray], name: str, *, source: Path | str = "the dataset") -> None:
    """Observation and action sizes of ``data`` against the environment of dataset ``name``."""
    from longhorizon.offline.envs import env_spaces

    obs_shape, act_shape = env_spaces(name)
    if data["observations"].shape[1:] != obs_shape:
        raise UsageError(f"{source} has observations of shape {data['observations'].shape[1:]} but {name}'s "
                         f"environment observes {obs_shape}; pass a dataset made for {name}.")
    if data["actions"].ndim == 2 and data["actions"].shape[1:] != act_shape:
        raise UsageError(f"{source} has actions of shape {data['actions'].shape[1:]} but {name}'s environment "
                         f"takes {act_shape}; pass a dataset made for {name}.")
