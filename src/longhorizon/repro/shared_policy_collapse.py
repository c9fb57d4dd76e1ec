"""`longhorizon repro shared-policy-collapse`: exploration vs cooperation under parameter sharing
(Lee & Weng 2026, "How Exploration Breaks Cooperation in Shared-Policy Multi-Agent RL").

The paper's claims: DQN agents that share one network on a networked Prisoner's Dilemma lose
cooperation as exploration epsilon rises (worst when payoffs favour defection), independent networks
do not, and grouped sharing or an observation augmented with exploration signals delays the collapse.

Here: a ``side x side`` lattice torus (:mod:`longhorizon.structured.dilemma`, Dg = Dr = b), the arms
of :mod:`longhorizon.structured.shared_dqn` (shared, grouped, independent, shared + exploration
signals), a fixed epsilon per run; seeds x epsilons x b of one arm are one vmapped program. Measured
over the last ``window`` share of the steps: the *greedy* cooperation rate (the share of agents whose
argmax is C: the learnt policy, without the epsilon-random actions that lower the behaviour rate by
construction), the behaviour cooperation rate and the mean Q(C) - Q(D) gap.

The rules (:func:`judge`), at the harshest b, Student-t 95% intervals over seeds (>= 3):
* collapse under sharing: the fitted slope of greedy cooperation on epsilon lies below 0;
* independent networks "keep cooperation": that slope lies above ``-COLLAPSE``;
* "delays": an arm's mean greedy cooperation over the epsilon grid is above shared's, per seed;
* an arm whose greedy cooperation at the smallest epsilon is below ``COLLAPSE`` never cooperated: ``no signal``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro.report import block_means, mean_se, plot_curves, verdict_lines, write_run
from longhorizon.structured import shared_dqn
from longhorizon.structured.dilemma import DilemmaConfig, NetworkedDilemma, payoff_matrix

COLLAPSE = 0.2  # a fall of the greedy cooperation rate by at least this much is a collapse
ARMS = {
    "shared": {"sharing": "shared"},
    "grouped": {"sharing": "grouped"},
    "independent": {"sharing": "independent"},
    "shared+exploration": {"sharing": "shared", "augment": "exploration"},
    "shared, random graph": {"sharing": "shared", "graph": "random_regular"},  # topology: reported, no claim
}
CLAIMS = {
    "collapse": "under a shared network, cooperation collapses as epsilon rises",
    "independent": "with independent networks, cooperation does not collapse",
    "grouped": "grouped sharing delays the collapse",
    "augmented": "state augmentation with exploration signals delays the collapse",
}


@dataclasses.dataclass(frozen=True)
class Setup:
    side: int = 6
    total_steps: int = 2_000
    seeds: int = 5
    epsilons: tuple[float, ...] = (0.02, 0.1, 0.2, 0.35, 0.5)
    harshness: tuple[float, ...] = (0.1, 0.4)  # Dg = Dr = b
    arms: tuple[str, ...] = tuple(ARMS)
    groups: int = 4
    window: float = 0.2  # the last share of the steps that is averaged
    rows_per_program: int = 10  # (seed, epsilon, b) rows vmapped in one compiled program

    def agent_config(self, arm: str) -> shared_dqn.Config:
        fields = {k: v for k, v in ARMS[arm].items() if k != "graph"}
        return shared_dqn.Config(**fields, groups=self.groups, total_steps=self.total_steps)

    def environment(self, arm: str) -> NetworkedDilemma:
        """The lattice torus, or for a random-graph arm a 4-regular random graph on as many agents."""
        graph = ARMS[arm].get("graph", "lattice")
        return NetworkedDilemma(DilemmaConfig(graph=graph, side=self.side, num_agents=self.side ** 2, degree=4,
                                              max_steps=self.total_steps))


QUICK = Setup(side=4, total_steps=300, seeds=2, epsilons=(0.05, 0.5), harshness=(0.3,), arms=("shared", "independent"),
              groups=2)


def run_arm(env: NetworkedDilemma, setup: Setup, arm: str) -> dict:
    """Per (b, epsilon): per-seed greedy / behaviour cooperation and Q gap over the last window."""
    grid = [(b, eps, seed) for b in setup.harshness for eps in setup.epsilons for seed in range(setup.seeds)]
    keys = jnp.stack([jax.random.PRNGKey(seed) for _, _, seed in grid])
    epsilons = jnp.array([eps for _, eps, _ in grid], jnp.float32)
    payoffs = jnp.stack([payoff_matrix(b, b) for b, _, _ in grid])
    # one compiled program of ``rows_per_program`` rows, run chunk after chunk (the last chunk padded):
    # on XLA:CPU a single program over all rows of the independent arm (rows x N networks) stalled
    chunk = min(setup.rows_per_program, len(grid))
    pad = -len(grid) % chunk
    keys, epsilons, payoffs = (jnp.concatenate([a, jnp.repeat(a[-1:], pad, 0)]) for a in (keys, epsilons, payoffs))
    sweep = shared_dqn.make_sweep(env, setup.agent_config(arm))
    start = time.perf_counter()
    compiled = sweep.lower(keys[:chunk], epsilons[:chunk], payoffs[:chunk]).compile()
    compile_s = time.perf_counter() - start
    parts = [jax.block_until_ready(compiled(keys[i:i + chunk], epsilons[i:i + chunk], payoffs[i:i + chunk]))
             for i in range(0, len(keys), chunk)]
    metrics = jax.tree.map(lambda *leaves: np.concatenate(leaves)[:len(grid)], *parts)
    run_s = time.perf_counter() - start - compile_s
    last = max(1, int(setup.total_steps * setup.window))
    shape = (len(setup.harshness), len(setup.epsilons), setup.seeds)
    tail = {name: np.asarray(metrics[name][:, -last:].mean(1)).reshape(shape)
            for name in ("greedy_cooperation", "cooperation", "q_gap")}
    return {"compile_s": compile_s, "run_s": run_s,
            "by_b": {str(b): {name: tail[name][i].tolist() for name in tail} for i, b in enumerate(setup.harshness)},
            "curves": curve_rows(metrics, setup)}


def curve_rows(metrics: dict, setup: Setup, points: int = 50) -> list[dict]:
    """The arm's training curve: per (b, epsilon), the seed mean of each metric over ``points`` equal blocks of steps
    (``step`` is the block's last step)."""
    shape = (len(setup.harshness), len(setup.epsilons), setup.seeds)
    names = ("reward", "greedy_cooperation", "cooperation", "q_gap")
    blocks = {n: block_means(metrics[n], points) for n in names}  # rows in (b, epsilon, seed) order
    steps = blocks["reward"][0]
    means = {n: blocks[n][1].reshape(*shape, -1).mean(2) for n in names}  # [b, eps, blocks]
    return [{"b": b, "epsilon": eps, "step": step, **{n: means[n][i, j, k] for n in names}}
            for i, b in enumerate(setup.harshness) for j, eps in enumerate(setup.epsilons)
            for k, step in enumerate(steps)]


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded greedy cooperation (``results[arm]["by_b"][b]``, [epsilon][seed]) at the
    harshest b: fitted slopes over epsilon and per-seed differences, Student-t 95% intervals over seeds (>= 3). An
    arm that never cooperated (greedy cooperation below the collapse threshold at the smallest epsilon) cannot
    collapse: ``no signal``."""
    setup, res, floor = L["setup"], L["results"], L["collapse_threshold"]
    b = f"{max(setup['harshness']):g}"
    eps = np.array(setup["epsilons"])
    coop = {a: np.array(r["by_b"][b]["greedy_cooperation"]).T for a, r in res.items()}  # [seeds, eps]
    sig = {a: C.task_floor(f"{a} at the smallest epsilon", coop[a][:, 0], floor) for a in coop}
    for a in sig:
        sig[a]["what"] = f"{a}: greedy cooperation {sig[a]['success']:.3g} at the smallest epsilon, below {floor:g}: it never cooperated"
    mean = {a: c.mean(1) for a, c in coop.items()}
    claims = []
    if "shared" in coop:
        claims.append(C.judge(CLAIMS["collapse"], C.trend(eps, coop["shared"], direction="decreasing"), [sig["shared"]],
                              quick=quick))
    if "independent" in coop:
        claims.append(C.judge(f"{CLAIMS['independent']} (slope on epsilon above -{floor:g})",
                              C.trend(eps, coop["independent"], direction="increasing", margin=-floor), [sig["independent"]],
                              quick=quick))
    for arm, key, text in (("grouped", "grouped", " (mean greedy cooperation over the epsilon grid above shared's)"),
                           ("shared+exploration", "augmented", "")):
        if arm in coop and "shared" in coop:
            claims.append(C.judge(CLAIMS[key] + text, C.difference(mean[arm], mean["shared"]), [sig[arm], sig["shared"]],
                                  quick=quick))
    return claims, {a: C.arm(setup["total_steps"], setup["seeds"], sig[a]) for a in coop}


def run(out_dir: str, quick: bool = False, setup: Setup | None = None) -> dict:
    setup, t0 = setup or (QUICK if quick else Setup()), time.perf_counter()
    out = Path(out_dir)
    results = {}
    for arm in setup.arms:
        results[arm] = run_arm(setup.environment(arm), setup, arm)
        print(f"{arm}: compile {results[arm]['compile_s']:.1f} s, run {results[arm]['run_s']:.1f} s")
    return finish(out, setup, results, quick, time.perf_counter() - t0)


def finish(out: Path, setup: Setup, results: dict, quick: bool, wall_seconds: float | None = None) -> dict:
    """Claims, verdict, plot, README and summary.json from the measured ``results``."""
    curves = {arm: r.pop("curves") for arm, r in results.items() if "curves" in r}  # beside the summary, not in it
    recorded = C.as_recorded({"setup": dataclasses.asdict(setup), "collapse_threshold": COLLAPSE, "results": results})
    claims, arms = judge(recorded, quick)
    summary = C.summary(paper="Shared-policy collapse", claims=claims, arms=arms, quick=quick, wall_seconds=wall_seconds,
                        scale=f"networked Prisoner's Dilemma, b = {max(setup.harshness):g}, epsilons {list(setup.epsilons)}, "
                              f"{setup.total_steps} steps, {setup.seeds} seeds",
                        command="longhorizon repro shared-policy-collapse" + (" --quick" if quick else ""), **recorded)
    out.mkdir(parents=True, exist_ok=True)
    lines = {}
    for arm, r in results.items():
        for b in map(str, setup.harshness):
            stats = [mean_se(v) for v in r["by_b"][b]["greedy_cooperation"]]
            lines[f"{arm}, b={b}"] = (list(setup.epsilons), [m for m, _ in stats], [s for _, s in stats])
    plot_curves(out / "cooperation.png", lines, "exploration epsilon (fixed)", "greedy cooperation rate",
                f"{setup.side ** 2} agents ({setup.side}x{setup.side} torus unless marked), {setup.seeds} seeds, mean +- SE")
    write_run(out, summary, readme(setup, results, summary, quick), curves)
    return summary


def readme(setup: Setup, results: dict, summary: dict, quick: bool) -> list[str]:
    n, dqn = setup.side ** 2, setup.agent_config("shared")
    lines = ["# shared-policy-collapse: exploration vs cooperation under parameter sharing", "",
             "Claim (Lee & Weng 2026): shared-network DQN agents on a networked Prisoner's Dilemma lose cooperation as "
             "exploration rises; independent networks do not; grouped sharing and exploration-signal augmentation "
             "delay the collapse.", "",
             f"Scale: a {setup.side}x{setup.side} lattice torus ({n} agents, von Neumann neighbours), payoffs "
             f"R=1, P=0, T=1+b, S=-b (Dg = Dr = b) averaged over neighbours, {setup.total_steps} joint steps per run, "
             f"fixed epsilon in {list(setup.epsilons)}, b in {list(setup.harshness)}, {setup.seeds} seeds (vmapped); "
             f"grouped = {setup.groups} networks over bands of rows; 'shared, random graph' = the shared arm on a "
             f"random 4-regular graph of {n} nodes (graph seed 0; topology is reported, no claim); DQN: MLP {dqn.hidden}, gamma {dqn.gamma}, Huber "
             f"loss, Adam {dqn.learning_rate:g}, batch {dqn.batch_size} per network per step, {dqn.buffer_steps}-step "
             f"replay, hard target copy every {dqn.target_update_every} steps. Differences from the "
             "paper: a far smaller lattice and shorter training (CPU), fixed rather than decayed epsilon, and local "
             "observations (own last action, share of cooperating neighbours).", "",
             "Measured over the last "
             f"{setup.window:.0%} of the steps; greedy = share of agents whose argmax is C (the learnt policy), "
             "behaviour = share of actions that were C (includes the epsilon-random ones), gap = mean Q(C) - Q(D).",
             "", "| arm | b | epsilon | greedy cooperation | behaviour cooperation | Q(C) - Q(D) |",
             "|---|---|---|---|---|---|"]
    for arm, r in results.items():
        for b in map(str, setup.harshness):
            cell = r["by_b"][b]
            for k, eps in enumerate(setup.epsilons):
                row = [f"{m:.3f} +- {s:.3f}" for m, s in (mean_se(cell[name][k]) for name in
                                                          ("greedy_cooperation", "cooperation", "q_gap"))]
                lines.append(f"| {arm} | {b} | {eps} | " + " | ".join(row) + " |")
    lines += ["", "![greedy cooperation vs epsilon](cooperation.png)", "", "## Verdict", "",
              "Rules (`longhorizon.repro.shared_policy_collapse.judge`), at the harshest b, Student-t 95% intervals over "
              "seeds: a collapse is a falling fitted slope of greedy cooperation on epsilon; independent networks keep "
              f"cooperation when that slope's interval lies above -{COLLAPSE}; an arm delays the collapse when its mean "
              "greedy cooperation over the epsilon grid is above shared's, per seed. An arm below "
              f"{COLLAPSE} greedy cooperation at the smallest epsilon never cooperated: no signal.", "",
              *verdict_lines(summary)]
    wall = f"Wall time {summary['wall_seconds']:.0f} s on a shared CPU: " if summary["wall_seconds"] is not None else "Time: "
    lines += ["", "Each arm's training curve (per b and epsilon, the seed mean of reward, greedy and behaviour cooperation "
              "and Q(C) - Q(D) over blocks of steps) is in `curves/`.", "",
              wall + ", ".join(f"{arm} compile {r['compile_s']:.0f} s + run {r['run_s']:.0f} s"
                               for arm, r in results.items()) + ".", "",
              "Command: `longhorizon repro shared-policy-collapse" + (" --quick`" if quick else "`")]
    return lines
