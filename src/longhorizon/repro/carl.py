"""CaRL (Jaeger et al. 2025): simple rewards keep PPO working at large minibatches; a summed shaped reward does not.

Protocol: PPO (the project's, continuous actions, fused engine through :class:`longhorizon.runner.run.Run`) on
the route-following driving environment (:mod:`longhorizon.envs.driving`) with either reward. The minibatch size
``B`` grows the way data parallelism grows it (the paper's route to large minibatches: more environments per
update): every run takes ``num_minibatches`` minibatches per epoch for ``update_epochs`` epochs and ``updates``
updates, so every minibatch size takes the same number of gradient steps, and the batch per update
(``num_envs = B * num_minibatches / num_steps`` environments) and the samples grow with ``B``. Seeds are vmapped in
one program. The training curve is the mean return of the training episodes finished in each chunk. After
training, each seed's greedy policy drives ``eval_episodes`` fresh episodes; we report the mean route completion
``RC = s_end / L`` and the infraction rate (share of episodes ended by a collision, a red light or leaving the road).

Claim rules (:func:`judge`), per reward, on each seed's route completion against log2 of the minibatch size: a
fitted slope with its Student-t 95% interval over seeds (>= 3). "The shaped reward degrades" holds when the
slope's interval lies below 0; "CaRL's reward does not degrade" holds when it lies above 0 and is contradicted when
it lies below. Both claims depend on the smallest minibatch's arm having learned (by :func:`claims.arm_signal`: its
training return rose, or its greedy route completion rose above that of its initial policy; and it drives: route
completion at least ``LEARNED``), else ``no signal``: a reward
that never trains a driver has nothing to degrade from. A larger minibatch that does not learn is the claim's
subject (equal gradient steps), so it is judged, not excused.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro.report import mean_se, resumable, verdict_lines, write_run

LEARNED = 0.2  # route completion a policy must reach to count as having learned to drive at all
CLAIM_SHAPED = "PPO on the summed shaped reward degrades as the minibatch grows (equal gradient steps)"
CLAIM_CARL = "PPO on CaRL's route-completion reward does not degrade as the minibatch grows (equal gradient steps)"


@dataclasses.dataclass(frozen=True)
class Setup:
    minibatch_sizes: tuple[int, ...] = (256, 1024, 4096, 16384)
    num_minibatches: int = 4  # per epoch, at every minibatch size: the batch per update is num_minibatches x B
    num_steps: int = 64
    updates: int = 80
    update_epochs: int = 4
    learning_rate: float = 3e-4
    seeds: int = 3
    chunks: int = 8  # points on each arm's training curve
    eval_episodes: int = 64
    rewards: tuple[str, ...] = ("shaped", "carl")

    def __post_init__(self):
        from longhorizon.errors import UsageError

        bad = [b for b in self.minibatch_sizes if b < 1 or (b * self.num_minibatches) % self.num_steps]
        if bad:
            raise UsageError(f"minibatch size {bad[0]} x {self.num_minibatches} minibatches is not a whole number of "
                             f"{self.num_steps}-step rollouts; pick sizes that are multiples of {self.num_steps}.")
        if self.seeds < 2:
            raise UsageError(f"the SE needs at least 2 seeds (got {self.seeds}); pass seeds=3.")

    def num_envs(self, minibatch: int) -> int:
        return minibatch * self.num_minibatches // self.num_steps

    @property
    def gradient_steps(self) -> int:
        return self.updates * self.update_epochs * self.num_minibatches

    def samples(self, minibatch: int) -> int:
        return self.updates * self.num_minibatches * minibatch

    def overrides(self, minibatch: int) -> dict[str, str]:
        return {"num_envs": str(self.num_envs(minibatch)), "num_steps": str(self.num_steps),
                "num_minibatches": str(self.num_minibatches), "update_epochs": str(self.update_epochs),
                "learning_rate": str(self.learning_rate), "total_steps": str(self.samples(minibatch))}

    def scale(self) -> str:
        sizes = self.minibatch_sizes
        return (f"minibatch sizes {', '.join(map(str, sizes))}, each {self.num_minibatches} minibatches x "
                f"{self.update_epochs} epochs x {self.updates} updates = {self.gradient_steps:,} gradient steps; the "
                f"batch per update is {self.num_minibatches} x B ({self.num_envs(sizes[0])}-{self.num_envs(sizes[-1])} "
                f"envs x {self.num_steps} steps), so samples per seed grow with B ({self.samples(sizes[0]):,} to "
                f"{self.samples(sizes[-1]):,}); lr {self.learning_rate:g}, {self.seeds} vmapped seeds, "
                f"{self.eval_episodes} greedy eval episodes per seed.")


QUICK = Setup(minibatch_sizes=(256, 1024), updates=4, chunks=2, seeds=2, eval_episodes=16)


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded runs (``runs[reward][B]``: per-seed route completion and training curve)."""
    setup = L["setup"]
    sizes = [str(b) for b in setup["minibatch_sizes"]]
    x = np.log2(setup["minibatch_sizes"])
    rc = {r: np.array([L["runs"][r][b]["rc_per_seed"] for b in sizes]).T for r in setup["rewards"]}  # [seeds, sizes]
    signals, arms = {}, {}
    for r in rc:
        for i, b in enumerate(sizes):
            run = L["runs"][r][b]
            curve = run.get("train_return")  # [points, seeds]
            learned = C.arm_signal(f"{r}, B={b}", None if curve is None else np.array(curve, np.float64).T,
                                   eval_start=run.get("rc_start_per_seed"),
                                   eval_end=run["rc_per_seed"] if "rc_start_per_seed" in run else None,
                                   what="training return")
            drives = C.task_floor(f"{r}, B={b}", rc[r][:, i], LEARNED)
            signals[r, b] = [learned, drives] if curve is not None else [drives]
            arms[f"{r}, B={b}"] = C.arm(run.get("samples", setup.get("updates")), setup["seeds"], *signals[r, b])
    claims = [C.judge(CLAIM_SHAPED, C.trend(x, rc["shaped"], direction="decreasing"), signals["shaped", sizes[0]], quick=quick),
              C.judge(CLAIM_CARL + ": route completion against log2 minibatch, slope not below 0",
                      C.trend(x, rc["carl"], direction="increasing"), signals["carl", sizes[0]], quick=quick)]
    return claims, arms


