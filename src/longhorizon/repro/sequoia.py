"""`longhorizon repro sequoia`: a Q-network embedded in a MILP vs the baselines on coupled restless bandits.

Claim (Xu et al. 2025, "Reinforcement learning with combinatorial actions for coupled restless bandits"):
SEQUOIA, a DQN whose greedy action and target max are MILPs over the Q-network, beats the best baseline on
average over the four constraint families (paper: +24.8%). Here at a small CPU scale: N arms (bits of the
action: N, or 2N for two interventions), a one-hidden-layer Q-network, short training, several seeds; each
seed draws its own bandit instance, and every policy is scored on the same evaluation episodes.

Rule (:func:`judge`, :mod:`longhorizon.repro.claims`): per seed, the relative gain ``g = (R_sequoia - R_best) /
R_best`` over the baseline with the best mean return in each family, averaged over the families; ``holds`` if
the Student-t 95% interval of ``g`` over seeds (>= 3) lies above 0, ``contradicted`` if below, else
``inconclusive``; ``no signal`` if SEQUOIA or the best baseline is no better than a random policy. A ``--quick``
run is not judged.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro.report import mean_se, resumable, verdict_lines, write_run
from longhorizon.structured import milp_q, sequoia
from longhorizon.structured.restless import FAMILIES, RestlessBandit, RestlessConfig

POLICIES = ("sequoia", "sampling", "myopic", "iterative", "random")
LEARNERS = {"SEQUOIA": "sequoia", "DQN (sampled max)": "sampling"}  # arm name -> its policy in the tables
BASELINES = POLICIES[1:]
PAPER = "SEQUOIA"
CLAIM = ("the MILP-embedded Q-learner (SEQUOIA) beats the best baseline on average (paper: +24.8%): "
         "relative gain averaged over the four families, per seed")


@dataclasses.dataclass(frozen=True)
class Setup:
    families: tuple = FAMILIES
    n_arms: int = 5
    seeds: int = 5
    total_steps: int = 2400
    hidden: tuple = (16,)
    # the exact argmax by enumeration (10 action bits here): the MILP's argmax at a fraction of its cost, so the
    # learners can act with the current network (policy_every 1) and train long enough to converge
    maximizer: str = "enumerate"
    policy_every: int = 1
    eval_episodes: int = 8
    horizon: int = 20
    scaling_arms: tuple = (4, 8, 12, 16, 24)
    scaling_states: int = 4

    def scale(self) -> str:
        return (f"{len(self.families)} famil{'y' if len(self.families) == 1 else 'ies'} ({', '.join(self.families)}), "
                f"N = {self.n_arms} arms, episodes of {self.horizon} steps, DQN with a ReLU network {self.hidden}, "
                f"{self.total_steps} environment steps, {self.seeds} seeds (one bandit instance per seed), "
                f"{self.eval_episodes} evaluation episodes per policy and seed, greedy max by {self.maximizer}")


QUICK = Setup(families=("budget",), n_arms=3, seeds=2, total_steps=200, hidden=(8,), eval_episodes=2, horizon=10,
              scaling_arms=(3, 6), scaling_states=1, maximizer="milp", policy_every=25)


def run(out_dir: str, quick: bool = False, setup: Setup | None = None) -> dict:
    setup, t0 = setup or (QUICK if quick else Setup()), time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {family: [finished(out, setup, family, seed) for seed in range(setup.seeds)] for family in setup.families}
    curves = {arm: [{"family": r["family"], "seed": r["seed"], "episode": i + 1, "train_return": v}
                    for rows in results.values() for r in rows for i, v in enumerate(r["train_returns"][policy])]
              for arm, policy in LEARNERS.items()}
    summary = summarise(results, solve_time_scaling(setup), setup, quick, time.perf_counter() - t0)
    plot(out / "sequoia.png", summary)
    write_run(out, summary, report_lines(summary), curves)
    shutil.rmtree(out / PARTIAL, ignore_errors=True)  # the finished (family, seed) rows now live in summary.json
    return summary


PARTIAL = "partial"


def finished(out: Path, setup: Setup, family: str, seed: int) -> dict:
    """One (family, seed) row, reused from ``out/partial/`` when a run with this setup already finished it
    (so an interrupted run resumes), else run and saved there."""
    row, _ = resumable(out / PARTIAL / f"{family}-{seed}.json", setup, lambda: run_seed(setup, family, seed))
    return C.as_recorded(row)


def run_seed(setup: Setup, family: str, seed: int) -> dict:
    env = RestlessConfig(family=family, n_arms=setup.n_arms, horizon=setup.horizon, seed=seed)
    config = sequoia.SequoiaConfig(hidden=setup.hidden, total_steps=setup.total_steps, seed=seed,
                                   maximizer=setup.maximizer, policy_every=setup.policy_every)
    t0 = time.perf_counter()
    learned = sequoia.train(env, config)
    train_seconds = time.perf_counter() - t0
    sampled = sequoia.train(env, dataclasses.replace(config, maximizer="sampling"))
    eval_seed = 10_000 + seed
    row = {"family": family, "seed": seed, "train_seconds": train_seconds,
           "train_returns": {"sequoia": list(learned["train_returns"]), "sampling": list(sampled["train_returns"])},
           "milp_solves": learned["milp_solves"], "milp_cache_hits": learned["milp_hits"],
           "milp_seconds_per_solve": learned["milp_seconds_per_solve"]}
    for policy in POLICIES:
        net = learned["net"] if policy == "sequoia" else sampled["net"] if policy == "sampling" else None
        scored = sequoia.evaluate(env, policy, setup.eval_episodes, eval_seed, net=net, config=config)
        row[policy] = scored["mean_return"]
        row[f"{policy}_seconds_per_action"] = scored["seconds_per_action"]
    print(f"{family} seed {seed}: " + ", ".join(f"{p} {row[p]:.2f}" for p in POLICIES))
    return row


def solve_time_scaling(setup: Setup) -> list[dict]:
    """Seconds per network MILP (with the myopic warm start) against N, budget family, networks at init."""
    import jax

    rows = []
    for n in setup.scaling_arms:
        env = RestlessBandit(RestlessConfig(family="budget", n_arms=n, budget=max(2, n // 3)))
        params = milp_q.QNet(setup.hidden).init(jax.random.PRNGKey(n), np.zeros((1, env.obs_dim + env.n_actions)))
        net = milp_q.layers(params, setup.hidden)
        rng, seconds = np.random.default_rng(n), []
        for _ in range(setup.scaling_states):
            obs = env.reset(rng)
            cons = env.constraints(obs)
            t0 = time.perf_counter()
            milp_q.solve_q(net, obs, cons, warm=milp_q.solve_linear(cons, env.expected_gain(obs)))
            seconds.append(time.perf_counter() - t0)
        rows.append({"n_arms": n, "action_bits": env.n_actions, "median_seconds": float(np.median(seconds)),
                     "max_seconds": float(np.max(seconds))})
    return rows


def relative_gains(results: dict) -> tuple[list[float], dict]:
    """Per (family, seed): (R_sequoia - R_best) / R_best against the family's best baseline by mean."""
    gains, best = [], {}
    for family, rows in results.items():
        best[family] = max(BASELINES, key=lambda p: np.mean([r[p] for r in rows]))
        gains += [(r["sequoia"] - r[best[family]]) / r[best[family]] for r in rows]
    return gains, best


