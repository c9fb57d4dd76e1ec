"""Checkpoints of LM runs: orbax-checkpoint, one directory per step, one file set per array.

Why orbax here and msgpack in :mod:`longhorizon.runner.checkpoint`: an LM run state (parameters,
two Adam moments, maybe a reference copy) of a 0.5B-parameter policy is several GB; orbax writes
each array through tensorstore (OCDBT), never as one in-memory blob, restores every array into a
template's dtype and sharding, and makes each step atomic: it writes ``N.orbax-checkpoint-tmp-*``
and renames it to ``N`` only once every item is written, so a killed save leaves the previous
step untouched (the unfinished one is removed when the folder is next opened). Saves are
synchronous (``enable_async_checkpointing=False``): when :meth:`RunCheckpoints.save` returns the
step is final, and no writer thread can outlive a Ctrl-C. The newest ``KEEP`` steps are kept.

A step holds three items: ``params`` (what ``--init`` reads), ``trainer`` (the rest of the arrays
a step reads: optimiser state, PRNG key, reference parameters when the KL term reads them) and
``meta`` (JSON: step, counters, the sampler's state).

Why a checksum: orbax's rename makes a step whole when written, but nothing notices bytes damaged
later, and damaged array bytes can restore as other numbers. Once orbax has renamed the step into
place, ``N/sha256.json`` records the SHA-256 over every file of the step (sorted by relative path,
each name and size hashed before its bytes); it is written atomically (temporary file + rename)
and deleted with its step. A restore without an explicit step reads the newest step whose files
match their checksum, says in one line on stderr which damaged step it passed over, and raises a
:class:`UsageError` when none is intact. A step without ``sha256.json`` (saved before checksums
existed, or killed between orbax's rename and the checksum) is read unverified, as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from longhorizon.errors import UsageError
from longhorizon.lm.processes import local_like, local_to_numpy, several

KEEP = 2
CHECKSUM = "sha256.json"


def _process_index() -> int:
    import jax

    return jax.process_index()


def _orbax():
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise UsageError("LM RL checkpoints need orbax-checkpoint, which is not installed; run "
                         "`pip install 'longhorizon[lm]'`.") from None
    return ocp


def steps(directory: str | os.PathLike) -> list[int]:
    """The finished steps saved in ``directory`` (directories named by their step), oldest first.

    Read from the folder names, without importing orbax: an unfinished save is a ``*-tmp-*`` name.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def latest_step(directory: str | os.PathLike) -> int | None:
    found = steps(directory)
    return found[-1] if found else None


def _digest(step_dir: Path) -> str:
    """SHA-256 over every file of a step but its checksum file, sorted by relative path."""
    digest = hashlib.sha256()
    files = sorted((p.relative_to(step_dir).as_posix(), p) for p in step_dir.rglob("*")
                   if p.is_file() and not p.name.startswith(CHECKSUM))
    for name, path in files:
        digest.update(f"{name}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _write_checksum(step_dir: Path) -> None:
    tmp = step_dir / (CHECKSUM + ".tmp")
    tmp.write_text(json.dumps({"sha256": _digest(step_dir)}))
    os.replace(tmp, step_dir / CHECKSUM)


def _intact(step_dir: Path) -> bool | None:
    """True when the step's files match its checksum, False when not, None when it has no checksum."""
    try:
        saved = json.loads((step_dir / CHECKSUM).read_text())["sha256"]
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, KeyError, TypeError):
        return False
    return _digest(step_dir) == saved


