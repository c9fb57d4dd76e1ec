"""Held-out evaluation: accuracy per horizon, mean reward, tokens per second; :class:`EvalSpec`, a run's
evaluation settings (:mod:`longhorizon.lm.run`)."""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.generate import generate
from longhorizon.lm.model import ModelConfig
from longhorizon.lm.tasks import Problem, correct_flags, score
from longhorizon.lm.tokenizer import Tokenizer


def evaluate(
    params,
    model_cfg: ModelConfig,
    tokenizer: Tokenizer,
    problems: Sequence[Problem],
    *,
    max_prompt_length: int,
    max_new_tokens: int,
    temperature: float = 0.0,
    batch_size: int = 256,
    seed: int = 0,
) -> dict:
    """Greedy (``temperature=0``) or sampled evaluation in fixed-size batches (one compilation).

    ``accuracy`` is exact match of the *final* answer; ``all_correct`` requires every scored
    answer; ``reward`` is the mean of each problem's own reward.
    """
    key = jax.random.PRNGKey(seed)
    rewards, finals, alls, horizons, n_tokens = [], [], [], [], 0
    t0 = time.perf_counter()
    for start in range(0, len(problems), batch_size):
        chunk = list(problems[start : start + batch_size])
        prompts = [p.prompt for p in chunk] + [""] * (batch_size - len(chunk))
        ptok, pvalid = tokenizer.encode_prompts(prompts, max_prompt_length)
        key, sub = jax.random.split(key)
        gen = generate(params, ptok, pvalid, sub, cfg=model_cfg, max_new_tokens=max_new_tokens, temperature=temperature,
                       eos_ids=tuple(tokenizer.eos_ids), pad_id=tokenizer.pad_id)
        tokens, valid = np.asarray(gen.tokens)[: len(chunk)], np.asarray(gen.valid)[: len(chunk)]
        n_tokens += int(valid.sum() + pvalid[: len(chunk)].sum())
        for p, text in zip(chunk, tokenizer.decode_batch(tokens)):
            flags = correct_flags(p, text)
            rewards.append(score(p, text))
            finals.append(float(flags[-1]))
            alls.append(float(all(flags)))
            horizons.append(p.horizon)
    elapsed = time.perf_counter() - t0
    by_h: dict[int, list[float]] = defaultdict(list)
    for h, f in zip(horizons, finals):
        by_h[h].append(f)
    return {
        "accuracy": float(np.mean(finals)) if finals else 0.0,
        "all_correct": float(np.mean(alls)) if alls else 0.0,
        "reward": float(np.mean(rewards)) if rewards else 0.0,
        "by_horizon": {int(h): float(np.mean(v)) for h, v in sorted(by_h.items())},
        "problems": len(problems),
        "tokens_per_s": n_tokens / max(elapsed, 1e-9),
    }


