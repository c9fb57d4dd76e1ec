"""Updates/s of our HIQL (and OTA) update, at the CPU size and at OGBench's reference size, side by side.

    .venv/bin/python benchmarks/offline_hiql_ogbench.py --rounds 3 --updates 200

Each configuration's chunk (``--updates`` scanned sample -> learn updates, one seed, the dataset on
device) is compiled first and timed separately; then the rounds are interleaved (every configuration
once per round) so that load from other jobs spreads over all of them; the table gives the median
and the min..max over rounds.

The peer is OGBench's reference JAX implementation (``impls/agents/hiql.py`` of seohongpark/ogbench).
It is not packaged (the ``ogbench`` wheel on PyPI holds only the environments), so pass a checkout of
the repository with ``--ogbench-repo PATH``: the script then builds ``benchmarks/.venvs/ogbench-impls``
(our jax/flax versions plus distrax and ml_collections, from the package registry) and runs the
reference in a worker process there, at the same network sizes and batch and on the same data, its
training loop as ``impls/main.py`` runs it (a host-side ``HGCDataset.sample`` then the jitted
``agent.update``, one call per update), also timed with a fixed batch (update only). The worker
compiles once and then takes one timed chunk per round, interleaved with ours.

    .venv/bin/python benchmarks/offline_hiql_ogbench.py --rounds 3 --updates 200 --ogbench-repo /path/to/ogbench
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

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


VENV = Path(__file__).resolve().parent / ".venvs" / "ogbench-impls"

WORKER = r"""
import json, sys, time
import numpy as np
repo, updates, hidden, batch = sys.argv[1], int(sys.argv[2]), tuple(json.loads(sys.argv[3])), int(sys.argv[4])
sys.path.insert(0, repo + "/impls")
import jax
from agents.hiql import HIQLAgent, get_config
from utils.datasets import Dataset, HGCDataset
data = dict(np.load(sys.argv[5]))
config = get_config()
config.update(dict(batch_size=batch, actor_hidden_dims=hidden, value_hidden_dims=hidden))
train = HGCDataset(Dataset.create(**data), config)
agent = HIQLAgent.create(0, data["observations"][:1], data["actions"][:1], config)
start = time.perf_counter()
fixed = train.sample(batch)
agent, info = agent.update(fixed)
jax.block_until_ready(info)
print(json.dumps({"compile_seconds": time.perf_counter() - start}), flush=True)
for line in sys.stdin:
    start = time.perf_counter()
    for _ in range(updates):
        agent, info = agent.update(train.sample(batch))
    jax.block_until_ready(info)
    loop = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(updates):
        agent, info = agent.update(fixed)
    jax.block_until_ready(info)
    print(json.dumps({"loop": updates / loop, "update_only": updates / (time.perf_counter() - start)}), flush=True)
"""


def reference_python() -> Path:
    """The peer's virtual environment: our jax/flax/optax versions plus the reference's own dependencies."""
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pins = [f"jax=={jax.__version__}", f"flax=={_version('flax')}", f"optax=={_version('optax')}",
                "distrax>=0.1.5", "ml_collections", "numpy"]
        subprocess.run([str(python), "-m", "pip", "install", "-q", *pins], check=True)
    return python


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def start_reference(repo: str, updates: int, hidden, batch: int, data_file: Path):
    worker = subprocess.Popen([str(reference_python()), "-c", WORKER, repo, str(updates), json.dumps(list(hidden)),
                               str(batch), str(data_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return worker, json.loads(worker.stdout.readline())["compile_seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=200, help="updates per timed chunk")
    parser.add_argument("--agents", default="hiql,ota")
    parser.add_argument("--ogbench-repo", default=None, help="a checkout of seohongpark/ogbench (runs the reference)")
    args = parser.parse_args()
    raw = dataset()
    data = goal_data(raw)
    programs, peers = {}, {}
    if args.ogbench_repo:
        data_file = Path(os.environ.get("TMPDIR", "/tmp")) / "offline_hiql_ogbench_data.npz"
        np.savez(data_file, valids=np.ones_like(raw["terminals"]), **raw)
        for size, overrides in SIZES.items():
            config = apply_overrides(agents.get("hiql").Config(), overrides)
            worker, compile_seconds = start_reference(args.ogbench_repo, args.updates, config.hidden,
                                                      config.batch_size, data_file)
            peers[size] = {"worker": worker, "compile_seconds": compile_seconds, "loop": [], "update_only": []}
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
        for peer in peers.values():
            peer["worker"].stdin.write("go\n")
            peer["worker"].stdin.flush()
            timing = json.loads(peer["worker"].stdout.readline())
            peer["loop"].append(timing["loop"])
            peer["update_only"].append(timing["update_only"])
    for peer in peers.values():
        peer["worker"].stdin.close()
        peer["worker"].wait()
    rows = [{"agent": name, "size": size, "compile_seconds": round(e["compile_seconds"], 1),
             "updates_per_second_median": round(float(np.median(e["rates"])), 1),
             "min": round(min(e["rates"]), 1), "max": round(max(e["rates"]), 1)} for (name, size), e in programs.items()]
    for size, peer in peers.items():
        for kind in ("loop", "update_only"):
            rows.append({"agent": f"OGBench hiql ({kind.replace('_', ' ')})", "size": size,
                         "compile_seconds": round(peer["compile_seconds"], 1),
                         "updates_per_second_median": round(float(np.median(peer[kind])), 1),
                         "min": round(min(peer[kind]), 1), "max": round(max(peer[kind]), 1)})
    reference = ("run from " + args.ogbench_repo) if peers else (
        "not run: pass --ogbench-repo PATH (OGBench's impls/ is not on PyPI; the ogbench wheel holds only the environments)")
    print(f"{'agent':<30} {'size':<30} {'compile s':>9} {'updates/s median [min, max]':>30}")
    for r in rows:
        print(f"{r['agent']:<30} {r['size']:<30} {r['compile_seconds']:>9} "
              f"{r['updates_per_second_median']:>12} [{r['min']}, {r['max']}]")
    print(f"OGBench reference: {reference}")
    print(json.dumps({"rows": rows, "reference": reference, "rounds": args.rounds, "updates": args.updates,
                      "load_average": os.getloadavg(), "devices": [str(d) for d in jax.devices()]}))


if __name__ == "__main__":
    main()
