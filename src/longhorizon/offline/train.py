"""Offline training: spec -> results folder, the one offline loop.

The control stack's fused engine scans ``collect -> learn`` with everything in the training state;
offline, ``collect`` would be "sample the dataset", and the dataset (up to millions of transitions)
must neither be copied per seed nor saved in every checkpoint. So the dataset is one shared argument
of the compiled chunk, ``jit(vmap_seeds(scan(sample -> learn)))`` (:func:`make_chunk`, using the
engine's :func:`~longhorizon.engine.fused.over_seeds`). :class:`OfflineTrainable` hands that chunk to
the runner's one training loop (:func:`longhorizon.runner.loop.train_loop`), which owns the results
folder, its lock, ``metrics.jsonl`` + TensorBoard, checkpoints, Ctrl-C, resume and the NaN stop;
evaluation (every ``eval_every`` chunks and at the end) runs in the real environment.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import time
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon import __version__
from longhorizon.config import apply_overrides
from longhorizon.core.nets import tree_all_finite
from longhorizon.engine.fused import compiled_init, mean_where, over_seeds
from longhorizon.errors import UsageError
from longhorizon.offline import agents
from longhorizon.offline.samplers import GoalData, goal_data
from longhorizon.runner.loop import Trainable, check_folder, train_loop
from longhorizon.runner.results import ResultsDir, read_json
from longhorizon.runner.run import plan_chunks

DATASET_KEYS = ("observations", "actions", "terminals", "next_observations")


@dataclasses.dataclass
class OfflineSpec:
    """One offline run. ``config_overrides`` are CLI strings (``{"option_length": "10"}``), applied on top
    of ``preset`` (``cpu``: the agent's defaults, sized for 2 cores; ``paper``: 512x3 networks, batch 1024)."""

    agent: str
    dataset: Any  # a dataset name, an .npz path, or a dict of arrays (load_dataset's keys)
    config_overrides: dict[str, str] = dataclasses.field(default_factory=dict)
    preset: str = "cpu"
    seeds: int = 1
    seed: int = 0
    num_updates: int = 100_000
    num_chunks: int = 20
    eval_every: int = 0  # chunks between evaluations (0: only at the end)
    eval_episodes: int = 0  # per task; 0: no evaluation
    eval_env: str | None = None  # the environment to evaluate in (default: the dataset's name)
    eval_tasks: tuple[int, ...] = (1, 2, 3, 4, 5)
    dataset_size: int | None = None  # transitions to load (default: the whole dataset)
    out: str | None = None
    quiet: bool = False


def spec_from_cli(agent: str, dataset: str, settings: Sequence[str] = (), **options: Any) -> OfflineSpec:
    """An :class:`OfflineSpec` from CLI text: ``settings`` are ``KEY=VALUE`` config fields (``--set
    option_length=10``, dashes or underscores), parsed and validated when the run is resolved;
    ``options`` are the spec's other fields (``seeds=3``, ``num_updates=...``)."""
    overrides = {}
    for text in settings:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects KEY=VALUE, got '{text}'; write e.g. --set option_length=10.")
        overrides[key.strip().replace("-", "_")] = value.strip()
    unknown = sorted(set(options) - {f.name for f in dataclasses.fields(OfflineSpec)})
    if unknown:
        raise UsageError(f"unknown option {unknown[0]} of offline train; see `longhorizon offline train --help`.")
    return OfflineSpec(agent, dataset, overrides, **options)


def dataset_label(dataset: Any) -> str:
    return "dict" if isinstance(dataset, dict) else Path(str(dataset)).name.removesuffix(".npz")


class OfflineRun:
    """A resolved spec: agent module, config, chunk plan and results folder; the dataset is read by :meth:`data`."""

    def __init__(self, spec: OfflineSpec):
        for name, low in (("seeds", 1), ("num_updates", 1), ("num_chunks", 1), ("eval_every", 0), ("eval_episodes", 0)):
            if getattr(spec, name) < low:
                raise UsageError(f"--{name.replace('_', '-')} must be at least {low} (got {getattr(spec, name)}); pass a larger value.")
        if spec.eval_every and not spec.eval_episodes:
            raise UsageError("--eval-every needs --eval-episodes N (episodes per task) to evaluate; add it or drop --eval-every.")
        if spec.preset not in agents.PRESETS:
            raise UsageError(f"unknown preset '{spec.preset}'; choose one of: {', '.join(agents.PRESETS)}.")
        self.spec = spec
        self.agent = agents.get(spec.agent)
        self.config = apply_overrides(self.agent.Config(), {**agents.PRESETS[spec.preset], **spec.config_overrides})
        self.eval_env = spec.eval_env or (None if isinstance(spec.dataset, dict) or str(spec.dataset).endswith(".npz")
                                          else str(spec.dataset))
        if spec.eval_episodes and self.eval_env is None:
            raise UsageError("evaluation needs an environment name for a dataset file; pass --eval-env NAME "
                             "(e.g. pointmaze-large-stitch-v0) or --eval-episodes 0.")
        check_dataset(spec.dataset)
        self.updates_per_chunk, self.num_chunks = plan_chunks(spec.num_updates, spec.num_chunks)
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.out = Path(spec.out or Path("runs") / f"offline-{spec.agent}-{dataset_label(spec.dataset)}-{stamp}")

    @functools.cached_property
    def data(self) -> GoalData:
        if isinstance(self.spec.dataset, dict):
            return goal_data(self.spec.dataset)
        from longhorizon.offline.datasets import load_dataset

        # with an evaluation environment, the observation and action sizes are checked against it
        return goal_data(load_dataset(self.spec.dataset, size=self.spec.dataset_size, seed=self.spec.seed,
                                      env=self.spec.eval_env if self.spec.eval_episodes else None))

    @functools.cached_property
    def eval_envs(self) -> list:
        """``eval_episodes`` OGBench environments, made once and reused by every evaluation."""
        from longhorizon.offline.envs import make_env

        return [make_env(self.eval_env) for _ in range(self.spec.eval_episodes)]

    def updates_after(self, chunks: int) -> int:
        return min(chunks * self.updates_per_chunk, self.spec.num_updates)

    def resolved_config(self) -> dict[str, Any]:
        s = self.spec
        return {"agent": s.agent, "dataset": "dict" if isinstance(s.dataset, dict) else str(s.dataset), "preset": s.preset,
                "config": self.config.to_dict(), "config_overrides": s.config_overrides, "seeds": s.seeds, "seed": s.seed,
                "num_updates": s.num_updates, "num_chunks": self.num_chunks, "updates_per_chunk": self.updates_per_chunk,
                "eval_every": s.eval_every, "eval_episodes": s.eval_episodes, "eval_env": self.eval_env,
                "eval_tasks": list(s.eval_tasks), "dataset_size": s.dataset_size,
                "longhorizon_version": __version__, "jax_version": jax.__version__, "devices": [str(d) for d in jax.devices()]}


def check_dataset(dataset: Any) -> None:
    """Refuse a dataset that cannot be read, without loading or generating it."""
    if isinstance(dataset, dict):
        missing = [k for k in DATASET_KEYS if k not in dataset]
        if missing:
            raise UsageError(f"the dataset dict lacks {', '.join(missing)}; pass observations, actions, terminals and next_observations.")
        return
    path = Path(str(dataset))
    if str(dataset).endswith(".npz") or path.exists():
        if not path.is_file():
            raise UsageError(f"dataset file {path} does not exist; pass an OGBench-format .npz or a dataset name.")
        return
    from longhorizon.offline.datagen import recipe

    recipe(str(dataset))  # an unknown name fails here, before anything is generated


def make_chunk(agent, config, updates_per_chunk: int):
    """``chunk(state, data, num_updates) -> (state, summary)``: ``updates_per_chunk`` scanned updates of
    which the first ``num_updates`` run (a run's last, shorter chunk reuses the program); the summary
    averages each metric over the updates that ran and says whether all were ``finite``."""
    def chunk(state, data, num_updates):
        def step(state, index):
            ran = index < num_updates
            run = lambda s: agents.update(agent, config, s, data)
            skip = lambda s: (s, jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype), jax.eval_shape(run, s)[1]))
            state, metrics = jax.lax.cond(ran, run, skip, state)
            finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(metrics)]))
            return state, {**metrics, "loss_finite": finite, "ran": ran}

        state, metrics = jax.lax.scan(step, state, jnp.arange(updates_per_chunk))
        ran, finite = metrics.pop("ran"), metrics.pop("loss_finite")
        summary = {k: mean_where(v, ran) for k, v in metrics.items()}
        summary["finite"] = jnp.all(finite | ~ran) & tree_all_finite(agent.agent_params(state))
        return state, summary

    return chunk



