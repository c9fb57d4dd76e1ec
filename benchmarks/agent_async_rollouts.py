"""Latency hiding by asynchronous rollouts: trajectories/s of the in-process loop vs 1, 2, 4 Ray actors.

Each environment turn (a tool call) sleeps ``L`` seconds (``--latencies``, e.g. 50-500 ms). For each
``L``, the same learner loop (``publish(params, v)``, ``next()``, optionally ``--train-seconds`` of
simulated learning) runs ``--steps`` batches of ``--requests-per-batch`` requests of ``--group``
trajectories each:

* ``in-process``: ``lm.agents.async_rollout.Rollouts`` with ``actors=0`` (the rollout function
  called in the learner's process, one request after another);
* ``async N``: ``N`` Ray actors, ``mode="async"``, ``--max-staleness`` (default 1), so up to
  ``(s + 1) k`` requests are generated ahead while the learner waits or trains.

Sources: ``--source synthetic`` (:class:`SyntheticSource`: no model, the latency is the only cost)
or ``--source real`` (:class:`TinyAgentSource`: the real multi-turn rollout,
``lm.agents.rollout.MultiTurnRollout``, of ``lm.policy.tiny_random()`` in the search environment
slowed by ``lm.agents.envs.latency.with_latency``; the model generates each turn's
``--action-tokens`` tokens, the compute a policy costs, and a scripted expert's tool call is
appended, because a random model would rarely write one and the latency would never be met), or
``--source agent`` (the agent trainer's own source, ``lm.agents.workers.AgentSource``, with
``tiny_random()`` in the slowed search environment: exactly what ``longhorizon lm agent --actors N``
runs; the random model seldom writes a tool call, so this measures generation more than latency).
Actor start-up is excluded, and for ``real`` every program is compiled beforehand (an in-process
pass over the same requests fills the persistent compilation cache the actors share): the clock
runs from the first timed ``publish`` to the last batch. Repeats are interleaved; the table gives the median and the
min-max spread of trajectories/s and action tokens/s, and the speed-up over the in-process median.

Run (Ray stays on loopback: the script moves itself into a private network namespace; needs root):

    nice python benchmarks/agent_async_rollouts.py --out /tmp/agent_async_rollouts.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("synthetic", "real", "agent"), default="synthetic")
    parser.add_argument("--latencies", default="0.05,0.2,0.5", help="seconds per environment turn")
    parser.add_argument("--actors", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="timed learner batches per measurement")
    parser.add_argument("--requests-per-batch", type=int, default=4)
    parser.add_argument("--group", type=int, default=2, help="trajectories per request (one GRPO group)")
    parser.add_argument("--turns", type=int, default=2, help="environment turns per trajectory (synthetic)")
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--train-seconds", type=float, default=0.0, help="simulated learner time per batch")
    parser.add_argument("--action-tokens", type=int, default=16, help="model tokens per turn (real)")
    parser.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of the local Ray instance")
    parser.add_argument("--cache", default="/tmp/longhorizon-bench-jax-cache", help="persistent compilation cache")
    parser.add_argument("--out", default="agent_async_rollouts.json")
    return parser.parse_args()


@dataclasses.dataclass(frozen=True)
class TinyAgentSource:
    """``MultiTurnRollout`` of ``tiny_random()`` in the slowed search environment (module docstring)."""

    latency_s: float
    action_tokens: int = 16

    def build(self):
        import jax

        from longhorizon.lm import policy
        from longhorizon.lm.agents import envs
        from longhorizon.lm.agents.demos import expert_policy
        from longhorizon.lm.agents.rollout import AgentConfig, MultiTurnRollout

        model, spec = policy.tiny_random(), envs.get("search")
        agent = AgentConfig(max_turns=4, max_action_tokens=self.action_tokens, max_context_tokens=2048,
                            length_bucket=256, max_observation_chars=300, describe_tools=False)
        env = envs.with_latency(spec.cls, self.latency_s)
        sampler = MultiTurnRollout(model.cfg, model.tokenizer, env, agent)
        expert, stops = expert_policy(spec.expert, agent.tool_format, model.tokenizer), set(model.tokenizer.eos_ids)

        def model_then_call(params, contexts, key, episodes):
            out = []
            for (ids, lps), (call, call_lps) in zip(sampler.sample(params, contexts, key, episodes),
                                                     expert(params, contexts, key, episodes)):
                if ids and ids[-1] in stops:
                    ids, lps = ids[:-1], lps[:-1]
                out.append((ids + call, lps + call_lps))
            return out

        rollout = MultiTurnRollout(model.cfg, model.tokenizer, env, agent, policy=model_then_call)
        return lambda params, tasks, seed, version: rollout.run(params, tasks, 1, jax.random.PRNGKey(seed), version)


def make_source(args, latency: float):
    """``(source, tasks, params_of_version)``."""
    if args.source == "synthetic":
        from longhorizon.lm.agents.async_rollout import SyntheticSource

        tasks = [{"prompt": f"task {i}", "group": i} for i in range(64)]
        return SyntheticSource(turns=args.turns, tokens_per_turn=16, latency_s=latency), tasks, (lambda v: {"w": [0.5]})
    from longhorizon.lm import policy
    from longhorizon.lm.agents import envs

    model = policy.tiny_random()
    params, tasks = model.params, envs.get("search").make_tasks(64, seed=0)  # the same weights every version
    if args.source == "agent":
        from longhorizon.lm.agents.rollout import AgentConfig
        from longhorizon.lm.agents.workers import AgentSource

        agent = AgentConfig(max_turns=4, max_action_tokens=args.action_tokens, max_context_tokens=2048,
                            length_bucket=256, max_observation_chars=300)
        return AgentSource(model.cfg, model.tokenizer, "search", agent, latency_s=latency), tasks, (lambda v: params)
    return TinyAgentSource(latency, args.action_tokens), tasks, (lambda v: params)


def measure(args, latency: float, actors: int) -> dict:
    from longhorizon.lm.agents.async_rollout import Config, Rollouts, group_requests

    source, tasks, params = make_source(args, latency)
    config = (Config(actors=0, requests_per_batch=args.requests_per_batch) if actors == 0 else
              Config(actors=actors, mode="async", max_staleness=args.max_staleness,
                     requests_per_batch=args.requests_per_batch))
    with Rollouts(source, group_requests(tasks, args.group), config) as rollouts:
        version = 0
        if args.source != "synthetic":  # every actor traces and loads its programs before the clock starts
            rollouts.warm_up(params(version), tasks[:1] * args.group, seed=10**6)
        start, trajectories, tokens, turns, lags, waits = time.perf_counter(), 0, 0, 0, [], 0.0
        for _ in range(args.steps):
            rollouts.publish(params(version), version)
            batch, info = rollouts.next()
            trajectories += len(batch)
            tokens += sum(t.action_tokens for t in batch)
            turns += sum(t.n_turns for t in batch)
            lags += info["lags"]
            waits += info["wait_seconds"]
            time.sleep(args.train_seconds)
            version += 1
        seconds = time.perf_counter() - start
    return {"latency_s": latency, "actors": actors, "seconds": seconds, "trajectories": trajectories,
            "trajectories_per_s": trajectories / seconds, "tokens_per_s": tokens / seconds,
            "staleness_mean": statistics.mean(lags), "wait_seconds": waits, "load": os.getloadavg()[0],
            "turns_mean": turns / trajectories}


def warm_up(args) -> None:
    """Real source: compile every program the timed runs use (same requests, same weights: same shapes)."""
    import jax

    jax.config.update("jax_compilation_cache_dir", args.cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if args.source != "synthetic":
        start = time.perf_counter()
        measure(args, 0.0, 0)
        print(f"warm-up (compiles) took {time.perf_counter() - start:.1f} s", flush=True)


def main() -> None:
    args = parse_args()
    warm_up(args)
    from longhorizon.engine.ray_loopback import enter_loopback_namespace

    enter_loopback_namespace()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray

    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, configure_logging=False)
    latencies = [float(x) for x in args.latencies.split(",")]
    counts = [0] + [int(x) for x in args.actors.split(",")]
    rows = []
    try:
        for latency in latencies:
            for repeat in range(args.repeats):  # interleaved: every setting once per repeat
                for actors in counts:
                    row = measure(args, latency, actors) | {"repeat": repeat}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        ray.shutdown()
    table = []
    for latency in latencies:
        base = statistics.median(r["trajectories_per_s"] for r in rows if r["latency_s"] == latency and r["actors"] == 0)
        for actors in counts:
            mine = [r for r in rows if r["latency_s"] == latency and r["actors"] == actors]
            rates, toks = [r["trajectories_per_s"] for r in mine], [r["tokens_per_s"] for r in mine]
            table.append({"latency_s": latency, "setting": "in-process" if actors == 0 else f"async {actors}",
                          "trajectories_per_s": statistics.median(rates), "min": min(rates), "max": max(rates),
                          "tokens_per_s": statistics.median(toks), "speedup": statistics.median(rates) / base,
                          "staleness_mean": statistics.median(r["staleness_mean"] for r in mine),
                          "turns_mean": statistics.median(r["turns_mean"] for r in mine)})
    print("\n| turn latency | setting | trajectories/s (median, min-max) | action tokens/s | speed-up | mean lag | turns |")
    print("|---|---|---|---|---|---|---|")
    for row in table:
        print(f"| {row['latency_s'] * 1000:.0f} ms | {row['setting']} | {row['trajectories_per_s']:.2f} "
              f"({row['min']:.2f}-{row['max']:.2f}) | {row['tokens_per_s']:.0f} | {row['speedup']:.2f}x | "
              f"{row['staleness_mean']:.2f} | {row['turns_mean']:.1f} |")
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                   "rows": rows, "table": table}, f, indent=1)


if __name__ == "__main__":
    main()
