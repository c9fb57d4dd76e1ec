"""`longhorizon repro ta-lpo`: a drift that sees the lifetime (TA-LPO) vs LPO's, on held-out training horizons.

Jackson et al. (2024) meta-learn LPO's drift with the lifetime inputs ``n/N`` and ``log N`` and report that
it generalises across training horizons better than LPO's and that the discovered drift changes over the
lifetime. Here both drifts are meta-trained with the same antithetic OpenES (:mod:`longhorizon.evolution.meta`)
on a 10-armed Gaussian bandit at lifetimes ``train_lifetimes``, then scored on held-out lifetimes, next to
the zero drift (PPO's unclipped surrogate) and PPO-clip (eps 0.2) as references. Both drifts are also
meta-trained the paper's way, with the engine's PPO as the inner loop on a control task
(:mod:`longhorizon.evolution.meta_ppo`). Last, all four drifts are saved and put into the engine's PPO
(``longhorizon train ppo --drift FILE``) on held-out environments and lifetimes, against PPO-clip.

The unit is the meta-training run: every drift is meta-trained ``meta_runs`` times, independently (run k has
the seed ``100 k`` for its drift's initialisation and its ES noise, so run 1 is the seed a single run used),
and each run's drift is scored on the same held-out bandits and the same held-out environment cells (the same
PPO seeds). A claim comparing two drifts takes one value per run, the paired difference of run k's two
drifts (the ES and meta-gradient drifts of run k start from the same initial drift); a claim about one drift
one value per run; holds or contradicted need a Student-t 95% interval over >= 3 runs on one side
(:func:`longhorizon.repro.claims.difference`). A drift gives a signal only if every one of its runs raised its
meta-training fitness. Each finished meta-training run (and each held-out environment evaluation) is saved
under ``partial/`` as it finishes, so an interrupted protocol resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.evolution import lpo, meta, meta_ppo
from longhorizon.repro import claims as C
from longhorizon.repro.report import mean_se, resumable, verdict_lines, write_run

PAPER = "TA-LPO"
RUN_SEED = 100  # meta-training run k (from 0) has the seed RUN_SEED * k; run 0 has seed 0, the one-run protocol's
PARTIAL = "partial"  # finished meta-training runs and held-out evaluations, read back by a rerun; removed at the end
REFERENCE = "PPO-clip 0.2"


@dataclasses.dataclass(frozen=True)
class Setup:
    meta_runs: int = 3  # independent meta-training runs per drift (different seeds): the unit of every claim
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


QUICK = Setup(meta_runs=2, generations=2, es=meta.ESConfig(population=4, tasks=2, train_lifetimes=(2, 4)),
              bandit=meta.BanditConfig(arms=4, batch=4, epochs=1), held_out_lifetimes=(8,), eval_tasks=8,
              held_out_envs=("CartPole-v1",), env_lifetimes=(1,), env_seeds=1,
              control=meta_ppo.InnerPPO(lifetimes=(2,), seeds=1, overrides=(("num_envs", 2), ("num_steps", 16),
                                                                            ("update_epochs", 1), ("num_minibatches", 1))),
              control_es=meta.ESConfig(population=2), control_generations=2)
GRID_R = np.linspace(0.5, 2.0, 31)


CHANGE = 0.1  # a drift "changes over the lifetime" if lpo.lifetime_change(early, late) is above this (stated before the run)


def per_run(ruling: C.Claim, values: str, **evidence) -> C.Claim:
    """``ruling`` (a :func:`~longhorizon.repro.claims.difference` over meta-training runs) with its unit in the rule."""
    unit = (f"; the unit is the meta-training run, one value per run ({values}): holds or contradicted need >= "
            f"{C.MIN_SEEDS} runs")
    reason = ruling.evidence["reason"].replace("seed(s)", "meta-training run(s)")
    return dataclasses.replace(ruling, rule=ruling.rule + unit, evidence={
        **ruling.evidence, "reason": reason, "meta_runs": ruling.evidence["seeds"], **evidence})


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers, each a list over meta-training runs: each drift's fitness
    curves (every run's must rise), its bandit scores per lifetime, PPO's normalised returns with it on held-out
    environments, and its drift grids. Every claim has one value per run: the paired difference of run k's two
    drifts, or run k's drift against a fixed bound (the evaluation's spread over held-out bandits or PPO seeds is
    kept in the evidence but is not the meta-training's)."""
    control, held = L["setup"]["control"]["env"], L["held_out_lifetimes"]
    fit = {a: [C.arm_signal(f"{a} run {k + 1}", [curve], what="meta-training fitness") for k, curve in enumerate(curves)]
           for a, curves in L["meta_fitness"].items()}
    runs = len(L["meta_fitness"]["LPO"])
    score = lambda a, lifetimes: [float(np.mean([L["scores"][a][str(n)][k][0] for n in lifetimes]))  # noqa: E731
                                  for k in range(runs)]
    every = list(L["scores"]["LPO"])
    envs = L["held_out_envs"]
    cells = [(e, n) for e in envs for n in envs[e]]
    unseen = [(e, n) for e, n in cells if not (e == control and int(n) in L["setup"]["control"]["lifetimes"])]
    ppo = lambda a, cs: np.array([[envs[e][n][a][k] for e, n in cs] for k in range(runs)])  # noqa: E731  [runs, cells, seeds]
    grid = L["drift_grid"]
    change = lambda early, late: [lpo.lifetime_change(a, b) for a, b in zip(grid[early], grid[late])]  # noqa: E731
    changed = f"run k's TA-LPO drift's change over the lifetime, against {CHANGE:g}"

    def transfer(a, b, cs):
        if not cs:
            return C.undecidable("no held-out environment or lifetime in this setup")
        pa, pb = ppo(a, cs), ppo(b, cs)
        return per_run(C.difference(pa.mean((1, 2)), pb.mean((1, 2))),
                       f"{a} run k minus {b} run k, PPO's normalised return over the held-out cells and the same PPO seeds",
                       ppo_seed_differences=(pa - pb).mean(1))

    claims = [
        C.judge("the temporally-aware drift generalises across held-out training horizons better than LPO's",
                per_run(C.difference(score("TA-LPO", held), score("LPO", held)), "TA-LPO run k minus LPO run k, mean "
                        "final score over the held-out lifetimes on the same held-out bandits", lifetimes=held),
                [*fit["TA-LPO"], *fit["LPO"]], quick=quick),
        C.judge("the discovered TA-LPO drift changes over the lifetime (f early vs late)",
                per_run(C.difference(change("ta_early", "ta_late"), CHANGE), changed), fit["TA-LPO"], quick=quick),
        C.judge("meta-trained on bandits, the temporally-aware drift transfers to held-out environments better than LPO's",
                transfer("TA-LPO (bandit)", "LPO (bandit)", cells), [*fit["TA-LPO"], *fit["LPO"]], quick=quick),
        C.judge(f"meta-trained on {control} with PPO, the temporally-aware drift generalises to held-out environments and "
                "lifetimes better than LPO's", transfer(f"TA-LPO ({control})", f"LPO ({control})", unseen),
                [*fit[f"TA-LPO ({control})"], *fit[f"LPO ({control})"]], quick=quick),
        C.judge(f"meta-trained on {control}, the TA-LPO drift changes over the lifetime",
                per_run(C.difference(change("ta_control_early", "ta_control_late"), CHANGE), changed),
                fit[f"TA-LPO ({control})"], quick=quick),
        C.judge("ES finds a better TA-LPO drift than a meta-gradient through the inner updates (bandits)",
                per_run(C.difference(score("TA-LPO", every), score("TA-LPO (meta-gradient)", every)),
                        "ES's TA-LPO run k minus the meta-gradient's run k (the same initial drift), mean final score "
                        "over every lifetime on the same held-out bandits"),
                [*fit["TA-LPO"], *fit["TA-LPO (meta-gradient)"]], quick=quick),
    ]
    gens = {a: len(curves[0]) for a, curves in L["meta_fitness"].items()}
    return claims, {a: C.arm(gens[a], runs, *fit[a]) for a in fit}