def train_in_memory(model, config, data: GoalData, seeds: int, updates: int, seed: int = 0, action_dim: int = 0):
    """``updates`` updates of ``model`` (a module with an agent's ``init``, ``sample``, ``learn`` and
    ``agent_params``, e.g. :mod:`longhorizon.offline.subgoal_diffusion`) on ``data``, ``seeds`` seeds vmapped,
    as one compiled chunk of the offline loop with no results folder: for a model a study trains and
    uses at once. Seed ``i`` starts from ``fold_in(PRNGKey(seed), i)``; ``action_dim`` is what ``init``
    is told (0 for a model that never acts). Returns the final state and the chunk's summary (its
    metrics averaged over the updates, and ``finite``), both with a leading seed axis."""
    obs_dim = data.observations.shape[-1]
    init = compiled_init(lambda k: model.init(k, obs_dim, action_dim, config), seeds)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(jnp.arange(seeds))
    chunk = jax.jit(over_seeds(make_chunk(model, config, updates), seeds, shared_args=2))
    return chunk(init(keys), data, jnp.int32(updates))

def spec_from_results(run_dir, **changes: Any) -> OfflineSpec:
    """The spec a results folder was written by (its ``config.json``, :meth:`OfflineRun.resolved_config`),
    to continue it with ``--resume``; ``changes`` replace fields that may change then (``quiet``)."""
    folder = Path(run_dir)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise UsageError(f"--resume {folder} has no config.json; pass a folder written by `longhorizon offline train`.")
    saved = read_json(config_path)
    try:
        spec = OfflineSpec(agent=saved["agent"], dataset=saved["dataset"], config_overrides=saved["config_overrides"],
                           preset=saved["preset"], seeds=saved["seeds"], seed=saved["seed"],
                           num_updates=saved["num_updates"], num_chunks=saved["num_chunks"],
                           eval_every=saved["eval_every"], eval_episodes=saved["eval_episodes"],
                           eval_env=saved["eval_env"], eval_tasks=tuple(saved["eval_tasks"]),
                           dataset_size=saved["dataset_size"], out=str(folder))
    except KeyError as missing:
        raise UsageError(f"{config_path} lacks {missing}; it was not written by `longhorizon offline train`.") from None
    return dataclasses.replace(spec, **changes)


