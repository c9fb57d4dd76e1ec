"""Updates/s of our HIQL (and OTA) update, at the CPU size and at OGBench's reference size, side by side.

    .venv/bin/python benchmarks/offline_hiql_ogbench.py --rounds 3 --updates 200

Each configuration's chunk (``--updates`` scanned sample -> learn updates, one seed, the dataset on
device) is compiled first and timed separately; then the rounds are interleaved (every configuration
once per round) so that load from other jobs spreads over all of them; the table gives the median
and the min..max over rounds.

The peer, OGBench's reference JAX implementation (``impls/agents/hiql.py`` of seohongpark/ogbench), is
not packaged: the ``ogbench`` wheel on PyPI (1.2.x) holds only the environments, and ``impls/`` is
reachable only by cloning the GitHub repository, which this project's machines cannot do. So the
reference column is reported as not run; rerun it beside this script where the repository can be
cloned (``impls/main.py --agents=agents/hiql.py`` at the same ``value_hidden_dims``,
``actor_hidden_dims`` and ``batch_size``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.config import apply_overrides
from longhorizon.engine.fused import over_seeds
from longhorizon.offline import agents
from longhorizon.offline.samplers import goal_data
from longhorizon.offline.train import make_chunk

SIZES = {"cpu (256x2, batch 256)": {}, "reference (512x3, batch 1024)": agents.PRESETS["paper"]}


def dataset(transitions: int = 100_000, length: int = 1000, seed: int = 0):
    """A PointMaze-shaped dataset (2-D observations and actions); the update's cost does not depend on the values."""
    rng = np.random.default_rng(seed)
    obs = np.cumsum(rng.normal(0, 0.1, (transitions + 1, 2)), 0).astype(np.float32)
    terminals = np.zeros(transitions, np.float32)
    terminals[length - 1::length] = 1
    terminals[-1] = 1
    return {"observations": obs[:-1], "next_observations": obs[1:], "terminals": terminals,
            "actions": rng.uniform(-1, 1, (transitions, 2)).astype(np.float32)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=200, help="updates per timed chunk")
    parser.add_argument("--agents", default="hiql,ota")
    args = parser.parse_args()
    data = goal_data(dataset())
    programs = {}
    for name in args.agents.split(","):
        agent = agents.get(name)
        for size, overrides in SIZES.items():
            config = apply_overrides(agent.Config(), overrides)
            state = jax.jit(over_seeds(lambda k: agent.init(k, 2, 2, config), 1))(jax.random.PRNGKey(0)[None])
            chunk = jax.jit(over_seeds(make_chunk(agent, config, args.updates), 1, shared_args=2))
            start = time.perf_counter()
            compiled = chunk.lower(state, data, jnp.int32(args.updates)).compile()
            programs[(name, size)] = {"compiled": compiled, "state": state, "compile_seconds": time.perf_counter() - start,
                                      "rates": []}
    for _ in range(args.rounds):
        for entry in programs.values():
            start = time.perf_counter()
            entry["state"], metrics = entry["compiled"](entry["state"], data, jnp.int32(args.updates))
            jax.block_until_ready(metrics)
            entry["rates"].append(args.updates / (time.perf_counter() - start))
    rows = [{"agent": name, "size": size, "compile_seconds": round(e["compile_seconds"], 1),
             "updates_per_second_median": round(float(np.median(e["rates"])), 1),
             "min": round(min(e["rates"]), 1), "max": round(max(e["rates"]), 1)} for (name, size), e in programs.items()]
    reference = "not run: OGBench's impls/ is not on PyPI (the ogbench wheel holds only the environments)"
    if importlib.util.find_spec("impls") is not None:
        reference = "an `impls` module is importable here, but this script does not drive it yet"
    print(f"{'agent':<6} {'size':<30} {'compile s':>9} {'updates/s median [min, max]':>30}")
    for r in rows:
        print(f"{r['agent']:<6} {r['size']:<30} {r['compile_seconds']:>9} "
              f"{r['updates_per_second_median']:>12} [{r['min']}, {r['max']}]")
    print(f"OGBench reference: {reference}")
    print(json.dumps({"rows": rows, "reference": reference, "rounds": args.rounds, "updates": args.updates,
                      "load_average": os.getloadavg(), "devices": [str(d) for d in jax.devices()]}))


if __name__ == "__main__":
    main()
