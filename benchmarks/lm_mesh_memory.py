"""The largest Llama-family model whose sharded GRPO step fits a per-device memory budget: fsdp=8 against one device.

Each model of a family (head size 64, a quarter as many key/value heads, MLP 4 x width, vocabulary 32,000, float32,
untied head; layers = width / 128) is compiled as ``lm.sharding.ShardedUpdate``'s GRPO step (AdamW, 16 rows x 128
tokens: 64 prompt + 64 completion) from ``jax.ShapeDtypeStruct`` leaves, so nothing is allocated; the compiled
program's ``memory_analysis()`` gives per device the bytes of its arguments (parameters, AdamW state, batch), its
outputs not aliased to donated arguments, and its temporaries. A model fits when their sum is within the budget.

The default budget is this machine's memory split over 8 virtual CPU devices (24 GiB / 8 = 3 GiB per device); the
same budget is applied to one device, and the whole machine (24 GiB) on one device is reported beside it.

    nice -n 10 .venv/bin/python benchmarks/lm_mesh_memory.py [--budget-gib 3] [--out benchmarks/out/lm_mesh_memory.json]

It starts one worker process with 8 virtual CPU devices (JAX fixes the count at start-up).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WIDTHS = (512, 768, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 4096, 5120)
ROWS, PROMPT, COMPLETION = 16, 64, 64
GIB = 2 ** 30


def family(width: int) -> dict:
    heads = width // 64
    return dict(vocab_size=32_000, d_model=width, n_layers=width // 128, n_heads=heads, n_kv_heads=max(1, heads // 4),
                d_ff=4 * width, tie_embeddings=False)


def step_bytes(width: int, mesh_spec: str) -> dict:
    """Per-device bytes of the compiled sharded step of ``family(width)`` on ``mesh_spec``."""
    import jax
    import numpy as np

    from longhorizon.lm import llama, sharding
    from longhorizon.lm.grpo import GRPOConfig, batch_shapes, optimizer_for
    from longhorizon.lm.offload import compiled_footprint

    cfg = llama.LlamaConfig(**family(width))
    params = jax.eval_shape(lambda: llama.init_params(jax.random.PRNGKey(0), cfg))
    count = int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(params)))
    grpo = GRPOConfig(max_prompt_length=PROMPT, max_completion_length=COMPLETION, bucket_completions=False,
                      lr_scheduler_type="constant")
    optimizer = optimizer_for(grpo)
    opt_state = jax.eval_shape(optimizer.init, params)
    batch = batch_shapes(ROWS, PROMPT, COMPLETION)
    mesh = sharding.parse_mesh(mesh_spec, cfg, jax.devices()[:int(np.prod(list(sharding.mesh_sizes(mesh_spec).values())))])
    step = sharding.ShardedUpdate(mesh, params, model_cfg=cfg, cfg=grpo, optimizer=optimizer)
    start = time.perf_counter()
    compiled = step.compile(params, opt_state, batch)
    memory = compiled.memory_analysis()
    return {"width": width, "mesh": mesh_spec, "parameters": count, "config": family(width),
            "argument_bytes": int(memory.argument_size_in_bytes), "output_bytes": int(memory.output_size_in_bytes),
            "alias_bytes": int(memory.alias_size_in_bytes), "temp_bytes": int(memory.temp_size_in_bytes),
            "total_bytes": compiled_footprint(compiled), "compile_seconds": time.perf_counter() - start}


def worker(budget: float, meshes: list[str]) -> list[dict]:
    """For each mesh, models in growing width until one does not fit (and that one, to show the edge)."""
    rows = []
    for mesh_spec in meshes:
        for width in WIDTHS:
            row = step_bytes(width, mesh_spec)
            row["fits"] = row["total_bytes"] <= budget
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("mesh", "width", "parameters", "total_bytes", "fits",
                                                   "compile_seconds")}), file=sys.stderr, flush=True)
            if row["total_bytes"] > 24 * GIB:  # past the whole machine: larger ones fit nowhere here
                break
    return rows


def largest(rows: list[dict], mesh: str, budget: float) -> dict | None:
    fitting = [r for r in rows if r["mesh"] == mesh and r["total_bytes"] <= budget]
    return max(fitting, key=lambda r: r["parameters"]) if fitting else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-gib", type=float, default=3.0, help="per-device budget (default 24 GiB / 8)")
    parser.add_argument("--meshes", default="data=1,fsdp=8")
    parser.add_argument("--out", default=str(HERE / "out" / "lm_mesh_memory.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    meshes = ["data=1", *args.meshes.split(";")]
    budget = args.budget_gib * GIB
    if args.worker:
        print(json.dumps(worker(budget, meshes)))
        return
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    done = subprocess.run([sys.executable, __file__, "--worker", "--budget-gib", str(args.budget_gib), "--meshes",
                           args.meshes], env=env, stdout=subprocess.PIPE, text=True, check=True)
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    report = {"budget_gib_per_device": args.budget_gib, "rows": ROWS, "tokens": PROMPT + COMPLETION, "models": rows,
              "largest": {mesh: largest(rows, mesh, budget) for mesh in meshes},
              "largest_one_device_whole_machine": largest(rows, "data=1", 24 * GIB)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"{'mesh':<16}{'width':>6}{'layers':>7}{'params (M)':>12}{'args MiB':>10}{'temp MiB':>10}{'total MiB':>11}  fits")
    for r in rows:
        print(f"{r['mesh']:<16}{r['width']:>6}{r['config']['n_layers']:>7}{r['parameters'] / 1e6:>12.1f}"
              f"{r['argument_bytes'] / 2**20:>10,.0f}{r['temp_bytes'] / 2**20:>10,.0f}{r['total_bytes'] / 2**20:>11,.0f}"
              f"  {'yes' if r['total_bytes'] <= budget else 'no'}")
    def named(row):
        return "none" if row is None else f"{row['parameters'] / 1e6:.0f}M parameters (width {row['width']})"

    for mesh, best in report["largest"].items():
        print(f"largest within {args.budget_gib} GiB per device on {mesh}: {named(best)}")
    print(f"largest on one device with the whole 24 GiB: {named(report['largest_one_device_whole_machine'])}")


if __name__ == "__main__":
    main()
