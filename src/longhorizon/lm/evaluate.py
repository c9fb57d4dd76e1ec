"""Held-out evaluation: accuracy per horizon, mean reward, tokens per second."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence

import jax
import numpy as np

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
) -> dict:
    """Mean reward of one completion per example (greedy when ``temperature == 0``) under ``rewards``
    (:class:`longhorizon.lm.data.RewardFunctions`), in fixed-size batches (one compilation).

    Returns ``reward``, ``rewards/NAME/mean`` per function, ``examples``, ``tokens_per_s`` and the first
    ``keep_samples`` (prompt, completion, reward) triples, for reading what the model writes.
    """
    key = jax.random.PRNGKey(seed)
    scores, texts, n_tokens = [], [], 0
    t0 = time.perf_counter()
    for start in range(0, len(examples), batch_size):
        chunk = list(examples[start : start + batch_size])
        ptok, pvalid = tokenizer.encode_prompts([e.prompt for e in chunk] + [""] * (batch_size - len(chunk)),
                                                max_prompt_length)
        key, sub = jax.random.split(key)
        gen = generate(params, ptok, pvalid, sub, cfg=model_cfg, max_new_tokens=max_new_tokens, temperature=temperature,
                       eos_ids=tuple(tokenizer.eos_ids), pad_id=tokenizer.pad_id)
        tokens, valid = np.asarray(gen.tokens)[: len(chunk)], np.asarray(gen.valid)[: len(chunk)]
        n_tokens += int(valid.sum() + pvalid[: len(chunk)].sum())
        chunk_texts = tokenizer.decode_batch(tokens)
        scores.append(rewards.scores(chunk, chunk_texts, [row[v].tolist() for row, v in zip(tokens, valid)]))
        texts.extend(chunk_texts)
    elapsed = time.perf_counter() - t0
    per_fn = np.concatenate(scores) if scores else np.zeros((0, len(rewards.names)))
    total = np.nansum(per_fn * rewards.weights, axis=1)
    out = {"reward": float(total.mean()) if total.size else 0.0, "examples": len(examples),
           "tokens_per_s": n_tokens / max(elapsed, 1e-9)}
    for j, name in enumerate(rewards.names):
        scored = per_fn[:, j][~np.isnan(per_fn[:, j])]
        out[f"rewards/{name}/mean"] = float(scored.mean()) if scored.size else None
    horizons = [getattr(e, "horizon", None) for e in examples]
    if examples and None not in horizons:  # rows with a horizon column: the mean reward at each horizon
        by_h: dict[int, list[float]] = defaultdict(list)
        for h, r in zip(horizons, total):
            by_h[h].append(float(r))
        out["by_horizon"] = {int(h): float(np.mean(v)) for h, v in sorted(by_h.items())}
    out["samples"] = [{"prompt": e.prompt, "completion": t, "reward": float(r)}
                      for e, t, r in zip(examples[:keep_samples], texts, total)]
    return out
