"""Supervised fine-tuning (teacher forcing).

Loss: the mean, over the batch's completion tokens (prompt tokens excluded), of
``-log pi(token | prefix)`` (a token mean over the whole batch, as TRL/transformers reduce it).

Two uses. :func:`train_sft` makes base policies of the built-in character tasks (sequences
``BOS + prompt + target + EOS``, right-padded; ``lm sft --task``, the reproductions). :class:`SFTSpec`
fine-tunes any policy of the LM spine (a pretrained model, or an ``lm sft``/``lm rl`` folder of one) on
a dataset in TRL's SFT formats (:mod:`longhorizon.lm.sft_data`), run by the one loop of
:func:`longhorizon.lm.run.run_rl` (results folder, checkpoints, Ctrl-C and exact resume, curves);
``lm sft --dataset`` builds it. Its defaults are TRL's ``SFTConfig``'s: AdamW, learning rate 2e-5
decaying linearly to 0 at the last step (no warm-up), weight decay 0, gradient clipping at norm 1,
8 rows a step, ``max_length`` 1024, no packing.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from longhorizon.errors import TrainingDiverged, UsageError
from longhorizon.lm.sft_data import SFTExample, batch_arrays, check_sft_row, encode_sft_rows
from longhorizon.lm.model import ModelConfig, forward
from longhorizon.lm.protocols import Sampler, Trainer
from longhorizon.lm.tasks import Problem
from longhorizon.lm.tokenizer import PAD, Tokenizer
from longhorizon.runner.loop import Trainable


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    steps: int = 2000
    batch_size: int = 64
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seq_len: int = 64  # padded length of prompt + completion (+ BOS, EOS)

    def __post_init__(self):
        for name in ("steps", "batch_size", "seq_len"):
            if getattr(self, name) < 1:
                raise UsageError(f"SFT {name} must be positive, got {getattr(self, name)}.")
        if self.learning_rate <= 0:
            raise UsageError(f"SFT learning_rate must be positive, got {self.learning_rate}.")


@functools.lru_cache(maxsize=32)
def make_optimizer(learning_rate: float, steps: int, warmup: int, weight_decay: float, max_grad_norm: float):
    warmup = max(1, min(warmup, steps))
    schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, warmup, max(steps, warmup + 1), learning_rate * 0.1)
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adamw(schedule, weight_decay=weight_decay))


def encode_sft(tokenizer: Tokenizer, problems: Sequence[Problem], seq_len: int):
    """``(tokens [B, L], valid [B, L], loss_mask [B, L-1])``; loss_mask marks targets of the completion."""
    tokens = np.full((len(problems), seq_len), PAD, np.int32)
    loss_mask = np.zeros((len(problems), seq_len - 1), np.float32)
    for b, p in enumerate(problems):
        prompt = tokenizer.encode(p.prompt, bos=True)
        target = tokenizer.encode(p.target, eos=True)
        row = prompt + target
        if len(row) > seq_len:
            raise UsageError(f"a training sequence has {len(row)} tokens but seq_len is {seq_len}; raise seq_len.")
        tokens[b, : len(row)] = row
        loss_mask[b, len(prompt) - 1 : len(row) - 1] = 1.0
    return tokens, tokens != PAD, loss_mask


def masked_sums(params, cfg: ModelConfig, tokens, valid, loss_mask):
    """``(sum of -log pi(token | prefix), sum of argmax hits)`` over the targets ``loss_mask`` marks."""
    logits = forward(params, cfg, tokens, valid)[:, :-1]
    logz = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logz, tokens[:, 1:, None], axis=-1)[..., 0]
    correct = (jnp.argmax(logits, axis=-1) == tokens[:, 1:]).astype(jnp.float32)
    return (nll * loss_mask).sum(), (correct * loss_mask).sum()


def sft_loss(params, cfg: ModelConfig, tokens, valid, loss_mask):
    nll, correct = masked_sums(params, cfg, tokens, valid, loss_mask)
    denom = jnp.maximum(loss_mask.sum(), 1.0)
    return nll / denom, {"token_accuracy": correct / denom}


@functools.partial(jax.jit, static_argnames=("cfg", "optimizer"), donate_argnums=(0, 1))
def sft_step(params, opt_state, tokens, valid, loss_mask, *, cfg: ModelConfig, optimizer):
    (loss, aux), grads = jax.value_and_grad(sft_loss, has_aux=True)(params, cfg, tokens, valid, loss_mask)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, {"loss": loss, **aux, "grad_norm": optax.tree.norm(grads)}


def train_sft(
    params,
    model_cfg: ModelConfig,
    tokenizer: Tokenizer,
    problems_for_step: Callable[[int], Sequence[Problem]],
    cfg: SFTConfig,
    *,
    log_every: int = 100,
    on_log: Callable[[dict], None] | None = None,
    start: dict | None = None,
    on_step_end: Callable[[dict], bool] | None = None,
):
    """Run teacher-forced steps up to ``cfg.steps``; ``problems_for_step(i)`` gives batch ``i``.

    Returns ``(params, history)``; ``on_log`` receives a metrics dict every ``log_every`` steps.
    ``start`` (``{"params", "opt_state", "step", "tokens"}``, as given to ``on_step_end``) resumes
    a run; ``on_step_end(state)`` is called after every step with that dict and stops the loop by
    returning True (its arrays are donated to the next step: copy them to the host to keep them).
    """
    optimizer = make_optimizer(cfg.learning_rate, cfg.steps, cfg.warmup_steps, cfg.weight_decay, cfg.max_grad_norm)
    if start is None:
        params = jax.tree_util.tree_map(jnp.array, params)  # private copy: the step donates its inputs
        opt_state, first, tokens_seen = optimizer.init(params), 0, 0
    else:
        params = jax.tree_util.tree_map(jnp.array, start["params"])
        opt_state = jax.tree_util.tree_map(jnp.array, start["opt_state"])
        first, tokens_seen = int(start["step"]), int(start["tokens"])
    history, t0, tokens_before = [], time.perf_counter(), tokens_seen
    for step in range(first, cfg.steps):
        tokens, valid, loss_mask = encode_sft(tokenizer, problems_for_step(step), cfg.seq_len)
        params, opt_state, metrics = sft_step(params, opt_state, tokens, valid, loss_mask, cfg=model_cfg, optimizer=optimizer)
        tokens_seen += int(valid.sum())
        if (step + 1) % log_every == 0 or step + 1 == cfg.steps:
            row = {k: float(v) for k, v in metrics.items()}
            if not np.isfinite(row["loss"]):
                raise TrainingDiverged(f"SFT loss became {row['loss']} at step {step + 1}; lower learning_rate.")
            row.update(step=step + 1, tokens=tokens_seen, tokens_per_s=(tokens_seen - tokens_before) / (time.perf_counter() - t0))
            history.append(row)
            if on_log:
                on_log(row)
        if on_step_end is not None and on_step_end({"params": params, "opt_state": opt_state, "step": step + 1,
                                                    "tokens": tokens_seen}):
            break
    return params, history


class TaskSFTTrainable(Trainable):
    """``lm sft`` on a built-in task (a character policy trained from scratch) as the runner's one loop
    drives it: a chunk is ``chunk_steps`` steps of :func:`train_sft` ending in one metrics row, the state
    ``{"params", "opt_state"}`` (msgpack checkpoints whose meta also keeps the tokens seen and the problem
    stream's generator, so a resumed run draws the same batches). ``setup`` is the run's ``config.json``
    (``lm/cli.py:_sft_setup``); the held-out evaluation runs once, after the last step.

    A chunk is as long as both the logging interval (``steps // 50``) and ``checkpoint_every`` steps allow
    (their greatest common divisor), so rows and checkpoints land on the steps they always have."""

    step_key = "step"
    progress_headline = ("loss", "loss")
    progress_description = "sft"
    plot_title = "SFT"

    def __init__(self, setup: dict, out: str, checkpoint_every: int):
        from pathlib import Path

        from longhorizon.lm.tasks import ProblemStream

        self.setup, self.cfg, self.out = setup, setup["sft"], Path(out)
        every = checkpoint_every or max(1, self.cfg.steps // 10)
        self.chunk_steps = math.gcd(max(1, self.cfg.steps // 50), every)
        self.num_chunks = -(-self.cfg.steps // self.chunk_steps)
        self.checkpoint_every = every // self.chunk_steps
        self.resume_command = f"longhorizon lm sft --resume {out}"
        self.tokenizer = Tokenizer(setup["alphabet"])
        self.stream = ProblemStream(setup["task"], setup["task_config"], setup["seed"])
        self.tokens = 0

    def resolved_config(self) -> dict:
        return self.setup

    def step_after(self, chunks_done: int) -> int:
        return min(chunks_done * self.chunk_steps, self.cfg.steps)

    def init_state(self):
        from longhorizon.lm.model import init_params

        cfg = self.cfg
        params = init_params(jax.random.PRNGKey(self.setup["seed"]), self.setup["model"])
        optimizer = make_optimizer(cfg.learning_rate, cfg.steps, cfg.warmup_steps, cfg.weight_decay, cfg.max_grad_norm)
        return {"params": params, "opt_state": optimizer.init(params)}

    def save_checkpoint(self, directory, chunk: int, state, meta: dict) -> None:
        from longhorizon.lm.resume import rng_state
        from longhorizon.runner import checkpoint

        checkpoint.save(directory, chunk, state, {**meta, "tokens": self.tokens, "stream": rng_state(self.stream.rng)})

    def restore_checkpoint(self, directory, template):
        from longhorizon.lm.resume import set_rng_state
        from longhorizon.runner import checkpoint

        state, meta = checkpoint.restore(directory, template)
        step = int(meta["step"])
        if step != self.cfg.steps and step % self.chunk_steps:
            raise UsageError(f"the checkpoint in {directory} is at step {step}, inside a chunk of {self.chunk_steps} "
                             "steps (saved by an older longhorizon); start the run again in a new folder.")
        set_rng_state(self.stream.rng, meta["stream"])
        self.tokens = int(meta["tokens"])
        chunk = self.num_chunks if step == self.cfg.steps else step // self.chunk_steps
        return state, {**meta, "chunk": chunk}  # older runs numbered their checkpoints by step

    def run_chunk(self, state, chunk: int):
        first, last = self.step_after(chunk), self.step_after(chunk + 1)
        end, rows = {}, []

        def stop_at_chunk_end(step_state: dict) -> bool:
            if step_state["step"] >= last:
                end.update(step_state)
                return True
            return False

        options = self.setup["options"]
        train_sft(state["params"], self.setup["model"], self.tokenizer,
                  lambda _: self.stream.sample(self.setup["horizons"], options["batch_size"]), self.cfg,
                  log_every=self.chunk_steps, on_log=rows.append, on_step_end=stop_at_chunk_end,
                  start={**state, "step": first, "tokens": self.tokens})  # a NaN loss raises TrainingDiverged
        self.tokens = end["tokens"]
        return {"params": end["params"], "opt_state": end["opt_state"]}, {"finite": True, "row": rows[-1]}

    def metrics_row(self, metrics: dict, chunk: int, elapsed: float) -> dict:
        return metrics["row"]

    def summary_fields(self, state, chunks_done: int, final_eval, train_seconds: float) -> dict:
        from longhorizon.lm.evaluate import evaluate
        from longhorizon.lm.model import count_params
        from longhorizon.lm.tasks import HELD_OUT_OFFSET, make_problems, max_lengths, parse_horizons
        from longhorizon.runner.results import read_metrics

        rows = [r for r in read_metrics(self.out) if "loss" in r]
        fields = {"params": count_params(state["params"]), "final": rows[-1] if rows else {}, "eval": None,
                  "tokens": self.tokens}
        if chunks_done == self.num_chunks:
            setup, options = self.setup, self.setup["options"]
            horizons = parse_horizons(options["eval_horizons"])
            held = make_problems("chain", horizons, options["eval_problems"], setup["seed"] + HELD_OUT_OFFSET,
                                 setup["task_config"])
            prompt, completion = max_lengths("chain", max(horizons), setup["task_config"])
            fields["eval"] = evaluate(state["params"], setup["model"], self.tokenizer, held,
                                      max_prompt_length=prompt + 1, max_new_tokens=completion + 1)
        return fields

    def plot(self, results) -> None:
        from longhorizon.lm.run import plot_curve

        plot_curve(results, results.read_metrics(), ("loss", "token_accuracy"), self.plot_title)


# ----------------------------------------------------------------------------- SFT on datasets, through the LM spine

LR_SCHEDULERS = ("linear", "constant")


@dataclasses.dataclass(frozen=True)
class SFTTrainingConfig:
    """TRL's ``SFTConfig`` settings that act here, with its names and defaults."""

    learning_rate: float = 2e-5
    lr_scheduler_type: str = "linear"  # decays to 0 by the run's last step; or "constant"
    per_device_train_batch_size: int = 8
    max_length: int = 1024
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0

    def __post_init__(self):
        if self.learning_rate <= 0:
            raise UsageError(f"--learning-rate must be positive (got {self.learning_rate}).")
        if self.lr_scheduler_type not in LR_SCHEDULERS:
            raise UsageError(f"--lr-scheduler-type {self.lr_scheduler_type} is unknown; use one of {', '.join(LR_SCHEDULERS)}.")
        if self.per_device_train_batch_size < 1:
            raise UsageError(f"--per-device-train-batch-size must be at least 1 (got {self.per_device_train_batch_size}).")
        if self.max_length < 2:
            raise UsageError(f"--max-length must be at least 2 tokens (got {self.max_length}).")
        if self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise UsageError("weight_decay must be 0 or positive and max_grad_norm positive; fix the value.")


def sft_steps(rows: int, batch_size: int, num_train_epochs: float, max_steps: int) -> int:
    """Optimiser steps of a run: ``max_steps`` when positive (TRL: it overrides the epochs), else enough
    batches of ``batch_size`` rows to cover ``num_train_epochs`` passes over ``rows`` rows."""
    if max_steps > 0:
        return max_steps
    if num_train_epochs <= 0:
        raise UsageError(f"--num-train-epochs must be positive (got {num_train_epochs}), or set --max-steps.")
    return max(1, math.ceil(num_train_epochs * rows / batch_size))


class SFTTrainer(Trainer):
    """Teacher-forced steps on batches of :class:`longhorizon.lm.sft_data.SFTExample` s, in the loop's
    trainer protocol (``params``, ``opt_state``, ``counters``, ``step(items, sizes) -> metrics``)."""

    def __init__(self, model_cfg, params, cfg: SFTTrainingConfig, steps: int, seq_len: int, pad_id: int,
                 mesh=None):
        from longhorizon.lm.grpo import rl_optimizer

        self.model_cfg, self.cfg, self.steps, self.seq_len, self.pad_id = model_cfg, cfg, steps, seq_len, pad_id
        self.optimizer = rl_optimizer(cfg.learning_rate, cfg.weight_decay, cfg.max_grad_norm,
                                      steps if cfg.lr_scheduler_type == "linear" else 0)
        self.sharded = None
        if mesh is None:
            self.params = jax.tree_util.tree_map(jnp.array, params)  # private copy: the step donates its inputs
            self.opt_state = self.optimizer.init(self.params)
        else:  # parameters and Adam moments split over the mesh (lm.sharding), the same step partitioned by XLA
            from longhorizon.lm.sharding import ShardedUpdate

            def step(p, o, batch):
                return sft_step(p, o, *batch, cfg=model_cfg, optimizer=self.optimizer)

            self.sharded = ShardedUpdate(mesh, params, optimizer=self.optimizer, step=step)
            self.params = self.sharded.place(params)
            self.opt_state = self.sharded.init(self.params)
        self.counters = {"optimizer_steps": 0, "examples": 0, "update_tokens": 0, "loss_tokens": 0}

    def learning_rate(self, step: int) -> float:
        """The rate of optimiser step ``step`` (0-based), as the schedule gives it."""
        if self.cfg.lr_scheduler_type == "constant":
            return self.cfg.learning_rate
        return self.cfg.learning_rate * max(0.0, 1.0 - step / self.steps)

    def step(self, items: Sequence[SFTExample], sizes=None) -> dict:
        t0 = time.perf_counter()
        tokens, valid, loss_mask = batch_arrays(items, self.seq_len, self.pad_id,
                                                max(len(items), self.cfg.per_device_train_batch_size))
        rate = self.learning_rate(self.counters["optimizer_steps"])
        if self.sharded is None:
            self.params, self.opt_state, out = sft_step(self.params, self.opt_state, tokens, valid, loss_mask,
                                                        cfg=self.model_cfg, optimizer=self.optimizer)
        else:
            self.params, self.opt_state, out = self.sharded(self.params, self.opt_state, (tokens, valid, loss_mask))
        metrics = {k: float(v) for k, v in jax.device_get(out).items()}
        if not np.isfinite(metrics["loss"]):
            raise TrainingDiverged(f"SFT loss became {metrics['loss']} at step {self.counters['optimizer_steps'] + 1}; "
                                   "lower --learning-rate.")
        n_tokens, n_loss = int(sum(len(x.ids) for x in items)), int(loss_mask.sum())
        self.counters["optimizer_steps"] += 1
        self.counters["examples"] += len(items)
        self.counters["update_tokens"] += n_tokens
        self.counters["loss_tokens"] += n_loss
        elapsed = time.perf_counter() - t0
        return {**metrics, "learning_rate": rate, "batch_loss_tokens": n_loss, "step_s": elapsed,
                "tokens_per_s": n_tokens / max(elapsed, 1e-9), **self.counters}


_eval_sums = jax.jit(masked_sums, static_argnames=("cfg",))


@dataclasses.dataclass(frozen=True, eq=False)
class SFTEval:
    """Held-out loss (TRL's ``eval_loss``: the token mean over all completion tokens of the eval rows) and
    token accuracy, before the first step, every ``every`` steps and after the last."""

    examples: tuple
    seq_len: int
    pad_id: int
    batch_size: int
    every: int = 0
    at_start: bool = True

    def run(self, params, policy) -> dict:
        nll = correct = tokens = 0.0
        for i in range(0, len(self.examples), self.batch_size):
            chunk = self.examples[i:i + self.batch_size]
            t, v, m = batch_arrays(chunk, self.seq_len, self.pad_id, self.batch_size)
            s_nll, s_correct = jax.device_get(_eval_sums(params, policy.model_cfg, t, v, m))
            nll, correct, tokens = nll + float(s_nll), correct + float(s_correct), tokens + float(m.sum())
        return {"loss": nll / max(tokens, 1.0), "token_accuracy": correct / max(tokens, 1.0),
                "examples": len(self.examples), "loss_tokens": int(tokens)}

    def row(self, evaluation: dict) -> dict:
        return {"eval_loss": evaluation["loss"], "eval_token_accuracy": evaluation["token_accuracy"]}


class _Rows(Sampler):
    """The training rows in shuffled epochs (:class:`longhorizon.lm.samplers.ShuffledPool`), with the
    dataset's statistics as the record of a fresh run (``sampler.json``, ``summary["sampler"]``)."""

    def __init__(self, examples: tuple, seed: int, stats: dict):
        from longhorizon.lm.samplers import ShuffledPool

        self.pool, self.stats = ShuffledPool(examples, seed=seed).build(), stats

    def prepare(self, trainer) -> dict:
        return {"stats": self.stats}

    def sample(self, n: int):
        return self.pool.sample(n)

    def observe(self, metrics: dict, evaluation) -> dict:
        return self.pool.observe(metrics, evaluation)

    def state(self) -> dict:
        return self.pool.state()

    def restore(self, state: dict) -> None:
        self.pool.restore(state)

    def describe(self) -> dict:
        return self.pool.describe()


def _sft_progress(metrics: dict) -> str:
    return f"loss {metrics['loss']:.3f} tok-acc {metrics['token_accuracy']:.3f}"


@dataclasses.dataclass(frozen=True)
class SFTSpec:
    """Supervised fine-tuning of the policy ``init`` (see :func:`longhorizon.lm.run.load_policy`) on the
    rows of ``dataset`` for ``steps`` optimiser steps (:func:`sft_steps`), run by
    :func:`longhorizon.lm.run.run_rl`. ``eval_dataset`` (optional): held-out rows whose loss is measured
    before the first step, every ``eval_steps`` steps (0: only after the last) and after the last.
    ``checkpoint_every``: 0 is about ten checkpoints a run; ``seed`` shuffles the rows; ``record``: extra
    config.json fields of whoever built the spec (the CLI keeps its options there for ``--resume``)."""

    out: str
    init: Any
    dataset: str
    steps: int
    train: SFTTrainingConfig = SFTTrainingConfig()
    eval_dataset: str | None = None
    eval_steps: int = 0
    checkpoint_every: int = 0
    seed: int = 0
    record: dict = dataclasses.field(default_factory=dict)
    mesh: str | None = None  # "data=D,fsdp=F,tensor=T": the step sharded over the local devices (lm.sharding)

    def check(self) -> None:
        """Refuse settings that cannot act and rows in no SFT format, before anything loads or compiles."""
        from longhorizon.lm.data import read_rows
        from longhorizon.lm.run import _is_llama

        if self.steps < 1:
            raise UsageError(f"--max-steps must be at least 1 (got {self.steps}).")
        if self.mesh is not None:
            from longhorizon.lm.sharding import mesh_sizes

            mesh_sizes(self.mesh)  # the spelling; the device count and the model's divisibility when it loads
        if self.checkpoint_every < 0:
            raise UsageError(f"--checkpoint-every must be 0 or positive (got {self.checkpoint_every}).")
        if self.eval_steps < 0 or self.eval_steps > self.steps:
            raise UsageError(f"--eval-steps {self.eval_steps} must be between 0 (only after the last step) and the "
                             f"run's {self.steps} steps.")
        if self.eval_steps and self.eval_dataset is None:
            raise UsageError("--eval-steps evaluates --eval-dataset, which is not given; add --eval-dataset FILE or "
                             "drop --eval-steps.")
        if not _is_llama(self.init):
            raise UsageError("--dataset fine-tunes a pretrained model (its tokenizer and chat template), not an "
                             "`lm sft --task` character model; start from --model or an --init folder of one.")
        read_rows(self.dataset, check_sft_row)
        if self.eval_dataset is not None:
            read_rows(self.eval_dataset, check_sft_row)

    @property
    def checkpoint_interval(self) -> int:
        return self.checkpoint_every or max(1, self.steps // 10)

    def config(self) -> dict:
        """The config.json this run writes (the policy's folder is read, its parameters are not)."""
        from longhorizon.lm.data import file_digest
        from longhorizon.lm.run import _policy_record

        files = {"train": self.dataset, "train_sha256": file_digest(self.dataset)}
        if self.eval_dataset is not None:
            files.update(eval=self.eval_dataset, eval_sha256=file_digest(self.eval_dataset), eval_steps=self.eval_steps)
        return {**self.record, **_policy_record(self.init), "sft": self.train, "dataset": files, "steps": self.steps,
                "checkpoint_every": self.checkpoint_interval, "seed": self.seed,
                **({"mesh": self.mesh} if self.mesh is not None else {})}

    def build(self, policy):
        """The trainer, the shuffled training rows and the held-out loss, tokenized for ``policy``."""
        from longhorizon.lm.data import read_rows
        from longhorizon.lm.run import Parts

        tok, cfg = policy.tokenizer, self.train
        train = encode_sft_rows(read_rows(self.dataset, check_sft_row), tok, cfg.max_length)
        held = (encode_sft_rows(read_rows(self.eval_dataset, check_sft_row), tok, cfg.max_length)
                if self.eval_dataset is not None else [])
        if not any(x.loss_tokens for x in train):
            raise UsageError(f"no row of {self.dataset} keeps a completion token within --max-length {cfg.max_length}; "
                             "raise --max-length or shorten the prompts.")
        seq_len = max(len(x.ids) for x in train + held)
        context = policy.model_cfg.context_length
        if context is not None and seq_len > context:
            raise UsageError(f"rows of {seq_len} tokens exceed the model's context of {context}; pass --max-length "
                             f"{context} (longer rows are then cut) or shorten the rows.")
        stats = {"rows": len(train), "seq_len": seq_len, "truncated_rows": sum(x.truncated for x in train),
                 "loss_tokens": sum(x.loss_tokens for x in train), "tokens": sum(len(x.ids) for x in train)}
        mesh = None
        if self.mesh is not None:
            from longhorizon.lm.sharding import parse_mesh

            mesh = parse_mesh(self.mesh, policy.model_cfg)
        trainer = SFTTrainer(policy.model_cfg, policy.params, cfg, self.steps, seq_len, tok.pad_id, mesh=mesh)
        evaluation = (SFTEval(tuple(held), seq_len, tok.pad_id, cfg.per_device_train_batch_size, self.eval_steps)
                      if held else None)
        return Parts(trainer, _Rows(tuple(train), self.seed, stats), evaluation, ("opt_state",),
                     cfg.per_device_train_batch_size, _sft_progress, ("loss", "token_accuracy"), "SFT", "sft",
                     "SFT data")
