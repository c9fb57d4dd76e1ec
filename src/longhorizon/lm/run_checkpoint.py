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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from longhorizon.errors import UsageError

KEEP = 2


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


class RunCheckpoints:
    """``with RunCheckpoints(folder) as store: store.save(step, params, trainer, meta)``; synchronous, atomic per step."""

    def __init__(self, directory: str | os.PathLike, *, read_only: bool = False):
        ocp = _orbax()
        self.directory = Path(directory).absolute()
        self._ocp = ocp
        options = ocp.CheckpointManagerOptions(max_to_keep=None if read_only else KEEP, create=not read_only,
                                               enable_async_checkpointing=False, read_only=read_only,
                                               cleanup_tmp_directories=not read_only)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def save(self, step: int, params: Any, trainer: Any, meta: dict) -> None:
        from longhorizon.runner.results import to_jsonable

        ocp = self._ocp
        args = ocp.args.Composite(params=ocp.args.StandardSave(params), trainer=ocp.args.StandardSave(trainer),
                                  meta=ocp.args.JsonSave(to_jsonable(meta)))
        self._manager.save(step, args=args, force=True)
        self._manager.wait_until_finished()

    def restore(self, params: Any = None, trainer: Any = None, step: int | None = None) -> tuple[Any, Any, dict]:
        """``(params, trainer, meta)`` of ``step`` (default the newest), each array tree restored into its
        template (``None``: as saved, numpy arrays)."""
        ocp = self._ocp
        step = self._manager.latest_step() if step is None else step
        if step is None:
            raise UsageError(f"no checkpoint in {self.directory}; the run saved none before it stopped, "
                             "so start it again without --resume.")

        def item(template):
            return ocp.args.StandardRestore(template) if template is not None else ocp.args.StandardRestore()

        try:
            out = self._manager.restore(step, args=ocp.args.Composite(params=item(params), trainer=item(trainer),
                                                                      meta=ocp.args.JsonRestore()))
        except Exception as error:  # orbax and tensorstore raise many types on a damaged or foreign folder
            raise UsageError(f"checkpoint {self.directory / str(step)} cannot be read ({type(error).__name__}: "
                             f"{str(error)[:200]}); it does not match this configuration or is damaged.") from None
        return out.params, out.trainer, dict(out.meta)

    def restore_params(self, template: Any, step: int | None = None) -> Any:
        """Only the policy parameters of ``step`` (default the newest), into ``template``."""
        ocp = self._ocp
        step = self._manager.latest_step() if step is None else step
        if step is None:
            raise UsageError(f"no checkpoint in {self.directory}; that run saved none, so train it again or pick "
                             "another folder.")
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(template)))
        except Exception as error:
            raise UsageError(f"checkpoint {self.directory / str(step)} cannot be read ({type(error).__name__}); it "
                             "does not match this model configuration or is damaged.") from None
        return out.params

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> "RunCheckpoints":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
