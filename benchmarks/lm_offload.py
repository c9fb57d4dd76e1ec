"""The layer-streamed GRPO update (``lm rl --offload host``) vs the plain in-memory one: throughput and device memory.

One Llama-family model that fits both ways (default: d=256, 8 blocks, 8 query / 4 key-value heads,
SwiGLU 768, vocabulary 512, tied head: 6.6M parameters) and one GRPO optimiser batch in the shared-
prompt layout (4 groups x 4 completions, 32 prompt + 32 completion tokens), float32:

* ``plain``: :func:`longhorizon.lm.grpo.update`, the whole model and AdamW state on the device;
* ``offload``: :class:`longhorizon.lm.offload.LayerStreamedUpdate`, parameters and AdamW state in
  host memory (numpy), one block at a time on the device, the next block's transfer issued before
  the current block computes.

Throughput: ``--rounds`` interleaved rounds of ``--steps`` optimiser steps each, steps per
wall-clock second and per CPU-second of the process, the ratio offload / plain per round, median and
min..max. Compile time (the first step, no persistent cache) is reported separately and never counted.

Device memory, two ways: (1) XLA's buffer assignment of the compiled programs
(``memory_analysis()``: arguments + outputs + temporaries - aliased), for the plain update and for
the largest streamed piece (a block's recomputed pullback); (2) the live JAX arrays on the device
at every layer boundary of a streamed step (``jax.live_arrays()``, the ``probe`` mode of the
updater). On a GPU (``memory_stats()`` available) it also runs each path alone in a fresh process
and reports the allocator's ``peak_bytes_in_use``::

    nice -n 10 .venv/bin/python benchmarks/lm_offload.py --rounds 3 --steps 5
    .venv/bin/python benchmarks/lm_offload.py --rounds 3 --steps 20 --layers 24 --d-model 1024   # GPU host

Writes ``benchmarks/out/lm_offload.json`` and prints markdown tables.
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


def setup(args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from longhorizon.lm import grpo, llama, offload

    cfg = llama.LlamaConfig(vocab_size=args.vocab, d_model=args.d_model, n_layers=args.layers, n_heads=8,
                            n_kv_heads=4, d_ff=3 * args.d_model, max_len=1024)
    gcfg = grpo.GRPOConfig(lr_scheduler_type="constant", num_generations=args.group, learning_rate=1e-5)
    rng = np.random.default_rng(0)
    g, s, p, n = args.groups, args.group, args.prompt, args.completion
    valid = np.ones((g * s, n), bool)
    batch = {"prompt": rng.integers(0, cfg.vocab_size, (g, p)).astype(np.int32), "prompt_valid": np.ones((g, p), bool),
             "completion": rng.integers(0, cfg.vocab_size, (g * s, n)).astype(np.int32), "completion_valid": valid,
             "mask": valid.astype(np.float32), "old_logp": np.full((g * s, n), -6.0, np.float32),
             "ref_logp": np.full((g * s, n), -6.0, np.float32),
             "advantages": np.repeat(rng.normal(0, 1, (g * s, 1)), n, 1).astype(np.float32)}
    params = jax.tree_util.tree_map(np.asarray, llama.init_params(jax.random.PRNGKey(0), cfg))
    optimizer = grpo.rl_optimizer(gcfg.learning_rate, gcfg.weight_decay, gcfg.max_grad_norm)

    def plain():
        device_params = jax.tree_util.tree_map(jnp.array, params)
        state = [device_params, optimizer.init(device_params)]
        device_batch = {k: jnp.asarray(v) for k, v in batch.items()}

        def step():
            state[0], state[1], m = grpo.update(state[0], state[1], device_batch, model_cfg=cfg, cfg=gcfg,
                                                optimizer=optimizer)
            jax.block_until_ready(m)
        return step, (state[0], state[1], device_batch)

    def streamed(probe=False):
        updater = offload.LayerStreamedUpdate(cfg, gcfg, probe=probe)
        state = [jax.tree_util.tree_map(updater.to_store, params)]
        state.append(updater.init(state[0]))

        def step():
            state[0], state[1], m = updater(state[0], state[1], batch)
            jax.block_until_ready(m)
        return step, updater

    return cfg, gcfg, params, batch, plain, streamed


def timed(step, steps: int) -> dict:
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"steps_per_s": steps / wall, "steps_per_cpu_s": steps / cpu}


def compiled_bytes(fn, *args, **kwargs) -> dict:
    """XLA's buffer assignment of one compiled program (bytes)."""
    m = fn.lower(*args, **kwargs).compile().memory_analysis()
    out = {"arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes, "temporaries": m.temp_size_in_bytes,
           "aliased": m.alias_size_in_bytes}
    out["total"] = out["arguments"] + out["outputs"] + out["temporaries"] - out["aliased"]
    return out


def memory(args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from longhorizon.lm import grpo, offload

    cfg, gcfg, params, batch, plain, streamed = setup(args)
    nbytes = lambda tree: int(sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(tree)))  # noqa: E731
    _, (device_params, opt_state, device_batch) = plain()
    optimizer = grpo.rl_optimizer(gcfg.learning_rate, gcfg.weight_decay, gcfg.max_grad_norm)
    plain_program = compiled_bytes(grpo.update, device_params, opt_state, device_batch, model_cfg=cfg, cfg=gcfg,
                                   optimizer=optimizer)
    del device_params, opt_state, device_batch
    step, updater = streamed(probe=True)
    step()  # compiles; the probe's peak is the same on every step
    tokens = args.groups * args.prompt + args.groups * args.group * args.completion
    x = jnp.zeros((1, tokens, cfg.d_model), jnp.float32)
    device_batch = {k: jnp.asarray(v) for k, v in batch.items()}
    block = jax.tree_util.tree_map(jnp.asarray, params["block_0"])
    pullback = compiled_bytes(offload._block_pullback, block, x, x, device_batch, cfg=cfg, temperature=gcfg.temperature)
    return {"model_bytes": nbytes(params), "block_bytes": nbytes(params["block_0"]),
            "embed_bytes": nbytes(params["embed"]), "residual_bytes": int(x.nbytes),
            "plain_update_program": plain_program, "block_pullback_program": pullback,
            "offload_peak_live_bytes": int(updater.peak_device_bytes)}


