"""Peak resident memory of loading and training Llama-family models with longhorizon, one fresh process per case.

Each case runs in its own subprocess (``.venv``'s Python, ``JAX_PLATFORMS=cpu``) and reports that
process's peak resident set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``), the peak already
reached after importing jax and longhorizon (``import_mb``), the wall time, the parameter count and
the bytes the parameters occupy. Cases:

* ``import``: nothing but the imports and one tiny jitted op (the floor of every other case);
* ``init-0.5B-bf16`` / ``init-0.5B-fp32``: a 0.5B-parameter Llama-family model with random weights,
  Qwen2.5-0.5B's shape (d=896, 24 layers, 14 heads, 2 KV heads, head size 64, SwiGLU 4864,
  vocabulary 151,936, tied head, q/k/v biases), initialised by ``llama.init_params`` under ``jax.jit``
  directly in the parameter dtype, with jax's default threefry PRNG (``xla_temp_mb``: the scratch
  memory XLA's buffer assignment gives the compiled init, mostly random bits for the 136M-value
  embedding) and, ``-rbg``, with ``jax_default_prng_impl="unsafe_rbg"`` (XLA's RngBitGenerator);
* ``forward-0.5B-bf16-rbg``: the bf16 model (rbg init), then one jitted forward of 4 x 64 tokens;
* ``load-135M-fp32`` / ``load-135M-bf16``: the real SmolLM2-135M-Instruct GGUF (``read_gguf``
  dequantizes it to float32 numpy, then ``params_from_hf`` casts to the dtype);
* ``grpo-135M-fp32`` / ``grpo-135M-bf16``: those weights, then one warm-up and one timed GRPO step of
  ``GRPOTrainer`` (4 prompts x 4 completions, <= 32 new tokens, chat-templated arithmetic prompts of
  ``lm_smollm2_trl.py``), reference model = policy (``beta = 0``), AdamW state in the same dtype.

    nice -n 10 .venv/bin/python benchmarks/lm_memory.py [--cases import,init-0.5B-bf16,...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))

QWEN25_05B = dict(vocab_size=151_936, d_model=896, n_layers=24, n_heads=14, n_kv_heads=2, d_ff=4864,
                  rope_base=1_000_000.0, rms_eps=1e-6, qkv_bias=True, tie_embeddings=True, max_len=32_768)
CASES = ["import", "init-0.5B-bf16", "init-0.5B-fp32", "init-0.5B-bf16-rbg", "init-0.5B-fp32-rbg",
         "forward-0.5B-bf16-rbg", "load-135M-fp32", "load-135M-bf16", "grpo-135M-fp32", "grpo-135M-bf16"]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def _tree_stats(params) -> tuple[int, int]:
    import jax

    leaves = jax.tree_util.tree_leaves(params)
    return int(sum(x.size for x in leaves)), int(sum(x.size * x.dtype.itemsize for x in leaves))


def worker(case: str) -> dict:
    import jax
    import jax.numpy as jnp

    from longhorizon.lm import llama

    jax.block_until_ready(jax.jit(lambda x: x + 1)(jnp.zeros(4)))
    import_mb = _peak_mb()
    t0 = time.perf_counter()
    out: dict = {}
    if case == "import":
        params = None
    elif "0.5B" in case:
        if case.endswith("-rbg"):  # XLA's RngBitGenerator instead of threefry: no big temporaries for the bits
            jax.config.update("jax_default_prng_impl", "unsafe_rbg")
        cfg = llama.LlamaConfig(**QWEN25_05B, dtype="bfloat16" if "bf16" in case else "float32")
        key = jax.random.PRNGKey(0)
        init = jax.jit(lambda k: llama.init_params(k, cfg)).lower(key).compile()
        out["compile_mb"] = _peak_mb()
        out["xla_temp_mb"] = init.memory_analysis().temp_size_in_bytes / 2**20
        params = jax.block_until_ready(init(key))
        out["init_s"] = time.perf_counter() - t0
        out["after_init_mb"] = _peak_mb()
        if case.startswith("forward"):
            tokens = jax.random.randint(jax.random.PRNGKey(1), (4, 64), 0, cfg.vocab_size)
            logits = jax.jit(lambda p, t: llama.forward(p, cfg, t, jnp.ones_like(t, bool)))(params, tokens)
            out["logits_finite"] = bool(jnp.isfinite(jax.block_until_ready(logits)).all())
    elif case.startswith(("load-135M", "grpo-135M")):
        from longhorizon.lm.checkpoints import read_gguf, smollm2_path

        dtype = "bfloat16" if case.endswith("bf16") else "float32"
        ckpt = read_gguf(smollm2_path(fetch=False))
        cfg = llama.config_from_gguf_spec(ckpt.spec, dtype=dtype)
        params = jax.block_until_ready(llama.params_from_hf(ckpt.tensors, cfg))
        out["load_s"] = time.perf_counter() - t0
        out["after_load_mb"] = _peak_mb()
        if case.startswith("grpo"):
            del ckpt  # the float32 numpy copy: the trainer needs only params
            out.update(_grpo_step(cfg, params))
    else:
        raise SystemExit(f"unknown case {case}; choose from {', '.join(CASES)}")
    if params is not None:
        out["params"], out["param_bytes"] = _tree_stats(params)
    out.update(case=case, seconds=time.perf_counter() - t0, import_mb=import_mb, peak_mb=_peak_mb(),
               version=f"jax {jax.__version__}")
    return out


def _grpo_step(cfg, params) -> dict:
    """One warm-up and one timed GRPO step of the generalised trainer (fails clearly while it is not there)."""
    import jax

    from lm_smollm2_trl import GENERATIONS, LEARNING_RATE, MAX_NEW, PROMPTS, make_problems, reward
    from longhorizon.lm.checkpoints import smollm2_path
    from longhorizon.lm.grpo import GRPOConfig, GRPOTrainer
    from longhorizon.lm.hf_tokenizer import from_gguf

    tok = from_gguf(smollm2_path(fetch=False))
    problems = make_problems(tok, 0, 2 * PROMPTS)
    gcfg = GRPOConfig(lr_scheduler_type="constant", num_generations=GENERATIONS, beta=0.0, loss_type="dapo", learning_rate=LEARNING_RATE,
                      max_prompt_length=max(len(tok.encode(p.prompt)) for p in problems),
                      max_completion_length=MAX_NEW, temperature=1.0)
    trainer = GRPOTrainer(model_cfg=cfg, params=params, tokenizer=tok, cfg=gcfg, reward_fn=reward)
    t0 = time.perf_counter()
    trainer.step(problems[:PROMPTS])
    jax.block_until_ready(trainer.params)
    first = time.perf_counter() - t0
    after_first = _peak_mb()
    t0 = time.perf_counter()
    m = trainer.step(problems[PROMPTS:])
    jax.block_until_ready(trainer.params)
    return {"first_step_s": first, "after_first_step_mb": after_first, "step_s": time.perf_counter() - t0,
            "generation_s": m["generation_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", default=str(HERE / "out" / "lm_memory.json"))
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker)), flush=True)
        return
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(SRC), "TOKENIZERS_PARALLELISM": "false"}
    rows = []
    for case in args.cases.split(","):
        if case not in CASES:
            raise SystemExit(f"unknown case {case}; choose from {', '.join(CASES)}")
        proc = subprocess.run([sys.executable, __file__, "--worker", case], capture_output=True, text=True, env=env)
        if proc.returncode:
            row = {"case": case, "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:400]}
        else:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        row["load_average"] = os.getloadavg()[0]
        rows.append(row)
        print(json.dumps(row), flush=True)
    report = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "memory_gb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30},
              "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{'case':22} {'params':>12} {'param MB':>9} {'import MB':>10} {'peak MB':>9} {'peak - import':>14} "
          f"{'XLA temp MB':>12} {'s':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['case']:22} failed: {r['error']}")
            continue
        params = f"{r['params']:>12,}" if "params" in r else f"{'':>12}"
        pbytes = f"{r['param_bytes'] / 2**20:>9,.0f}" if "param_bytes" in r else f"{'':>9}"
        temp = f"{r['xla_temp_mb']:>12,.0f}" if "xla_temp_mb" in r else f"{'':>12}"
        print(f"{r['case']:22} {params} {pbytes} {r['import_mb']:>10,.0f} {r['peak_mb']:>9,.0f} "
              f"{r['peak_mb'] - r['import_mb']:>14,.0f} {temp} {r['seconds']:>7.1f}")


if __name__ == "__main__":
    main()
