"""Ctrl-C saves, ``--resume RUN_DIR`` continues: run state of ``longhorizon lm sft|rl``.

The first Ctrl-C does not stop the program mid-step: :class:`StopRequest` turns SIGINT into a
flag that the training loop reads between steps, so the state saved is always the state after a
whole step (parameters, optimiser, PRNG key, the problem stream's generator, counters,
curriculum). A second Ctrl-C raises ``KeyboardInterrupt`` at once, leaving only the last periodic
checkpoint. ``lm sft`` saves its arrays to the foundation's msgpack checkpoints
(:mod:`longhorizon.runner.checkpoint`) and everything else to its JSON index; ``lm rl`` runs through
:func:`longhorizon.lm.run.run_rl`, which saves with orbax (:mod:`longhorizon.lm.run_checkpoint`).
Either way a resumed run continues with the same numbers an uninterrupted run would have used.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import numpy as np

from longhorizon.errors import UsageError

INTERRUPTED_EXIT = 130


class StopRequest:
    """While active (``with``), the first SIGINT sets :attr:`requested`; a second one raises ``KeyboardInterrupt``."""

    def __init__(self, what: str = "step"):
        self.requested = False
        self.what = what
        self._previous = None

    def _handler(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(f"\nstopping after this {self.what} to save a checkpoint (Ctrl-C again to abort without saving)",
              file=sys.stderr, flush=True)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


def rng_state(rng: np.random.Generator) -> dict:
    """The JSON-able state of a numpy generator (restored by :func:`set_rng_state`)."""
    return rng.bit_generator.state


def set_rng_state(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


def check_fresh(results, resume: bool) -> None:
    """A new run must not overwrite another run's folder."""
    from longhorizon.runner import checkpoint

    if not resume and (results.metrics_path.exists() or checkpoint.latest_meta(results.checkpoints)):
        raise UsageError(f"{results.root} already holds a run; pass --resume {results.root} to continue it or choose another --out.")


def resume_options(run_dir: Path, command: str) -> dict:
    """The options a run was started with, from its ``config.json``."""
    from longhorizon.runner.results import read_json

    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise UsageError(f"{run_dir} has no config.json; pass --resume the folder a `longhorizon {command}` run wrote.")
    config = read_json(path)
    if config.get("command") != command or "options" not in config:
        made_by = f"`longhorizon {config['command']}`" if config.get("command") else "another command"
        raise UsageError(f"{run_dir} was written by {made_by}, not by `longhorizon {command}` (with --resume support); "
                         "resume it with the command that made it.")
    return config["options"]


def reject_changes(ctx, allowed: tuple[str, ...] = ("resume",)) -> None:
    """With ``--resume``, every other option comes from the saved config; name the first one given."""
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        if name not in allowed and source is not None and source.name == "COMMANDLINE":
            raise UsageError(f"--{name.replace('_', '-')} cannot be changed when resuming; pass only --resume RUN_DIR.")


def load_params(directory: Path, template):
    """Policy parameters from the newest msgpack checkpoint (``lm sft``, and ``lm rl`` before orbax).

    Those checkpoints hold the whole run state (``{"params", "opt_state", ...}``); older ones hold
    the parameters alone. Both restore into ``template`` (freshly initialised parameters). Orbax
    checkpoints of ``lm rl`` are read by :func:`longhorizon.lm.run.load_policy`.
    """
    from flax import serialization

    from longhorizon.runner import checkpoint

    meta = checkpoint.latest_meta(directory)
    if meta is None:
        raise UsageError(f"no checkpoint in {directory}; that run saved none, so train it again or pick another folder.")
    path = Path(directory) / meta["file"]
    try:
        raw = serialization.msgpack_restore(path.read_bytes())
        return serialization.from_state_dict(template, raw.get("params", raw))
    except Exception as error:  # msgpack and flax raise several types on a damaged or foreign file
        raise UsageError(f"checkpoint {path} cannot be read ({type(error).__name__}); it does not match this model "
                         "configuration or is damaged.") from None
