"""The LM spine: run specs and the one loop that runs them (:func:`run_rl`).

A spec is an :class:`RLSpec` (GRPO family, ``lm rl``) or a :class:`longhorizon.lm.sft.SFTSpec`
(supervised fine-tuning, ``lm sft --dataset``); once the policy is loaded, ``spec.build(policy)``
gives the loop its :class:`Parts` (trainer, sampler, evaluation). ``lm rl``, ``lm sft`` and the
reproductions only build specs. The loop owns the results folder (one writer:
:class:`longhorizon.runner.lock.FolderLock`): ``config.json``, ``metrics.jsonl`` (one row per RL
step, also as TensorBoard events in ``tensorboard/``), ``summary.json``, ``curve.png`` and
``checkpoints/`` (orbax, :mod:`longhorizon.lm.run_checkpoint`). A fresh run with an :class:`EvalSpec`
first evaluates the starting policy (a metrics row at step 0 and ``summary["eval_start"]``, so that every
curve starts at the base; a resumed run does not evaluate it again). Per step::

    items, sizes = sampler.sample(items_per_step)
    metrics = trainer.step(items, sizes)            # GRPO family (lm.grpo.GRPOTrainer) or lm.sft.SFTTrainer
    row = metrics + groups_no_signal_fraction       # groups_all_equal / groups: groups without a GRPO signal
    evaluation = evaluate(...)  on steps k * every and the last step, else None
    row |= sampler.observe(metrics, evaluation)     # curriculum gates, SCALER's level, ...
    append the row; checkpoint every `checkpoint_every` steps, at the end and on Ctrl-C

Ctrl-C (:class:`longhorizon.lm.resume.StopRequest`) lets the step in flight finish, saves it and
raises :class:`Interrupted`; ``run_rl(spec, resume=True)`` restores parameters, optimiser state,
PRNG key, reference parameters (when ``beta > 0``; otherwise the reference is never read), counters
and the sampler's state, drops metric rows after the checkpoint and continues, so the result
equals an uninterrupted run bit for bit (XLA on CPU is deterministic).

The policy comes from :func:`load_policy`, the one place that turns an ``init`` (a results folder
of ``lm sft`` or ``lm rl``, a :class:`Pretrained` model such as SmolLM2, or a :class:`Policy`
already in memory) into parameters, model configuration and tokenizer. Rewards are the built-in
verifier of the task's problems, or TRL-style reward functions (``RLSpec.rewards``,
:class:`longhorizon.lm.data.RewardFunctions`) over dataset rows.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from longhorizon.errors import UsageError
from longhorizon.lm.data import DatasetSpec
from longhorizon.lm.evaluate import EvalSpec
from longhorizon.lm.grpo import GRPOConfig
from longhorizon.lm.protocols import Sampler, Trainer
from longhorizon.lm.resume import INTERRUPTED_EXIT  # noqa: F401  (re-exported: the CLI's exit code)
from longhorizon.runner.interrupts import Interrupted as RunInterrupted

OFFLOAD = ("none", "host")  # host: the update streams the model from host memory (lm.offload)

# ----------------------------------------------------------------------------- the policy


@dataclasses.dataclass(frozen=True)
class Policy:
    """A policy in memory: parameters, model configuration, tokenizer; ``label`` is what config.json records."""

    params: Any
    model_cfg: Any
    tokenizer: Any
    label: str = "in memory"
    config: dict = dataclasses.field(default_factory=dict)  # the config.json of the run that made it, if any


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """A pretrained model by ``--model`` name or path (:func:`longhorizon.lm.policy.load_pretrained`)."""

    model: str = "smollm2"
    dtype: str = "float32"

    def __post_init__(self):
        if self.dtype not in ("float32", "bfloat16"):
            raise UsageError(f"--dtype {self.dtype} is not supported; use float32 or bfloat16.")

    def check(self) -> None:
        """Refuse a ``--model`` that is no checkpoint, reading nothing but the folder's listing."""
        from longhorizon.lm.policy import resolve

        resolve(self.model)

    def load(self) -> Policy:
        from longhorizon.lm.policy import load_pretrained

        loaded = load_pretrained(self.model, self.dtype)
        return Policy(loaded.params, loaded.cfg, loaded.tokenizer, f"pretrained:{loaded.source}", {})