class Drift(NamedTuple):
    temporal: bool
    trainer: Callable  # seed -> a trainer with generation(), params(), inner_steps_per_generation()
    generations: int
    label: str


def drifts(setup: Setup) -> dict[str, Drift]:
    """The five meta-trained drifts: ES on bandits (LPO, TA-LPO), the meta-gradient on bandits (TA-LPO), and ES
    with the engine's PPO as the inner loop on the control task (LPO, TA-LPO)."""
    control = setup.control.env
    es = lambda t: lambda seed: meta.MetaTrainer(lpo.DriftConfig(temporal=t), setup.bandit, setup.es, seed=seed)  # noqa: E731
    ppo = lambda t: lambda seed: meta_ppo.EnvMetaTrainer(lpo.DriftConfig(temporal=t), setup.control,  # noqa: E731
                                                         setup.control_es, seed=seed)
    gradient = lambda seed: meta.MetaGradientTrainer(lpo.DriftConfig(temporal=True), setup.bandit, setup.es, seed=seed)  # noqa: E731
    return {"LPO": Drift(False, es(False), setup.generations, "LPO on bandits"),
            "TA-LPO": Drift(True, es(True), setup.generations, "TA-LPO on bandits"),
            "TA-LPO (meta-gradient)": Drift(True, gradient, setup.generations, "TA-LPO on bandits by meta-gradient"),
            f"LPO ({control})": Drift(False, ppo(False), setup.control_generations, f"LPO on {control} (engine PPO)"),
            f"TA-LPO ({control})": Drift(True, ppo(True), setup.control_generations, f"TA-LPO on {control} (engine PPO)")}


