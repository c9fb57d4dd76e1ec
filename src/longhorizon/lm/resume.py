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

from pathlib import Path

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.runner.interrupts import INTERRUPTED_EXIT, StopRequest  # noqa: F401  (one Ctrl-C policy for every run)


def rng_state(rng: np.random.Generator) -> dict:
    """The JSON-able state of a numpy generator (restored by :func:`set_rng_state`)."""
    return rng.bit_generator.state


def set_rng_state(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


def check_fresh(results, resume: bool) -> None:
    """A new run must not overwrite another run's folder."""
    from longhorizon.runner import checkpoint
    from longhorizon.runner.lock import refuse_if_held

    refuse_if_held(results.root)
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
    """Policy parameters from the newest intact msgpack checkpoint (``lm sft``, and ``lm rl`` before orbax).

    Those checkpoints hold the whole run state (``{"params", "opt_state", ...}``); older ones hold
    the parameters alone. Both restore into ``template`` (freshly initialised parameters). Orbax
    checkpoints of ``lm rl`` are read by :func:`longhorizon.lm.run.load_policy`.
    """
    from flax import serialization

    from longhorizon.runner import checkpoint

    if checkpoint.latest_meta(directory) is None:
        raise UsageError(f"no checkpoint in {directory}; that run saved none, so train it again or pick another folder.")
    data, record, verified = checkpoint.read_verified(directory)  # the newest intact one
    path = Path(directory) / record["file"]
    try:
        raw = serialization.msgpack_restore(data)
        return serialization.from_state_dict(template, raw.get("params", raw))
    except Exception as error:  # msgpack and flax raise several types on a damaged or foreign file
        cause = "" if verified else " or is damaged"
        raise UsageError(f"checkpoint {path} cannot be read ({type(error).__name__}); it does not match this model "
                         f"configuration{cause}.") from None