def policy_config(init: str | Path) -> dict:
    """The ``config.json`` of a policy folder, checked to hold a model and a checkpoint (no parameters loaded)."""
    from longhorizon.lm import run_checkpoint
    from longhorizon.runner import checkpoint
    from longhorizon.runner.results import read_json

    folder = Path(init)
    if not (folder / "config.json").exists():
        raise UsageError(f"{init} has no config.json; pass --init a folder written by `longhorizon lm sft` or `lm rl`.")
    config = read_json(folder / "config.json")
    if "model" not in config and "pretrained" not in config:
        raise UsageError(f"{init} holds no policy (its config.json has no model); pass --init a folder written by "
                         "`longhorizon lm sft` or `lm rl`.")
    if run_checkpoint.latest_step(folder / "checkpoints") is None and checkpoint.latest_meta(folder / "checkpoints") is None:
        raise UsageError(f"no checkpoint in {folder / 'checkpoints'}; that run saved none, so train it again or pick "
                         "another folder.")
    return config


def load_policy(init: str | Path | Policy | Pretrained) -> Policy:
    """The one place a run's policy is loaded: a :class:`Policy` as is, a :class:`Pretrained` model,
    or a results folder of ``lm sft`` (msgpack checkpoints) or ``lm rl`` (orbax checkpoints), newest
    checkpoint (a run that started from a pretrained model reloads that model's configuration and
    tokenizer, then its own parameters)."""
    if isinstance(init, Policy):
        return init
    if isinstance(init, Pretrained):
        return init.load()
    import jax

    from longhorizon.lm import run_checkpoint
    from longhorizon.lm.model import ModelConfig, init_params
    from longhorizon.lm.resume import load_params
    from longhorizon.lm.tokenizer import Tokenizer

    config = policy_config(init)
    if "pretrained" in config:
        base = Pretrained(**config["pretrained"]).load()
        tokenizer, model_cfg, template = base.tokenizer, base.model_cfg, base.params
    else:
        tokenizer = Tokenizer(config.get("alphabet", Tokenizer().alphabet))
        model_cfg = ModelConfig(**config["model"])
        template = init_params(jax.random.PRNGKey(0), model_cfg)
    folder = Path(init) / "checkpoints"
    if run_checkpoint.latest_step(folder) is not None:
        with run_checkpoint.RunCheckpoints(folder, read_only=True) as store:
            params = store.restore_params(template)
    else:
        params = load_params(folder, template)
    return Policy(params, model_cfg, tokenizer, str(init), config)


def _policy_record(init: str | Path | Policy | Pretrained) -> dict:
    """What config.json says about the policy, without loading parameters."""
    if isinstance(init, Policy):
        return {"init": init.label, "model": init.model_cfg, "alphabet": getattr(init.tokenizer, "alphabet", None)}
    if isinstance(init, Pretrained):
        init.check()
        return {"init": None, "pretrained": dataclasses.asdict(init)}
    config = policy_config(init)
    if "pretrained" in config:
        return {"init": str(init), "pretrained": config["pretrained"]}
    return {"init": str(init), "model": config["model"], "alphabet": config.get("alphabet")}


# ----------------------------------------------------------------------------- the spec


@dataclasses.dataclass(frozen=True, eq=False)
class Parts:
    """What a run spec builds for the loop once the policy is loaded (``spec.build(policy)``).

    ``trainer`` is a :class:`longhorizon.lm.protocols.Trainer`; the attributes named in ``arrays`` are
    checkpointed with the parameters and restored on resume. ``sampler`` follows
    :class:`longhorizon.lm.protocols.Sampler` and gives ``items_per_step`` items a step.
    ``evaluation`` (or None) has ``run(params, policy)``, ``row(evaluation)``, ``every`` and
    ``at_start`` as :class:`EvalSpec` has them. ``progress(metrics)`` is the progress bar's text,
    ``curve_keys`` the training metrics curve.png plots, ``title`` its title, ``task`` the bar's
    label and ``name`` what a sampler's preparation pass is announced as."""

    trainer: Trainer
    sampler: Sampler
    evaluation: Any
    arrays: tuple[str, ...]
    items_per_step: int
    progress: Any
    curve_keys: tuple[str, ...]
    title: str
    task: str
    name: str


