"""CaRL (Jaeger et al. 2025): simple rewards keep PPO working at large minibatches; a summed shaped reward does not.

Protocol: PPO (the project's, continuous actions, fused engine through :class:`longhorizon.runner.run.Run`) on
the route-following driving environment (:mod:`longhorizon.envs.driving`) with either reward. Every run collects
the same batch (``num_envs x num_steps`` samples per update) for the same number of updates, so all minibatch
sizes see equal samples; the minibatch size ``B`` is set by ``num_minibatches = batch / B`` (larger ``B``: fewer,
larger gradient steps). Seeds are vmapped in one program. After training, each seed's greedy policy drives
``eval_episodes`` fresh episodes; we report the mean route completion ``RC = s_end / L`` and the infraction rate
(share of episodes ended by a collision, a red light or leaving the road).

Claim rules (:func:`judge`), per reward, on each seed's route completion against log2 of the minibatch size: a
fitted slope with its Student-t 95% interval over seeds (>= 3). "The shaped reward degrades" holds when the
slope's interval lies below 0; "CaRL's reward does not degrade" holds when it lies above 0 and is contradicted when
it lies below. A reward whose policy never learned to drive (route completion below ``LEARNED`` at the smallest
minibatch) gives ``no signal``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro.report import mean_se, verdict_lines, write

LEARNED = 0.2  # route completion a policy must reach to count as having learned to drive at all
CLAIM_SHAPED = "PPO on the summed shaped reward degrades as the minibatch grows (equal samples)"
CLAIM_CARL = "PPO on CaRL's route-completion reward does not degrade as the minibatch grows (equal samples)"


@dataclasses.dataclass(frozen=True)
class Setup:
    minibatch_sizes: tuple[int, ...] = (256, 1024, 4096, 16384)
    num_envs: int = 256
    num_steps: int = 64  # batch = 16,384 samples per update
    updates: int = 40
    update_epochs: int = 4
    learning_rate: float = 3e-4
    seeds: int = 3
    eval_episodes: int = 64
    rewards: tuple[str, ...] = ("shaped", "carl")

    def __post_init__(self):
        from longhorizon.errors import UsageError

        batch = self.num_envs * self.num_steps
        bad = [b for b in self.minibatch_sizes if b < 1 or batch % b]
        if bad:
            raise UsageError(f"minibatch size {bad[0]} does not divide the batch {batch}; pick sizes that divide it.")
        if self.seeds < 2:
            raise UsageError(f"the SE needs at least 2 seeds (got {self.seeds}); pass seeds=3.")

    @property
    def batch(self) -> int:
        return self.num_envs * self.num_steps

    def overrides(self, minibatch: int) -> dict[str, str]:
        return {"num_envs": str(self.num_envs), "num_steps": str(self.num_steps),
                "num_minibatches": str(self.batch // minibatch), "update_epochs": str(self.update_epochs),
                "learning_rate": str(self.learning_rate), "total_steps": str(self.batch * self.updates)}

    def scale(self) -> str:
        return (f"batch {self.batch} samples/update ({self.num_envs} envs x {self.num_steps} steps), {self.updates} "
                f"updates = {self.batch * self.updates:,} samples per seed, {self.update_epochs} epochs, lr "
                f"{self.learning_rate:g}, {self.seeds} vmapped seeds, minibatch sizes "
                f"{', '.join(map(str, self.minibatch_sizes))}; {self.eval_episodes} greedy eval episodes per seed.")


QUICK = Setup(minibatch_sizes=(256, 1024), num_envs=32, num_steps=64, updates=4, eval_episodes=16)


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded per-seed route completion (``runs[reward][B]["rc_per_seed"]``)."""
    setup = L["setup"]
    sizes = [str(b) for b in setup["minibatch_sizes"]]
    x = np.log2(setup["minibatch_sizes"])
    rc = {r: np.array([L["runs"][r][b]["rc_per_seed"] for b in sizes]).T for r in setup["rewards"]}  # [seeds, sizes]
    drives = {r: {b: C.task_floor(f"{r}, B={b}", rc[r][:, i], LEARNED) for i, b in enumerate(sizes)} for r in rc}
    claims = [C.judge(CLAIM_SHAPED, C.trend(x, rc["shaped"], direction="decreasing"), [drives["shaped"][sizes[0]]], quick=quick),
              C.judge(CLAIM_CARL + ": route completion against log2 minibatch, slope not below 0",
                      C.trend(x, rc["carl"], direction="increasing"), [drives["carl"][sizes[0]]], quick=quick)]
    return claims, {f"{r}, B={b}": C.arm(setup["updates"], setup["seeds"], drives[r][b]) for r in rc for b in sizes}


def eval_program(env, algo, episodes: int):
    """Jitted ``(params over seeds, key) -> (RC, hard, soft)`` of each seed's first greedy episode per copy, ``(S, E)``."""
    max_steps = env.max_episode_steps

    def one_seed(params, key):
        keys = jax.random.split(key, episodes)
        obs, state = jax.vmap(env.reset)(keys)

        def step(carry, _):
            obs, state, key, done, rc, hard, soft, steps = carry
            key, k_act, k_step = jax.random.split(key, 3)
            action = algo.act(params, obs, k_act, True)
            obs, state, _, term, trunc, info = jax.vmap(env.step)(jax.random.split(k_step, episodes), state, action)
            live = ~done
            ended = term | trunc
            hit = info["collision"] | info["red_light"] | info["off_road"]
            rc = jnp.where(live & ended, info["route_completion"], rc)
            hard = jnp.where(live & ended, hit, hard)
            soft = soft + jnp.where(live, (info["off_lane"] | info["speeding"]).astype(jnp.float32), 0.0)
            return (obs, state, key, done | ended, rc, hard, soft, steps + live), None

        zeros = jnp.zeros(episodes)
        init = (obs, state, key, jnp.zeros(episodes, bool), zeros, jnp.zeros(episodes, bool), zeros, zeros)
        (_, state, _, done, rc, hard, soft, steps), _ = jax.lax.scan(step, init, None, max_steps)
        return jnp.where(done, rc, state.s / env.route_length), hard, soft / jnp.maximum(steps, 1)

    return jax.jit(jax.vmap(one_seed))


