"""`longhorizon repro ta-lpo`: a drift that sees the lifetime (TA-LPO) vs LPO's, on held-out training horizons.

Jackson et al. (2024) meta-learn LPO's drift with the lifetime inputs ``n/N`` and ``log N`` and report that
it generalises across training horizons better than LPO's and that the discovered drift changes over the
lifetime. Here both drifts are meta-trained with the same antithetic OpenES (:mod:`longhorizon.evolution.meta`)
on a 10-armed Gaussian bandit at lifetimes ``train_lifetimes``, then scored on held-out lifetimes, next to
the zero drift (PPO's unclipped surrogate) and PPO-clip (eps 0.2) as references. Both drifts are also
meta-trained the paper's way, with the engine's PPO as the inner loop on a control task
(:mod:`longhorizon.evolution.meta_ppo`). Last, all four drifts are saved and put into the engine's PPO
(``longhorizon train ppo --drift FILE``) on held-out environments and lifetimes, against PPO-clip.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.evolution import lpo, meta, meta_ppo
from longhorizon.repro import claims as C
from longhorizon.repro.report import mean_se, verdict_lines, write_run

PAPER = "TA-LPO"


@dataclasses.dataclass(frozen=True)
class Setup:
    generations: int = 100
    es: meta.ESConfig = meta.ESConfig(population=32, tasks=16)
    # noisy pulls and large inner steps: unconstrained updates over-commit, so the drift has work to do
    bandit: meta.BanditConfig = meta.BanditConfig(noise=2.0, inner_lr=4.0)
    held_out_lifetimes: tuple = (4, 16, 32, 128)
    eval_tasks: int = 256
    # held-out environments: the engine's PPO (default config) with each drift, lifetimes in PPO updates
    held_out_envs: tuple = ("CartPole-v1", "Acrobot-v1")
    env_lifetimes: tuple = (8, 64)
    env_seeds: int = 5
    # the second family: meta-training with the engine's PPO as the inner loop (evolution.meta_ppo)
    control: meta_ppo.InnerPPO = meta_ppo.InnerPPO(env="CartPole-v1", lifetimes=(8, 32), seeds=2)
    control_es: meta.ESConfig = meta.ESConfig(population=8)
    control_generations: int = 30


QUICK = Setup(generations=2, es=meta.ESConfig(population=4, tasks=2, train_lifetimes=(2, 4)),
              bandit=meta.BanditConfig(arms=4, batch=4, epochs=1), held_out_lifetimes=(8,), eval_tasks=8,
              held_out_envs=("CartPole-v1",), env_lifetimes=(1,), env_seeds=1,
              control=meta_ppo.InnerPPO(lifetimes=(2,), seeds=1, overrides=(("num_envs", 2), ("num_steps", 16),
                                                                            ("update_epochs", 1), ("num_minibatches", 1))),
              control_es=meta.ESConfig(population=2), control_generations=2)
GRID_R = np.linspace(0.5, 2.0, 31)


CHANGE = 0.1  # a drift "changes over the lifetime" if mean |f_late - f_early| / mean |f| is above this (stated before the run)
UNIT = "; the unit is the meta-training run (one per drift here): a claim about what meta-training finds needs >= 3 of them"


def lifetime_change(early, late) -> float:
    """``mean |f_late - f_early| / mean |f|`` of a drift's grids early and late in the lifetime."""
    early, late = np.asarray(early), np.asarray(late)
    return float(np.abs(late - early).mean() / max(0.5 * (np.abs(early).mean() + np.abs(late).mean()), 1e-12))