def dry_run(spec: OfflineSpec, resume: bool = False) -> dict[str, Any]:
    """What :func:`train` would do, checked as it checks it; nothing is read, compiled or written."""
    run = OfflineRun(spec)
    check_folder(run.out, resume)
    return {"out": str(run.out), **run.resolved_config()}


def train(spec: OfflineSpec, resume: bool = False) -> dict[str, Any]:
    """Train ``spec`` to completion (or continue a stopped run with ``resume``); returns ``summary.json``'s
    contents plus ``state``, the final training state (leading seed axis), for callers that go on computing."""
    summary, state = train_loop(lambda: OfflineTrainable(OfflineRun(spec)), resume)
    return {**summary, "state": state}


class OfflineTrainable(Trainable):
    """An offline run as the loop drives it: each chunk is one compiled ``scan(sample -> learn)`` over the
    shared dataset, for every seed."""

    step_key = "step"  # updates per seed

    def __init__(self, run: OfflineRun):
        spec = run.spec
        self.run = run
        self.out, self.num_chunks, self.eval_every, self.quiet = run.out, run.num_chunks, spec.eval_every, spec.quiet
        self.resume_command = f"longhorizon offline train --resume {run.out}"
        self.progress_description = f"{spec.agent} · {dataset_label(spec.dataset)} (updates)"
        self.compiled = None

    def resolved_config(self) -> dict[str, Any]:
        return self.run.resolved_config()

    def init_state(self):
        run, spec = self.run, self.run.spec
        data = run.data  # a malformed dataset fails here, before the folder is written
        obs_dim, action_dim = data.observations.shape[-1], data.actions.shape[-1]
        init = compiled_init(lambda k: run.agent.init(k, obs_dim, action_dim, run.config), spec.seeds)
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(spec.seed), i))(jnp.arange(spec.seeds))
        return init(keys)

    def compile(self, state) -> float:
        run = self.run
        chunk_fn = jax.jit(over_seeds(make_chunk(run.agent, run.config, run.updates_per_chunk), run.spec.seeds,
                                      shared_args=2))
        t0 = time.perf_counter()
        self.compiled = chunk_fn.lower(state, run.data, jnp.int32(run.updates_per_chunk)).compile()
        return time.perf_counter() - t0

    def step_after(self, chunks_done: int) -> int:
        return self.run.updates_after(chunks_done)

    def run_chunk(self, state, chunk: int):
        updates = self.step_after(chunk + 1) - self.step_after(chunk)
        state, metrics = self.compiled(state, self.run.data, jnp.int32(updates))
        return state, jax.device_get(metrics)

    def metrics_row(self, metrics: dict[str, Any], chunk: int, elapsed: float) -> dict[str, Any]:
        updates = self.step_after(chunk) - self.step_after(chunk - 1)
        rate = self.run.spec.seeds * updates / elapsed
        return {"updates": updates, **{k: float(np.mean(v)) for k, v in metrics.items() if k != "finite"},
                "updates_per_second": rate, "steps_per_second": rate}

    def evaluate(self, state, chunk: int) -> list[float] | None:
        return evaluate_seeds(self.run, state, chunk) if self.run.spec.eval_episodes else None

    def summary_fields(self, state, chunks_done: int, final_eval, train_seconds: float) -> dict[str, Any]:
        spec = self.run.spec
        updates = self.step_after(chunks_done)
        # ``final_success`` is ``final_eval_return`` under the name offline readers know (a success rate)
        return {"agent": spec.agent, "dataset": dataset_label(spec.dataset), "seeds": spec.seeds, "updates": updates,
                "updates_per_second": updates * spec.seeds / train_seconds if train_seconds > 0 else None,
                "final_success": final_eval, "final_success_mean": None if final_eval is None else float(np.mean(final_eval))}

    def plot(self, results: ResultsDir) -> None:
        plot_curve(results)