def gpu_peak(args, which: str) -> int:
    """``peak_bytes_in_use`` of a fresh process that runs only ``which`` (GPU allocators keep a peak)."""
    cmd = [sys.executable, __file__, "--peak-worker", which, *sys.argv[1:]]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return int(json.loads(out.strip().splitlines()[-1])["peak_bytes_in_use"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--completion", type=int, default=32)
    ap.add_argument("--peak-worker", choices=("plain", "offload"), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(HERE / "out" / "lm_offload.json"))
    args = ap.parse_args()
    import jax

    if args.peak_worker:
        _, _, _, _, plain, streamed = setup(args)
        step = (plain() if args.peak_worker == "plain" else streamed())[0]
        step()
        step()
        print(json.dumps({"peak_bytes_in_use": jax.devices()[0].memory_stats()["peak_bytes_in_use"]}))
        return

    cfg, _, params, _, plain, streamed = setup(args)
    runs = {"plain": plain()[0], "offload": streamed()[0]}
    compile_s = {}
    for name, step in runs.items():
        t0 = time.perf_counter()
        step()
        compile_s[name] = time.perf_counter() - t0
    rounds = []
    for r in range(args.rounds):
        row = {"round": r, "load_1min": os.getloadavg()[0]}
        order = list(runs) if r % 2 == 0 else list(runs)[::-1]  # alternate who goes first
        for name in order:
            row[name] = timed(runs[name], args.steps)
        row["ratio"] = row["offload"]["steps_per_s"] / row["plain"]["steps_per_s"]
        row["cpu_ratio"] = row["offload"]["steps_per_cpu_s"] / row["plain"]["steps_per_cpu_s"]
        rounds.append(row)
        print(json.dumps(row), flush=True)
    mem = memory(args)
    if jax.devices()[0].memory_stats() is not None:
        mem["gpu_peak_bytes_in_use"] = {name: gpu_peak(args, name) for name in ("plain", "offload")}
    n_params = int(sum(x.size for x in jax.tree_util.tree_leaves(params)))
    result = {"config": vars(args), "params": n_params, "device": str(jax.devices()[0]), "jax": jax.__version__,
              "machine": platform.processor() or platform.machine(), "compile_s": compile_s, "rounds": rounds,
              "memory": mem}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    report(result)


def report(result: dict) -> None:
    rounds = result["rounds"]

    def spread(values, fmt="{:.2f}"):
        return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"

    c = result["config"]
    print(f"\n{result['params'] / 1e6:.1f}M parameters ({c['layers']} blocks, d={c['d_model']}), {result['device']}, "
          f"batch {c['groups']}x{c['group']} x ({c['prompt']}+{c['completion']}) tokens, {c['steps']} steps x "
          f"{c['rounds']} rounds\n")
    print("| path | steps/s | steps/CPU-s | compile s |")
    print("|---|---|---|---|")
    for name in ("plain", "offload"):
        print(f"| {name} | {spread([r[name]['steps_per_s'] for r in rounds])} | "
              f"{spread([r[name]['steps_per_cpu_s'] for r in rounds])} | {result['compile_s'][name]:.1f} |")
    print(f"| offload / plain | {spread([r['ratio'] for r in rounds])} | {spread([r['cpu_ratio'] for r in rounds])} | |")
    per_round = ", ".join(f"{r['ratio']:.2f} (load {r['load_1min']:.1f})" for r in rounds)
    print(f"\nper-round ratios: {per_round}\n")
    m = result["memory"]
    mb = lambda b: f"{b / 2**20:.2f} MiB"  # noqa: E731
    layers = lambda b: f"{b / m['block_bytes']:.1f}"  # noqa: E731
    print("| device memory | bytes | blocks |")
    print("|---|---|---|")
    print(f"| one block's weights | {mb(m['block_bytes'])} | 1.0 |")
    print(f"| whole model | {mb(m['model_bytes'])} | {layers(m['model_bytes'])} |")
    p, b = m["plain_update_program"], m["block_pullback_program"]
    print(f"| plain update program (args {mb(p['arguments'])} + temps {mb(p['temporaries'])}) | {mb(p['total'])} | "
          f"{layers(p['total'])} |")
    print(f"| offload: peak live arrays at layer boundaries | {mb(m['offload_peak_live_bytes'])} | "
          f"{layers(m['offload_peak_live_bytes'])} |")
    print(f"| offload: a block's pullback program (args {mb(b['arguments'])} + temps {mb(b['temporaries'])}) | "
          f"{mb(b['total'])} | {layers(b['total'])} |")
    print(f"| offload bound: peak live + pullback temporaries | {mb(m['offload_peak_live_bytes'] + b['temporaries'])} | "
          f"{layers(m['offload_peak_live_bytes'] + b['temporaries'])} |")
    if "gpu_peak_bytes_in_use" in m:
        g = m["gpu_peak_bytes_in_use"]
        print(f"| GPU peak_bytes_in_use: plain / offload | {mb(g['plain'])} / {mb(g['offload'])} | "
              f"{layers(g['plain'])} / {layers(g['offload'])} |")


if __name__ == "__main__":
    main()