def per_run(ruling: C.Claim, **evidence) -> C.Claim:
    return dataclasses.replace(ruling, rule=ruling.rule + UNIT, evidence={**ruling.evidence, **evidence})


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers: each drift's meta-training fitness curve (it must rise), its
    bandit scores per lifetime, PPO's normalised returns with it on held-out environments, and its drift grids.
    Each drift comes from one meta-training run, so every comparison has one value per drift (the evaluation's
    spread over held-out bandits or PPO seeds is kept in the evidence but is not the meta-training's)."""
    control, held = L["setup"]["control"]["env"], L["held_out_lifetimes"]
    fit = {a: C.arm_signal(a, [curve], what="meta-training fitness") for a, curve in L["meta_fitness"].items()}
    score = lambda a, lifetimes: float(np.mean([L["scores"][a][str(n)][0] for n in lifetimes]))  # noqa: E731
    every = list(L["scores"]["LPO"])
    envs = L["held_out_envs"]
    cells = [(e, n) for e in envs for n in envs[e]]
    unseen = [(e, n) for e, n in cells if not (e == control and int(n) in L["setup"]["control"]["lifetimes"])]
    ppo = lambda a, cs: float(np.mean([envs[e][n][a] for e, n in cs]))  # noqa: E731
    grid = L["drift_grid"]

    def transfer(a, b, cs):
        if not cs:
            return C.undecidable("no held-out environment or lifetime in this setup")
        return per_run(C.difference([ppo(a, cs)], [ppo(b, cs)]), ppo_seed_differences=(
            np.array([envs[e][n][a] for e, n in cs]) - np.array([envs[e][n][b] for e, n in cs])).mean(0))

    claims = [
        C.judge("the temporally-aware drift generalises across held-out training horizons better than LPO's",
                per_run(C.difference([score("TA-LPO", held)], [score("LPO", held)]), lifetimes=held),
                [fit["TA-LPO"], fit["LPO"]], quick=quick),
        C.judge("the discovered TA-LPO drift changes over the lifetime (f early vs late)",
                per_run(C.difference([lifetime_change(grid["ta_early"], grid["ta_late"])], CHANGE)), [fit["TA-LPO"]], quick=quick),
        C.judge("meta-trained on bandits, the temporally-aware drift transfers to held-out environments better than LPO's",
                transfer("TA-LPO (bandit)", "LPO (bandit)", cells), [fit["TA-LPO"], fit["LPO"]], quick=quick),
        C.judge(f"meta-trained on {control} with PPO, the temporally-aware drift generalises to held-out environments and "
                "lifetimes better than LPO's", transfer(f"TA-LPO ({control})", f"LPO ({control})", unseen),
                [fit[f"TA-LPO ({control})"], fit[f"LPO ({control})"]], quick=quick),
        C.judge(f"meta-trained on {control}, the TA-LPO drift changes over the lifetime",
                per_run(C.difference([lifetime_change(grid["ta_control_early"], grid["ta_control_late"])], CHANGE)),
                [fit[f"TA-LPO ({control})"]], quick=quick),
        C.judge("ES finds a better TA-LPO drift than a meta-gradient through the inner updates (bandits)",
                per_run(C.difference([score("TA-LPO", every)], [score("TA-LPO (meta-gradient)", every)])),
                [fit["TA-LPO"], fit["TA-LPO (meta-gradient)"]], quick=quick),
    ]
    gens = {a: len(curve) for a, curve in L["meta_fitness"].items()}
    return claims, {a: C.arm(gens[a], 1, fit[a]) for a in fit}


def held_out_environments(setup: Setup, drift_files: dict, runs_dir: Path, log=print) -> dict:
    """``{env: {lifetime: {arm: [normalised final greedy return per seed]}}}``: one ``runner.train`` per cell,
    every seed in one program; the same seeds (so the same initial networks) for every arm."""
    from longhorizon.runner import run as runner

    arms = {"PPO-clip 0.2": {}, **{name: {"drift": str(path)} for name, path in drift_files.items()}}
    table = {}
    for env in setup.held_out_envs:
        lo, hi = meta_ppo.return_range(env)
        table[env] = {}
        for lifetime in setup.env_lifetimes:
            table[env][lifetime] = {}
            for arm, overrides in arms.items():
                folder = runs_dir / f"{env}_N{lifetime}_{slug(arm)}"
                spec = runner.RunSpec(algo="ppo", env=env, seeds=setup.env_seeds, num_chunks=1, quiet=True, out=str(folder),
                                      config_overrides={"total_steps": str(meta_ppo.lifetime_config(
                                          meta_ppo.InnerPPO(env=env), lifetime).total_steps), **overrides})
                summary = runner.train(spec)
                returns = np.asarray(summary["final_eval_return"], float)
                table[env][lifetime][arm] = ((returns - lo) / (hi - lo)).tolist()
                log(f"  {env} N={lifetime} {arm}: final greedy return {returns.mean():.1f} "
                    f"(compile {summary['compile_seconds']:.0f} s, train {summary['train_seconds']:.1f} s)")
    return table


def drift_grid(config: lpo.DriftConfig, params, progress: float, horizon: float) -> np.ndarray:
    """``f(r, A)`` on ``GRID_R x {-1, +1}``, shape ``[2, R]``."""
    r, a = np.meshgrid(GRID_R, [-1.0, 1.0])
    extra = dict(progress=progress, horizon=horizon) if config.temporal else {}
    return np.asarray(lpo.drift(config, params, jnp.asarray(r), jnp.asarray(a), **extra))


def meta_train(trainer, generations: int, label: str) -> tuple[list, dict]:
    """Run ``generations`` ES generations; the fitness curve and the throughput (first generation = compile)."""
    t0 = time.perf_counter()
    curve = [trainer.generation()]
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    curve += [trainer.generation() for _ in range(generations - 1)]
    run_s = time.perf_counter() - t0
    print(f"{label}: {generations} generations, last mean fitness {curve[-1]:.3f} (first generation {compile_s:.0f} s)")
    return curve, {"first_generation_s": compile_s, "generation_s": run_s / max(generations - 1, 1),
                   "inner_steps_per_s": trainer.inner_steps_per_generation() * (generations - 1) / max(run_s, 1e-9)}


def slug(arm: str) -> str:
    return arm.lower().replace(" ", "_").replace("(", "").replace(")", "").replace("-", "_")


def run(out_dir: str, quick: bool = False) -> dict:
    setup, t0 = QUICK if quick else Setup(), time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    control = setup.control.env
    trained, curves, rates = {}, {}, {}
    for name, temporal in (("LPO", False), ("TA-LPO", True)):
        trainer = meta.MetaTrainer(lpo.DriftConfig(temporal=temporal), setup.bandit, setup.es)
        curves[name], rates[name] = meta_train(trainer, setup.generations, f"{name} on bandits")
        trained[name] = trainer
    mg = meta.MetaGradientTrainer(lpo.DriftConfig(temporal=True), setup.bandit, setup.es)
    curves["TA-LPO (meta-gradient)"], rates["TA-LPO (meta-gradient)"] = meta_train(mg, setup.generations,
                                                                                 "TA-LPO on bandits by meta-gradient")
    for name, temporal in (("LPO", False), ("TA-LPO", True)):
        trainer = meta_ppo.EnvMetaTrainer(lpo.DriftConfig(temporal=temporal), setup.control, setup.control_es)
        label = f"{name} ({control})"
        curves[label], rates[label] = meta_train(trainer, setup.control_generations, f"{name} on {control} (engine PPO)")
        trained[label] = trainer

    key = jax.random.PRNGKey(12345)  # the same held-out bandits for every arm (paired comparison)
    objectives = {"LPO": meta.drift_objective(trained["LPO"].drift, trained["LPO"].params()),
                  "TA-LPO": meta.drift_objective(trained["TA-LPO"].drift, trained["TA-LPO"].params()),
                  "TA-LPO (meta-gradient)": meta.drift_objective(mg.drift, mg.params()),
                  "zero drift (r A)": meta.drift_objective(lpo.DriftConfig(), None),
                  "PPO-clip 0.2": meta.ppo_clip_objective(0.2)}
    lifetimes = tuple(sorted(set(setup.held_out_lifetimes) | set(setup.es.train_lifetimes)))
    scores = {name: np.asarray(jax.jit(lambda k, o=obj: meta.evaluate(o, setup.bandit, k, lifetimes, setup.eval_tasks))(key))
              for name, obj in objectives.items()}
    ta = trained["TA-LPO"]
    horizon = float(max(setup.es.train_lifetimes))
    early, late = drift_grid(ta.drift, ta.params(), 0.05, horizon), drift_grid(ta.drift, ta.params(), 0.95, horizon)
    lpo_grid = drift_grid(trained["LPO"].drift, trained["LPO"].params(), 0.0, horizon)
    ta_env = trained[f"TA-LPO ({control})"]
    env_horizon = float(max(setup.control.lifetimes))
    env_early, env_late = (drift_grid(ta_env.drift, ta_env.params(), p, env_horizon) for p in (0.05, 0.95))

    arms = {name if "(" in name else f"{name} (bandit)": name for name in trained}
    drift_files = {arm: out / f"{slug(arm)}_drift.npz" for arm in arms}
    for arm, path in drift_files.items():
        lpo.save_drift(path, trained[arms[arm]].params())
    print("held-out environments (the engine's PPO with each drift):")
    envs = held_out_environments(setup, drift_files, out / "runs")
    cells = [(env, n) for env in envs for n in envs[env]]
    env_scores = {arm: np.array([envs[e][n][arm] for e, n in cells]) for arm in envs[cells[0][0]][cells[0][1]]}
    unseen = [i for i, (e, n) in enumerate(cells) if not (e == control and n in setup.control.lifetimes)]
    table = {name: {int(n): mean_se(s[i]) for i, n in enumerate(lifetimes)} for name, s in scores.items()}
    tables = {"scores": {name: {str(n): list(v) for n, v in t.items()} for name, t in table.items()},
              "held_out_lifetimes": list(setup.held_out_lifetimes), "train_lifetimes": list(setup.es.train_lifetimes),
              "throughput": rates, "meta_fitness": curves, "held_out_envs": envs, "meta_gradient_skipped_steps": mg.skipped,
              "drift_grid": {"r": GRID_R.tolist(), "ta_early": early.tolist(), "ta_late": late.tolist(), "lpo": lpo_grid.tolist(),
                             "ta_control_early": env_early.tolist(), "ta_control_late": env_late.tolist()},
              "setup": C.as_recorded(dataclasses.asdict(setup))}
    claims, arms = judge(C.as_recorded(tables), quick)  # the numbers as recorded (string keys)
    command = "longhorizon repro ta-lpo" + (" --quick" if quick else "")
    summary = C.summary(paper=PAPER, claims=claims, arms=arms, quick=quick, command=command, wall_seconds=time.perf_counter() - t0,
                        scale=f"bandits: {setup.generations} ES generations x population {setup.es.population}; {control}: "
                              f"{setup.control_generations} generations x population {setup.control_es.population}; one "
                              f"meta-training run per drift; held-out environments {list(setup.held_out_envs)} x "
                              f"{setup.env_seeds} PPO seeds", **tables)
    plot(out / "ta_lpo.png", lifetimes, table, early, late, lpo_grid, envs, cells)
    lines = ["# TA-LPO: a lifetime-aware drift vs LPO's on held-out training horizons and environments", "",
             f"Produced by `{command}`.", "", __doc__.split("\n\n", 1)[1].strip(), "",
             f"Scale (bandits): {setup.generations} ES generations, population {setup.es.population} (antithetic), "
             f"{setup.es.tasks} bandits per member per generation, {setup.bandit.arms} arms, {setup.bandit.batch} pulls x "
             f"{setup.bandit.epochs} gradient steps per inner update, train lifetimes {setup.es.train_lifetimes}; "
             f"{setup.eval_tasks} held-out bandits per lifetime. The meta-gradient arm: {setup.generations} Adam steps "
             f"(same step size) on the gradient of the mean final score through the unrolled inner updates, "
             f"{mg.runs} inner runs per step ({mg.skipped} steps skipped for a non-finite gradient).", "",
             f"Scale ({control}): {setup.control_generations} ES generations, population {setup.control_es.population}, "
             f"each member's fitness from {setup.control.seeds} PPO runs per lifetime N in {setup.control.lifetimes} "
             f"(engine PPO, the environment's default config{', overrides ' + str(dict(setup.control.overrides)) if setup.control.overrides else ''}), "
             "normalised return of the episodes ending in the last quarter of the lifetime. The paper meta-trains on "
             "MinAtar/Brax with far larger populations and budgets.",
             "", "Bandits: final normalised score (1 = best arm, 0 = uniform), mean +- SE over held-out bandits "
             "(* = held-out lifetime):", "",
             "| objective | " + " | ".join(f"N={n}{'*' if n in setup.held_out_lifetimes else ''}" for n in lifetimes) + " |",
             "|---" * (len(lifetimes) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(f"{m:.3f} +- {e:.3f}" for m, e in t.values()) + " |" for name, t in table.items()]
    lines += ["", "Meta-training throughput (inner environment steps, or bandit pulls, simulated per second over the "
              "whole population; the first generation includes compilation):", "",
              "| drift | first generation (s) | generation (s) | inner steps/s |", "|---|---|---|---|"]
    lines += [f"| {n} | {r['first_generation_s']:.1f} | {r['generation_s']:.2f} | {r['inner_steps_per_s']:.3g} |" for n, r in rates.items()]
    lines += ["", f"Held-out environments: the engine's PPO (default config for the environment, {setup.env_seeds} seeds, "
              "the same seeds for every arm) with each saved drift (`longhorizon train ppo --env ENV --drift "
              "FILE_drift.npz`) against PPO-clip, for N updates. Final greedy return normalised to [0, 1] "
              "(CartPole: R/500; Acrobot: (R+500)/500), mean +- SE over seeds (* = a cell the "
              f"{control} drifts were meta-trained on):", "",
              "| environment | N | " + " | ".join(env_scores) + " |", "|---|---|" + "---|" * len(env_scores)]
    lines += [f"| {e}{'' if i in unseen else '*'} | {n} | " + " | ".join(
        "{:.3f} +- {:.3f}".format(*mean_se(envs[e][n][arm])) for arm in env_scores) + " |" for i, (e, n) in enumerate(cells)]
    lines += ["", "![TA-LPO](ta_lpo.png)", "", "## Verdict", "", *verdict_lines(summary), "",
              "Rules: `longhorizon.repro.ta_lpo.judge` (each claim's rule and numbers are in `summary.json`). Each drift "
              "is one meta-training run, so no comparison of drifts has the 3 runs that holds or contradicted need; a "
              "drift whose meta-training fitness did not rise gives no signal."]
    curves_out = {a: [{"generation": i + 1, "fitness": f} for i, f in enumerate(c)] for a, c in curves.items()}
    write_run(out, summary, lines, curves_out)
    return summary


def plot(path: Path, lifetimes, table: dict, early, late, lpo_grid, envs: dict, cells: list) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 3.8))
    for name, t in table.items():
        m, e = np.array([t[n] for n in lifetimes]).T
        ax1.errorbar(lifetimes, m, yerr=e, marker="o", ms=3, label=name)
    ax1.set_xscale("log")
    ax1.set_xlabel("lifetime N (inner updates)")
    ax1.set_ylabel("final normalised score")
    ax1.legend(fontsize=8)
    for i, a in enumerate((-1, 1)):
        ax2.plot(GRID_R, early[i], label=f"TA-LPO early (n/N=0.05), A={a:+d}")
        ax2.plot(GRID_R, late[i], "--", label=f"TA-LPO late (n/N=0.95), A={a:+d}")
        ax2.plot(GRID_R, lpo_grid[i], ":", label=f"LPO, A={a:+d}")
    ax2.set_xlabel("ratio r")
    ax2.set_ylabel("drift f(r, A)")
    ax2.legend(fontsize=6)
    arms = list(envs[cells[0][0]][cells[0][1]])
    width = 0.8 / len(arms)
    for j, arm in enumerate(arms):
        m, e = np.array([mean_se(envs[c][n][arm]) for c, n in cells]).T
        ax3.bar(np.arange(len(cells)) + j * width, m, width, yerr=e, label=arm)
    ax3.set_xticks(np.arange(len(cells)) + 0.4 - width / 2, [f"{c.split('-')[0]} N={n}" for c, n in cells], fontsize=7)
    ax3.set_ylabel("normalised final greedy return")
    ax3.set_title("PPO with each drift, held-out environments", fontsize=9)
    ax3.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