def meta_run(drift: Drift, seed: int) -> dict:
    """One meta-training run: its fitness curve, throughput and final drift parameters (and, for the meta-gradient,
    its skipped steps and inner runs per step)."""
    trainer = drift.trainer(seed)
    curve, rates = meta_train(trainer, drift.generations, f"{drift.label} (seed {seed})")
    out = {"seed": seed, "fitness": curve, "throughput": rates,
           "params": {k: np.asarray(v, np.float64).tolist() for k, v in trainer.params().items()}}  # float32 exactly
    if isinstance(trainer, meta.MetaGradientTrainer):
        out.update(skipped_steps=trainer.skipped, inner_runs=trainer.runs)
    return out


def params_of(result: dict) -> dict:
    return {k: jnp.asarray(v, jnp.float32) for k, v in result["params"].items()}


def finished(path: Path, setup: Setup, compute: Callable[[], dict]) -> dict:
    """``compute()``'s result, saved at ``path`` as it finishes, or read back from there by a rerun of this setup."""
    result, _ = resumable(path, setup, compute, log=print)
    return C.as_recorded(result)


def held_out_environments(setup: Setup, arm: str, overrides: dict, runs_dir: Path, log=print) -> dict:
    """``{env: {lifetime: [normalised final greedy return per seed]}}`` of the engine's PPO with ``overrides`` (a
    drift, or none for PPO-clip): one ``runner.train`` per cell, every seed in one program; the same seeds (so the
    same initial networks) for every arm and run."""
    from longhorizon.runner import run as runner

    table = {}
    for env in setup.held_out_envs:
        lo, hi = meta_ppo.return_range(env)
        table[env] = {}
        for lifetime in setup.env_lifetimes:
            folder = runs_dir / f"{env}_N{lifetime}_{slug(arm)}"
            shutil.rmtree(folder, ignore_errors=True)  # scratch of an interrupted evaluation: its result was not saved
            spec = runner.RunSpec(algo="ppo", env=env, seeds=setup.env_seeds, num_chunks=1, quiet=True, out=str(folder),
                                  config_overrides={"total_steps": str(meta_ppo.lifetime_config(
                                      meta_ppo.InnerPPO(env=env), lifetime).total_steps), **overrides})
            summary = runner.train(spec)
            returns = np.asarray(summary["final_eval_return"], float)
            table[env][lifetime] = ((returns - lo) / (hi - lo)).tolist()
            log(f"  {env} N={lifetime} {arm}: final greedy return {returns.mean():.1f} "
                f"(compile {summary['compile_seconds']:.0f} s, train {summary['train_seconds']:.1f} s)")
    return table


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