def train_one(env, setup: Setup, minibatch: int, evaluate, log=print) -> dict:
    """Train every seed through the fused engine and evaluate; per-seed RC, hard-infraction and soft-infraction rates."""
    from longhorizon.runner import run as runner

    spec = runner.RunSpec(algo="ppo", env=env, seeds=setup.seeds, num_chunks=1, quiet=True,
                          config_overrides=setup.overrides(minibatch), out="/dev/null/unused")
    run = runner.Run(spec)
    state = run.engine.init(spec.seed)
    compile_s = run.engine.compile(state)
    t0 = time.perf_counter()
    state, _ = run.engine.run_chunk(state, run.updates_in_chunk(0))
    params = run.algo.agent_params(state)
    rc, hard, soft = jax.device_get(evaluate(params, jax.random.split(jax.random.PRNGKey(10_000), setup.seeds)))
    train_s = time.perf_counter() - t0
    log(f"  {env.default_params.reward:6s} B={minibatch:5d}: RC {rc.mean():.3f}, infractions {hard.mean():.3f} "
        f"(compile {compile_s:.0f} s, train+eval {train_s:.0f} s)")
    return {"rc_per_seed": rc.mean(1).tolist(), "infraction_per_seed": hard.mean(1).tolist(),
            "soft_rate_per_seed": soft.mean(1).tolist(), "compile_seconds": compile_s, "train_seconds": train_s}


def study(setup: Setup, log=print) -> dict:
    from longhorizon import algos
    from longhorizon.envs.driving import make_driving

    algo = algos.get("ppo")
    results = {}
    for reward in setup.rewards:
        env = make_driving(reward)
        evaluate = eval_program(env, algo, setup.eval_episodes)
        results[reward] = {str(b): train_one(env, setup, b, evaluate, log) for b in setup.minibatch_sizes}
    return results


def plot(path: Path, setup: Setup, table: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, label in zip(axes, ("rc", "infraction"), ("final route completion", "infraction rate")):
        for reward, rows in table.items():
            ys = np.array([rows[str(b)][key] for b in setup.minibatch_sizes])
            ax.errorbar(setup.minibatch_sizes, ys[:, 0], yerr=ys[:, 1], marker="o", capsize=3, label=reward)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("minibatch size (equal samples)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle("PPO on the driving env: shaped vs CaRL reward")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(out_dir: str, quick: bool = False) -> dict:
    setup, t0 = QUICK if quick else Setup(), time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    print(f"carl: {setup.scale()}")
    raw = study(setup)
    table = {reward: {b: {"rc": mean_se(r["rc_per_seed"]), "infraction": mean_se(r["infraction_per_seed"]),
                          "soft": mean_se(r["soft_rate_per_seed"])} for b, r in rows.items()}
             for reward, rows in raw.items()}
    plot(out / "carl.png", setup, table)
    recorded = C.as_recorded({"setup": dataclasses.asdict(setup), "table": table, "runs": raw})
    claims, arms = judge(recorded, quick)
    command = "longhorizon repro carl" + (" --quick" if quick else "")
    summary = C.summary(paper="CaRL", claims=claims, arms=arms, scale=setup.scale(), quick=quick, command=command,
                        wall_seconds=time.perf_counter() - t0, **recorded)
    lines = ["# CaRL: simple rewards at large minibatches", "",
             "Claim (Jaeger et al. 2025): PPO with a summed shaped reward degrades as the minibatch grows, while "
             "CaRL's simple reward (route-completion gain times soft-infraction factors, hard infractions terminate) "
             "keeps improving.", "",
             f"Scale: {setup.scale()} The paper trains on CARLA/nuPlan with up to hundreds of millions of samples; "
             "here a 150 m S-curve with one parked car and one traffic light (longhorizon.envs.driving).", "",
             "| reward | minibatch | route completion | infraction rate | soft-infraction rate |", "|---|---|---|---|---|"]
    for reward, rows in table.items():
        for b, row in rows.items():
            lines.append(f"| {reward} | {b} | {row['rc'][0]:.3f} +- {row['rc'][1]:.3f} | "
                         f"{row['infraction'][0]:.3f} +- {row['infraction'][1]:.3f} | "
                         f"{row['soft'][0]:.3f} +- {row['soft'][1]:.3f} |")
    lines += ["", "(mean +- SE over seeds.)", "", "![route completion and infractions](carl.png)", "", "## Verdict", "",
              *verdict_lines(summary), "", "Rules: `longhorizon.repro.carl.judge` (module docstring)."] + [
              "", "At equal samples the largest minibatches take few gradient steps; with this small budget a "
              "drop can come from under-training rather than from the reward, so the budget limits the conclusion.",
              "", "Wall time on the shared 2-core machine: --quick about 7 min (compilation, about 1 min per run, "
              "dominates); the full study (8 runs of 655,360 samples per seed x 3 seeds) was not run there.",
              "", "Produced by:", "", "```bash", command, "```"]
    write(out, summary, lines)
    return summary
