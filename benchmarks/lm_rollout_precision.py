"""Generation speed of SmolLM2-135M-Instruct with its float32 weights against the bfloat16 rollout copy
(``lm rl --rollout-dtype bfloat16``), side by side in one process, and how far the copy's log-probabilities are
from the policy's.

Workload: the GRPO rollout of ``lm rl``'s recipe (docs/lm.md): 4 chat-templated addition prompts, 8 completions
each sharing its prompt, up to 32 new tokens, temperature 1 (``GRPOTrainer.rollout`` with ``rollout_dtype``
float32 and bfloat16). Each contender's first rollout (compilation) is reported apart; then ``--rounds`` interleaved
rounds (the order alternates) of ``--steps`` rollouts each: new tokens per second, median and [min, max], and the
per-round ratio bfloat16 / float32. The mismatch: the policy's float32 teacher-forced log-probabilities of the
bfloat16 copy's samples against the copy's own (mean |log pi - log mu| over sampled tokens, and the share of tokens
whose ratio exceeds the cap 2).

    nice -n 10 .venv/bin/python benchmarks/lm_rollout_precision.py --rounds 3 --steps 2
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--out", default=str(HERE / "out" / "lm_rollout_precision.json"))
    args = parser.parse_args()

    import jax
    import numpy as np

    from longhorizon.lm.data import read_rows
    from longhorizon.lm.grpo import GRPOConfig, GRPOTrainer, completion_logprobs, rollout_weights
    from longhorizon.lm.run import Pretrained

    policy = Pretrained(args.model, "float32").load()
    rows = read_rows(ROOT / "examples" / "lm" / "addition.jsonl")[:4]

    class Prompt:
        def __init__(self, row):
            self.prompt = policy.tokenizer.apply_chat_template(row["prompt"]) if isinstance(row["prompt"], list) \
                else row["prompt"]

    problems = [Prompt(r) for r in rows]
    trainers = {dtype: GRPOTrainer(policy.model_cfg, policy.params, policy.tokenizer,
                                   GRPOConfig(lr_scheduler_type="constant", num_generations=8, max_prompt_length=128,
                                              max_completion_length=32, rollout_dtype=dtype), seed=0,
                                   reward_fn=lambda problem, text: 0.0)
                for dtype in ("float32", "bfloat16")}

    def rollout(dtype):
        start = time.perf_counter()
        ro = trainers[dtype].rollout(problems)
        return time.perf_counter() - start, ro

    first = {dtype: rollout(dtype)[0] for dtype in trainers}
    rates = {dtype: [] for dtype in trainers}
    ratios, gaps, truncated = [], [], []
    for r in range(args.rounds):
        order = list(trainers) if r % 2 == 0 else list(reversed(trainers))
        round_rates = {}
        for dtype in order:
            tokens = seconds = 0.0
            for _ in range(args.steps):
                elapsed, ro = rollout(dtype)
                seconds, tokens = seconds + elapsed, tokens + float(ro["valid"].sum())
            round_rates[dtype] = tokens / seconds
            rates[dtype].append(round_rates[dtype])
            if dtype == "bfloat16":  # the copy's samples scored by the float32 policy
                batch = {"tokens": np.concatenate([ro["prompt_tokens"], ro["tokens"]], 1),
                         "valid": np.concatenate([ro["prompt_valid"], ro["valid"]], 1),
                         "mask": ro["valid"].astype(np.float32)}
                old = np.asarray(completion_logprobs(policy.params, jax.tree_util.tree_map(np.asarray, batch),
                                                     model_cfg=policy.model_cfg, temperature=1.0))
                _, stats = rollout_weights(old, ro["logprobs"], batch["mask"], 2.0)
                gaps.append(stats["rollout_logp_gap"])
                truncated.append(stats["rollout_is_truncated"])
        ratios.append(round_rates["bfloat16"] / round_rates["float32"])

    def spread(values):
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    report = {"model": args.model, "machine": platform.processor() or platform.machine(), "jax": jax.__version__,
              "devices": str(jax.devices()[0]), "first_rollout_seconds": first,
              "new_tokens_per_s": {k: spread(v) for k, v in rates.items()}, "ratio_bf16_over_fp32": spread(ratios),
              "logp_gap": spread(gaps), "truncated_share": spread(truncated), "rounds": args.rounds, "steps": args.steps}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
