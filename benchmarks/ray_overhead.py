"""Overhead of the Ray engine against the fused engine at equal total work.

For each work size (about 10, 100 and 1000 ms of fused work per update per seed, set through PPO's
``num_steps`` after a calibration run; ``--work-ms`` takes any list) and each actor count N in 1, 2,
4: N seeds of PPO on CartPole-v1, trained for the same number of updates by the fused engine (one program, seeds vmapped)
and by the Ray engine in ``sync`` mode (one seed per actor, so one actor call is one seed's
``collect``; ``learn`` for all seeds on the learner). The two engines do the same arithmetic
(bit-identical results), so the difference in wall time is the Ray engine's cost: dispatch,
(de)serialisation, the object store, process placement on the cores. Each row also reports the work
inside one actor call as the actor measures it (``collect`` plus converting its inputs and outputs;
PPO's ``learn`` is the larger part of an update, so an actor call holds about a quarter of it).
Repeats are interleaved (fused, ray, ray, fused, ...) and the 1-minute load average is recorded beside each measurement.

A second table times the parameter broadcast: ``ray.put`` of P megabytes plus N actors reading it.

Run (Ray stays on loopback: the script moves itself into a private network namespace; needs root):

    nice python benchmarks/ray_overhead.py --out /tmp/ray_overhead.json

On an existing cluster (no namespace): ``python benchmarks/ray_overhead.py --address auto``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from longhorizon.engine.ray_cluster import match_priority


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-ms", default="10,100,1000", help="target fused ms per update per seed")
    parser.add_argument("--actors", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="fused wall time per seed per measurement, about")
    parser.add_argument("--broadcast-mb", default="0,1,10,100",
                        help="parameter sizes for the broadcast table (0: an empty call, the bare round trip)")
    parser.add_argument("--skip-overhead", action="store_true", help="only the broadcast table")
    parser.add_argument("--no-match-priority", dest="match_priority", action="store_false",
                        help="leave the actors at Ray's niceness (15 steps below the driver's priority)")
    parser.add_argument("--address", default="local", help="local: a private instance on loopback; or auto/HOST:PORT")
    parser.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of the local Ray instance")
    parser.add_argument("--out", default="ray_overhead.json")
    return parser.parse_args()


def load() -> float:
    return os.getloadavg()[0]


def ppo_config(num_steps: int):
    from longhorizon.algos import ppo

    return ppo.Config(num_envs=8, num_steps=num_steps, update_epochs=4, num_minibatches=4, total_steps=10**9)


def engines(config, seeds: int, updates: int, address: str):
    from longhorizon.algos import ppo
    from longhorizon.engine.fused import FusedEngine
    from longhorizon.engine.ray import RayEngine, RayOptions
    from longhorizon.envs import make

    env = make("CartPole-v1")
    fused = FusedEngine(ppo, env, config, seeds, updates)
    ray = RayEngine(ppo, "CartPole-v1", {}, config, seeds, updates, RayOptions(actors=seeds, address=address), env=env)
    return fused, ray


def timed_chunk(engine, state) -> tuple[object, float]:
    start = time.perf_counter()
    state, _ = engine.run_chunk(state)
    return state, time.perf_counter() - start


def calibrate(address: str) -> float:
    """Fused seconds per update of one seed at num_steps=32."""
    fused, _ = engines(ppo_config(32), 1, 20, address)
    state = fused.init(0)
    fused.compile(state)
    state, _ = timed_chunk(fused, state)
    return min(timed_chunk(fused, state)[1] for _ in range(3)) / 20


def overhead_table(args, per_step_seconds: float) -> list[dict]:
    rows = []
    for work_ms in [float(w) for w in args.work_ms.split(",")]:
        num_steps = max(4, int(round(32 * work_ms / 1000 / per_step_seconds)))
        updates = max(3, int(round(args.seconds * 1000 / work_ms)))
        for actors in [int(a) for a in args.actors.split(",")]:
            fused, ray = engines(ppo_config(num_steps), actors, updates, args.address)
            states = {}
            for name, engine in (("fused", fused), ("ray", ray)):
                state = engine.init(0)
                engine.compile(state)
                if name == "ray" and args.match_priority:
                    match_priority(ray.actor_pids())
                states[name], _ = timed_chunk(engine, state)  # warm-up chunk
            times = {"fused": [], "ray": []}
            loads = []
            waits = []
            call_ms = []  # the work inside one actor call (collect and the conversions), without Ray's share
            for repeat in range(args.repeats):
                order = ("fused", "ray") if repeat % 2 == 0 else ("ray", "fused")
                for name in order:
                    engine = fused if name == "fused" else ray
                    loads.append(load())
                    wait0 = ray.wait_seconds
                    work0 = ray.actor_work() if name == "ray" else None
                    states[name], seconds = timed_chunk(engine, states[name])
                    times[name].append(seconds / updates)
                    if name == "ray":
                        waits.append((ray.wait_seconds - wait0) / updates)
                        work1 = ray.actor_work()
                        call_ms.append(1000 * statistics.median(
                            (b[1] - a[1]) / max(1, b[0] - a[0]) for a, b in zip(work0, work1)))
            ray.close()
            fused_med, ray_med = statistics.median(times["fused"]), statistics.median(times["ray"])
            ratios = [r / f - 1 for r, f in zip(times["ray"], times["fused"])]
            row = {
                "work_ms_target": work_ms, "num_steps": num_steps, "actors": actors, "seeds": actors,
                "updates_per_measurement": updates, "repeats": args.repeats,
                "fused_ms_per_update": 1000 * fused_med, "ray_ms_per_update": 1000 * ray_med,
                "work_ms_per_call": 1000 * fused_med / actors,
                "fused_ms_range": [1000 * min(times["fused"]), 1000 * max(times["fused"])],
                "ray_ms_range": [1000 * min(times["ray"]), 1000 * max(times["ray"])],
                "overhead_median": statistics.median(ratios), "overhead_range": [min(ratios), max(ratios)],
                "learner_wait_ms_per_update": 1000 * statistics.median(waits),
                "actor_work_ms_per_call": statistics.median(call_ms),
                "actor_work_ms_per_call_range": [min(call_ms), max(call_ms)],
                "load_1min_median": statistics.median(loads), "load_1min_range": [min(loads), max(loads)],
                "times": times, "actors_priority_matched": bool(args.match_priority),
                "niceness": os.getpriority(os.PRIO_PROCESS, 0),
            }
            rows.append(row)
            print(f"work~{work_ms:g}ms actors={actors}: fused {row['fused_ms_per_update']:.1f} ms/update, "
                  f"ray {row['ray_ms_per_update']:.1f} ms/update, overhead {100 * row['overhead_median']:+.1f}% "
                  f"[{100 * min(ratios):+.1f}, {100 * max(ratios):+.1f}], actor work per call "
                  f"{row['actor_work_ms_per_call']:.1f} ms, load {row['load_1min_median']:.1f}",
                  flush=True)
    return rows


class _Reader:
    def touch(self, leaves) -> float:
        return float(sum(leaf.reshape(-1)[0] for leaf in leaves))


def broadcast_table(args) -> list[dict]:
    import ray

    rows = []
    for actors in [int(a) for a in args.actors.split(",")]:
        readers = [ray.remote(num_cpus=1)(_Reader).remote() for _ in range(actors)]
        ray.get([r.touch.remote([np.zeros(1, np.float32)]) for r in readers])
        for megabytes in [float(m) for m in args.broadcast_mb.split(",")]:
            params = [np.random.default_rng(0).standard_normal(max(1, int(megabytes * 2**20 / 4 / 8)), dtype=np.float32)
                      for _ in range(8)]  # 8 leaves, P MB in all
            samples = []
            ray.get([r.touch.remote(ray.put(params)) for r in readers])  # warm-up: object-store pages, first reads
            for _ in range(args.repeats):
                start = time.perf_counter()
                ref = ray.put(params)  # published once
                ray.get([r.touch.remote(ref) for r in readers])  # by reference to every actor
                samples.append(time.perf_counter() - start)
                del ref
            rows.append({"actors": actors, "megabytes": megabytes, "ms_median": 1000 * statistics.median(samples),
                         "ms_range": [1000 * min(samples), 1000 * max(samples)], "load_1min": load()})
            print(f"broadcast {megabytes:g} MB to {actors} actors: {rows[-1]['ms_median']:.1f} ms", flush=True)
        for reader in readers:
            ray.kill(reader)
    return rows


def main() -> None:
    args = parse_args()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if args.address == "local":
        from longhorizon.engine.ray_loopback import enter_loopback_namespace

        enter_loopback_namespace()
    import jax
    import ray

    if args.address == "local":
        ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
                 log_to_driver=False)
    else:
        ray.init(address=args.address, log_to_driver=False)
    machine = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
               "python": sys.version.split()[0], "jax": jax.__version__, "ray": ray.__version__,
               "devices": [str(d) for d in jax.devices()], "load_1min_start": load(),
               "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    result = {"machine": machine, "command": " ".join(sys.argv)}
    if not args.skip_overhead:
        per_step = calibrate(args.address)
        print(f"calibration: fused {1000 * per_step:.2f} ms per update at num_steps=32 (1 seed)", flush=True)
        result.update(calibration_ms_per_update_at_32_steps=1000 * per_step, overhead=overhead_table(args, per_step))
    result["broadcast"] = broadcast_table(args)
    result["machine"]["load_1min_end"] = load()
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
    print(f"wrote {args.out}")
    ray.shutdown()


if __name__ == "__main__":
    main()
