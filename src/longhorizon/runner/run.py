"""config -> run -> results folder.

A run is described by a :class:`RunSpec`. :func:`train` builds the environment and the algorithm
(failing on bad input before anything compiles) and hands the run, as a :class:`ControlTrainable`
whose engine runs each chunk for every seed, to the one training loop
(:func:`longhorizon.runner.loop.train_loop`): metrics rows, evaluation now and then, a checkpoint
per chunk, Ctrl-C, NaN/Inf and early stops. ``--resume`` restores the newest checkpoint and continues
with the same compiled program, so the parameters at the end equal those of an uninterrupted run
with the same seed.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import os
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
from longhorizon.errors import UsageError
from longhorizon.runner.evaluate import evaluate
from longhorizon.runner.loggers import require_wandb
from longhorizon.runner.loop import Trainable, check_folder, train_loop  # noqa: F401 (check_folder: re-exported)
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


def _as_cli(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def train(spec: RunSpec, resume: bool = False, max_chunks: int | None = None, run: Run | None = None) -> dict[str, Any]:
    """Run training to completion (or ``max_chunks`` more chunks) and return the summary; ``run``, if
    given, is ``spec`` already resolved (a sweep passes one whose engine trains a config per seed row).

    The run goes through :func:`longhorizon.runner.loop.train_loop`: Ctrl-C lets start-up and the chunk in
    flight finish, saves, and raises :class:`~longhorizon.runner.interrupts.Interrupted` saying what was saved."""
    summary, _ = train_loop(lambda: ControlTrainable(Run(spec) if run is None else run), resume, max_chunks)
    return summary


class ControlTrainable(Trainable):
    """A control run (:class:`Run`) as the loop drives it: its engine runs the chunks for every seed."""

    step_key = "env_steps"
    divergence_advice = "lower --learning-rate or --max-grad-norm and start again"

    def __init__(self, run: Run):
        spec = run.spec
        self.run, self.engine = run, run.engine
        self.out, self.num_chunks, self.eval_every = run.out, run.num_chunks, spec.eval_every
        self.quiet, self.wandb = spec.quiet, spec.wandb
        self.resume_command = f"longhorizon train --resume {run.out}"
        self.progress_description = f"{spec.algo} · {spec.env}"
        self.plot_title = f"{spec.algo} on {spec.env}"
        self.eval_key = jax.random.PRNGKey(spec.seed + 10_000)
        self.last_returns: dict[str, Any] | None = None  # carried into rows of chunks in which no episode ended

    def resolved_config(self) -> dict[str, Any]:
        return self.run.resolved_config()

    def init_state(self):
        return self.engine.init(self.run.spec.seed)

    def compile(self, state) -> float:
        return self.engine.compile(state)

    def run_chunk(self, state, chunk: int):
        return self.engine.run_chunk(state, self.run.updates_in_chunk(chunk))

    def step_after(self, chunks_done: int) -> int:
        return self.run.env_steps_after(chunks_done)

    def metrics_row(self, metrics: dict[str, Any], chunk: int, elapsed: float) -> dict[str, Any]:
        chunk_steps = self.step_after(chunk) - self.step_after(chunk - 1)
        row = _metrics_row(metrics, self.run.spec.seeds * chunk_steps / elapsed)
        row["updates"] = self.run.updates_in_chunk(chunk - 1)
        if row["episode_return_mean"] is None and self.last_returns is not None:
            row.update(self.last_returns)  # no episode ended in this chunk: carry the last figures
        elif row["episode_return_mean"] is not None:
            self.last_returns = {k: row[k] for k in ("episode_return_mean", "episode_return_min", "episode_return_max")}
        return row

    def evaluate(self, state, chunk: int) -> list[float]:
        return evaluate(self.run.algo, state, self.run.env, jax.random.fold_in(self.eval_key, chunk),
                        self.run.spec.eval_episodes, seed_indices=self.engine.row_seeds)

    def target_reached(self, evaluation: list[float]) -> bool:
        target = self.run.spec.target_return
        return target is not None and float(np.mean(evaluation)) >= target

    def summary_fields(self, state, chunks_done: int, final_eval, train_seconds: float) -> dict[str, Any]:
        spec = self.run.spec
        env_steps = self.step_after(chunks_done)
        return {"algo": spec.algo, "env": env_name(spec.env), "seeds": spec.seeds,
                "total_env_steps": env_steps, "total_env_steps_all_seeds": env_steps * spec.seeds,
                "eval_episodes": spec.eval_episodes,
                # Training throughput: env steps of all seeds per second of chunk execution (compile excluded).
                "steps_per_second": env_steps * spec.seeds / train_seconds if train_seconds > 0 else None}

    def close(self) -> None:
        self.engine.close()  # distributed and host engines release their workers and environments


def _metrics_row(metrics: dict[str, Any], sps: float) -> dict[str, Any]:
    episodes = np.asarray(metrics["episodes"], dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_seed = np.where(episodes > 0, np.asarray(metrics["episode_return_sum"]) / np.maximum(episodes, 1), np.nan)
    has = np.isfinite(per_seed)
    row: dict[str, Any] = {"episodes": int(episodes.sum())}
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
    row["steps_per_second"] = sps
    return row