def evaluate_dataset(
    params,
    model_cfg,
    tokenizer,
    examples: Sequence,
    rewards,
    *,
    max_prompt_length: int,
    max_new_tokens: int,
    temperature: float = 0.0,
    batch_size: int = 64,
    seed: int = 0,
    keep_samples: int = 3,
    num_samples: int = 1,
    correct_threshold: float = 1.0,
) -> dict:
    """``num_samples`` completions per example (greedy when ``temperature == 0``; the ``num_samples`` rows of an
    example share its prompt's cache) scored by ``rewards`` (:class:`longhorizon.lm.data.RewardFunctions`), in
    fixed-size batches of about ``batch_size`` rows (one compilation).

    A completion is *correct* when its reward (the weighted sum of the functions) is ``>= correct_threshold``
    (default 1.0: ``examples/lm/rewards.py:correct_answer`` gives 1.0 to a right answer, alone or with a format
    bonus). Returns ``reward`` and ``accuracy`` (means over all completions) with their standard errors
    ``reward_se`` / ``accuracy_se`` over the examples' means (:mod:`longhorizon.core.stats`), ``pass_at_k``
    ``{k: value}`` and ``pass_at_k_se`` for k = 1, 2, 4, .., ``num_samples`` (unbiased estimator; pass@1 is
    the accuracy), ``rewards/NAME/mean`` per function, ``examples``, ``num_samples``, ``correct_threshold``,
    ``tokens_per_s``, ``by_horizon`` (mean reward per ``horizon`` column, when every row has one) and the first
    ``keep_samples`` (prompt, completion, reward) triples, for reading what the model writes.
    """
    from longhorizon.core.stats import mean_se, pass_at_k_ks, pass_at_k_mean_se

    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1 (got {num_samples}).")
    key = jax.random.PRNGKey(seed)
    per_batch = max(1, batch_size // num_samples)  # prompts per batch: about batch_size rows
    scores, texts, n_tokens = [], [], 0
    t0 = time.perf_counter()
    for start in range(0, len(examples), per_batch):
        chunk = list(examples[start : start + per_batch])
        ptok, pvalid = tokenizer.encode_prompts([e.prompt for e in chunk] + [""] * (per_batch - len(chunk)),
                                                max_prompt_length)
        key, sub = jax.random.split(key)
        gen = generate(params, ptok, pvalid, sub, cfg=model_cfg, max_new_tokens=max_new_tokens, temperature=temperature,
                       eos_ids=tuple(tokenizer.eos_ids), pad_id=tokenizer.pad_id, group_size=num_samples)
        rows = len(chunk) * num_samples  # example i's samples are rows i*S .. i*S+S-1
        tokens, valid = np.asarray(gen.tokens)[:rows], np.asarray(gen.valid)[:rows]
        n_tokens += int(valid.sum() + pvalid[: len(chunk)].sum())  # each prompt is computed once
        chunk_texts = tokenizer.decode_batch(tokens)
        repeated = [e for e in chunk for _ in range(num_samples)]
        scores.append(rewards.scores(repeated, chunk_texts, [row[v].tolist() for row, v in zip(tokens, valid)]))
        texts.extend(chunk_texts)
    elapsed = time.perf_counter() - t0
    per_fn = np.concatenate(scores) if scores else np.zeros((0, len(rewards.names)))
    total = np.nansum(per_fn * rewards.weights, axis=1)
    by_example = total.reshape(len(examples), num_samples)
    correct = by_example >= correct_threshold
    out = {"examples": len(examples), "num_samples": num_samples, "temperature": float(temperature),
           "correct_threshold": float(correct_threshold),
           "tokens_per_s": n_tokens / max(elapsed, 1e-9)}
    if len(examples):
        out["reward"], out["reward_se"] = mean_se(by_example.mean(axis=1))
        out["accuracy"], out["accuracy_se"] = mean_se(correct.mean(axis=1))
        passes = {k: pass_at_k_mean_se(num_samples, correct.sum(axis=1), k) for k in pass_at_k_ks(num_samples)}
        out["pass_at_k"] = {k: v for k, (v, _) in passes.items()}
        out["pass_at_k_se"] = {k: se for k, (_, se) in passes.items()}
    else:
        out.update(reward=0.0, reward_se=0.0, accuracy=0.0, accuracy_se=0.0, pass_at_k={}, pass_at_k_se={})
    for j, name in enumerate(rewards.names):
        scored = per_fn[:, j][~np.isnan(per_fn[:, j])]
        out[f"rewards/{name}/mean"] = float(scored.mean()) if scored.size else None
    horizons = [getattr(e, "horizon", None) for e in examples]
    if examples and None not in horizons:  # rows with a horizon column: the mean reward at each horizon
        by_h: dict[int, list[float]] = defaultdict(list)
        for h, r in zip(horizons, by_example.mean(axis=1)):
            by_h[h].append(float(r))
        out["by_horizon"] = {int(h): float(np.mean(v)) for h, v in sorted(by_h.items())}
    out["samples"] = [{"prompt": e.prompt, "completion": t, "reward": float(r)}
                      for e, t, r in zip(examples[:keep_samples], texts[::num_samples], total[::num_samples])]
    return out


def reward_columns(fn) -> list[str]:
    """The dataset columns a TRL-style reward function names as parameters without a default (besides
    ``prompts``, ``completions`` and ``completion_ids``): the columns every row must have for it."""
    import inspect

    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature: nothing to check
        return []
    return [p.name for p in parameters
            if p.name not in ("prompts", "completions", "completion_ids") and p.default is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def check_reward_columns(rewards, rows: Sequence[dict], dataset) -> None:
    """Refuse, in one sentence naming it, a column a reward function needs that a row of ``dataset`` lacks."""
    for fn, name in zip(rewards.funcs, rewards.names):
        for column in reward_columns(fn):
            missing = next((i for i, row in enumerate(rows) if column not in row), None)
            if missing is not None:
                raise UsageError(f"reward function {name} needs the column {column!r}, which row {missing + 1} of "
                                 f"{dataset} lacks; add that column to the dataset or choose another reward function.")


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """Held-out evaluation every ``every`` steps (0: only after the last step, which is always evaluated)
    and, with ``at_start``, of the starting policy before a fresh run's first step (a metrics row at step 0):
    accuracy per horizon of task problems (:func:`evaluate`), or, with ``rewards``,
    the mean reward, accuracy (reward >= ``correct_threshold``) and pass@k of ``num_samples`` completions per
    dataset example (:func:`evaluate_dataset`). Greedy unless ``temperature`` > 0
    (``seed`` then draws the samples). ``lm eval --dataset`` runs one of these on its own."""

    problems: tuple = dataclasses.field(compare=False, repr=False)
    max_prompt_length: int
    max_new_tokens: int
    every: int = 0
    rewards: Any = dataclasses.field(default=None, compare=False, repr=False)
    num_samples: int = 1
    temperature: float = 0.0
    correct_threshold: float = 1.0
    seed: int = 0
    at_start: bool = True

    def __post_init__(self):
        if self.num_samples < 1:
            raise UsageError(f"--num-samples must be at least 1 (got {self.num_samples}).")
        if self.temperature < 0:
            raise UsageError(f"--temperature must be 0 (greedy) or positive (got {self.temperature}).")
        if self.num_samples > 1 and self.rewards is None:
            raise UsageError("--num-samples (pass@k) applies to --dataset evaluations scored by --reward-funcs; drop it.")
        if self.num_samples > 1 and self.temperature == 0:
            raise UsageError(f"--num-samples {self.num_samples} draws {self.num_samples} completions per prompt, which "
                             "greedy decoding (--temperature 0) makes identical; pass --temperature (e.g. 1.0) or drop "
                             "--num-samples.")

    def describe(self) -> dict:
        defaults = {"num_samples": 1, "temperature": 0.0, "correct_threshold": 1.0, "seed": 0, "at_start": True}
        return {"problems": len(self.problems), "max_prompt_length": self.max_prompt_length,
                "max_new_tokens": self.max_new_tokens, "every": self.every,
                "horizons": sorted({int(p.horizon) for p in self.problems if hasattr(p, "horizon")}),
                **{k: getattr(self, k) for k, v in defaults.items() if getattr(self, k) != v}}

    def run(self, params, policy) -> dict:
        """Evaluate ``params`` with ``policy``'s model configuration and tokenizer (a :class:`longhorizon.lm.run.Policy`)."""
        if self.rewards is not None:
            return evaluate_dataset(params, policy.model_cfg, policy.tokenizer, list(self.problems), self.rewards,
                                    max_prompt_length=self.max_prompt_length, max_new_tokens=self.max_new_tokens,
                                    temperature=self.temperature, seed=self.seed, num_samples=self.num_samples,
                                    correct_threshold=self.correct_threshold)
        return evaluate(params, policy.model_cfg, policy.tokenizer, list(self.problems),
                        max_prompt_length=self.max_prompt_length, max_new_tokens=self.max_new_tokens,
                        temperature=self.temperature, seed=self.seed)

    def row(self, evaluation: dict) -> dict:
        """The metrics-row fields of one evaluation."""
        if self.rewards is not None:
            return {"eval_reward": evaluation["reward"], "eval_accuracy": evaluation["accuracy"],
                    **({"eval_by_horizon": evaluation["by_horizon"]} if "by_horizon" in evaluation else {})}
        return {"eval_accuracy": evaluation["accuracy"], "eval_by_horizon": evaluation["by_horizon"]}
