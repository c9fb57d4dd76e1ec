"""`longhorizon repro mad-pinn`: MAD-PINN (Tayal, Singh, Kolathaya & Bansal 2025) at CPU scale.

The paper's claims: (1) a physics-informed network trained on the epigraph HJB-VI approximates the
state-constrained value; (2) trained on a reduced (2-agent) system and deployed decentralised, with
reachability-based neighbour selection and receding-horizon execution, it keeps many agents safe
(3) at a lower cost than safety filters such as a CBF-QP, and (4) keeps doing so as the team grows.

Here: part 1 trains the PINN (``control.mad_pinn``) on a reduction small enough for the float64
grid solver (one agent and a parked neighbour: 2-D state + budget) and compares values and safe sets
on the grid. Part 2 trains the same PINN on the 2-agent pair system (6-D state + budget) and deploys
it to N agents on a circle swapping to antipodal goals, against a decentralised CBF-QP with the same
neighbour candidates, and against independent PPO: the project's PPO trained by the fused engine on the
reduced pair system (``control.pair_navigation``: one agent, one scripted neighbour crossing the circle),
parameter-shared and deployed by the same neighbour rule, one training seed per scenario seed.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import numpy as np

from longhorizon import algos
from longhorizon.control import mad_pinn as mp
from longhorizon.control import pair_navigation as pn
from longhorizon.control.epigraph import GridConfig, Navigation, solve_grid
from longhorizon.repro import claims as C
from longhorizon.repro.report import verdict_lines, write_run

SETTINGS = {
    False: {"grid": GridConfig(points=41, z_points=31, dt=0.025), "pinn_steps": 3000, "hidden": (96, 96, 96),
            "batch": 1024, "agents": (2, 8, 16, 32), "seeds": 3, "steps": 480,
            "ppo": {"total_steps": "1500000"}},
    True: {"grid": GridConfig(points=17, z_points=13, dt=0.1), "pinn_steps": 60, "hidden": (16, 16),
           "batch": 128, "agents": (4,), "seeds": 1, "steps": 40,
           "ppo": {"num_envs": "4", "num_steps": "16", "num_minibatches": "1", "update_epochs": "1", "hidden": "16,16",
                   "total_steps": "64"}},
}
REDUCED = Navigation(agents=1, dim=2, speed=1.0, radius=0.4, horizon=1.0, obstacle=(1.0, 0.0))
PAIR = Navigation(agents=2, dim=2, speed=1.0, radius=0.3, horizon=1.0)  # the value's (and the CBF's) safety distance
PPO = "independent PPO"
PAIR_EPISODES = 256  # greedy episodes per seed on the reduced pair system after training
COLLISION = 0.25  # a collision: two centres closer than this (both methods keep a 0.05 margin)
LOOKAHEAD = 0.25  # neighbour-candidate horizon, s (at 0.5, 2-3 of 8 agents stayed locked in pairs and never arrived)
CBF_TURN = 0.6  # rad: the CBF-QP's nominal control turns right near a neighbour (without it, it deadlocks from N = 8)
SUCCESS_FLOOR = 0.8  # safety and cost claims need MAD-PINN's agents to reach their goals in >= 80% of cases
CLAIMS = {
    "pinn": "the PINN matches the grid solution of the reduced problem (safe sets and values)",
    "safety": "decentralised MAD-PINN collides no more often than the CBF-QP at every team size",
    "cost": "MAD-PINN reaches the goals sooner than the CBF-QP at every team size",
    "scaling": "MAD-PINN's collision rate does not grow with the number of agents",
    "marl": "MAD-PINN collides no more often than independent PPO at every team size",
}


def train_ppo(env: pn.PairNavigation, overrides: dict, seeds: int, log=print) -> tuple:
    """PPO (continuous defaults + ``overrides``) on the pair system through the fused engine, seeds vmapped:
    (agent params with a leading seed axis, {seconds, compile_seconds, steps, mean episode return per seed
    in the last chunk})."""
    from longhorizon.runner import run as runner

    spec = runner.RunSpec(algo="ppo", env=env, seeds=seeds, num_chunks=5, quiet=True, config_overrides=overrides,
                          out="/dev/null/unused")
    run = runner.Run(spec)
    state = run.engine.init(spec.seed)
    compile_seconds, begin = run.engine.compile(state), time.perf_counter()
    curve = []
    for chunk in range(run.num_chunks):
        state, metrics = run.engine.run_chunk(state, run.updates_in_chunk(chunk))
        returns = np.asarray(metrics["episode_return_sum"]) / np.maximum(np.asarray(metrics["episodes"]), 1)
        curve.append({"step": run.env_steps_after(chunk + 1), **{f"episode_return_seed{s}": float(r) for s, r in enumerate(returns)}})
        log(f"ppo chunk {chunk + 1}/{run.num_chunks}: episode return {np.round(returns, 2).tolist()}")
    params = run.algo.agent_params(state)
    greedy = lambda prm: (lambda o: run.algo.act(prm, o, jax.random.PRNGKey(0), True))
    collided, arrived = jax.jit(jax.vmap(lambda prm: pn.episode_outcomes(env, greedy(prm), jax.random.PRNGKey(5),
                                                                        PAIR_EPISODES)))(params)
    info = {"seconds": time.perf_counter() - begin, "compile_seconds": compile_seconds,
            "steps": run.env_steps_after(run.num_chunks), "episode_return": returns.tolist(),
            "pair_collision_rate": np.asarray(collided).mean(1).tolist(), "pair_arrival_rate": np.asarray(arrived).mean(1).tolist(),
            "curve": curve}
    return params, info


def deploy(model: mp.PinnValue, ppo_params, agents: int, seeds: int, steps: int) -> dict:
    """The three controllers on the circle swap, seeds vmapped (scenario seed s uses PPO training seed s):
    {method: {metric: [seeds]}}, and seconds per method."""
    config = mp.DeployConfig(agents=agents, steps=steps, lookahead=LOOKAHEAD, cbf_turn=CBF_TURN)
    starts, goals = jax.vmap(lambda k: mp.circle_swap(config, k))(jax.random.split(jax.random.PRNGKey(agents), seeds))
    env, score, ppo = pn.PairNavigation(), mp.pinn_safety_score(model, config), algos.get("ppo")
    greedy = lambda params: (lambda o: ppo.act(params, o, jax.random.PRNGKey(0), True))
    programs = {
        "MAD-PINN": jax.vmap(lambda p, g: mp.rollout(mp.pinn_controller(model, config), p, g, config)),
        "CBF-QP": jax.vmap(lambda p, g: mp.rollout(mp.cbf_controller(PAIR, config), p, g, config)),
        PPO: lambda p, g: jax.vmap(lambda prm, p, g: mp.rollout(pn.policy_controller(greedy(prm), score, env, config),
                                                               p, g, config))(ppo_params, p, g),
    }
    results = {}
    for method, program in programs.items():
        begin = time.perf_counter()
        paths, controls = jax.jit(program)(starts, goals)
        rows = [mp.episode_metrics(paths[s], controls[s], goals[s], COLLISION, config) for s in range(seeds)]
        results[method] = {key: [row[key] for row in rows] for key in rows[0]}
        results[method]["seconds"] = time.perf_counter() - begin
    return results


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers: the PINN against the grid as an agreement within 0.1 (1 - safe-set
    agreement, value MAE / value range); the deployment claims per seed, Student-t 95% intervals over seeds (>= 3)
    at every team size. A safety or cost claim needs agents that do the task (MAD-PINN's success, arrived without
    a collision, >= ``SUCCESS_FLOOR`` = 0.8 at every N); the safety comparison also a CBF-QP that does (a
    deadlocked CBF is safe for free), and the MARL comparison a PPO that does its own (pair arrival rate >= 0.1),
    else ``no signal``. The safety claims' evidence also carries each method's collision
    rate among the agents that arrived (success-conditioned safety)."""
    grid, dep = L["grid_check"], L["deployment"]
    sizes = sorted(dep, key=int)
    floors = {n: C.task_floor(f"MAD-PINN, N={n}", dep[n]["MAD-PINN"]["success"], SUCCESS_FLOOR) for n in sizes}
    cbf_floors = {n: C.task_floor(f"CBF-QP, N={n}", dep[n]["CBF-QP"]["success"], SUCCESS_FLOOR) for n in sizes}
    ppo = L["ppo_training"]
    ppo_does = C.task_floor(PPO, ppo["pair_arrival_rate"], C.TASK_FLOOR)
    seeds = len(dep[sizes[0]]["MAD-PINN"]["success"])
    per_n = lambda other, key, margin=0.0: C.combine({f"N={n}": C.difference(  # noqa: E731
        dep[n]["MAD-PINN"][key], dep[n][other][key], margin=margin, higher_is_better=False) for n in sizes}, "team size")
    collisions = np.array([dep[n]["MAD-PINN"]["collision_rate"] for n in sizes]).T
    gates = list(floors.values())
    conditioned = {f"N={n}": {m: _nanmean(r.get("collision_given_arrival")) for m, r in dep[n].items()
                              if isinstance(r, dict) and "collision_given_arrival" in r} for n in sizes}
    with_conditioned = lambda ruling: dataclasses.replace(  # noqa: E731
        ruling, evidence={**ruling.evidence, "collision_given_arrival": conditioned})
    claims = [
        C.judge(CLAIMS["pinn"], C.agreement([1.0 - grid["safe_set_agreement"], grid["value_mae"] / grid["value_range"]],
                                            [0.0, 0.0], tolerance=0.1), quick=quick),
        C.judge(CLAIMS["safety"], with_conditioned(per_n("CBF-QP", "collision_rate", margin=-0.05)),
                [*gates, *cbf_floors.values()], quick=quick),
        C.judge(CLAIMS["cost"], per_n("CBF-QP", "time_to_goal"), gates, quick=quick),
        C.judge(CLAIMS["scaling"] + " (slope on log2 N below 0.05)",
                C.trend(np.log2([int(n) for n in sizes]), collisions, direction="decreasing", margin=0.05) if len(sizes) > 1
                else C.undecidable("one team size: no slope"), gates, quick=quick),
        C.judge(CLAIMS["marl"], with_conditioned(per_n(PPO, "collision_rate")), [*gates, ppo_does], quick=quick),
    ]
    arms = {f"MAD-PINN, N={n}": C.arm(None, seeds, floors[n]) for n in sizes}
    arms.update({f"CBF-QP, N={n}": C.arm(None, seeds, cbf_floors[n]) for n in sizes})
    arms[PPO] = C.arm(ppo["steps"], len(ppo["episode_return"]), ppo_does)
    return claims, arms