def evaluate_seeds(run: OfflineRun, state, chunk: int) -> list[float]:
    """Success rate (mean over its fixed tasks) of every seed's policy in ``run.eval_env``; the same
    evaluation episodes for every seed and chunk, so curves compare policies, not start states."""
    from longhorizon.offline.envs import evaluate

    act = jax.jit(lambda params, obs, goals: run.agent.act(params, obs, goals, run.config))
    rates = []
    for i in range(run.spec.seeds):
        params = jax.tree.map(lambda x: x[i], run.agent.agent_params(state))
        result = evaluate(lambda obs, goals, key: act(params, obs, goals), run.eval_env, task_ids=run.spec.eval_tasks,
                          episodes_per_task=run.spec.eval_episodes, seed=run.spec.seed, envs=run.eval_envs)
        rates.append(float(result["success"]))
    return rates


def plot_curve(results: ResultsDir) -> None:
    """``curve.png``: every ``*loss`` metric and the evaluation success rate against updates."""
    rows = results.read_metrics()
    if not rows:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_eval) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
    steps = [r["step"] for r in rows]
    for key in sorted(k for k in rows[-1] if k.endswith("loss")):
        ax_loss.plot(steps, [r.get(key) for r in rows], label=key)
    ax_loss.set(xlabel="updates", ylabel="loss (mean over seeds)", yscale="symlog")
    ax_loss.legend(fontsize=7)
    evals = [r for r in rows if r.get("eval_return_mean") is not None]
    ax_eval.plot([r["step"] for r in evals], [r["eval_return_mean"] for r in evals], "o-")
    ax_eval.set(xlabel="updates", ylabel="success rate", ylim=(-0.02, 1.02), title="evaluation (mean over seeds)")
    for ax in (ax_loss, ax_eval):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(results.curve_path)
    plt.close(fig)