def train_one(env, setup: Setup, minibatch: int, evaluate, log=print) -> dict:
    """Train every seed through the fused engine (``setup.chunks`` points on the training curve) and evaluate;
    per-seed RC, hard-infraction and soft-infraction rates."""
    from longhorizon.runner import run as runner

    spec = runner.RunSpec(algo="ppo", env=env, seeds=setup.seeds, num_chunks=setup.chunks, quiet=True,
                          config_overrides=setup.overrides(minibatch), out="/dev/null/unused")
    run = runner.Run(spec)
    state = run.engine.init(spec.seed)
    rc_start = start_route_completion(run, state, evaluate, setup)
    compile_s = run.engine.compile(state)
    t0 = time.perf_counter()
    steps, returns = [], []
    for i in range(run.num_chunks):
        state, metrics = run.engine.run_chunk(state, run.updates_in_chunk(i))
        count = np.asarray(metrics["episodes"], np.float64)
        ret = np.asarray(metrics["episode_return_sum"], np.float64) / np.maximum(count, 1)
        steps.append(run.env_steps_after(i + 1))
        returns.append(np.where(count > 0, ret, np.nan).tolist())
    params = run.algo.agent_params(state)
    rc, hard, soft = jax.device_get(evaluate(params, jax.random.split(jax.random.PRNGKey(10_000), setup.seeds)))
    train_s = time.perf_counter() - t0
    log(f"  {env.default_params.reward:6s} B={minibatch:5d}: RC {rc.mean():.3f}, infractions {hard.mean():.3f}, "
        f"training return {np.nanmean(returns[0]):.3g} -> {np.nanmean(returns[-1]):.3g} "
        f"(compile {compile_s:.0f} s, train+eval {train_s:.0f} s)")
    return {"rc_per_seed": rc.mean(1).tolist(), "rc_start_per_seed": rc_start, "infraction_per_seed": hard.mean(1).tolist(),
            "soft_rate_per_seed": soft.mean(1).tolist(), "steps": steps, "train_return": returns,
            "samples": run.num_updates * run.steps_per_update, "updates": run.num_updates,
            "gradient_steps": run.num_updates * setup.update_epochs * setup.num_minibatches,
            "compile_seconds": compile_s, "train_seconds": train_s}


def start_route_completion(run, state, evaluate, setup: Setup) -> list[float]:
    """Each seed's greedy route completion before training (the evaluation start of the arm's signal test)."""
    rc, _, _ = jax.device_get(evaluate(run.algo.agent_params(state), jax.random.split(jax.random.PRNGKey(10_000), setup.seeds)))
    return rc.mean(1).tolist()


def study(setup: Setup, out: Path, log=print) -> dict:
    """Every (reward, minibatch) arm, each saved under ``out/arms/`` as it finishes and read back on a rerun of the
    same setup (:func:`longhorizon.repro.report.resumable`)."""
    from longhorizon import algos
    from longhorizon.envs.driving import episode_scores, make_driving

    algo = algos.get("ppo")
    results = {}
    for reward in setup.rewards:
        env, evaluate = make_driving(reward), None
        results[reward] = {}
        for b in setup.minibatch_sizes:
            def train(b=b):
                nonlocal evaluate
                evaluate = evaluate or episode_scores(env, lambda p, o, k: algo.act(p, o, k, True),
                                                      setup.eval_episodes)  # greedy; compiled once per reward
                return train_one(env, setup, b, evaluate, log)

            results[reward][str(b)], _ = resumable(out / "arms" / f"{reward}-{b}.json", setup, train, log)
    return results


