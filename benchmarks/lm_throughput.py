"""GRPO throughput of language-model policies on this machine, longhorizon vs TRL, side by side in one run.

Workload (identical for both): randomly initialised decoder-only transformers of about 0.1M, 1M and
10M parameters over the character alphabet of ``longhorizon.lm.tokenizer``; h1 chained-arithmetic
prompts of horizon 5 (35 characters + BOS = 36 prompt tokens), up to 26 new tokens (EOS included);
8 prompts x ``num_generations = 8`` = 64 completions per step; one optimiser step per generation
batch (``num_iterations = steps_per_generation = gradient_accumulation_steps = 1``), ``beta = 0``,
``loss_type = "dapo"``, temperature 1, AdamW at 1e-4; rewards from ``longhorizon.lm.tasks.score``
(the same Python verifier in both processes).

* ``longhorizon``: :class:`longhorizon.lm.grpo.GRPOTrainer` (jitted KV-cache generation in one
  ``lax.while_loop``, jitted update), ``rope`` positions.
* ``trl``: TRL's ``GRPOTrainer`` on ``transformers.GPT2LMHeadModel`` built from a ``GPT2Config`` of
  the same width, depth and heads (learned positions; no hub access: a character-level fast
  tokenizer is built in the script), in its own virtual environment ``benchmarks/.venvs/trl``
  created by ``peer_env`` on first use (CPU torch wheel from this machine's disk).

Each (size, contender) runs in a fresh process: one warm-up step (compilation for JAX; lazy
initialisation for torch), reported separately as ``first step s``, then ``--steps`` timed steps.
Rounds are interleaved (round i runs every contender at every size with seed i); the report gives
the median and range of GRPO steps per second (wall and per CPU-second of the process) and the
per-round ratio longhorizon / TRL. longhorizon processes also report generation tokens/s (new
tokens) and training tokens/s (valid prompt + completion tokens of the update) from the same steps.

    nice -n 10 .venv/bin/python benchmarks/lm_throughput.py --rounds 3 [--sizes 0.1M,1M,10M] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))

SIZES = {  # width, depth, heads
    "0.1M": (64, 2, 4),
    "1M": (128, 5, 4),
    "10M": (256, 12, 8),
}
HORIZON, PROMPTS, GENERATIONS, LEARNING_RATE = 5, 8, 8, 1e-4
TRL_REQUIREMENTS = ["torch==2.13.0", "trl==1.13.0", "transformers==5.17.0", "accelerate==1.15.0", "datasets==5.0.1"]


def _problems(seed: int, n: int):
    """Deterministic h1 chain problems (the same in both processes: numpy only)."""
    from longhorizon.lm.tasks import TaskConfig, make_problems, max_lengths

    cfg = TaskConfig(digits=2, operators="+", names="split", fixed_width=True)
    plen, clen = max_lengths("chain", HORIZON, cfg)
    return make_problems("chain", [HORIZON], n, 1000 + seed, cfg), plen + 1, clen + 1


# ----------------------------------------------------------------------------- longhorizon worker


def worker_longhorizon(size: str, seed: int, steps: int) -> dict:
    import jax

    from longhorizon.lm.grpo import GRPOConfig, GRPOTrainer
    from longhorizon.lm.model import ModelConfig, count_params, init_params
    from longhorizon.lm.tokenizer import Tokenizer

    d, n_layers, n_heads = SIZES[size]
    tok = Tokenizer()
    problems, plen, clen = _problems(seed, PROMPTS * (steps + 1))
    model_cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=d, n_layers=n_layers, n_heads=n_heads, max_len=128)
    params = init_params(jax.random.PRNGKey(seed), model_cfg)
    cfg = GRPOConfig(lr_scheduler_type="constant", num_generations=GENERATIONS, beta=0.0, loss_type="dapo", learning_rate=LEARNING_RATE,
                     max_prompt_length=plen, max_completion_length=clen, temperature=1.0)
    trainer = GRPOTrainer(model_cfg, params, tok, cfg, seed=seed)
    t0 = time.perf_counter()
    trainer.step(problems[:PROMPTS])
    jax.block_until_ready(trainer.params)
    first = time.perf_counter() - t0
    gen_s = upd_s = 0.0
    gen_tok = upd_tok = 0
    c0, t0 = time.process_time(), time.perf_counter()
    for s in range(1, steps + 1):
        before = dict(trainer.counters)
        m = trainer.step(problems[s * PROMPTS:(s + 1) * PROMPTS])
        jax.block_until_ready(trainer.params)
        gen_s += m["generation_s"]
        upd_s += m["step_s"] - m["generation_s"]
        gen_tok += trainer.counters["generated_tokens"] - before["generated_tokens"]
        upd_tok += trainer.counters["update_tokens"] - before["update_tokens"]
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"params": count_params(params), "steps": steps, "seconds": seconds, "cpu_seconds": cpu,
            "first_step_seconds": first, "generation_tokens_per_s": gen_tok / gen_s,
            "training_tokens_per_s": upd_tok / upd_s, "new_tokens_per_step": gen_tok / steps,
            "version": f"jax {jax.__version__}"}


# ----------------------------------------------------------------------------- TRL worker (runs in the trl venv)


def worker_trl(size: str, seed: int, steps: int) -> dict:
    import tempfile

    import torch
    import transformers
    import trl
    from datasets import Dataset
    from tokenizers import Regex, decoders, models, pre_tokenizers, processors
    from tokenizers import Tokenizer as HFTokenizer
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        PreTrainedTokenizerFast,
        TrainerCallback,
    )

    from longhorizon.lm.tasks import score
    from longhorizon.lm.tokenizer import SPECIALS, Tokenizer

    d, n_layers, n_heads = SIZES[size]
    ours = Tokenizer()
    vocab = {s: i for i, s in enumerate(SPECIALS)} | {c: i + len(SPECIALS) for i, c in enumerate(ours.alphabet)}
    core = HFTokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>",
                                        eos_token="<eos>", padding_side="left")

    problems, plen, clen = _problems(seed, PROMPTS * (steps + 1))
    dataset = Dataset.from_dict({"prompt": [p.prompt for p in problems], "index": list(range(len(problems)))})

    def reward(prompts, completions, index, **_):
        return [score(problems[i], text) for i, text in zip(index, completions)]

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_positions=128, n_embd=d, n_layer=n_layers,
                                       n_head=n_heads, bos_token_id=1, eos_token_id=2, pad_token_id=0))
    n_params = sum(p.numel() for p in model.parameters())
    times: list[tuple[float, float]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            times.append((time.perf_counter(), time.process_time()))

        def on_step_end(self, args, state, control, **kw):
            times.append((time.perf_counter(), time.process_time()))

    with tempfile.TemporaryDirectory() as out:
        args = trl.GRPOConfig(
            output_dir=out, per_device_train_batch_size=PROMPTS * GENERATIONS, num_generations=GENERATIONS,
            gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1, max_completion_length=clen,
            learning_rate=LEARNING_RATE, lr_scheduler_type="constant", beta=0.0, loss_type="dapo", epsilon=0.2,
            temperature=1.0, top_p=1.0, max_steps=steps + 1, logging_steps=1, report_to="none", save_strategy="no",
            use_cpu=True, seed=seed, disable_tqdm=True, dataloader_num_workers=0, shuffle_dataset=False,
            # TRL 1.13 turns both on by default (even on the CPU); the comparison is fp32 without recomputation
            bf16=False, fp16=False, gradient_checkpointing=False,
        )
        trainer = trl.GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=dataset,
                                  processing_class=tokenizer, callbacks=[Clock()])
        trainer.train()
    begins, ends = times[0::2], times[1::2]
    return {"params": n_params, "steps": steps, "seconds": ends[-1][0] - ends[0][0],  # steps 2..steps+1, back to back
            "cpu_seconds": ends[-1][1] - ends[0][1], "first_step_seconds": ends[0][0] - begins[0][0],
            "torch_threads": torch.get_num_threads(), "prompt_tokens": plen,
            "version": f"trl {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__}"}


# ----------------------------------------------------------------------------- driver


def _run_worker(contender: str, size: str, seed: int, steps: int) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(SRC), "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if contender.startswith("trl"):
        from peer_env import peer_python

        python = str(peer_python("trl", TRL_REQUIREMENTS))
        if contender == "trl-1thread":  # torch on one thread: immune to OpenMP spin-waits on a busy machine
            env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    else:
        python = sys.executable
    out = subprocess.run([python, __file__, "--worker", "trl" if contender.startswith("trl") else contender, "--sizes", size, "--seed", str(seed),
                          "--steps", str(steps)], check=False, capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"{contender} {size} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="timed GRPO steps per run (after one warm-up step)")
    parser.add_argument("--sizes", default="0.1M,1M,10M")
    parser.add_argument("--only", default="longhorizon,trl,trl-1thread")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(HERE / "out" / "lm_throughput.json"))
    args = parser.parse_args()
    if args.worker:
        fn = {"longhorizon": worker_longhorizon, "trl": worker_trl}[args.worker]
        print(json.dumps(fn(args.sizes, args.seed, args.steps)), flush=True)
        return
    sizes, names = args.sizes.split(","), args.only.split(",")
    for s in sizes:
        if s not in SIZES:
            raise SystemExit(f"unknown size {s}; choose from {', '.join(SIZES)}")
    results: dict[str, list[dict]] = {}
    for rnd in range(args.rounds):
        for size in sizes:
            for name in names:
                row = _run_worker(name, size, rnd, args.steps)
                row.update(round=rnd, size=size, contender=name, load_average=os.getloadavg()[0],
                           steps_per_second=row["steps"] / row["seconds"],
                           steps_per_cpu_second=row["steps"] / row["cpu_seconds"])
                results.setdefault(f"{name}@{size}", []).append(row)
                print(json.dumps(row), flush=True)

    def spread(values):
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    summary = {}
    for key, rows in results.items():
        summary[key] = {k: spread([r[k] for r in rows]) for k in
                        ("steps_per_second", "steps_per_cpu_second", "first_step_seconds")}
        for k in ("generation_tokens_per_s", "training_tokens_per_s"):
            if k in rows[0]:
                summary[key][k] = spread([r[k] for r in rows])
        summary[key].update(params=rows[0]["params"], version=rows[0]["version"])
    ratios = {}
    for size in sizes:
        for peer in ("trl", "trl-1thread"):
            a, b = results.get(f"longhorizon@{size}"), results.get(f"{peer}@{size}")
            if a and b:
                wall = [x["steps_per_second"] / y["steps_per_second"] for x, y in zip(a, b)]
                cpu = [x["steps_per_cpu_second"] / y["steps_per_cpu_second"] for x, y in zip(a, b)]
                ratios[f"longhorizon/{peer}@{size}"] = {"wall": spread(wall), "cpu": spread(cpu), "per_round_wall": wall}
    report = {"config": {"horizon": HORIZON, "prompts": PROMPTS, "num_generations": GENERATIONS,
                         "steps_timed": args.steps, "rounds": args.rounds, "sizes": {s: SIZES[s] for s in sizes}},
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average": os.getloadavg()},
              "runs": results, "summary": summary, "ratios": ratios}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"\nGRPO steps (64 completions, prompt 36, <= 26 new tokens), {args.steps} timed steps, {args.rounds} rounds")
    print(f"{'contender':18} {'params':>10} {'steps/s median [min, max]':>28} {'per CPU-s':>10} {'first step s':>13} "
          f"{'gen tok/s':>10} {'train tok/s':>11}")
    for key, s in summary.items():
        st = s["steps_per_second"]
        gen = f"{s['generation_tokens_per_s']['median']:>10,.0f}" if "generation_tokens_per_s" in s else f"{'':>10}"
        trn = f"{s['training_tokens_per_s']['median']:>11,.0f}" if "training_tokens_per_s" in s else f"{'':>11}"
        print(f"{key:18} {s['params']:>10,} {st['median']:>10.3f} [{st['min']:.3f}, {st['max']:.3f}]".ljust(58) +
              f" {s['steps_per_cpu_second']['median']:>10.3f} {s['first_step_seconds']['median']:>13.1f} {gen} {trn}")
    for size, r in ratios.items():
        print(f"{size}: wall {r['wall']['median']:.2f} [{r['wall']['min']:.2f}, {r['wall']['max']:.2f}] "
              f"per round {', '.join(f'{x:.2f}' for x in r['per_round_wall'])}; "
              f"per CPU-second {r['cpu']['median']:.2f} [{r['cpu']['min']:.2f}, {r['cpu']['max']:.2f}]")


if __name__ == "__main__":
    main()