def drift_file(out: Path, arm: str, k: int) -> Path:
    """Run ``k``'s (from 0) saved drift: ``ARM_drift.npz`` for the first run, ``ARM_runK_drift.npz`` for the others."""
    return out / (f"{slug(arm)}_drift.npz" if k == 0 else f"{slug(arm)}_run{k + 1}_drift.npz")


def over_runs(values) -> str:
    """``mean +- SE`` over meta-training runs (one value per run)."""
    return "{:.3f} +- {:.3f}".format(*mean_se(np.asarray(values, float)))


def run(out_dir: str, quick: bool = False) -> dict:
    setup, t0 = QUICK if quick else Setup(), time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    partial, control = out / PARTIAL, setup.control.env
    specs = drifts(setup)
    seeds = [RUN_SEED * k for k in range(setup.meta_runs)]
    results = {name: [] for name in specs}
    for k, seed in enumerate(seeds):  # run by run: each finished run holds every drift, a complete paired unit
        print(f"meta-training run {k + 1} of {setup.meta_runs} (seed {seed}):")
        for name, drift in specs.items():
            results[name].append(finished(partial / f"meta-{slug(name)}-seed{seed}.json", setup,
                                          lambda d=drift, s=seed: meta_run(d, s)))
    curves = {name: [r["fitness"] for r in rs] for name, rs in results.items()}
    rates = {name: [r["throughput"] for r in rs] for name, rs in results.items()}
    gradient = results["TA-LPO (meta-gradient)"]

    key = jax.random.PRNGKey(12345)  # the same held-out bandits for every arm and run (paired comparison)
    lifetimes = tuple(sorted(set(setup.held_out_lifetimes) | set(setup.es.train_lifetimes)))
    evaluate = {t: jax.jit(lambda k, p, c=lpo.DriftConfig(temporal=t): meta.evaluate(
        meta.drift_objective(c, p), setup.bandit, k, lifetimes, setup.eval_tasks)) for t in (False, True)}
    raw = {name: [np.asarray(evaluate[specs[name].temporal](key, params_of(r))) for r in results[name]]
           for name in ("LPO", "TA-LPO", "TA-LPO (meta-gradient)")}
    references = {"zero drift (r A)": meta.drift_objective(lpo.DriftConfig(), None), REFERENCE: meta.ppo_clip_objective(0.2)}
    raw.update({name: [np.asarray(jax.jit(lambda k, o=obj: meta.evaluate(o, setup.bandit, k, lifetimes, setup.eval_tasks))(key))]
                for name, obj in references.items()})
    # scores[name][N] = [(mean, SE) over the held-out bandits] per meta-training run (one entry for a reference)
    scores = {name: {int(n): [mean_se(s[i]) for s in per_run] for i, n in enumerate(lifetimes)} for name, per_run in raw.items()}

    horizon, env_horizon = float(max(setup.es.train_lifetimes)), float(max(setup.control.lifetimes))
    grids = lambda name, progress, h: [lpo.drift_grid(lpo.DriftConfig(temporal=specs[name].temporal), params_of(r),  # noqa: E731
                                                      GRID_R, progress, h).tolist() for r in results[name]]
    grid = {"r": GRID_R.tolist(), "ta_early": grids("TA-LPO", 0.05, horizon), "ta_late": grids("TA-LPO", 0.95, horizon),
            "lpo": grids("LPO", 0.0, horizon), "ta_control_early": grids(f"TA-LPO ({control})", 0.05, env_horizon),
            "ta_control_late": grids(f"TA-LPO ({control})", 0.95, env_horizon)}

    env_arms = {"LPO (bandit)": "LPO", "TA-LPO (bandit)": "TA-LPO", f"LPO ({control})": f"LPO ({control})",
                f"TA-LPO ({control})": f"TA-LPO ({control})"}
    for arm, name in env_arms.items():
        for k, r in enumerate(results[name]):
            lpo.save_drift(drift_file(out, arm, k), params_of(r))
    print("held-out environments (the engine's PPO with each drift):")
    runs_dir = out / "runs"
    reference = finished(partial / f"envs-{slug(REFERENCE)}.json", setup,
                         lambda: held_out_environments(setup, REFERENCE, {}, runs_dir))
    evaluated = {arm: [finished(partial / f"envs-{slug(arm)}-seed{seed}.json", setup, lambda a=arm, k=k: held_out_environments(
                     setup, f"{a} run {k + 1}", {"drift": str(drift_file(out, a, k))}, runs_dir)) for k, seed in enumerate(seeds)]
                 for arm in env_arms}
    # envs[env][N][arm] = [normalised return per PPO seed] per meta-training run (one entry for PPO-clip)
    envs = {e: {n: {REFERENCE: [reference[e][n]], **{arm: [t[e][n] for t in evaluated[arm]] for arm in env_arms}}
                for n in reference[e]} for e in reference}
    cells = [(e, n) for e in envs for n in envs[e]]
    unseen = [i for i, (e, n) in enumerate(cells) if not (e == control and int(n) in setup.control.lifetimes)]

    tables = {"scores": scores, "held_out_lifetimes": list(setup.held_out_lifetimes), "train_lifetimes": list(setup.es.train_lifetimes),
              "meta_runs": setup.meta_runs, "meta_seeds": seeds, "throughput": rates, "meta_fitness": curves,
              "held_out_envs": envs, "meta_gradient_skipped_steps": [r["skipped_steps"] for r in gradient],
              "drift_grid": grid, "setup": C.as_recorded(dataclasses.asdict(setup))}
    recorded = C.as_recorded(tables)
    claims, arms = judge(recorded, quick)  # the numbers as recorded (string keys)
    command = "longhorizon repro ta-lpo" + (" --quick" if quick else "")
    summary = C.summary(paper=PAPER, claims=claims, arms=arms, quick=quick, command=command, wall_seconds=time.perf_counter() - t0,
                        scale=f"bandits: {setup.generations} ES generations x population {setup.es.population}; {control}: "
                              f"{setup.control_generations} generations x population {setup.control_es.population}; "
                              f"{setup.meta_runs} meta-training runs per drift; held-out environments "
                              f"{list(setup.held_out_envs)} x {setup.env_seeds} PPO seeds", **tables)
    plot(out / "ta_lpo.png", lifetimes, recorded, env_arms)
    lines = report_lines(summary, setup, lifetimes, unseen)
    curves_out = {a: [{"run": k + 1, "seed": seeds[k], "generation": i + 1, "fitness": f}
                      for k, c in enumerate(cs) for i, f in enumerate(c)] for a, cs in curves.items()}
    write_run(out, summary, lines, curves_out)
    shutil.rmtree(partial, ignore_errors=True)  # every finished run now lives in summary.json
    return summary