def learning_curves(per_seed: dict, families, policy: str) -> np.ndarray:
    """[seeds, episodes]: each seed's training episode returns of ``policy``'s learner, averaged over the families."""
    rows = [sorted(per_seed[f], key=lambda r: r["seed"]) for f in families]
    n = min(len(r["train_returns"][policy]) for fam in rows for r in fam)
    return np.mean([[r["train_returns"][policy][:n] for r in fam] for fam in rows], 0)


def plateau(curve: np.ndarray) -> dict:
    """Has a learner converged? Per seed the last quarter's mean training return minus the third quarter's, with
    its Student-t 95% interval over seeds (an interval around 0: no longer rising)."""
    q = curve.shape[1] // 4
    mean, low, high = C.t_interval(curve[:, -q:].mean(1) - curve[:, -2 * q:-q].mean(1))
    return {"last_minus_third_quarter": mean, "interval": [low, high]}


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers ``L`` (``setup``, ``per_seed``, ``best_baseline``). The claim
    needs both learners to have learned (each one's training return rose: last vs first quarter of its episodes,
    Student-t over seeds) and the best baseline to beat a random policy; else ``no signal``."""
    setup, per = L["setup"], L["per_seed"]
    fams, seeds = setup["families"], setup["seeds"]
    val = lambda f, m: np.array([row[m] for row in sorted(per[f], key=lambda r: r["seed"])])  # noqa: E731
    best = L["best_baseline"]
    gain = np.mean([(val(f, "sequoia") - val(f, best[f])) / val(f, best[f]) for f in fams], 0)
    rand = np.mean([val(f, "random") for f in fams], 0)
    learned = {arm: C.arm_signal(arm, learning_curves(per, fams, policy), what="training return")
               for arm, policy in LEARNERS.items()}
    beats = {arm: C.baseline_signal(arm, np.mean([val(f, policy) for f in fams], 0), rand, what="a random policy")
             for arm, policy in LEARNERS.items()}
    bb = C.baseline_signal("best baseline", np.mean([val(f, best[f]) for f in fams], 0), rand, what="a random policy")
    claims = [C.judge(CLAIM, C.difference(gain, 0.0), [*learned.values(), bb], quick=quick)]
    arms = {arm: C.arm(setup["total_steps"], seeds, learned[arm], beats[arm]) for arm in LEARNERS}
    return claims, {**arms, "best baseline": C.arm(None, seeds, bb)}


def summarise(results: dict, scaling: list, setup: Setup, quick: bool, wall_seconds: float | None = None) -> dict:
    gains, best = relative_gains(results)
    table = {family: {p: mean_se([r[p] for r in rows]) for p in POLICIES} for family, rows in results.items()}
    convergence = {arm: plateau(learning_curves(results, setup.families, policy)) for arm, policy in LEARNERS.items()}
    tables = {"setup": dataclasses.asdict(setup), "returns": table, "best_baseline": best, "relative_gains": gains,
              "convergence": convergence, "per_seed": results, "solve_time_scaling": scaling}
    claims, arms = judge(tables, quick)
    return C.summary(paper=PAPER, claims=claims, arms=arms, scale=setup.scale(), quick=quick,
                     command="longhorizon repro sequoia" + (" --quick" if quick else ""), wall_seconds=wall_seconds, **tables)


def plot(path: Path, summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, mid, right) = plt.subplots(1, 3, figsize=(15, 3.8))
    families, width = list(summary["returns"]), 0.16
    for j, policy in enumerate(POLICIES):
        means = [summary["returns"][f][policy][0] for f in families]
        ses = [summary["returns"][f][policy][1] for f in families]
        left.bar(np.arange(len(families)) + (j - 2) * width, means, width, yerr=ses, label=policy, capsize=2)
    left.set_xticks(np.arange(len(families)), families)
    left.set_ylabel("mean episode return")
    left.set_title("return per family (mean +- SE over seeds)")
    top = max(m + e for row in summary["returns"].values() for m, e in row.values())
    left.set_ylim(0, 1.3 * top)  # room for the legend above the bars
    left.legend(fontsize=7, ncol=3, loc="upper left")
    families_run = summary["setup"]["families"]
    for arm, policy in LEARNERS.items():
        curve = learning_curves(summary["per_seed"], families_run, policy)
        k = max(1, curve.shape[1] // 20)  # 20 points: the mean of each block of episodes
        blocks = curve[:, : curve.shape[1] // k * k].reshape(len(curve), -1, k).mean(2)
        xs = (np.arange(blocks.shape[1]) + 0.5) * k * summary["setup"]["horizon"]
        mid.plot(xs, blocks.mean(0), label=arm)
        mid.fill_between(xs, blocks.mean(0) - blocks.std(0) / np.sqrt(len(blocks)), blocks.mean(0) + blocks.std(0) / np.sqrt(len(blocks)), alpha=0.2)
    mid.set_xlabel("environment steps")
    mid.set_ylabel("training episode return (mean over families)")
    mid.set_title("learning curves (mean +- SE over seeds)")
    mid.legend(fontsize=7)
    scaling = summary["solve_time_scaling"]
    right.plot([r["action_bits"] for r in scaling], [r["median_seconds"] for r in scaling], marker="o")
    right.set_yscale("log")
    right.set_xlabel("action bits (2 N, budget family)")
    right.set_ylabel("seconds per Q-network MILP (median)")
    right.set_title(f"MILP solve time, network {tuple(summary['setup']['hidden'])} at init")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report_lines(summary: dict) -> list[str]:
    lines = ["# SEQUOIA: a Q-network embedded in a MILP on coupled restless bandits", "",
             f"Claim: {CLAIM}.", "",
             f"Scale: {summary['scale']}. "
             "The paper trains for far longer, on N up to ~100 arms, with larger networks; here everything runs on 2 CPU "
             f"cores, with {summary['setup']['total_steps']} environment steps per learner and one small hidden layer. "
             + ("At N = 5 (at most 10 action bits) SEQUOIA's greedy action and target max are computed exactly by "
                "scoring every feasible action (enumerated once per constraint set), which is the argmax the MILP "
                "returns (`tests/structured/test_sequoia.py` checks the two agree on random networks in every family) "
                "at a small fraction of its cost; the MILP's own solve times are in the last table. "
                if summary["setup"]["maximizer"] == "enumerate" else "")
             + f"The acting network is refreshed every {summary['setup']['policy_every']} step(s).", "",
             "## Mean episode return (mean +- SE over seeds)", "",
             "| family | " + " | ".join(POLICIES) + " | best baseline |", "|---|" + "---|" * (len(POLICIES) + 1)]
    for family, row in summary["returns"].items():
        lines.append(f"| {family} | " + " | ".join(f"{m:.2f} +- {s:.2f}" for m, s in (row[p] for p in POLICIES))
                     + f" | {summary['best_baseline'][family]} |")
    solves = [r for rows in summary["per_seed"].values() for r in rows]
    lines += ["", "## Did the learners learn and converge?", "",
              "| learner | first-quarter training return | last-quarter | rose (95% interval) | last minus third quarter "
              "(95% interval) |", "|---|---|---|---|---|"]
    for arm in LEARNERS:
        sig = summary["arms"][arm]["signal"]["tests"][0]
        conv = summary["convergence"][arm]
        lines.append(f"| {arm} | {sig['first_window']:.2f} | {sig['last_window']:.2f} | {sig['change']:+.2f} "
                     f"[{sig['interval'][0]:.2f}, {sig['interval'][1]:.2f}] | {conv['last_minus_third_quarter']:+.2f} "
                     f"[{conv['interval'][0]:.2f}, {conv['interval'][1]:.2f}] |")
    lines += ["", "Training returns are the episodes' undiscounted returns while learning (epsilon-greedy, epsilon "
              "falling from 1 to 0.05 over the first half), averaged over the families per seed; curves per family "
              "and seed are in `curves/`. A learner whose training return did not rise gives the claim `no signal`.", "",
              "Baselines: `sampling` = the same DQN with the max over 16 random feasible actions and the myopic "
              "action; `myopic` = the MILP of the expected immediate reward; `iterative` = iterative myopic (greedy "
              "one bit at a time); `random` = a random feasible action.", "",
              (f"MILP during SEQUOIA training: {np.mean([r['milp_seconds_per_solve'] for r in solves]) * 1e3:.1f} ms per "
               f"solve (myopic warm start included), {sum(r['milp_cache_hits'] for r in solves)} memoised hits for "
               f"{sum(r['milp_solves'] for r in solves)} solves; " if summary["setup"]["maximizer"] == "milp" else "")
              + f"SEQUOIA's greedy action at evaluation: {np.mean([r['sequoia_seconds_per_action'] for r in solves]) * 1e3:.2f} "
              f"ms per step; training took {np.mean([r['train_seconds'] for r in solves]):.0f} s per SEQUOIA learner.", "",
              "## MILP solve time against the number of arms (budget family, network at init)", "",
              "| N | action bits | median s | max s |", "|---|---|---|---|"]
    lines += [f"| {r['n_arms']} | {r['action_bits']} | {r['median_seconds']:.3f} | {r['max_seconds']:.3f} |"
              for r in summary["solve_time_scaling"]]
    lines += ["", "![returns and solve time](sequoia.png)", "", "## Verdict", "", *verdict_lines(summary), "",
              "Rule: per seed the relative gain over each family's best baseline, averaged over the families; holds if "
              "its Student-t 95% interval over seeds (>= 3) lies above 0, contradicted if below; no signal if SEQUOIA or "
              "the best baseline is no better than a random policy, or either learner's training return did not rise "
              "(the rule and numbers are in `summary.json`).", "",
              f"Produced by `{summary['command']}` in {summary['wall_seconds']:.0f} s on the shared 2-core machine."]
    return lines