def plot(path: Path, setup: Setup, table: dict, raw: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 + len(raw), figsize=(4.2 * (2 + len(raw)), 3.6))
    for ax, key, label in zip(axes, ("rc", "infraction"), ("final route completion", "infraction rate")):
        for reward, rows in table.items():
            ys = np.array([rows[str(b)][key] for b in setup.minibatch_sizes])
            ax.errorbar(setup.minibatch_sizes, ys[:, 0], yerr=ys[:, 1], marker="o", capsize=3, label=reward)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"minibatch size ({setup.gradient_steps:,} gradient steps each)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    for ax, (reward, rows) in zip(axes[2:], raw.items()):
        for b, run in rows.items():
            ys = np.nanmean(np.array(run["train_return"], np.float64), 1)
            ax.plot(np.arange(1, len(ys) + 1) / len(ys) * setup.gradient_steps, ys, marker="o", ms=3, label=f"B={b}")
        ax.set_xlabel("gradient steps")
        ax.set_ylabel("training episode return")
        ax.set_title(f"{reward} reward")
        ax.legend(fontsize=7)
    fig.suptitle("PPO on the driving env: shaped vs CaRL reward at equal gradient steps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(out_dir: str, quick: bool = False) -> dict:
    setup, t0 = QUICK if quick else Setup(), time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    print(f"carl: {setup.scale()}")
    raw = study(setup, out)
    table = {reward: {b: {"rc": mean_se(r["rc_per_seed"]), "infraction": mean_se(r["infraction_per_seed"]),
                          "soft": mean_se(r["soft_rate_per_seed"]), "samples": r["samples"],
                          "gradient_steps": r["gradient_steps"]} for b, r in rows.items()}
             for reward, rows in raw.items()}
    plot(out / "carl.png", setup, table, raw)
    recorded = C.as_recorded({"setup": dataclasses.asdict(setup), "table": table, "runs": raw})
    claims, arms = judge(recorded, quick)
    command = "longhorizon repro carl" + (" --quick" if quick else "")
    # the protocol's wall time: every arm's compile + training + evaluation, whether it ran now or was read back
    wall = sum(r["compile_seconds"] + r["train_seconds"] for rows in raw.values() for r in rows.values())
    summary = C.summary(paper="CaRL", claims=claims, arms=arms, scale=setup.scale(), quick=quick, command=command,
                        wall_seconds=wall, **recorded)
    curves = {f"{reward}, B={b}": [{"step": st, "seed": i, "train_return": ret[i]}
                                   for st, ret in zip(r["steps"], r["train_return"]) for i in range(len(ret))]
              for reward, rows in raw.items() for b, r in rows.items()}
    write_run(out, summary, readme(summary, setup, table, command, time.perf_counter() - t0), curves)
    return summary


def readme(summary: dict, setup: Setup, table: dict, command: str, invocation_s: float) -> list[str]:
    lines = ["# CaRL: simple rewards at large minibatches", "",
             "Claim (Jaeger et al. 2025): PPO with a summed shaped reward degrades as the minibatch grows, while "
             "CaRL's simple reward (route-completion gain times soft-infraction factors, hard infractions terminate) "
             "keeps improving.", "",
             f"Scale: {setup.scale()} The paper trains on CARLA/nuPlan with up to hundreds of millions of samples and "
             "grows the minibatch by data parallelism (more environments and GPUs per update); here a 150 m S-curve "
             "with one parked car and one traffic light (longhorizon.envs.driving), and the minibatch grows the same "
             "way: equal gradient steps at every size, samples in proportion to the size.", "",
             "| reward | minibatch | samples per seed | route completion | infraction rate | soft-infraction rate |",
             "|---|---|---|---|---|---|"]
    for reward, rows in table.items():
        for b, row in rows.items():
            lines.append(f"| {reward} | {b} | {row['samples']:,} | {row['rc'][0]:.3f} +- {row['rc'][1]:.3f} | "
                         f"{row['infraction'][0]:.3f} +- {row['infraction'][1]:.3f} | "
                         f"{row['soft'][0]:.3f} +- {row['soft'][1]:.3f} |")
    lines += ["", "(mean +- SE over seeds; every arm took the same gradient steps.) Each arm's training curve is in "
              "`curves/`, each arm's raw result in `arms/`.", "", "![route completion, infractions and training curves](carl.png)",
              "", "## Verdict", "", *verdict_lines(summary), "", "Rules: `longhorizon.repro.carl.judge` (module docstring).",
              "", f"Wall time on the shared 2-core machine: {summary['wall_seconds']:.0f} s summed over the arms "
              f"(compilation, training and evaluation; this invocation {invocation_s:.0f} s).",
              "", "Produced by:", "", "```bash", command, "```"]
    return lines