def _nanmean(values) -> float:
    """The mean of the finite values (a seed where no agent arrived has no success-conditioned rate); NaN if none."""
    v = np.asarray([np.nan if x is None else x for x in (values or [])], np.float64)
    return float(np.mean(v[np.isfinite(v)])) if np.isfinite(v).any() else float("nan")


def plot(path: Path, check: dict, grid_value, table: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    extent = [grid_value.axes[1][0], grid_value.axes[1][-1], grid_value.axes[0][0], grid_value.axes[0][-1]]
    top = np.nanmax(np.where(np.isfinite(check["budget_exact"]), check["budget_exact"], np.nan))
    for ax, key, title in ((axes[0], "budget_exact", "grid DP: C*(x)"), (axes[1], "budget_learnt", "PINN: C*(x)")):
        image = ax.imshow(np.where(np.isfinite(check[key]), check[key], np.nan), origin="lower", extent=extent,
                          vmin=0, vmax=top, aspect="equal")
        ax.set_title(title + " (white: no safe budget)", fontsize=9)
        ax.set_xlabel("e_y"), ax.set_ylabel("e_x")
    fig.colorbar(image, ax=axes[1], fraction=0.046)
    sizes = sorted(table)
    for ax, metric, label in ((axes[2], "collision_rate", "collision rate"), (axes[3], "time_to_goal", "time to goal (s)")):
        for method in ("MAD-PINN", "CBF-QP", PPO):
            values = np.array([table[n][method][metric] for n in sizes])
            ax.errorbar(sizes, values.mean(1), yerr=values.std(1), marker="o", capsize=3, label=method)
        ax.set_xlabel("agents"), ax.set_ylabel(label), ax.set_xticks(sizes)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(out_dir: str, quick: bool = False) -> dict:
    out, setting, begin = Path(out_dir), SETTINGS[quick], time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    grid = setting["grid"]
    grid_value = solve_grid(REDUCED, grid)
    grid_seconds = time.perf_counter() - begin
    base = mp.PinnConfig(hidden=setting["hidden"], steps=setting["pinn_steps"], batch=setting["batch"])
    reduced_model = mp.train_pinn(REDUCED, dataclasses.replace(base, box=(2.5, 2.5)))
    check = mp.grid_check(reduced_model, grid_value)
    pair_model = mp.train_pinn(PAIR, dataclasses.replace(base, box=(1.5,) * 4 + (1.25,) * 2))
    check.update(mp.bound_check(pair_model))
    train_seconds = time.perf_counter() - begin - grid_seconds
    ppo_params, ppo_info = train_ppo(pn.PairNavigation(), setting["ppo"], setting["seeds"])
    every = max(1, len(pair_model.losses) // 100)
    curves = {f"PINN {name} (mean squared HJB-VI residual)": [{"step": i + 1, "residual_sq": float(model.losses[i: i + every].mean())}
                                                          for i in range(0, len(model.losses), every)]
              for name, model in (("reduced", reduced_model), ("pair", pair_model))}
    curves[PPO] = ppo_info.pop("curve")
    table = {n: deploy(pair_model, ppo_params, n, setting["seeds"], setting["steps"]) for n in setting["agents"]}
    plot(out / "mad_pinn.png", check, grid_value, table)
    recorded = {"grid_check": {k: v for k, v in check.items() if not k.startswith("budget_") or k == "budget_mae"},
               "deployment": {str(n): {m: {k: (float(np.mean(v)) if k == "seconds" else [float(x) for x in v])
                                           for k, v in r.items()} for m, r in row.items()} for n, row in table.items()},
               "ppo_training": ppo_info,
               "residual_final": {"reduced": float(reduced_model.losses[-50:].mean()), "pair": float(pair_model.losses[-50:].mean())},
               "seconds": {"grid": grid_seconds, "pinn_training": train_seconds,
                           "ppo_training": ppo_info["seconds"] + ppo_info["compile_seconds"], "total": time.perf_counter() - begin}}
    recorded = C.as_recorded(recorded)
    claims, arms = judge(recorded, quick)
    summary = C.summary(paper="MAD-PINN", claims=claims, arms=arms, quick=quick, wall_seconds=recorded["seconds"]["total"],
                        scale=f"team sizes {', '.join(map(str, setting['agents']))}; {setting['seeds']} deployment seeds; "
                              "PINN and grid on the reduced 2-agent problem",
                        command="longhorizon repro mad-pinn" + (" --quick" if quick else ""), **recorded)
    write_run(out, summary, [readme(summary, setting, table, quick)], curves)
    return summary


def readme(summary: dict, setting: dict, table: dict, quick: bool) -> str:
    g, check = setting["grid"], summary["grid_check"]
    rows = ["| agents | method | collision rate | success | arrival | collision rate among arrived | time to goal (s) | effort | min distance |",
            "|---|---|---|---|---|---|---|---|---|"]
    for n, row in table.items():
        for method, r in row.items():
            cell = lambda k: f"{np.mean(r[k]):.3f} ± {np.std(r[k]):.3f}"  # noqa: E731
            rows.append(f"| {n} | {method} | {cell('collision_rate')} | {cell('success')} | {cell('arrival')} | "
                        f"{_nanmean(r['collision_given_arrival']):.3f} | {cell('time_to_goal')} | "
                        f"{cell('effort')} | {np.min(r['min_distance']):.3f} |")
    command = "longhorizon repro mad-pinn" + (" --quick" if quick else "")
    claims = "\n".join(verdict_lines(summary))
    return f"""# MAD-PINN: a PINN epigraph value deployed decentralised (`{command}`)

Claims (Tayal, Singh, Kolathaya & Bansal 2025, "MAD-PINN"): a physics-informed network on the epigraph HJB-VI
approximates the state-constrained value; trained on a 2-agent system and deployed decentralised with
reachability-based neighbour selection and receding-horizon execution it keeps many agents safe at lower cost
than a CBF-QP safety filter, also as the team grows; the issue adds a MARL baseline (independent PPO).

Scale and differences from the paper: single-integrator agents in the plane, |u| <= 1, running cost
l = sum_i |e_i| (distance to goal), safety distance {PAIR.radius} in the value and the CBF (a collision is counted
below {COLLISION}), value horizon T = {PAIR.horizon} s re-evaluated every control step (dt = 0.05 s, receding horizon);
goals farther than 1.5 are seen at 1.5 in their direction (the pair value is trained on |e_i| <= 1.5 per axis,
|d| <= 1.25 per axis). PINN: tanh MLP {setting['hidden']}, {setting['pinn_steps']} Adam steps of
{setting['batch']} points, time curriculum over the first half, DeepReach's base max(phi - z, g) + (T - t)/T N,
budget fed relative to the unconstrained cost. **The deployed value is floored at its known lower bound**
max(C0 - z, g) (C0: the unconstrained cost; training fits the raw network): the raw network falls below that bound
(at {check['bound_violation_share']:.0%} of sampled pair states by more than 0.05), where budgets below the unconstrained
cost look feasible; without the floor the controller's z* sank to the bottom of its budget grid and the agents reached
their goals in 0-2% of cases (the previous run of this command). Neighbour candidates: reachable within
{LOOKAHEAD} s (2 x speed x lookahead + radius); episodes of {setting['steps']} steps ({setting['steps'] * 0.05:.0f} s).
Each agent uses ONE neighbour (the paper also uses larger reduced systems), the reachable candidate with the largest
learnt pair value at a generous budget. Grid check: the same PINN code on one agent with a neighbour parked at
(1, 0) (radius {REDUCED.radius}), float64 DP on {g.points}x{g.points} states x {g.z_points} budgets, dt = {g.dt}, 12 headings
+ standing still. Scenario: N agents on a circle of radius 2 swap to the antipodes (start jitter 0.02 = the seed),
{setting['steps']} steps of 0.05 s, {setting['seeds']} seed(s); collision = two centres closer than {COLLISION};
success = reached the goal (within 0.05) and never collided; arrival = reached the goal.
The CBF-QP baseline (alpha = 4, half responsibility per pair, speed octagon) sees the same candidate neighbours;
its nominal control (straight to the goal) turns {CBF_TURN} rad to the right while a neighbour is a candidate
(deadlock breaking, ours: without it the CBF-QP deadlocked at the centre from 8 agents on and never arrived).
The MARL baseline, independent PPO: the project's PPO (continuous defaults: 16 envs x 128 steps, 10 epochs, normalised
observations and rewards; {setting['ppo'].get('total_steps')} steps{' and ' + ', '.join(f'{k} {v}' for k, v in setting['ppo'].items() if k != 'total_steps') if len(setting['ppo']) > 1 else ''})
trained by the fused engine on the reduced pair system (`longhorizon.control.pair_navigation`: one agent, one scripted
neighbour driving straight to its goal on the same circle, angles random; observation = the PINN's pair features;
reward = -|e| dt - 10 [collision below {PAIR.radius}]; ends on collision, arrival or 160 steps), {setting['seeds']} seed(s).
Parameter-shared independent learners: every agent runs the same greedy policy on its own pair observation with the
neighbour chosen by the same rule (the PINN's safety value ranks the candidates); it is not trained with N agents.
Scenario seed s uses training seed s. Training: {summary['ppo_training']['steps']:,} steps per seed in
{summary['ppo_training']['seconds']:.0f} s (+ {summary['ppo_training']['compile_seconds']:.0f} s compile), last-chunk
episode return per seed {', '.join(f'{r:.2f}' for r in summary['ppo_training']['episode_return'])}. On its own reduced
system ({PAIR_EPISODES} greedy episodes per seed) the policy collides in
{', '.join(f'{r:.2f}' for r in summary['ppo_training']['pair_collision_rate'])} of the episodes and arrives in
{', '.join(f'{r:.2f}' for r in summary['ppo_training']['pair_arrival_rate'])} (heading straight to the goal collides in
every episode: both agents reach the centre together).

## PINN against the grid solution (reduced problem)

| safe-set agreement | value MAE | value range | budget C* MAE | grid nodes compared | infeasible states found | final mean residual^2 (reduced, pair) |
|---|---|---|---|---|---|---|
| {check['safe_set_agreement']:.3f} | {check['value_mae']:.3f} | {check['value_range']:.3f} | {check['budget_mae']:.3f} | {check['nodes']} | {check['infeasible_found']:.2f} of {check['infeasible_states']} | {summary['residual_final']['reduced']:.3g}, {summary['residual_final']['pair']:.3g} |

Agreement and value error are of the deployed (floored) value; the raw network's: agreement
{check['raw_safe_set_agreement']:.3f}, value MAE {check['raw_value_mae']:.3f}. Both are over the grid nodes whose budget lies in the PINN's sampled range (z - C0 in
[-0.5, 2]); "infeasible states found": of the states with no safe budget on the grid's z axis, the share where the
PINN has none either. The pair value (6-D state, no grid solution) against its lower bound
V >= max(C0 - z, g): below it by more than 0.05 at {check['bound_violation_share']:.1%} of 4096 sampled points
(t = 0), by {check['bound_violation_mean']:.3f} on average.

## Deployment (mean ± std over seeds)

{chr(10).join(rows)}

![MAD-PINN](mad_pinn.png)

Left: the constrained optimal cost C*(x) = min{{z : V(0, x, z) <= 0}} of the reduced problem from the grid and from
the PINN. Right: collision rate and time to goal (unreached agents count the episode length) against team size, for
MAD-PINN, the CBF-QP and independent PPO.

## Verdict

{claims}

Rules (`longhorizon.repro.mad_pinn.judge`): the PINN claim is an agreement within 0.1 (1 - safe-set agreement, value
MAE / value range); the deployment claims compare per-seed numbers at every N with Student-t 95% intervals over
seeds (>= 3): safety within 0.05 of the CBF-QP's collision rate, cost a lower time to goal, scaling a slope of the
collision rate on log2 N below 0.05, MARL a collision rate no higher than independent PPO's. A safety or cost
claim needs MAD-PINN's agents to do the task: success (arrived without a collision) >= {SUCCESS_FLOOR} at every N,
else no signal (an agent that does not move is safe); the MARL claim also needs PPO to arrive in >= 0.1 of its
own pair episodes. The "collision rate among arrived" column is the success-conditioned safety (also in the
safety claims' evidence). Wall time {summary['seconds']['total']:.0f} s (grid {summary['seconds']['grid']:.0f} s, PINN training
{summary['seconds']['pinn_training']:.0f} s, PPO training {summary['seconds']['ppo_training']:.0f} s).

Command: `{command}`
"""