class RunCheckpoints:
    """``with RunCheckpoints(folder) as store: store.save(step, params, trainer, meta)``; synchronous, atomic per step."""

    def __init__(self, directory: str | os.PathLike, *, read_only: bool = False):
        ocp = _orbax()
        self.directory = Path(directory).absolute()
        self._ocp, self._read_only = ocp, read_only
        options = ocp.CheckpointManagerOptions(max_to_keep=None if read_only else KEEP, create=not read_only,
                                               enable_async_checkpointing=False, read_only=read_only,
                                               cleanup_tmp_directories=not read_only)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def save(self, step: int, params: Any, trainer: Any, meta: dict) -> None:
        from longhorizon.runner.results import to_jsonable

        ocp = self._ocp
        if several():  # every process calls save at the same step and writes its own shards
            params, trainer = local_to_numpy(params), local_to_numpy(trainer)
        args = ocp.args.Composite(params=ocp.args.StandardSave(params), trainer=ocp.args.StandardSave(trainer),
                                  meta=ocp.args.JsonSave(to_jsonable(meta)))
        self._manager.save(step, args=args, force=True)
        self._manager.wait_until_finished()
        if _process_index() == 0:  # the one writer of the checksum (every process of a one-process run is 0)
            _write_checksum(self.directory / str(step))  # after orbax's rename: the step's files are final

    def _readable_step(self, step: int | None, none_saved: str) -> tuple[int, bool]:
        """``(step, verified)``: ``step`` if given (refused when damaged), else the newest intact step.

        Passing over a damaged step is said in one line on stderr; ``verified`` is False for a step
        without a checksum. A writable store (a resumed run) deletes the damaged steps it passed over:
        the run saves those steps again, and orbax's keep-``KEEP`` window must hold intact ones.
        """
        candidates = [step] if step is not None else sorted(self._manager.all_steps(), reverse=True)
        if not candidates:
            raise UsageError(f"no checkpoint in {self.directory}; {none_saved}")
        damaged = []
        for candidate in candidates:
            intact = _intact(self.directory / str(candidate))
            if intact is None:
                print(f"checkpoint {self.directory / str(candidate)} has no checksum (saved by an older longhorizon "
                      "or killed while saving it), so it is read unverified.", file=sys.stderr)
            if intact is False:
                damaged.append(str(candidate))
                continue
            if damaged:
                print(f"checkpoint step {' and '.join(damaged)} in {self.directory} is damaged (its files do not match "
                      f"the checksum saved with them), so step {candidate} is used instead"
                      f"{'' if self._read_only else ' and the damaged one is deleted'}.", file=sys.stderr)
                for bad in [] if self._read_only else damaged:
                    self._manager.delete(int(bad))
            return candidate, bool(intact)
        left = "" if step is not None else " and no intact step is left"
        raise UsageError(f"checkpoint step {', '.join(damaged)} in {self.directory} is damaged (its files do not match "
                         f"the checksum saved with them){left}; restore the folder from a backup or start the run "
                         "again in a new folder.")

    def restore(self, params: Any = None, trainer: Any = None, step: int | None = None) -> tuple[Any, Any, dict]:
        """``(params, trainer, meta)`` of ``step`` (default the newest intact one), each array tree restored
        into its template (``None``: as saved, numpy arrays)."""
        ocp = self._ocp
        step, verified = self._readable_step(step, "the run saved none before it stopped, so start it again "
                                                   "without --resume.")

        def item(template):  # a multi-process run's local arrays (an RNG key) are saved as numpy (lm.processes)
            return ocp.args.StandardRestore(local_to_numpy(template) if several() else template) \
                if template is not None else ocp.args.StandardRestore()

        try:
            out = self._manager.restore(step, args=ocp.args.Composite(params=item(params), trainer=item(trainer),
                                                                      meta=ocp.args.JsonRestore()))
        except Exception as error:  # orbax and tensorstore raise many types on a damaged or foreign folder
            raise UsageError(f"checkpoint {self.directory / str(step)} cannot be read ({type(error).__name__}: "
                             f"{str(error)[:200]}); it does not match this configuration"
                             f"{'' if verified else ' or is damaged'}.") from None
        if several():
            return (out.params if params is None else local_like(out.params, params),
                    out.trainer if trainer is None else local_like(out.trainer, trainer), dict(out.meta))
        return out.params, out.trainer, dict(out.meta)

    def restore_params(self, template: Any, step: int | None = None) -> Any:
        """Only the policy parameters of ``step`` (default the newest intact one), into ``template``."""
        ocp = self._ocp
        step, verified = self._readable_step(step, "that run saved none, so train it again or pick another folder.")
        try:
            read = local_to_numpy(template) if several() else template
            out = self._manager.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(read)))
        except Exception as error:
            raise UsageError(f"checkpoint {self.directory / str(step)} cannot be read ({type(error).__name__}); it "
                             f"does not match this model configuration{'' if verified else ' or is damaged'}.") from None
        return local_like(out.params, template) if several() else out.params

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> "RunCheckpoints":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
