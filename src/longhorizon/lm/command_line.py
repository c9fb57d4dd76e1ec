"""What the ``longhorizon lm`` commands share (``lm sft|rl|eval`` in :mod:`longhorizon.lm.cli`, ``lm agent``
in :mod:`longhorizon.lm.agents.cli`): a run's options, new or resumed, and running a spec through the
LM run spine or printing its plan. Heavy modules are imported inside the functions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from longhorizon.errors import UsageError
from longhorizon.runner.command_line import print_json


# where a run's processes are (lm.processes): the same three options on `lm rl`, `lm sft` and `lm agent`
COORDINATOR_ADDRESS = typer.Option(None, envvar="JAX_COORDINATOR_ADDRESS", help="HOST:PORT of process 0 in a run of "
                                   "several processes (one per host; docs/scale.md); with --num-processes and "
                                   "--process-id.")
NUM_PROCESSES = typer.Option(None, envvar="JAX_NUM_PROCESSES", help="Processes in a multi-process run (--mesh then "
                             "spans the devices of all of them).")
PROCESS_ID = typer.Option(None, envvar="JAX_PROCESS_ID", help="This process's number, 0..N-1: process 0 writes --out, "
                          "process k writes OUT/process-k.")

# rollout workers on Ray (lm.agents.async_rollout): the same three options on `lm rl` and `lm agent`
ACTORS = typer.Option(0, help="Ray rollout workers sampling the completions (0: in this process).")
MODE = typer.Option("sync", help="--actors: sync (every batch sampled by the current policy, bit-identical to "
                    "--actors 0) or async (the workers sample ahead; docs/scale.md).")
MAX_STALENESS = typer.Option(1, help="--mode async: the largest policy-version lag of a batch (corrected by the "
                             "truncated importance weights of the decoupled objective).")


def check_worker_options(o: dict, given: set[str]) -> None:
    """Refuse a rollout-worker option that nothing in this run would read."""
    for name in ("mode", "max_staleness"):
        if name in given and not o.get("actors"):
            raise UsageError(f"--{name.replace('_', '-')} applies to Ray rollout workers; add --actors N or drop it.")
    if "max_staleness" in given and o.get("mode") != "async":
        raise UsageError("--max-staleness bounds asynchronous batches; add --mode async or drop --max-staleness.")


def workers_config(o: dict, requests_per_batch: int = 1):
    """The rollout workers' :class:`longhorizon.lm.agents.async_rollout.Config` of a run's options (None: none)."""
    if not o.get("actors"):
        return None
    from longhorizon.lm.agents.async_rollout import Config

    return Config(actors=o["actors"], mode=o["mode"], max_staleness=o["max_staleness"] if o["mode"] == "async" else 0,
                  requests_per_batch=requests_per_batch)


def run_options(ctx: typer.Context, resume: Optional[Path], command: str) -> dict:
    """The run's options: those given now, or with ``--resume`` the saved ones (nothing else may be given but the
    mesh and where the processes are). A multi-process run joins its processes here, before JAX starts."""
    from longhorizon.lm.processes import LAUNCH_OPTIONS, Launch, join, process_folder
    from longhorizon.lm.resume import reject_changes, resume_options

    launch = Launch.of(ctx.params)
    if ctx.params.get("dry_run"):
        launch.check()
    else:
        join(launch)
    if resume is not None:
        # the checkpoints hold whole arrays restored into the new run's shardings, so a run may continue on another
        # mesh, or on another number of processes
        reject_changes(ctx, allowed=("resume", "dry_run", "mesh", *LAUNCH_OPTIONS))
        options = {**resume_options(resume, command), "out": str(resume)}
        mesh = ctx.params.get("mesh")
        if mesh is not None and mesh != options.get("mesh"):
            options["mesh"] = mesh
            if not ctx.params.get("dry_run"):
                _record_mesh_change(process_folder(resume), mesh)
        return options
    if ctx.params.get("out") is None:
        raise UsageError(f"--out is required: the results folder for `longhorizon {command}` (or --resume RUN_DIR).")
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in ctx.params.items()
            if k not in ("resume", "dry_run", *LAUNCH_OPTIONS)}


def _record_mesh_change(folder: Path, mesh: str) -> None:
    """config.json of a run resumed on another mesh: the new mesh (what a later ``--resume`` uses) and the
    list of earlier ones (``meshes_before``); refused while another process writes the folder."""
    from longhorizon.lm.sharding import mesh_sizes
    from longhorizon.runner.lock import refuse_if_held
    from longhorizon.runner.results import read_json, write_json_atomic

    mesh_sizes(mesh)  # the spelling, before anything is written
    refuse_if_held(folder)
    config = read_json(folder / "config.json")
    config.setdefault("meshes_before", []).append(config.get("mesh"))
    config["mesh"] = config["options"]["mesh"] = mesh
    write_json_atomic(folder / "config.json", config)


def plan_or_run(spec, command: str, resume: bool, dry_run: bool) -> dict | None:
    """``--dry-run``: print the plan (the config.json the run would write, with its results folder) and
    return None; else run the spec through the LM run spine and return its summary (Ctrl-C: the saved
    step and how to resume, exit code INTERRUPTED_EXIT)."""
    from longhorizon.lm.run import Interrupted, run_rl
    from longhorizon.lm.run import dry_run as plan_run

    if dry_run:
        print_json(plan_run(spec, resume))
        return None
    try:
        return run_rl(spec, resume=resume)
    except Interrupted as stop:
        raise interrupted(command, stop.folder, stop.step) from None


def interrupted(command: str, folder, step: int) -> typer.Exit:
    """Say which step a run stopped by Ctrl-C saved and how to continue; exit code 130."""
    from longhorizon.lm.resume import INTERRUPTED_EXIT

    print(f"interrupted: checkpoint saved at step {step}; continue with `longhorizon {command} --resume {folder}`.",
          file=sys.stderr)
    return typer.Exit(INTERRUPTED_EXIT)
