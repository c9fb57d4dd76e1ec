"""config -> run -> results folder.

A run is described by a :class:`RunSpec`. :func:`train` builds the environment and the algorithm
(failing on bad input before anything compiles), compiles one chunk, then loops over chunks:
log a metrics row, evaluate now and then, checkpoint, stop early if asked. Ctrl-C saves the last
finished chunk; NaN/Inf stops with a message naming the chunk and keeps the last good checkpoint.
``--resume`` restores the newest checkpoint and continues with the same compiled program, so the
parameters at the end equal those of an uninterrupted run with the same seed.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from longhorizon import __version__
from longhorizon import algos as algo_registry
from longhorizon.config import apply_overrides
from longhorizon.engine import Engine
from longhorizon.envs import env_name, make, recorded_env_id
from longhorizon.envs.gymnasium import is_host_env
from longhorizon.errors import TrainingDiverged, UsageError
from longhorizon.runner import checkpoint
from longhorizon.runner.evaluate import evaluate
from longhorizon.runner.interrupts import Interrupted, StopRequest
from longhorizon.runner.lock import FolderLock, refuse_if_held
from longhorizon.runner.loggers import MetricsLoggers, require_wandb
from longhorizon.runner.plots import plot_runs
from longhorizon.runner.progress import ChunkProgress
from longhorizon.runner.results import ResultsDir, read_json


@dataclasses.dataclass
class RunSpec:
    algo: str
    env: Any  # an id, an .npz path, gymnasium:ID, pkg.module:factory, or an environment object
    config_overrides: dict[str, str] = dataclasses.field(default_factory=dict)
    env_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    env_params: Any = None  # params of a gymnax-style environment object (in place of its defaults)
    seeds: int = 1
    seed: int = 0
    out: str | None = None
    num_chunks: int = 25
    eval_every: int = 0  # chunks between greedy evaluations (0: only at the end)
    eval_episodes: int = 10
    target_return: float | None = None  # stop early once the mean greedy-eval return reaches it
    engine: str = "fused"
    num_devices: int | str = 1  # local devices the seeds are sharded over, or "all" (--engine fused only)
    quiet: bool = False
    # --engine ray only (see longhorizon.engine.ray)
    actors: int = 1
    address: str = "local"  # local | auto | HOST:PORT
    mode: str = "sync"  # sync (bit-identical to fused) | async (bounded staleness)
    max_staleness: int = 0
    actor_cpus: float = 1.0  # resources each actor declares; Ray places actors by them
    actor_gpus: float = 0.0
    wandb: str | None = None  # Weights & Biases project that also receives the metrics rows


RAY_DEFAULTS = {"actors": 1, "address": "local", "mode": "sync", "max_staleness": 0, "actor_cpus": 1.0, "actor_gpus": 0.0}


def default_out_dir(algo: str, env: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{algo}-{env.replace(':', '-').replace('/', '-')}-{stamp}"


def plan_chunks(num_updates: int, num_chunks: int) -> tuple[int, int]:
    """``(updates_per_chunk, chunks)`` that run exactly ``num_updates`` updates in at most ``num_chunks`` chunks.

    ``updates_per_chunk = ceil(num_updates / num_chunks)`` and ``chunks = ceil(num_updates / updates_per_chunk)``:
    every chunk but the last runs ``updates_per_chunk`` updates, the last runs the rest (the same
    compiled program, with the updates past the end masked), so no update is dropped and a learning-rate
    schedule reaches its end. ``chunks`` is smaller than ``num_chunks`` only when there are fewer updates
    than chunks, or when rounding leaves the last requested chunk empty.
    """
    updates_per_chunk = -(-num_updates // max(1, num_chunks))
    return updates_per_chunk, -(-num_updates // updates_per_chunk)


class Run:
    """A resolved run: algorithm module, config, environment, engine and results folder."""

    def __init__(self, spec: RunSpec):
        if spec.seeds < 1:
            raise UsageError(f"--seeds must be at least 1 (got {spec.seeds}); pass --seeds 1 or more.")
        if spec.eval_episodes < 1:
            raise UsageError(f"--eval-episodes must be at least 1 (got {spec.eval_episodes}); pass 10 for example.")
        if spec.num_chunks < 1:
            raise UsageError(f"--chunks must be at least 1 (got {spec.num_chunks}); pass 25 for example.")
        if spec.wandb is not None:
            require_wandb()
        self.spec = spec
        self.loggers: MetricsLoggers | None = None  # opened by _train once the folder is settled
        self.algo = algo_registry.get(spec.algo)
        self.env = make(spec.env, spec.env_params, **spec.env_overrides)  # unknown env fails here, before compiling
        base = self.algo.default_config(self.env)
        self.config = apply_overrides(base, spec.config_overrides)  # validates on construction
        self.algo.check_env(self.env, self.config)
        self.config = self.algo.resolve_config(self.env, self.config)  # settings that depend on the environment
        self.env = self.algo.wrap_env(self.env, self.config)  # e.g. the time step in the observation
        spu = self.algo.steps_per_update(self.config)
        self.num_updates = max(1, self.config.total_steps // spu)
        self.updates_per_chunk, self.num_chunks = plan_chunks(self.num_updates, spec.num_chunks)
        self.steps_per_update = spu
        self.steps_per_chunk = self.updates_per_chunk * spu
        self.out = Path(spec.out or default_out_dir(spec.algo, self.env.id))
        self.engine = self._make_engine()

    def updates_in_chunk(self, chunk: int) -> int:
        """Updates run by chunk ``chunk`` (0-based): ``updates_per_chunk``, the rest in the last one."""
        return min(self.updates_per_chunk, self.num_updates - chunk * self.updates_per_chunk)

    def env_steps_after(self, chunks_done: int) -> int:
        """Environment steps per seed once ``chunks_done`` chunks have run."""
        return min(chunks_done * self.updates_per_chunk, self.num_updates) * self.steps_per_update

    @functools.cached_property
    def results(self) -> ResultsDir:
        """The results folder, created when first used (so a dry run creates nothing)."""
        return ResultsDir(self.out)

    def _make_engine(self) -> Engine:
        if self.spec.engine != "ray" and RAY_DEFAULTS != {k: getattr(self.spec, k) for k in RAY_DEFAULTS}:
            raise UsageError("--actors, --address, --mode, --max-staleness, --actor-cpus and --actor-gpus apply to "
                             "--engine ray only; add --engine ray.")
        if str(self.spec.num_devices) != "1" and (self.spec.engine != "fused" or is_host_env(self.env)):
            engine = "host" if is_host_env(self.env) else self.spec.engine
            raise UsageError(f"--devices shards the fused engine's seeds over devices and this run uses the {engine} "
                             "engine; drop --devices.")
        if self.spec.engine in ("fused", "host") and is_host_env(self.env):  # Python envs: the host engine
            from longhorizon.engine.host import HostEngine

            return HostEngine(self.algo, self.env, self.config, self.spec.seeds, self.updates_per_chunk)
        if self.spec.engine == "host":
            raise UsageError(f"--engine host steps Python environments (gymnasium:ID); {self.env.id} runs inside XLA, "
                             f"so drop --engine host (the fused engine runs it).")
        if self.spec.engine == "fused":
            from longhorizon.engine.fused import FusedEngine, resolve_devices

            return FusedEngine(self.algo, self.env, self.config, self.spec.seeds, self.updates_per_chunk,
                               num_devices=resolve_devices(self.spec.num_devices, self.spec.seeds))
        if self.spec.engine == "ray":
            from longhorizon.engine import ray as ray_engine  # optional extra

            return ray_engine.make_engine(self)
        raise UsageError(f"unknown engine '{self.spec.engine}'; choose fused, host or ray.")

    def resolved_config(self) -> dict[str, Any]:
        return {
            "algo": self.spec.algo, "env": recorded_env_id(self.spec.env), "env_overrides": self.spec.env_overrides,
            "seeds": self.spec.seeds, "seed": self.spec.seed, "engine": self.engine.name,
            "num_devices": self.spec.num_devices, "seed_devices": self.engine.num_devices,
            "config": self.config.to_dict(), "config_overrides": self.spec.config_overrides,
            "num_chunks": self.num_chunks, "num_updates": self.num_updates,
            "updates_per_chunk": self.updates_per_chunk, "steps_per_chunk": self.steps_per_chunk, "eval_every": self.spec.eval_every,
            "eval_episodes": self.spec.eval_episodes, "target_return": self.spec.target_return,
            **({"ray": {k: getattr(self.spec, k) for k in RAY_DEFAULTS}} if self.spec.engine == "ray" else {}),
            "longhorizon_version": __version__, "jax_version": jax.__version__,
            "devices": [str(d) for d in jax.devices()],
        }


def spec_from_results(run_dir: str | os.PathLike, **changes: Any) -> RunSpec:
    """Rebuild the spec of an existing results folder (for --resume and eval)."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise UsageError(f"{run_dir} is not a longhorizon results folder (no config.json); pass the folder a train run wrote.")
    try:
        cfg = read_json(path)
        spec = RunSpec(algo=cfg["algo"], env=cfg["env"], config_overrides={k: _as_cli(v) for k, v in cfg["config"].items()},
                       env_overrides=cfg.get("env_overrides", {}), seeds=cfg["seeds"], seed=cfg["seed"], out=str(run_dir),
                       num_chunks=cfg["num_chunks"], eval_every=cfg.get("eval_every", 0),
                       eval_episodes=cfg.get("eval_episodes", 10), target_return=cfg.get("target_return"),
                       engine=cfg.get("engine", "fused"), num_devices=cfg.get("num_devices", 1), **cfg.get("ray", {}))
    except (KeyError, ValueError, TypeError) as error:
        raise UsageError(f"{path} is malformed ({error}); it was not written by `longhorizon train` or was edited by hand.") from None
    return dataclasses.replace(spec, **changes)


