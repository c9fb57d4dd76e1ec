"""Layers scanned vs unrolled on the real SmolLM2-135M-Instruct: compilation time and logits.

``longhorizon.lm.llama.Llama`` stacks its 30 blocks' weights and runs them with one ``lax.scan``; before, the
blocks were an unrolled Python loop, so every program (forward, generation, the GRPO update) held 30 copies of
the block and compiled for longer as the model got deeper. This script compiles the same forward pass both ways
on the same weights (the unrolled one applies :class:`longhorizon.lm.llama.Block` layer by layer, as the old
module did) and reports

* compilation seconds of each forward program (``jit(...).lower(...).compile()``, median of ``--repeats``
  fresh compilations; the persistent compilation cache is off in this process),
* whether the logits are bit-identical (and the largest difference),
* the compilation seconds of the GRPO update and of generation (what a run's first step pays), scanned only,

for the benchmark workload of ``lm_smollm2_trl.py`` (4 chat prompts of 46 tokens x 4 completions of <= 32 tokens),
and last the update's seconds on a batch whose longest completion is 12 tokens, at the bucketed width (16 columns)
and at the full ``max_completion_length`` (32 and 64), median of ``--repeats`` timed calls after one warm-up each.

    nice -n 10 .venv/bin/python benchmarks/lm_scan_layers.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

import jax

jax.config.update("jax_enable_compilation_cache", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from longhorizon.lm import generate as G
    from longhorizon.lm import grpo, llama
    from longhorizon.lm.checkpoints import read_gguf
    from longhorizon.lm.checkpoints.fetch import model_path

    ckpt = read_gguf(model_path("smollm2"))
    cfg = llama.config_from_gguf_spec(ckpt.spec)
    params = llama.params_from_hf(ckpt.tensors, cfg)
    del ckpt
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (16, 78)), jnp.int32)
    valid = jnp.asarray(np.arange(78)[None] >= rng.integers(0, 8, (16, 1)))

    def scanned(p):
        return llama.forward(p, cfg, tokens, valid)

    def unrolled(p):
        return llama.forward_layer_by_layer(p, cfg, tokens, valid)

    def compile_seconds(fn, *fn_args) -> tuple[float, object]:
        times, compiled = [], None
        for _ in range(args.repeats):
            jax.clear_caches()  # or the second compilation of the same program is a lookup
            t0 = time.perf_counter()
            compiled = jax.jit(fn).lower(*fn_args).compile()
            times.append(time.perf_counter() - t0)
        return statistics.median(times), compiled

    report = {"model": "SmolLM2-135M-Instruct fp32", "layers": cfg.n_layers, "batch": list(tokens.shape),
              "jax": jax.__version__, "repeats": args.repeats}
    for name, fn in (("scanned", scanned), ("unrolled", unrolled)):
        seconds, compiled = compile_seconds(fn, params)
        report[f"{name}_forward_compile_s"] = seconds
        report[f"{name}_logits"] = np.asarray(compiled(params))
    a, b = report.pop("scanned_logits"), report.pop("unrolled_logits")
    report["logits_bit_identical"] = bool(np.array_equal(a, b))
    report["logits_max_abs_difference"] = float(np.abs(a - b).max())

    # what a GRPO run's first step compiles: generation and the update, on the benchmark's shapes
    prompts, prompt_valid = tokens[:4, :46], valid[:4, :46]
    t0 = time.perf_counter()
    G.generate.lower(params, prompts, prompt_valid, jax.random.PRNGKey(0), cfg=cfg, max_new_tokens=32, temperature=1.0,
                     top_p=1.0, group_size=4, eos_ids=(2,), pad_id=0).compile()
    report["generate_compile_s"] = time.perf_counter() - t0
    config = grpo.GRPOConfig(lr_scheduler_type="constant", num_generations=4, max_prompt_length=46, max_completion_length=32)
    optimizer = grpo.optimizer_for(config)
    batch = {"prompt": prompts, "prompt_valid": prompt_valid, "completion": tokens[:, 46:], "completion_valid": valid[:, 46:],
             "mask": jnp.ones((16, 32)), "old_logp": jnp.zeros((16, 32)), "ref_logp": jnp.zeros((16, 32)),
             "advantages": jnp.ones((16, 32)), "rows": jnp.ones(16)}
    t0 = time.perf_counter()
    grpo.update.lower(params, optimizer.init(params), batch, model_cfg=cfg, cfg=config, optimizer=optimizer).compile()
    report["update_compile_s"] = time.perf_counter() - t0

    # bucketing: the same 16 completions of <= 12 tokens, run at 16 columns (bucketed) and at 32 / 64 (not)
    lengths, state = jnp.asarray(rng.integers(3, 13, 16)), optimizer.init(params)
    for width in (16, 32, 64):
        cols = jnp.arange(width)[None] < lengths[:, None]
        completion = jnp.asarray(rng.integers(0, cfg.vocab_size, (16, width)), jnp.int32)
        wide = {**batch, "completion": completion, "completion_valid": cols, "mask": cols.astype(jnp.float32),
                "old_logp": jnp.zeros((16, width)), "ref_logp": jnp.zeros((16, width)), "advantages": jnp.ones((16, width))}
        def one_update(p, s, b):  # the gradient norm needs every gradient: the backward pass is not dead code
            new, _, metrics = grpo.update(p, s, b, model_cfg=cfg, optimizer=optimizer,
                                          cfg=dataclasses.replace(config, max_completion_length=64))
            return metrics["grad_norm"] + new["embed"]["embedding"][0, 0]

        step = jax.jit(one_update)
        step(params, state, wide).block_until_ready()
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            step(params, state, wide).block_until_ready()
            times.append(time.perf_counter() - t0)
        report[f"update_s_at_{width}_columns"] = statistics.median(times)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
