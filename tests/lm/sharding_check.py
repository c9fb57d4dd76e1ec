"""Sharded GRPO steps and greedy generation against one device, on virtual CPU devices; prints one JSON object.

Run by tests/lm/test_lm_sharding.py in a subprocess (JAX fixes the device count at start-up)::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \
        python tests/lm/sharding_check.py --shared fsdp=4 data=2,fsdp=2 fsdp=8 ...

A mesh runs on the first (product of its sizes) devices, so one 8-device process checks the 4-device meshes
too (one start-up, one one-device baseline); ``--shared``: the first mesh also runs the shared-prompt layout;
``--in-house=SPEC``: the in-house Transformer (lm.model) also takes a step on that mesh.
For each mesh: the sharded step's loss, gradient norm, gradient (Adam's first moment after one step is
``(1 - b1)`` times the clipped gradient) and updated parameters against the one-device step, greedy generations
against one device, and the bytes of parameters + optimiser state per device (held, and the compiled step's
outputs from its memory analysis). The numbers are compared by the test, not here.
"""

from __future__ import annotations

import json
import re
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm import llama, sharding
from longhorizon.lm.generate import generate
from longhorizon.lm.grpo import GRPOConfig, completion_logprobs, optimizer_for, update
from longhorizon.lm.model import ModelConfig
from longhorizon.lm.model import init_params as init_in_house

# tiny-random's shape (lm.policy.tiny_random) without its tokenizer: 4 query heads, 2 key/value heads, odd vocabulary
CFG = llama.LlamaConfig(vocab_size=259, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128)
IN_HOUSE = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, d_ff=64)  # lm.model.Transformer
# TRL's default rate: AdamW's first step moves each parameter by lr g / (|g| + 1e-8), so an entry whose gradient is
# float32 noise moves by up to lr either way on any two summation orders; at 1e-6 that stays under the tolerance
GRPO = GRPOConfig(learning_rate=1e-6, lr_scheduler_type="constant", max_prompt_length=8, max_completion_length=8)
ROWS, PROMPT, COMPLETION = 16, 8, 8


def batches(params, model_cfg=CFG):
    """The per-row layout (``tokens, valid``) and the shared-prompt layout (8 groups of 2) of random rollouts."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, model_cfg.vocab_size, (ROWS, PROMPT + COMPLETION)).astype(np.int32)
    valid = np.ones(tokens.shape, bool)
    valid[0, :3] = False  # a left-padded prompt
    valid[1, PROMPT + 5:] = False  # a completion that stopped early
    valid[2, PROMPT + 1:] = False
    tokens[2, :PROMPT] = tokens[3, :PROMPT]  # rows 2, 3 form a group in the shared layout
    tokens[0, :PROMPT] = np.where(valid[0, :PROMPT], tokens[0, :PROMPT], 0)
    tokens[1, :PROMPT] = tokens[0, :PROMPT]
    valid[1, :PROMPT] = valid[0, :PROMPT]
    for g in range(2, ROWS // 2):
        tokens[2 * g, :PROMPT] = tokens[2 * g + 1, :PROMPT]
    common = {"mask": valid[:, PROMPT:].astype(np.float32),
              "advantages": rng.normal(size=(ROWS, COMPLETION)).astype(np.float32), "rows": np.ones(ROWS, np.float32)}
    per_row = {"tokens": tokens, "valid": valid, **common}
    logp = np.asarray(completion_logprobs(params, jax.tree_util.tree_map(jnp.asarray, per_row), model_cfg=model_cfg,
                                          temperature=1.0))
    common["old_logp"] = (logp + rng.normal(scale=0.2, size=logp.shape)).astype(np.float32)  # ratios off 1: some clip
    common["ref_logp"] = common["old_logp"]
    shared = {"prompt": tokens[::2, :PROMPT], "prompt_valid": valid[::2, :PROMPT],
              "completion": tokens[:, PROMPT:], "completion_valid": valid[:, PROMPT:], **common}
    return {"rows": {**per_row, **common}, "shared": shared}


def one_step(params, opt, batch, step=None, compiled=None, model_cfg=CFG):
    """One update on one device (``step`` None) or on ``step``'s mesh (``compiled``: its program for these shapes)."""
    if step is None:
        place = jax.tree_util.tree_map(jnp.array, params)  # a private copy: the update donates it
        args = place, opt.init(place), jax.tree_util.tree_map(jnp.asarray, batch)
        program = update.lower(*args, model_cfg=model_cfg, cfg=GRPO, optimizer=opt).compile()
        new, state, metrics = program(*args)
    else:
        args = step.arguments(step.place(params), step.init(params), batch)
        program = compiled or step.compile(*args)
        new, state, metrics = program(*args)
    mu = state[1][0].mu  # chain(clip, adamw): adamw = chain(scale_by_adam, ...): ScaleByAdamState
    memory = program.memory_analysis()
    return jax.device_get((new, mu, {k: float(v) for k, v in metrics.items()})) + (int(memory.temp_size_in_bytes),)


def compare(got, reference) -> dict:
    """How far a sharded step (new parameters, Adam's first moment, metrics) is from the one-device step."""
    (new, mu, metrics, _), (ref_new, ref_mu, ref_metrics, _) = got, reference
    pairs = list(zip(jax.tree_util.tree_leaves(new), jax.tree_util.tree_leaves(ref_new)))
    return {
        "loss": [metrics["loss"], ref_metrics["loss"]],
        "grad_norm": [metrics["grad_norm"], ref_metrics["grad_norm"]],
        "metrics_max_relative": max(abs(metrics[k] - ref_metrics[k]) / max(abs(ref_metrics[k]), 1e-30) for k in ref_metrics),
        "gradient_max_relative": max_relative(mu, ref_mu),
        "params_max_abs": max(float(np.max(np.abs(x - y))) for x, y in pairs),
        "params_max_relative": max_relative(new, ref_new),
        "params_within_tolerance": all(np.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in pairs),
    }