def dry_run(spec: RunSpec, resume: bool = False) -> dict[str, Any]:
    """The ``config.json`` that :func:`train` would write (with ``out``), checked as ``train`` checks it.

    Builds the run (algorithm, config, environment, engine options) and checks the results folder:
    a new run may not reuse a folder that holds a run, a resumed one needs a checkpoint. Nothing is
    compiled, initialised or written, and no folder is created.
    """
    run = Run(spec)
    run.engine.close()
    check_folder(run.out, resume)
    return {"out": str(run.out), **run.resolved_config()}


def check_folder(out: Path, resume: bool, saved: bool | None = None) -> None:
    """``out`` as a run needs it: a new run may not reuse a folder that holds a run, a resumed one needs a checkpoint.

    ``saved`` says whether ``out/checkpoints`` holds one, for runs whose checkpoints are not this
    runner's msgpack files (the LM loop's orbax steps); by default the msgpack index is read.
    """
    refuse_if_held(out)  # a live writer is named first, whatever else the folder holds
    if saved is None:
        saved = checkpoint.latest_meta(out / "checkpoints") is not None
    if resume and not saved:
        raise UsageError(f"no checkpoint in {out / 'checkpoints'}; the run saved none before it stopped, "
                         "so start it again without --resume.")
    if not resume and ((out / "metrics.jsonl").exists() or saved):
        raise UsageError(f"{out} already holds a run; pass --resume {out} to continue it or choose another --out.")


