"""`longhorizon repro srl`: SRL's scaling claim for the Ray engine: throughput grows near-linearly with the
number of actors until the learner saturates, and is the learner's from there on.

The paper: SRL (Mei et al., "SRL: Scaling Distributed Reinforcement Learning to Over Ten Thousand Cores",
ICLR 2024) splits training into actor workers (environments and inference) and trainer workers joined by
sample and parameter streams, acting and learning at once; its throughput grows near-linearly with the
actors until the trainers consume samples as fast as they come.

Ours (:class:`Setup`): the Ray engine (:mod:`longhorizon.engine.ray`) on a multi-node Ray cluster simulated
on this machine (:class:`longhorizon.engine.ray_cluster.SimulatedCluster`: the learner on a head node
without CPUs, the actors ``SPREAD`` over 4 worker nodes). The environment is CartPole-v1 with a stated
simulated step cost (:func:`costly_cartpole`: a host sleep of ``step_cost_s`` once per vectorised step of
an actor, whatever its number of environments), a stand-in for a simulator whose steps are slow, so that
adding actors adds acting capacity instead of competing for this machine's 2 cores. PPO with V-trace,
``num_envs`` x ``num_steps`` environment steps per batch. For each actor count N and seed: a fresh
cluster, compile, a warm-up chunk (it fills the request pipeline), then a timed chunk of ``updates``
updates. Recorded: the throughput T(N) (environment steps learned per second of wall time), and the
learner's share of that wall time (everything but waiting for actors' batches: ``learn``, publishing
parameters, Ray's dispatch), from which the learner bound, batch / learner seconds per update, follows.
Sweeps alternate in direction (1 -> 16, then 16 -> 1) so that a drift in the machine's load does not
line up with N; every finished (N, seed) is saved under ``partial/`` and read back by a rerun.

Why the engine's ``async`` mode and not ``sync``: SRL's dataflow is one policy fed by many actors while
the learner learns, which is ``async`` (one seed; each batch learned once, requested while the learner
works on earlier ones). ``sync`` runs N independent seeds and serialises acting and learning, so its
update time is the actors' time plus the learner's and its throughput bends smoothly, never showing the
claimed "linear, then flat" shape. ``async`` has a bound of its own: at most ``max_staleness + 1``
batches are in flight (PPO with V-trace tolerates 8, so 9), so at most 9 of 16 actors work at once. The
step cost (7 ms: about 230 ms per batch of 32 steps) and the learner's network (256 x 256: about 30 ms of
CPU per ``learn``, plus Ray's round trip) are chosen so that the learner saturates well before that, near 6
actors on this machine when it is quiet (the suggested 10 ms per step would put it near 9, on the staleness
bound); the README reports where it fell. The actors get the learner's CPU priority
(:func:`~longhorizon.engine.ray_cluster.match_priority`; Ray starts them 15 niceness steps lower), so that
other jobs on the machine do not slow the actors more than the learner.

Claims (rules and margins fixed here, before any run; :mod:`longhorizon.repro.claims`):

1. Near-linear scaling while the learner is not saturated: at the largest N >= 2 whose learner share
   (mean over seeds) is below ``saturated_share`` (1/2), the scaling efficiency T(N) / (N T(1)) (per seed)
   is above ``efficiency_margin`` (0.8): ``C.difference`` (one-sample, margin 0.8), holds if its 95%
   interval lies above 0.8, contradicted if below. No such N: no signal.
2. Bounded by the learner beyond that: at the largest N, T(N) is above ``bound_margin`` (0.8) of the
   learner bound batch / (learner seconds per update) (per seed; the ratio is the learner's share of the
   wall time, so this says the learner is busy at least 80% of the time): ``C.difference`` (one-sample,
   margin 0.8). It needs the actors to offer more than the learner takes, min(N, max_staleness + 1) x T(1)
   above the learner bound (means over seeds), else no signal.

A ``--quick`` run (1 and 2 actors, one seed, one worker node, a 64 x 64 network) checks the machinery and is
not judged.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro.report import mean_se, plot_curves, resumable, verdict_lines, write_run

PAPER = "SRL: Scaling Distributed Reinforcement Learning to Over Ten Thousand Cores (Mei et al., ICLR 2024)"
ENV_ID = "longhorizon.repro.srl:costly_cartpole"  # an import path: each Ray actor rebuilds the env from it


@dataclasses.dataclass(frozen=True)
class Setup:
    actors: tuple[int, ...] = (1, 2, 4, 8, 16)
    seeds: tuple[int, ...] = (0, 1, 2)
    step_cost_s: float = 0.007  # simulated host seconds per vectorised environment step of an actor
    num_envs: int = 8
    num_steps: int = 32
    hidden: tuple[int, ...] = (256, 256)  # the learner's network: learning a batch costs several actor steps
    max_staleness: int = 8  # PPO with V-trace tolerates 8: at most 9 batches in flight
    nodes: int = 4  # simulated worker nodes; each gets enough logical CPUs for its share of the most actors
    warmup_updates: int = 16
    updates: int = 48  # timed updates per measurement
    saturated_share: float = 0.5  # claim 1 looks at the largest N whose learner share is below this
    efficiency_margin: float = 0.8  # claim 1: T(N) / (N T(1)) above this
    bound_margin: float = 0.8  # claim 2: T(N_max) / learner bound above this

    def __post_init__(self):
        if list(self.actors) != sorted(set(self.actors)) or self.actors[0] != 1 or len(self.actors) < 2:
            raise ValueError(f"actors must rise from 1 through at least one more count; got {self.actors}.")
        if not self.seeds or self.warmup_updates < 1 or self.updates < 1:
            raise ValueError("a measurement needs at least one seed, one warm-up update and one timed update.")


QUICK = Setup(actors=(1, 2), seeds=(0,), hidden=(64, 64), nodes=1, warmup_updates=4, updates=8)


# ----------------------------------------------------------------------------- the environment
def costly_cartpole(step_cost_s: float = 0.007):
    """gymnax CartPole-v1 whose every step costs ``step_cost_s`` seconds of host time (a sleep).

    The sleep is a ``jax.pure_callback`` whose zero result is added to the reward, taking the action as
    input: XLA can neither drop it (its result is used) nor hoist it out of the rollout's loop (its input
    changes every step). Batched (``vmap_method="broadcast_all"``), it runs once per vectorised step, with
    every environment's action at once: an actor's ``num_envs`` environments share one simulator call,
    as a batched simulator's would.
    """
    import jax
    import jax.numpy as jnp
    from gymnax.environments.classic_control.cartpole import CartPole

    class CostlyCartPole(CartPole):
        def step_env(self, key, state, action, params):
            obs, state, reward, done, info = super().step_env(key, state, action, params)
            paid = jax.pure_callback(_sleep, jax.ShapeDtypeStruct(jnp.shape(action), jnp.float32), action,
                                     vmap_method="broadcast_all")
            return obs, state, reward + 0.0 * paid, done, info

    def _sleep(action):
        time.sleep(step_cost_s)
        return np.zeros(np.shape(action), np.float32)

    return CostlyCartPole()


def ppo_config(setup: Setup):
    from longhorizon.algos import ppo

    return ppo.Config(num_envs=setup.num_envs, num_steps=setup.num_steps, hidden=tuple(setup.hidden),
                      correction="vtrace", total_steps=10**9)


# ----------------------------------------------------------------------------- one measurement
def measure(setup: Setup, actors: int, seed: int) -> dict:
    """T(N) and the learner's share for ``actors`` actors and one seed, on a fresh simulated cluster
    (:func:`longhorizon.runner.throughput.async_ray_throughput`)."""
    from longhorizon.algos import ppo
    from longhorizon.runner.throughput import async_ray_throughput

    return async_ray_throughput(ppo, ENV_ID, {"step_cost_s": setup.step_cost_s}, ppo_config(setup), actors=actors,
                                seed=seed, nodes=setup.nodes, cpus_per_node=-(-max(setup.actors) // setup.nodes),
                                max_staleness=setup.max_staleness, warmup_updates=setup.warmup_updates,
                                updates=setup.updates)


# ----------------------------------------------------------------------------- the claims
def table(L: dict) -> dict:
    """Per actor count: the per-seed numbers (seeds in ``setup.seeds`` order) the claims use."""
    setup, rows = L["setup"], L["rows"]
    by = {(r["actors"], r["seed"]): r for r in rows}
    one = {s: by[(1, s)]["steps_per_second"] for s in setup["seeds"]}  # T(1): a Setup's actors start at 1
    out = {}
    for n in setup["actors"]:
        got = [by[(n, s)] for s in setup["seeds"]]
        out[n] = {"steps_per_second": [r["steps_per_second"] for r in got],
                  "learner_share": [r["learner_share"] for r in got],
                  "learner_bound": [r["learner_bound"] for r in got],
                  "bound_ratio": [r["steps_per_second"] / r["learner_bound"] for r in got],
                  "efficiency": [r["steps_per_second"] / (n * one[r["seed"]]) for r in got]}
    return out


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """The two claims from the recorded numbers ``L`` (``setup`` and one row per (N, seed))."""
    setup, t = L["setup"], table(L)
    ns = list(setup["actors"])
    half, last = setup["saturated_share"], ns[-1]
    unsaturated = [n for n in ns[1:] if np.mean(t[n]["learner_share"]) < half]
    n_u = unsaturated[-1] if unsaturated else ns[1]
    scales = {"arm": f"{n_u} actors", "test": f"some N >= 2 with learner share (mean over seeds) below {half:g}",
              "moved": bool(unsaturated), "shares": {n: float(np.mean(t[n]["learner_share"])) for n in ns},
              "what": f"the learner's share was at least {half:g} from 2 actors on, so no N >= 2 was actor-bound"}
    in_flight = min(last, setup["max_staleness"] + 1)
    offered = in_flight * float(np.mean(t[1]["steps_per_second"]))
    bound = float(np.mean(t[last]["learner_bound"]))
    floods = {"arm": f"{last} actors",
              "test": "min(N, max_staleness + 1) x T(1) above the learner bound at the largest N",
              "offered": offered, "learner_bound": bound, "moved": offered > bound,
              "what": f"{in_flight} working actors offer {offered:.0f} steps/s at most, not above the learner bound "
                      f"{bound:.0f} steps/s, so the learner cannot be what bounds throughput"}
    # one-sample intervals of the per-seed ratios themselves (minus 0), against the margins
    efficiency = C.difference(t[n_u]["efficiency"], 0.0, margin=setup["efficiency_margin"])
    ratio = C.difference(t[last]["bound_ratio"], 0.0, margin=setup["bound_margin"])
    claims = [
        C.judge(f"while the learner is not saturated, throughput grows near-linearly with actors: at {n_u} actors "
                f"({'the most whose learner share was' if unsaturated else 'no N >= 2 had a learner share'} below "
                f"{half:g}), "
                f"T(N) / (N T(1)) > {setup['efficiency_margin']:g}",
                C.Claim("", efficiency.verdict, efficiency.rule, {**efficiency.evidence, "actors": n_u}),
                depends_on=[scales], quick=quick),
        C.judge(f"beyond that, throughput is bounded by the learner: at {last} actors T(N) > "
                f"{setup['bound_margin']:g} x the learner bound (batch / learner seconds per update)",
                C.Claim("", ratio.verdict, ratio.rule, {**ratio.evidence, "actors": last}),
                depends_on=[floods], quick=quick),
    ]
    note = "a throughput measurement: what is judged is speed, not what the agent learns"
    arms = {f"{n} actors": C.arm(len(setup["seeds"]) * setup["updates"] * setup["num_envs"] * setup["num_steps"],
                                 len(setup["seeds"]), C.not_applied(f"{n} actors", note)) for n in ns}
    return claims, arms


# ----------------------------------------------------------------------------- the run
def run(out_dir: str, quick: bool = False, setup: Setup | None = None) -> dict:
    from longhorizon.runner.throughput import loopback_scratch

    setup = setup or (QUICK if quick else Setup())
    out = Path(out_dir)
    (out / "partial").mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = []
    with loopback_scratch():
        for index, seed in enumerate(setup.seeds):
            for n in (setup.actors if index % 2 == 0 else setup.actors[::-1]):
                print(f"srl: {n} actor(s), seed {seed}", flush=True)
                row, _ = resumable(out / "partial" / f"actors{n}_seed{seed}.json", setup,
                                   lambda: measure(setup, n, seed), log=print)
                print(f"  {row['steps_per_second']:.0f} steps/s, learner share {row['learner_share']:.2f} (cluster "
                      f"{row['cluster_seconds']:.0f} s, compile {row['compile_seconds']:.0f} s)", flush=True)
                rows.append(row)
    rows.sort(key=lambda r: (r["actors"], r["seed"]))
    recorded = C.as_recorded({"setup": dataclasses.asdict(setup), "rows": rows})
    claims, arms = judge(recorded, quick)
    scale = (f"PPO (V-trace, hidden {'x'.join(map(str, setup.hidden))}) on CartPole-v1 with a simulated step cost of "
             f"{setup.step_cost_s * 1e3:g} ms per vectorised step; {setup.num_envs} envs x {setup.num_steps} steps per "
             f"batch; Ray engine async (max staleness {setup.max_staleness}) on a simulated cluster (head + "
             f"{setup.nodes} worker nodes) on one 2-core machine; actors {', '.join(map(str, setup.actors))}; "
             f"{len(setup.seeds)} seed(s) x {setup.updates} timed updates")
    summary = C.summary(paper=PAPER, claims=claims, arms=arms, scale=scale, quick=quick,
                        command="longhorizon repro srl" + (" --quick" if quick else ""),
                        wall_seconds=time.perf_counter() - start, setup=dataclasses.asdict(setup), rows=rows)
    t = table(recorded)
    ns = list(setup.actors)
    curve = {n: mean_se(t[n]["steps_per_second"]) for n in ns}
    bound = {n: mean_se(t[n]["learner_bound"]) for n in ns}
    plot_curves(out / "throughput_vs_actors.png",
                {"measured T(N)": (ns, [curve[n][0] for n in ns], [curve[n][1] for n in ns]),
                 "linear: N x T(1)": (ns, [n * curve[ns[0]][0] / ns[0] for n in ns], [0.0] * len(ns)),
                 "learner bound": (ns, [bound[n][0] for n in ns], [bound[n][1] for n in ns])},
                "actors", "environment steps / s", "Ray engine (async) on a simulated cluster")
    write_run(out, summary, _readme(setup, summary, t), curves={"throughput": [
        {"actors": n, "steps_per_second": curve[n][0], "steps_per_second_se": curve[n][1],
         "learner_share": float(np.mean(t[n]["learner_share"])), "learner_bound": bound[n][0],
         "efficiency": float(np.mean(t[n]["efficiency"]))} for n in ns]})
    return summary


def _readme(setup: Setup, summary: dict, t: dict) -> list[str]:
    rows = {(r["actors"], r["seed"]): r for r in summary["rows"]}
    lines = ["| actors | steps/s (mean +- SE) | T(N) / (N T(1)) | learner share | learner bound steps/s | "
             "actor s per collect | actors that worked, largest lag | placed on (seed " f"{setup.seeds[0]}) |",
             "|---|---|---|---|---|---|---|---|"]
    for n, got in t.items():
        mean, se = mean_se(got["steps_per_second"])
        runs = [rows[(n, s)] for s in setup.seeds]
        collect = np.mean([r["collect_seconds_per_call"] for r in runs])
        worked = max(sum(c > 0 for c in r["calls_per_actor"]) for r in runs)
        lag = max(max(map(int, r["staleness_seen"])) for r in runs)
        placed = runs[0]["placed_on"]
        nodes = ", ".join(f"{name} x{placed.count(name)}" for name in sorted(set(placed)))
        lines.append(f"| {n} | {mean:,.0f} +- {se:,.0f} | {np.mean(got['efficiency']):.2f} | "
                     f"{np.mean(got['learner_share']):.2f} | {np.mean(got['learner_bound']):,.0f} | {collect:.3f} | "
                     f"{worked}, {lag} | {nodes} |")
    return [
        "# SRL: throughput of the Ray engine as actors grow", "",
        "<!-- claims-module verdicts -->", "",
        *verdict_lines(summary), "",
        "<!-- /claims-module verdicts -->", "",
        f"Command: `{summary['command']}` (wall {summary['wall_seconds']:.0f} s; root, or under "
        "`unshare -rn sh -c 'ip link set lo up && ...'`: the simulated cluster lives in a private loopback-only "
        "network namespace).", "",
        f"Scale: {summary['scale']}.", "",
        "How it differs from the paper: SRL measures thousands of CPU cores across machines, GPU trainers and real "
        "simulators (Atari, Google Research Football, SMAC, hide-and-seek); here every node is a Ray raylet on the "
        "same 2-core machine, and the environment's cost is a sleep of "
        f"{setup.step_cost_s * 1e3:g} ms per vectorised step of an actor, so actors add acting capacity without "
        "needing cores. What is measured is the engine's dataflow: one learner fed by N actors over Ray, acting and "
        "learning at once (`--mode async`, one policy). The engine keeps at most max staleness + 1 = "
        f"{setup.max_staleness + 1} batches in flight, so no more than that many actors work at once.", "",
        "![throughput vs actors](throughput_vs_actors.png)", "",
        "T(N): environment steps learned per second of wall time over the timed updates (after compiling and a "
        f"warm-up of {setup.warmup_updates} updates). Learner share: the part of that wall time the learner did not "
        "spend waiting for actors' batches (learning, publishing parameters, Ray's dispatch). Learner bound: batch / "
        "learner seconds per update, the most the learner could take if batches were always ready; T(N) / bound "
        "equals the learner share.", "",
        *lines, "",
        "Rerun (about the time above; finished measurements under `partial/` are read back):", "",
        "```",
        "unshare -n sh -c 'ip link set lo up && .venv/bin/longhorizon repro srl'",
        "```",
    ]
