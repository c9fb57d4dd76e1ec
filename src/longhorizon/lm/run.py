"""The LM spine: run specs and the one loop that runs them (:func:`run_rl`).

A spec is an :class:`RLSpec` (GRPO family, ``lm rl``) or a :class:`longhorizon.lm.sft.SFTSpec`
(supervised fine-tuning, ``lm sft --dataset``); once the policy is loaded, ``spec.build(policy)``
gives the loop its :class:`Parts` (trainer, sampler, evaluation). ``lm rl``, ``lm sft`` and the
reproductions only build specs. The loop is the runner's one training loop
(:func:`longhorizon.runner.loop.train_loop`, one chunk per step, driving an :class:`LMTrainable`); it
owns the results folder (one writer): ``config.json``, ``metrics.jsonl`` (one row per step, also as
TensorBoard events in ``tensorboard/``), ``summary.json``, ``curve.png`` and ``checkpoints/`` (orbax,
:mod:`longhorizon.lm.run_checkpoint`). A fresh run with an :class:`EvalSpec`
first evaluates the starting policy (a metrics row at step 0 and ``summary["eval_start"]``, so that every
curve starts at the base; a resumed run does not evaluate it again). Per step::

    items, sizes = sampler.sample(items_per_step)
    metrics = trainer.step(items, sizes)            # GRPO family (lm.grpo.GRPOTrainer) or lm.sft.SFTTrainer
    row = metrics + groups_no_signal_fraction       # groups_all_equal / groups: groups without a GRPO signal
    evaluation = evaluate(...)  on steps k * every and the last step, else None
    row |= sampler.observe(metrics, evaluation)     # curriculum gates, SCALER's level, ...
    append the row; checkpoint every `checkpoint_every` steps, at the end and on Ctrl-C

Ctrl-C lets the step in flight finish, saves it and raises :class:`Interrupted`; a loss that is NaN
or infinite stops the run, keeping the last checkpoint; ``run_rl(spec, resume=True)`` restores parameters, optimiser state,
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
from longhorizon.runner.loop import Trainable

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
    mesh: str | None = None  # "data=D,fsdp=F,tensor=T": the update sharded over the local devices (lm.sharding)
    workers: Any = None  # lm.agents.async_rollout.Config: completions sampled on Ray workers (lm.grpo_workers)

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
        if self.mesh is not None:
            from longhorizon.lm.sharding import mesh_sizes

            mesh_sizes(self.mesh)  # the spelling; the device count and the model's divisibility when it loads
            if self.offload == "host":
                raise UsageError("--mesh shards the in-memory update and --offload host streams it from host memory; "
                                 "drop one of them.")
        if self.offload == "host" and not _is_llama(self.init):
            raise UsageError("--offload host streams Llama-family models layer by layer, not an `lm sft` character "
                             "model; start from a pretrained --model or drop --offload.")
        if self.agent is not None:
            self.agent.check()
            if self.workers is not None:
                raise UsageError("an agent run takes its rollout workers from its AgentSpec (`lm agent --actors`); "
                                 "drop RLSpec.workers.")
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
        updater = None
        if self.offload == "host":
            from longhorizon.lm.offload import LayerStreamedUpdate

            updater = LayerStreamedUpdate(policy.model_cfg, grpo)
        elif self.mesh is not None:
            from longhorizon.lm.grpo import optimizer_for
            from longhorizon.lm.sharding import ShardedUpdate, parse_mesh

            updater = ShardedUpdate(parse_mesh(self.mesh, policy.model_cfg), policy.params,
                                    model_cfg=policy.model_cfg, cfg=grpo, optimizer=optimizer_for(grpo))
        if self.agent is not None:
            trainer = self.agent.trainer(policy, grpo, self.seed, sampler=sampler, updater=updater)
        else:
            trainer = GRPOTrainer(policy.model_cfg, policy.params, policy.tokenizer, grpo, seed=self.seed,
                                  batch_rewards=rewards, updater=updater)
            if self.workers is not None:
                trainer.workers = _grpo_workers(self.workers, trainer, sampler, self.prompts_per_step)
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
                **({"offload": self.offload} if self.offload != "none" else {}),
                **({"mesh": self.mesh} if self.mesh is not None else {}),
                **({"workers": self.workers} if self.workers is not None else {})}


def _grpo_workers(config, trainer, sampler, prompts_per_step: int):
    """The trainer's rollouts on Ray workers; in async mode they draw the problems from ``sampler`` and the keys from
    the trainer's key, ahead of the steps."""
    import jax
    import numpy as np

    from longhorizon.lm.grpo_workers import CompletionSource, GRPOWorkers

    pull = None
    if config.mode == "async":
        def pull():
            problems, sizes = sampler.sample(prompts_per_step)
            trainer.key, key = jax.random.split(trainer.key)
            return list(problems), sizes, np.asarray(key)

    return GRPOWorkers(CompletionSource(trainer.rollout_model_cfg, trainer.tokenizer, trainer.cfg), config, pull)


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

    The run goes through the runner's one training loop (:func:`longhorizon.runner.loop.train_loop`) as an
    :class:`LMTrainable`. Raises :class:`Interrupted` after saving when Ctrl-C stopped it; a second Ctrl-C
    aborts at once, leaving the last saved checkpoint.
    """
    from longhorizon.runner.loop import train_loop

    spec.check()
    try:
        summary, _ = train_loop(lambda: LMTrainable(spec, quiet), resume)
    except RunInterrupted as stop:
        if stop.saved is None:  # nothing saved: the runner's message says so
            raise
        raise Interrupted(Path(spec.out), stop.saved) from None
    return summary


def _saved_config_matches(saved: dict, config: dict) -> None:
    """Refuse a resume whose settings differ from the folder's config.json, naming the first setting that
    differs. A field of a settings dataclass (``grpo``) that the saved record lacks was added to longhorizon
    after the run started: the run behaved as its default, so the default matches it."""
    from longhorizon.runner.results import to_jsonable

    def plain(value):
        return json.loads(json.dumps(to_jsonable(value)))

    for key in sorted((set(saved) | set(config)) - {"meshes_before"}):  # the folder's history, not a setting
        value, before = config.get(key), saved.get(key)
        if dataclasses.is_dataclass(value) and isinstance(before, dict):
            for field in dataclasses.fields(value):
                now = plain(getattr(value, field.name))
                if field.name in before:
                    differs = before[field.name] != now
                elif field.default is not dataclasses.MISSING:
                    differs = plain(field.default) != now
                elif field.default_factory is not dataclasses.MISSING:
                    differs = plain(field.default_factory()) != now
                else:
                    differs = True
                if differs:
                    _refuse_resume(f"{key}.{field.name}")
            if set(before) - {f.name for f in dataclasses.fields(value)}:
                _refuse_resume(f"{key}.{sorted(set(before) - {f.name for f in dataclasses.fields(value)})[0]}")
        elif before != plain(value):
            _refuse_resume(key)


def _refuse_resume(setting: str):
    raise UsageError(f"the run in this folder was started with another {setting!r} than the one given now; "
                     "resume it with the settings it was started with (or start a new run elsewhere).")


class LMTrainable(Trainable):
    """An LM run (an :class:`RLSpec`, or an :class:`longhorizon.lm.sft.SFTSpec`) as the runner's loop drives
    it: a chunk is one step of the trainer. The trainer and the sampler hold the training state, so the
    loop's state is None and the checkpoints are orbax steps (:mod:`longhorizon.lm.run_checkpoint`) of the
    parameters, the arrays ``Parts.arrays`` names, the counters and the sampler's state."""

    step_key = "step"  # optimiser steps
    divergence_advice = "lower the learning rate and start again"

    def __init__(self, spec, quiet: bool):
        self.spec, self.quiet = spec, quiet
        from longhorizon.lm.processes import process_folder

        # process 0 of a multi-process run writes spec.out, process k its own OUT/process-k; the checkpoints are
        # orbax's multi-host ones in spec.out (lm.processes)
        self.out, self.num_chunks = process_folder(spec.out), spec.steps
        self.checkpoints = Path(spec.out) / "checkpoints"
        self.checkpoint_every = spec.checkpoint_interval
        self.resume_command = f"longhorizon {spec.record.get('command', 'lm rl')} --resume {spec.out}"
        self.config = spec.config()
        self.policy, self.parts, self.store = None, None, None
        self.eval_start = self.last_eval = self.sampler_record = None

    def resolved_config(self) -> dict:
        return self.config

    def has_checkpoint(self, directory: Path) -> bool:
        from longhorizon.lm import run_checkpoint

        return run_checkpoint.latest_step(self.checkpoints) is not None  # process k > 0 reads process 0's

    def agree_to_stop(self, requested: bool) -> bool:
        from longhorizon.lm.processes import any_process

        return any_process(requested)

    def init_state(self):
        from longhorizon.lm.run_checkpoint import RunCheckpoints

        self.policy = load_policy(self.spec.init)
        self.parts = parts = self.spec.build(self.policy)
        self.progress_description = parts.task
        self.progress_headline = (parts.curve_keys[0], parts.curve_keys[0])
        self.store = RunCheckpoints(self.checkpoints)
        return None

    def _arrays(self) -> dict:
        return {name: getattr(self.parts.trainer, name) for name in self.parts.arrays}

    def restore_checkpoint(self, directory: Path, template):
        from longhorizon.runner.results import read_json

        _saved_config_matches(read_json(self.out / "config.json"), self.config)
        trainer = self.parts.trainer
        trainer.params, arrays, meta = self.store.restore(trainer.params, self._arrays())
        for name, value in arrays.items():
            setattr(trainer, name, value)
        trainer.counters = {k: int(v) for k, v in meta["counters"].items()}
        self.parts.sampler.restore(meta["sampler"])
        self.eval_start = meta.get("eval_start")
        if (self.out / "sampler.json").exists():
            self.sampler_record = read_json(self.out / "sampler.json")
        # checkpoints saved before the runner's key names recorded the wall time as wall_s
        wall = float(meta.get("wall_seconds", meta.get("wall_s", 0.0)))
        return None, {**meta, "chunk": int(meta["step"]), "wall_seconds": wall}

    def save_checkpoint(self, directory: Path, chunk: int, state, meta: dict) -> None:
        trainer = self.parts.trainer
        self.store.save(chunk, trainer.params, self._arrays(),
                        {**meta, "step": chunk, "counters": trainer.counters, "sampler": self.parts.sampler.state(),
                         **({"eval_start": self.eval_start} if self.eval_start is not None else {})})

    def _say(self, text: str) -> None:
        if not self.quiet:  # on stdout: stderr is kept for errors and the progress display
            print(text, flush=True)

    def begin(self, state, stop) -> list[dict]:
        from longhorizon.runner.results import write_json_atomic

        parts, sampler = self.parts, self.parts.sampler
        if sampler.preparation:
            self._say(f"{parts.name}: {sampler.preparation} (one pass before the first step)")
        self.sampler_record = sampler.prepare(parts.trainer)
        if self.sampler_record is not None:
            write_json_atomic(self.out / "sampler.json", self.sampler_record)
        ev = parts.evaluation
        if ev is None or not ev.at_start or stop.requested:
            return []
        # the starting policy, so that every curve starts at the base (a row at step 0, no training fields)
        self._say("evaluating the starting policy (step 0)")
        self.eval_start = ev.run(parts.trainer.params, self.policy)
        return [ev.row(self.eval_start)]

    def step_after(self, chunks_done: int) -> int:
        return chunks_done

    def run_chunk(self, state, chunk: int):
        import math

        import numpy as np

        parts, trainer, sampler, ev = self.parts, self.parts.trainer, self.parts.sampler, self.parts.evaluation
        step = chunk + 1
        # asynchronous agent workers draw their rows from the sampler themselves, ahead of the steps
        items, sizes = ([], None) if trainer.samples_itself else sampler.sample(parts.items_per_step)
        metrics = trainer.step(items, sizes)
        row: dict = {}
        horizons = [getattr(p, "horizon", None) for p in items]
        if horizons and None not in horizons:
            row["horizon"] = int(max(horizons))
        row.update(metrics)
        if metrics.get("groups"):  # groups whose rewards are all equal carry no GRPO signal
            row["groups_no_signal_fraction"] = metrics["groups_all_equal"] / metrics["groups"]
        if sizes is not None:
            row["group_size_mean"] = float(np.mean(sizes))
        evaluation = None
        if ev is not None and ((ev.every and step % ev.every == 0) or step == self.spec.steps):
            evaluation = self.last_eval = ev.run(trainer.params, self.policy)
            row.update(ev.row(evaluation))
        row.update(sampler.observe(metrics, evaluation) or {})
        loss = metrics.get("loss")
        finite = not isinstance(loss, float) or math.isfinite(loss)
        return None, {"finite": finite, "row": row}

    def metrics_row(self, metrics: dict, chunk: int, elapsed: float) -> dict:
        return metrics["row"]

    def summary_fields(self, state, chunks_done: int, final_eval, train_seconds: float) -> dict:
        from longhorizon.runner.results import read_metrics

        parts, done = self.parts, chunks_done == self.spec.steps
        if done and self.last_eval is None and parts.evaluation is not None:  # resumed after the last step's save
            self.last_eval = parts.evaluation.run(parts.trainer.params, self.policy)
        counters = parts.trainer.counters
        steps_rows = [r for r in read_metrics(self.out) if "tokens_per_s" in r]  # not the step-0 evaluation row
        fields = {"steps": self.spec.steps, "eval_start": self.eval_start, "eval": self.last_eval if done else None,
                  "counters": counters,
                  "training_tokens": sum(counters.get(k, 0) for k in ("rollout_tokens", "update_tokens")),
                  "mean_tokens_per_s": sum(r["tokens_per_s"] for r in steps_rows) / max(len(steps_rows), 1)}
        if self.sampler_record is not None:
            fields["sampler"] = self.sampler_record.get("stats", self.sampler_record)
        return fields

    def plot(self, results) -> None:
        plot_curve(results, results.read_metrics(), self.parts.curve_keys, self.parts.title)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
        if self.parts is not None:
            self.parts.trainer.close()


def plot_curve(results, rows: Sequence[dict], keys: Sequence[str], title: str) -> None:
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