def _as_cli(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def train(spec: RunSpec, resume: bool = False, max_chunks: int | None = None, run: Run | None = None) -> dict[str, Any]:
    """Run training to completion (or ``max_chunks`` more chunks) and return the summary; ``run``, if
    given, is ``spec`` already resolved (a sweep passes one whose engine trains a config per seed row).

    Ctrl-C (:class:`~longhorizon.runner.interrupts.StopRequest`) lets start-up and the chunk in flight
    finish, saves, and raises :class:`~longhorizon.runner.interrupts.Interrupted` saying what was saved."""
    with StopRequest("chunk") as stop:
        run = Run(spec) if run is None else run
        lock = FolderLock(run.out)  # one writer per results folder; released however this process ends
        try:
            lock.acquire()
            return _train(run, resume, max_chunks, stop)
        finally:
            lock.release()
            if run.loggers is not None:
                run.loggers.close()
            run.engine.close()  # distributed and host engines release their workers and environments


def completed_summary(out: Path) -> dict[str, Any] | None:
    """The summary of a run in ``out`` that has finished (completed or reached its target), else None."""
    path = Path(out) / "summary.json"
    if not path.exists():
        return None
    try:
        summary = read_json(path)
    except ValueError:
        return None
    return summary if summary.get("status") in ("completed", "target_reached") else None


def _train(run: Run, resume: bool, max_chunks: int | None, stop: StopRequest) -> dict[str, Any]:
    spec, results, engine = run.spec, run.results, run.engine
    start_wall = time.perf_counter()
    check_folder(run.out, resume)
    if resume and (done := completed_summary(run.out)) is not None:
        print(f"{run.out} holds a finished run (status {done['status']}); nothing to resume, nothing changed.",
              file=sys.stderr)
        return done
    resume_hint = f"continue with `longhorizon train --resume {run.out}`"
    state = engine.init(spec.seed)
    first_chunk, prior, resume_step = 0, {"wall_seconds": 0.0, "train_seconds": 0.0, "compile_seconds": 0.0}, None
    if resume:
        state, meta = checkpoint.restore(results.checkpoints, state)
        first_chunk, resume_step = int(meta["chunk"]), int(meta["env_steps"])
        prior = {k: float(meta.get(k, 0.0)) for k in prior}
        results.truncate_metrics(run.env_steps_after(first_chunk))
    else:
        results.write_config(run.resolved_config())
    run.loggers = MetricsLoggers(results.root, read_json(results.config_path), wandb_project=spec.wandb,
                                 resume_step=resume_step)

    compile_seconds = engine.compile(state) if first_chunk < run.num_chunks else 0.0
    if stop.requested:  # Ctrl-C while starting: start-up was let finish, no chunk has run
        raise Interrupted(f"interrupted before training resumed: {results.checkpoints} still holds chunk "
                          f"{first_chunk}; {resume_hint}." if resume else
                          f"interrupted before the first chunk finished: nothing was saved; run the same command "
                          f"again to start {run.out} afresh.")
    eval_key = jax.random.PRNGKey(spec.seed + 10_000)
    status, train_seconds, chunk = "completed", prior["train_seconds"], first_chunk
    last_eval: list[float] | None = None
    last_returns = None
    stop_at = run.num_chunks if max_chunks is None else min(run.num_chunks, first_chunk + max_chunks)

    def wall() -> float:
        return prior["wall_seconds"] + time.perf_counter() - start_wall

    def save(chunk_index: int, good_state) -> None:
        checkpoint.save(results.checkpoints, chunk_index, good_state, {
            "env_steps": run.env_steps_after(chunk_index), "wall_seconds": wall(), "train_seconds": train_seconds,
            "compile_seconds": prior["compile_seconds"] + compile_seconds})

    progress = ChunkProgress(total_steps=run.env_steps_after(run.num_chunks), description=f"{spec.algo} · {spec.env}",
                             quiet=spec.quiet, completed=run.env_steps_after(first_chunk))
    saved = first_chunk if resume else None
    try:
        with progress:
            while chunk < stop_at:
                t0 = time.perf_counter()
                new_state, metrics = engine.run_chunk(state, run.updates_in_chunk(chunk))
                elapsed = time.perf_counter() - t0
                if not np.all(metrics["finite"]):
                    bad = [i for i, ok in enumerate(np.atleast_1d(metrics["finite"])) if not ok]
                    kept = f"the last good checkpoint (chunk {saved}) is kept in {results.checkpoints}" \
                        if saved is not None else "no checkpoint was saved before it"
                    raise TrainingDiverged(
                        f"NaN or Inf in the loss or parameters during chunk {chunk + 1} (seed index {bad}); "
                        f"{kept}; lower --learning-rate or --max-grad-norm and start again.")
                state, chunk = new_state, chunk + 1
                train_seconds += elapsed
                chunk_steps = run.env_steps_after(chunk) - run.env_steps_after(chunk - 1)
                row = _metrics_row(metrics, chunk, run.env_steps_after(chunk), spec.seeds * chunk_steps / elapsed, wall())
                row["updates"] = run.updates_in_chunk(chunk - 1)
                if row["episode_return_mean"] is None and last_returns is not None:
                    row.update(last_returns)  # no episode ended in this chunk: carry the last figures
                elif row["episode_return_mean"] is not None:
                    last_returns = {k: row[k] for k in ("episode_return_mean", "episode_return_min", "episode_return_max")}
                # The last chunk is always evaluated: that evaluation is the run's final one, the same
                # number in metrics.jsonl, TensorBoard, the curve and summary.json.
                if (spec.eval_every and chunk % spec.eval_every == 0) or chunk == run.num_chunks:
                    last_eval = evaluate(run.algo, state, run.env, jax.random.fold_in(eval_key, chunk), spec.eval_episodes,
                                         seed_indices=engine.row_seeds)
                    row["eval_return_mean"] = float(np.mean(last_eval))
                    row["eval_return_per_seed"] = last_eval
                run.loggers.log(results.append_metrics(row))
                save(chunk, state)
                saved = chunk
                progress.update(run.env_steps_after(chunk), row)
                if spec.target_return is not None and last_eval is not None and np.mean(last_eval) >= spec.target_return:
                    status = "target_reached"
                    break
                if stop.requested:
                    status = "interrupted"
                    break
        if chunk < run.num_chunks and status == "completed":
            status = "stopped"
    except KeyboardInterrupt:  # a second Ctrl-C: the chunk in flight is dropped, the saved ones stay
        status = "interrupted"
    except TrainingDiverged:
        _finish(run, state, chunk, "diverged", None, compile_seconds, prior, train_seconds, wall(), eval_key)
        raise

    final_eval = last_eval if status in ("completed", "target_reached") else None
    if status == "completed" and final_eval is None:  # resumed after the last chunk's save, before its summary
        final_eval = evaluate(run.algo, state, run.env, jax.random.fold_in(eval_key, chunk), spec.eval_episodes,
                              seed_indices=engine.row_seeds)
    summary = _finish(run, state, chunk, status, final_eval, compile_seconds, prior, train_seconds, wall(), eval_key)
    if status == "interrupted":
        if saved is None:
            raise Interrupted(f"interrupted before the first chunk finished: nothing was saved; run the same command "
                              f"again to start {run.out} afresh.", summary)
        raise Interrupted(f"interrupted: chunk {saved} of {run.num_chunks} is saved in {results.checkpoints}; "
                          f"{resume_hint}.", summary)
    return summary


def _metrics_row(metrics: dict[str, Any], chunk: int, env_steps: int, sps: float, wall_seconds: float) -> dict[str, Any]:
    episodes = np.asarray(metrics["episodes"], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_seed = np.where(episodes > 0, np.asarray(metrics["episode_return_sum"]) / np.maximum(episodes, 1), np.nan)
    has = np.isfinite(per_seed)
    row: dict[str, Any] = {"chunk": chunk, "env_steps": env_steps, "episodes": int(episodes.sum())}
    if has.any():
        row.update(episode_return_mean=float(np.nanmean(per_seed)), episode_return_min=float(np.nanmin(per_seed)),
                   episode_return_max=float(np.nanmax(per_seed)),
                   episode_return_per_seed=[None if not np.isfinite(v) else float(v) for v in per_seed])
    else:
        row.update(episode_return_mean=None, episode_return_min=None, episode_return_max=None)
    if "episode_length_sum" in metrics:  # CleanRL's episodic_length: mean per seed, then over the seeds with episodes
        lengths = np.asarray(metrics["episode_length_sum"], dtype=np.float64) / np.maximum(episodes, 1)
        row["episode_length_mean"] = float(np.mean(lengths[has])) if has.any() else None
    for key, value in metrics.items():
        if key not in ("episodes", "episode_return_sum", "episode_length_sum", "finite"):
            row[key] = float(np.mean(value))
    row.update(steps_per_second=sps, wall_seconds=wall_seconds)
    return row


def _finish(run: Run, state, chunk: int, status: str, final_eval, compile_seconds: float, prior: dict[str, float],
            train_seconds: float, wall_seconds: float, eval_key) -> dict[str, Any]:
    spec, results = run.spec, run.results
    env_steps = run.env_steps_after(chunk)
    summary = {
        "algo": spec.algo, "env": env_name(spec.env), "seeds": spec.seeds, "status": status, "chunks_done": chunk,
        "total_env_steps": env_steps, "total_env_steps_all_seeds": env_steps * spec.seeds,
        "final_eval_return": final_eval,
        "final_eval_return_mean": None if final_eval is None else float(np.mean(final_eval)),
        "eval_episodes": spec.eval_episodes,
        # Training throughput: env steps of all seeds per second of chunk execution (compile excluded).
        "steps_per_second": env_steps * spec.seeds / train_seconds if train_seconds > 0 else None,
        "compile_seconds": prior["compile_seconds"] + compile_seconds,
        "train_seconds": train_seconds, "wall_seconds": wall_seconds,
        "results": str(results.root),
    }
    results.write_summary(summary)
    if results.read_metrics():
        plot_runs([results.root], results.curve_path, title=f"{spec.algo} on {spec.env}")
    return summary