def report_lines(summary: dict, setup: Setup, lifetimes: tuple, unseen: list) -> list[str]:
    """The README: scale, the bandit and held-out environment tables, throughput, the per-run values, verdicts."""
    control, runs, command = setup.control.env, setup.meta_runs, summary["command"]
    scores, envs, rates = summary["scores"], summary["held_out_envs"], summary["throughput"]
    cells = [(e, n) for e in envs for n in envs[e]]
    gradient_runs = max(1, setup.es.population * setup.es.tasks // 4)
    skipped = summary["meta_gradient_skipped_steps"]

    def bandit_cell(name, n):
        per_run = scores[name][str(n)]
        return "{:.3f} +- {:.3f}".format(*per_run[0]) if len(per_run) == 1 else over_runs([m for m, _ in per_run])

    def env_cell(e, n, arm):
        per_run = envs[e][n][arm]
        return "{:.3f} +- {:.3f}".format(*mean_se(per_run[0])) if arm == REFERENCE else over_runs([np.mean(r) for r in per_run])

    lines = ["# TA-LPO: a lifetime-aware drift vs LPO's on held-out training horizons and environments", "",
             f"Produced by `{command}`.", "", __doc__.split("\n\n", 1)[1].strip(), "",
             f"Meta-training runs: {runs} per drift, seeds {summary['meta_seeds']}.", "",
             f"Scale (bandits): {setup.generations} ES generations, population {setup.es.population} (antithetic), "
             f"{setup.es.tasks} bandits per member per generation, {setup.bandit.arms} arms, {setup.bandit.batch} pulls x "
             f"{setup.bandit.epochs} gradient steps per inner update, train lifetimes {setup.es.train_lifetimes}; "
             f"{setup.eval_tasks} held-out bandits per lifetime. The meta-gradient arm: {setup.generations} Adam steps "
             f"(same step size) on the gradient of the mean final score through the unrolled inner updates, "
             f"{gradient_runs} inner runs per step (steps skipped for a non-finite gradient, per run: {skipped}).", "",
             f"Scale ({control}): {setup.control_generations} ES generations, population {setup.control_es.population}, "
             f"each member's fitness from {setup.control.seeds} PPO runs per lifetime N in {setup.control.lifetimes} "
             f"(engine PPO, the environment's default config{', overrides ' + str(dict(setup.control.overrides)) if setup.control.overrides else ''}), "
             "normalised return of the episodes ending in the last quarter of the lifetime. The paper meta-trains on "
             "MinAtar/Brax with far larger populations and budgets.",
             "", "Bandits: final normalised score (1 = best arm, 0 = uniform) (* = held-out lifetime). A meta-trained "
             f"drift: the mean over its {runs} meta-training runs of each run's mean over the held-out bandits, +- SE "
             "over runs; a reference (no meta-training): mean +- SE over the held-out bandits.", "",
             "| objective | " + " | ".join(f"N={n}{'*' if n in setup.held_out_lifetimes else ''}" for n in lifetimes) + " |",
             "|---" * (len(lifetimes) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(bandit_cell(name, n) for n in lifetimes) + " |" for name in scores]
    lines += ["", "Meta-training throughput, mean over runs (inner environment steps, or bandit pulls, simulated per "
              "second over the whole population; the first generation includes compilation):", "",
              "| drift | first generation (s) | generation (s) | inner steps/s |", "|---|---|---|---|"]
    lines += [f"| {n} | {np.mean([r['first_generation_s'] for r in rs]):.1f} | {np.mean([r['generation_s'] for r in rs]):.2f} | "
              f"{np.mean([r['inner_steps_per_s'] for r in rs]):.3g} |" for n, rs in rates.items()]
    arms = list(envs[cells[0][0]][cells[0][1]])
    lines += ["", f"Held-out environments: the engine's PPO (default config for the environment, {setup.env_seeds} seeds, "
              "the same seeds for every arm and run) with each saved drift (`longhorizon train ppo --env ENV --drift "
              "FILE_drift.npz`; run k > 1's drifts are FILE_runk_drift.npz) against PPO-clip, for N updates. Final greedy "
              "return normalised to [0, 1] (CartPole: R/500; Acrobot: (R+500)/500). A drift: the mean over its "
              f"{runs} meta-training runs of each run's mean over seeds, +- SE over runs; PPO-clip: mean +- SE over "
              f"seeds (* = a cell the {control} drifts were meta-trained on):", "",
              "| environment | N | " + " | ".join(arms) + " |", "|---|---|" + "---|" * len(arms)]
    lines += [f"| {e}{'' if i in unseen else '*'} | {n} | " + " | ".join(env_cell(e, n, arm) for arm in arms) + " |"
              for i, (e, n) in enumerate(cells)]
    lines += ["", "Each claim's value per meta-training run (a paired difference, or a drift's change over the lifetime "
              f"minus {CHANGE:g}) and its Student-t 95% interval over runs:", "",
              "| claim | " + " | ".join(f"run {k + 1}" for k in range(runs)) + " | mean [95% interval] | verdict |",
              "|---|" + "---|" * (runs + 2)]
    for c in summary["claims"]:
        ev = c["evidence"]
        if "a" not in ev:
            lines.append(f"| {c['claim']} | " + " | " * runs + f"| {c['verdict']} |")
            continue
        d = np.asarray(ev["a"], float) - np.asarray(ev["b"], float)
        low, high = (float("nan") if v is None else v for v in ev["interval"])
        lines.append(f"| {c['claim']} | " + " | ".join(f"{v:+.4f}" for v in d) + f" | {ev['difference']:+.4f} "
                     f"[{low:+.4f}, {high:+.4f}] | {c['verdict']} |")
    lines += ["", "![TA-LPO](ta_lpo.png)", "", "## Verdict", "", *verdict_lines(summary), "",
              "Rules: `longhorizon.repro.ta_lpo.judge` (each claim's rule and numbers are in `summary.json`). The unit is "
              f"the meta-training run: each claim has one value per run ({runs} here), the paired difference of run k's "
              "two drifts (scored on the same held-out bandits or PPO seeds) or run k's drift's change over the lifetime "
              f"against {CHANGE:g}; holds if the Student-t 95% interval over runs lies above the margin, contradicted if "
              f"below, else inconclusive; fewer than {C.MIN_SEEDS} runs is inconclusive. A drift gives a signal only if "
              "every one of its meta-training runs raised its fitness (last quarter of the curve above the first); a "
              "claim on a drift without one is no signal."]
    return lines


def plot(path: Path, lifetimes, L: dict, env_arms: dict) -> None:
    """Bandit scores per lifetime, the bandit-trained drifts per run, and PPO with each drift on held-out cells
    (drifts: mean over runs +- SE over runs; references: +- SE over bandits or seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 3.8))
    for name, t in L["scores"].items():
        per_run = [t[str(n)] for n in lifetimes]
        m, e = (np.array([v[0] for v in per_run]).T if len(per_run[0]) == 1
                else np.array([mean_se([mean for mean, _ in v]) for v in per_run]).T)
        ax1.errorbar(lifetimes, m, yerr=e, marker="o", ms=3, label=name)
    ax1.set_xscale("log")
    ax1.set_xlabel("lifetime N (inner updates)")
    ax1.set_ylabel("final normalised score")
    ax1.legend(fontsize=8)
    grid = L["drift_grid"]
    for k, (early, late, flat) in enumerate(zip(grid["ta_early"], grid["ta_late"], grid["lpo"])):
        colour = f"C{k}"
        for i, a in enumerate((-1, 1)):
            style = dict(color=colour, alpha=1.0 if a > 0 else 0.5)
            ax2.plot(GRID_R, early[i], **style, label=f"run {k + 1}: TA-LPO early (n/N=0.05)" if a > 0 else None)
            ax2.plot(GRID_R, late[i], "--", **style, label=f"run {k + 1}: TA-LPO late (n/N=0.95)" if a > 0 else None)
            ax2.plot(GRID_R, flat[i], ":", **style, label=f"run {k + 1}: LPO" if a > 0 else None)
    ax2.set_xlabel("ratio r")
    ax2.set_ylabel("drift f(r, A) (A=+1 dark, A=-1 light)")
    ax2.legend(fontsize=6)
    envs = L["held_out_envs"]
    cells = [(e, n) for e in envs for n in envs[e]]
    arms = [REFERENCE, *env_arms]
    width = 0.8 / len(arms)
    for j, arm in enumerate(arms):
        stats = [mean_se(envs[c][n][arm][0]) if arm == REFERENCE else mean_se([np.mean(r) for r in envs[c][n][arm]])
                 for c, n in cells]
        m, e = np.array(stats).T
        ax3.bar(np.arange(len(cells)) + j * width, m, width, yerr=e, label=arm)
    ax3.set_xticks(np.arange(len(cells)) + 0.4 - width / 2, [f"{c.split('-')[0]} N={n}" for c, n in cells], fontsize=7)
    ax3.set_ylabel("normalised final greedy return")
    ax3.set_title("PPO with each drift, held-out environments", fontsize=9)
    ax3.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