def _grpo_progress(metrics: dict) -> str:
    return f"reward {metrics['reward']:.3f} kl {metrics.get('kl', 0):.4f}"


@dataclasses.dataclass(frozen=True)
class RLSpec:
    """Everything one RL run needs; :func:`run_rl` runs it.

    ``init``: the policy (see :func:`load_policy`); ``sampler``: a sampler spec of
    :mod:`longhorizon.lm.samplers`, or a :class:`longhorizon.lm.data.DatasetSpec` (prompts from files,
    TRL-style reward functions; it brings its own evaluation and rewards, so those stay None);
    ``rewards``: :class:`longhorizon.lm.data.RewardFunctions` scoring whole rollouts of the sampler's
    items (None: the task problems' built-in verifier); ``agent``: a
    :class:`longhorizon.lm.agents.spec.AgentSpec` makes each item a task row of a tool environment,
    played as a multi-turn episode (its evaluation is an :class:`longhorizon.lm.agents.spec.AgentEval`); ``checkpoint_every``: steps between checkpoints (0: about ten per
    run; the last step and Ctrl-C always save); ``seed``: the trainer's PRNG key (the sampler's
    seeds are its own); ``record``: extra config.json fields of whoever built the spec (the CLI keeps
    its options there for ``--resume``); ``offload``: ``"host"`` runs each optimiser step layer-streamed from
    host memory (:class:`longhorizon.lm.offload.LayerStreamedUpdate`, Llama-family policies), ``"none"`` in
    device memory.
    """

    out: str
    init: Any
    grpo: GRPOConfig
    sampler: Any
    steps: int
    prompts_per_step: int
    evaluation: EvalSpec | None = None
    checkpoint_every: int = 0
    seed: int = 0
    record: dict = dataclasses.field(default_factory=dict)
    rewards: Any = None
    agent: Any = None  # longhorizon.lm.agents.spec.AgentSpec: multi-turn episodes of a tool environment
    offload: str = "none"

    def __post_init__(self):
        # the learning-rate schedule spans the run: TRL's linear decay reaches 0 at the last optimiser step
        if isinstance(self.grpo, GRPOConfig) and isinstance(self.steps, int) and self.steps > 0:
            object.__setattr__(self, "grpo", self.grpo.for_run(self.steps))

    def check(self) -> None:
        """Refuse settings that cannot act, before anything loads or compiles."""
        if self.offload not in OFFLOAD:
            raise UsageError(f"--offload {self.offload} is unknown; use one of {', '.join(OFFLOAD)}.")
        if self.offload == "host" and self.agent is not None:
            raise UsageError("--offload host streams the update of `lm rl`; agent runs train in device memory, so drop it.")
        if self.offload == "host" and not _is_llama(self.init):
            raise UsageError("--offload host streams Llama-family models layer by layer, not an `lm sft` character "
                             "model; start from a pretrained --model or drop --offload.")
        if self.agent is not None:
            self.agent.check()
        if self.steps < 1:
            raise UsageError(f"--steps must be at least 1 (got {self.steps}).")
        if self.prompts_per_step < 1:
            raise UsageError(f"--prompts-per-step must be at least 1 (got {self.prompts_per_step}).")
        if self.checkpoint_every < 0:
            raise UsageError(f"--checkpoint-every must be 0 or positive (got {self.checkpoint_every}).")
        ev = self.evaluation
        if ev is not None:
            if not ev.problems:
                raise UsageError("the held-out set is empty; pass at least one held-out problem (--eval-problems).")
            if ev.every < 0:
                raise UsageError(f"--eval-every must be 0 or positive (got {ev.every}).")
            if ev.every > self.steps:
                raise UsageError(f"--eval-every {ev.every} is beyond the run's {self.steps} steps, so no periodic "
                                 f"evaluation would happen; pass at most --eval-every {self.steps} (or 0).")
        self.sampler.check(self.steps, ev)

    @property
    def checkpoint_interval(self) -> int:
        return self.checkpoint_every or max(1, self.steps // 10)

    def build(self, policy: Policy) -> Parts:
        """The trainer (GRPO family, or an agent's), the sampler and the evaluation, for ``policy``."""
        from longhorizon.lm.grpo import GRPOTrainer

        sampler_spec, ev_spec, grpo, rewards = self.sampler, self.evaluation, self.grpo, self.rewards
        if isinstance(sampler_spec, DatasetSpec):  # rows rendered with the policy's chat template, scored by reward functions
            rewards = sampler_spec.rewards
            sampler_spec, ev_spec, grpo = sampler_spec.bind(policy.tokenizer, grpo, policy.model_cfg.context_length)
        sampler = sampler_spec.build()
        if self.agent is not None:
            trainer = self.agent.trainer(policy, grpo, self.seed, sampler=sampler)
        else:
            updater = None
            if self.offload == "host":
                from longhorizon.lm.offload import LayerStreamedUpdate

                updater = LayerStreamedUpdate(policy.model_cfg, grpo)
            trainer = GRPOTrainer(policy.model_cfg, policy.params, policy.tokenizer, grpo, seed=self.seed,
                                  batch_rewards=rewards, updater=updater)
        # the reference is saved only when it is kept (beta > 0, or reference_kl to log the KL to it)
        arrays = ("opt_state", "key", *(("ref_params",) if grpo.keeps_reference else ()))
        return Parts(trainer, sampler, ev_spec, arrays, self.prompts_per_step, _grpo_progress,
                     ("reward", "entropy", "kl"), "GRPO", "rl", type(self.sampler).__name__)

    def config(self) -> dict:
        """The config.json this run writes (the policy's folder is read, its parameters are not)."""
        return {**self.record, **_policy_record(self.init), "grpo": self.grpo, "sampler": self.sampler.describe(),
                **({"rewards": self.rewards.describe()} if self.rewards is not None else {}),
                **({"agent": self.agent.describe()} if self.agent is not None else {}),
                "steps": self.steps, "prompts_per_step": self.prompts_per_step,
                "evaluation": self.evaluation.describe() if self.evaluation is not None else None,
                "checkpoint_every": self.checkpoint_interval, "seed": self.seed,
                **({"offload": self.offload} if self.offload != "none" else {})}


def _is_llama(init) -> bool:
    """Whether the policy ``init`` names is a Llama-family model (read from its config, nothing loaded)."""
    if isinstance(init, Pretrained):
        return True
    if isinstance(init, Policy):
        from longhorizon.lm.llama import LlamaConfig

        return isinstance(init.model_cfg, LlamaConfig)
    return "pretrained" in policy_config(init)


class Interrupted(RunInterrupted):
    """Ctrl-C stopped :func:`run_rl` after a whole step; ``step`` is saved in ``folder``."""

    def __init__(self, folder: Path, step: int):
        super().__init__(f"interrupted: checkpoint saved at step {step} in {folder}; continue with --resume {folder}.")
        self.folder, self.step = folder, step


def check_folder(spec: RLSpec, resume: bool) -> None:
    """A new run needs a folder without a run, a resumed one a checkpoint (the runner's one check)."""
    from longhorizon.lm import run_checkpoint
    from longhorizon.runner.run import check_folder as check

    out = Path(spec.out)
    check(out, resume, saved=run_checkpoint.latest_step(out / "checkpoints") is not None)


def dry_run(spec: RLSpec, resume: bool = False) -> dict:
    """The config.json :func:`run_rl` would write (with ``out``), checked as it checks; nothing loaded or written."""
    spec.check()
    check_folder(spec, resume)
    return {"out": spec.out, **spec.config()}


# ----------------------------------------------------------------------------- the loop


def run_rl(spec: RLSpec, *, resume: bool = False, quiet: bool = False) -> dict:
    """Run ``spec`` to its last step (or continue it with ``resume``) and return the summary.

    Raises :class:`Interrupted` after saving when Ctrl-C stopped it; a second Ctrl-C aborts at once
    (``KeyboardInterrupt``), leaving the last saved checkpoint.
    """
    from longhorizon.runner.lock import FolderLock

    from longhorizon.runner.interrupts import StopRequest

    spec.check()
    with StopRequest() as stop:  # from here on the first Ctrl-C stops at the next step boundary, saved
        lock = FolderLock(spec.out)  # one writer per results folder; released however this ends
        try:
            lock.acquire()
            return _run(spec, resume, quiet, stop)
        finally:
            lock.release()


def _saved_config_matches(saved: dict, config: dict) -> None:
    from longhorizon.runner.results import to_jsonable

    now = json.loads(json.dumps(to_jsonable(config)))
    for key in sorted(set(saved) | set(now)):
        if saved.get(key) != now.get(key):
            raise UsageError(f"the run in this folder was started with another {key!r} than the one given now; "
                             "resume it with the settings it was started with (or start a new run elsewhere).")


def _run(spec: RLSpec, resume: bool, quiet: bool, stop) -> dict:
    import numpy as np

    from longhorizon.lm.run_checkpoint import RunCheckpoints
    from longhorizon.runner.loggers import MetricsLoggers
    from longhorizon.runner.results import ResultsDir, read_json, write_json_atomic

    t_start = time.perf_counter()
    check_folder(spec, resume)
    config = spec.config()
    policy = load_policy(spec.init)
    results = ResultsDir(spec.out)
    parts = spec.build(policy)
    trainer, sampler, ev_spec = parts.trainer, parts.sampler, parts.evaluation

    def trainer_arrays() -> dict:
        return {name: getattr(trainer, name) for name in parts.arrays}

    store = RunCheckpoints(results.checkpoints)
    loggers = None
    try:
        first, prior_wall, sampler_record, eval_start = 0, 0.0, None, None
        if resume:
            _saved_config_matches(read_json(results.config_path), config)
            trainer.params, arrays, meta = store.restore(trainer.params, trainer_arrays())
            for name, value in arrays.items():
                setattr(trainer, name, value)
            trainer.counters = {k: int(v) for k, v in meta["counters"].items()}
            sampler.restore(meta["sampler"])
            first, prior_wall = int(meta["step"]), float(meta.get("wall_seconds", meta.get("wall_s", 0.0)))  # older: wall_s
            eval_start = meta.get("eval_start")
            results.truncate_metrics(first, key="step")
            if (results.root / "sampler.json").exists():
                sampler_record = read_json(results.root / "sampler.json")
        else:
            results.write_config(config)
        loggers = MetricsLoggers(results.root, read_json(results.config_path), resume_step=first if resume else None,
                                 step_key="step")
        rows: list[dict] = results.read_metrics() if resume else []
        every = spec.checkpoint_interval
        last_saved = first if resume else None

        def wall() -> float:
            return prior_wall + time.perf_counter() - t_start

        def save(step: int) -> None:
            nonlocal last_saved
            store.save(step, trainer.params, trainer_arrays(),
                       {"step": step, "counters": trainer.counters, "sampler": sampler.state(), "wall_seconds": wall(),
                        **({"eval_start": eval_start} if eval_start is not None else {})})
            last_saved = step

        def run_eval() -> dict:
            return ev_spec.run(trainer.params, policy)

        last_eval = None
        with _progress(quiet) as bar:
            if not resume:
                if sampler.preparation:
                    bar.console.print(f"{parts.name}: {sampler.preparation} (one pass before the first step)")
                sampler_record = sampler.prepare(trainer)
                if sampler_record is not None:
                    write_json_atomic(results.root / "sampler.json", sampler_record)
            job = bar.add_task(parts.task, total=spec.steps, info="", completed=first)
            if not resume and ev_spec is not None and ev_spec.at_start and not stop.requested:
                # the starting policy, so that every curve starts at the base (a row at step 0, no training fields)
                bar.console.print("evaluating the starting policy (step 0)")
                eval_start = run_eval()
                written = results.append_metrics({"step": 0, **ev_spec.row(eval_start)})
                rows.append(written)
                loggers.log(written)
            step = first
            for step in range(first + 1, spec.steps + 1):
                if stop.requested:
                    step -= 1
                    break
                # asynchronous agent workers draw their rows from the sampler themselves, ahead of the steps
                items, sizes = ([], None) if trainer.samples_itself else \
                    sampler.sample(parts.items_per_step)
                metrics = trainer.step(items, sizes)
                row: dict = {"step": step}
                horizons = [getattr(p, "horizon", None) for p in items]
                if horizons and None not in horizons:
                    row["horizon"] = int(max(horizons))
                row.update(metrics)
                if metrics.get("groups"):  # groups whose rewards are all equal carry no GRPO signal
                    row["groups_no_signal_fraction"] = metrics["groups_all_equal"] / metrics["groups"]
                if sizes is not None:
                    row["group_size_mean"] = float(np.mean(sizes))
                evaluation = None
                if ev_spec is not None and ((ev_spec.every and step % ev_spec.every == 0) or step == spec.steps):
                    evaluation = last_eval = run_eval()
                    row.update(ev_spec.row(evaluation))
                row.update(sampler.observe(metrics, evaluation) or {})
                written = results.append_metrics(row)
                rows.append(written)
                loggers.log(written)
                if stop.requested or step % every == 0 or step == spec.steps:
                    save(step)
                bar.update(job, completed=step, info=(f"h={row['horizon']} " if "horizon" in row else "")
                           + parts.progress(metrics))
        if step < spec.steps:  # stopped by Ctrl-C (before the first step too, e.g. while sGPO profiled)
            if last_saved != step:
                save(step)
            raise Interrupted(results.root, step)
        evaluation = last_eval if last_eval is not None or ev_spec is None else run_eval()
        counters = trainer.counters
        steps_rows = [r for r in rows if "tokens_per_s" in r]  # not the step-0 evaluation row
        summary = {"status": "completed", "steps": spec.steps, "eval_start": eval_start, "eval": evaluation,
                   "counters": counters,
                   "training_tokens": sum(counters.get(k, 0) for k in ("rollout_tokens", "update_tokens")),
                   "mean_tokens_per_s": sum(r["tokens_per_s"] for r in steps_rows) / max(len(steps_rows), 1),
                   "wall_seconds": wall()}
        if sampler_record is not None:
            summary["sampler"] = sampler_record.get("stats", sampler_record)
        results.write_summary(summary)
        _plot(results, rows, parts.curve_keys, parts.title)
        return summary
    finally:
        store.close()
        if loggers is not None:
            loggers.close()
        trainer.close()


class _Quiet:
    """A stand-in for the progress bar when ``quiet``."""

    class console:  # noqa: N801
        @staticmethod
        def print(*args, **kwargs):
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def add_task(self, *args, **kwargs):
        return 0

    def update(self, *args, **kwargs):
        pass


def _progress(quiet: bool):
    if quiet:
        return _Quiet()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    TextColumn("{task.fields[info]}"))


def _plot(results, rows: Sequence[dict], keys: Sequence[str], title: str) -> None:
    """curve.png: the training metrics ``keys`` per step (GRPO: reward, entropy, KL; SFT: loss, token
    accuracy) and the held-out evaluation where evaluated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key in keys:
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts), label=key)
    for key, label in (("eval_accuracy", "held-out accuracy"), ("eval_reward", "held-out reward"),
                       ("eval_loss", "held-out loss")):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts), "o--", ms=3, label=label)
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(results.curve_path, dpi=110)
    plt.close(fig)