def in_house(spec: str) -> dict:
    """The in-house Transformer's per-row step on ``spec``'s mesh against one device."""
    params = init_in_house(jax.random.PRNGKey(1), IN_HOUSE)
    opt = optimizer_for(GRPO)
    batch = batches(params, IN_HOUSE)["rows"]
    step = sharding.ShardedUpdate(sharding.parse_mesh(spec, IN_HOUSE, devices_for(spec)), params, model_cfg=IN_HOUSE,
                                  cfg=GRPO, optimizer=opt)
    return {spec: compare(one_step(params, opt, batch, step, model_cfg=IN_HOUSE),
                          one_step(params, opt, batch, model_cfg=IN_HOUSE))}


def max_relative(a, b) -> float:
    """max |a - b| / max |b| over every leaf (the scale of each leaf sets its own tolerance)."""
    return max(float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-30))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def generations(params, mesh=None):
    """Greedy continuations of 4 prompts by groups of 2 rows: ``(tokens, logprobs, the tokens' sharding, the key/value
    head counts of the KV caches in the compiled program, per device)``."""
    rng = np.random.default_rng(1)
    prompt = rng.integers(3, CFG.vocab_size, (4, PROMPT)).astype(np.int32)
    valid = np.ones(prompt.shape, bool)
    valid[0, :3] = False
    prompt[0, :3] = 0
    if mesh is not None:
        params = sharding.shard_params(mesh, params)
        prompt, valid = sharding.shard_batch(mesh, (prompt, valid))
    # no stop id: every row decodes all 8 tokens
    program = generate.lower(params, prompt, valid, jax.random.PRNGKey(0), cfg=CFG, max_new_tokens=8, temperature=0.0,
                             group_size=2, eos_ids=(-1,)).compile()
    out = program(params, prompt, valid, jax.random.PRNGKey(0))
    # caches are [layers, rows, slots, kv heads, head size]; prompts and completions both have 8 slots here
    heads = sorted({int(h) for h in re.findall(rf"f32\[{CFG.n_layers},\d+,8,(\d+),{CFG.head_dim}\]", program.as_text())})
    return np.asarray(out.tokens), np.asarray(out.logprobs), str(out.tokens.sharding), heads


BAD = ("fsdp=3", "data=2,fsdp=2,pipeline=1", "tensor=4", "fsdp=2,tensor=2,data=2,fsdp=1", "fsdp=two")


def devices_for(spec: str):
    return jax.devices()[: int(np.prod(list(sharding.mesh_sizes(spec).values())))]


def main(specs: list[str], shared: bool, in_house_spec: str | None) -> dict:
    start = time.process_time()
    params = llama.init_params(jax.random.PRNGKey(0), CFG)
    opt = optimizer_for(GRPO)
    data = batches(params)
    base = {layout: one_step(params, opt, b) for layout, b in data.items()}
    base_tokens, base_logprobs, _, _ = generations(params)
    one_device_bytes = 3 * 4 * sum(x.size for x in jax.tree_util.tree_leaves(params))  # float32 params, mu and nu
    report = {"devices": jax.device_count(), "one_device_bytes": one_device_bytes, "base": {k: v[2] for k, v in base.items()},
              "one_device_temp_bytes": base["rows"][3],
              "meshes": {}, "seconds": {"one device": time.process_time() - start}}
    for spec in specs:
        start = time.process_time()
        mesh = sharding.parse_mesh(spec, CFG, devices_for(spec))
        step = sharding.ShardedUpdate(mesh, params, model_cfg=CFG, cfg=GRPO, optimizer=opt)
        placed, state = step.place(params), step.init(params)
        compiled = step.compile(placed, state, data["rows"])  # compiled once: measured here, run by one_step
        memory = compiled.memory_analysis()
        row = {"sizes": dict(mesh.shape), "held_bytes": sharding.device_bytes((placed, state)),
               "compiled_output_bytes": int(memory.output_size_in_bytes),
               "compiled_argument_bytes": int(memory.argument_size_in_bytes),
               "compiled_temp_bytes": int(memory.temp_size_in_bytes),
               "q_kernel_spec": str(placed["blocks"]["q"]["kernel"].sharding.spec)}
        del placed, state
        layouts = ("rows", "shared") if shared and spec == specs[0] else ("rows",)  # shared once: its compile costs
        for layout in layouts:
            row[layout] = compare(one_step(params, opt, data[layout], step, compiled if layout == "rows" else None),
                                  base[layout])
        tokens, logprobs, token_sharding, heads = generations(params, mesh)
        row["generation"] = {"identical": bool((tokens == base_tokens).all()),
                             "logprobs_max_abs": float(np.max(np.abs(logprobs - base_logprobs))),
                             "tokens_sharding": token_sharding, "kv_cache_heads_per_device": heads}
        report["meshes"][spec] = row
        report["seconds"][spec] = time.process_time() - start
    report["in_house"] = in_house(in_house_spec) if in_house_spec else {}
    report["errors"] = {}
    for spec in BAD:  # on 4 devices (a mesh of 3 devices is refused, not built on the first 3)
        try:
            sharding.parse_mesh(spec, CFG, jax.devices()[:4])
            report["errors"][spec] = None
        except UsageError as e:
            report["errors"][spec] = str(e)
    return report


if __name__ == "__main__":
    args = sys.argv[1:]
    options = [a for a in args if a.startswith("--")]
    in_house_spec = next((a.split("=", 1)[1] for a in options if a.startswith("--in-house=")), None)
    print(json.dumps(main([a for a in args if a not in options], "--shared" in options, in_house_spec)))
