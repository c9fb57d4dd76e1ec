"""One-off migration: re-judge the summaries written before the claims schema, from their recorded numbers.

Nothing is re-run. For each folder in :data:`CONVERTERS`, the old ``summary.json`` (kept whole under
``legacy``) is read and every claim gets its verdict from the rules of :mod:`longhorizon.repro.claims`
applied to what was recorded: per-seed numbers where they were kept; a claim recorded from fewer than 3
seeds (or without its per-seed numbers) is ``inconclusive``; a claim whose arm did not move, whose
baseline is no better than its start, or whose agents do not do the task is ``no signal``, naming what
did not move. Where a rule needs a threshold that the old run did not state, the one used here is named
in the claim's rule (:data:`TASK_FLOOR`). Run from the repository root: ``python tools/rejudge.py [FOLDER ...]``. It lives outside the package:
it is the record of how the verdicts of 2026-12-03 were derived, deleted folder by folder as each
reproduction is re-run under the claims module.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C

DATE = "2026-12-03"
REJUDGED = f"{DATE} from recorded numbers; not re-run"
NOTE = f"Verdicts re-judged under the claims module from the recorded numbers on {DATE}; not re-run."
COMMIT = "unknown (run before the claims schema)"
TASK_FLOOR = 0.1  # an agent that succeeds in fewer than 10% of held-out tasks does not do the task
RESULTS = Path("docs") / "results"


def _arm(steps, seeds, *signals) -> dict:
    signal = signals[0] if len(signals) == 1 else {"tests": list(signals), "moved": all(s["moved"] for s in signals)}
    return {"steps": None if steps is None else int(steps), "seeds": int(seeds), "signal": signal}


def _not_recorded(arm: str, why: str) -> dict:
    return {"arm": arm, "test": "not applied", "moved": True, "note": why}


def inconclusive(reason: str, **evidence) -> C.Claim:
    """A claim that no rule can decide from what was recorded (say, no per-seed numbers): inconclusive, with why."""
    return C.Claim("", C.INCONCLUSIVE, "not decidable from the recorded numbers", {"reason": reason, **evidence})


def _seed_rule(values_a, values_b, seeds: int, what: str) -> C.Claim:
    return inconclusive(f"{seeds} seed(s){'' if seeds >= 3 else '; holds or contradicted need at least 3'}: {what}",
                          a=values_a, b=values_b, seeds=seeds)


def _agent_scale(setup: dict) -> str:
    return (f"tiny-random agent warm-started on {setup['demos']} scripted demos; {setup['steps']} RL steps x "
            f"{setup['prompts_per_step']} prompts x {setup['num_generations']} generations; {setup['seeds']} seed(s); "
            f"{setup['eval_tasks']} held-out tasks")


def _per_seed_curves(points) -> list[dict]:
    return [{"eval": i, "tokens": t, "success": s} for i, (t, s) in enumerate(points)]


# ----------------------------------------------------------------------------------------------- agents
def router_r1(L: dict, path: Path) -> dict:
    setup, warm = L["setup"], L["warm_start"]
    weights = [f"{w:g}" for w in L["weights"]]
    acc = {w: L["arms"][w]["accuracy"][0] for w in weights}
    cost = {w: L["arms"][w]["cost"][0] for w in weights}
    floors = [C.task_floor(f"w={w}", acc[w], TASK_FLOOR) for w in weights]
    learned = [C.arm_signal(f"w={w}", eval_start=warm["accuracy"][0], eval_end=acc[w], what="held-out accuracy")
               for w in weights]
    lo, hi = weights[0], weights[-1]
    claims = [
        C.judge("raising the cost weight lowers the trained router's cost",
                _seed_rule([cost[hi]], [cost[lo]], setup["seeds"], f"cost at w={hi} vs w={lo}"), floors),
        C.judge("raising the cost weight lowers its accuracy",
                _seed_rule([acc[lo]], [acc[hi]], setup["seeds"], f"accuracy at w={lo} vs w={hi}"), learned),
    ]
    arms = {f"w={w}": _arm(setup["steps"], setup["seeds"], f, s) for w, f, s in zip(weights, floors, learned)}
    curves = {f"w={w}": [{"step": i + 1, "cost": c} for i, c in enumerate(L["train_cost_curves"][w])] for w in weights}
    return dict(paper="Router-R1", claims=claims, arms=arms, scale=_agent_scale(setup), curves=curves,
                command="longhorizon repro router-r1")


def asearcher(L: dict, path: Path) -> dict:
    setup = L["setup"]
    raised = "raised (2k+2)"
    start = float(np.mean(list(L["warm_start_accuracy"][raised].values())))
    end = float(np.mean(list(L["accuracy"][raised].values())))
    rl = C.arm_signal("RL (raised budget)", eval_start=start, eval_end=end, what="held-out accuracy")
    floor = C.task_floor("RL (raised budget)", end, TASK_FLOOR)
    claims = [
        C.judge("agents use more turns and succeed less as questions need more hops",
                _seed_rule(L["turns"][raised], L["accuracy"][raised], setup["seeds"], "per-seed turns and accuracy by hops not recorded"),
                [rl, floor]),
        C.judge("a larger turn budget never lowers accuracy and raises it on the hardest questions",
                _seed_rule(L["accuracy"][raised], L["accuracy"]["tight (k+1)"], setup["seeds"], "raised vs tight budget"),
                [rl, floor]),
        C.judge("RL with a generous budget raises accuracy over the warm start",
                _seed_rule([end], [start], setup["seeds"], "per-seed accuracies not recorded; RL changed the mean by "
                           f"{end - start:+.3f}")),
    ]
    return dict(paper="ASearcher", claims=claims, arms={"RL (raised budget)": _arm(setup["steps"], setup["seeds"], rl, floor)},
                scale=_agent_scale(setup), command="longhorizon repro asearcher")


def agents_a1(L: dict, path: Path) -> dict:
    setup = L["setup"]
    teachers = C.task_floor("teachers", list(L["teacher_success"].values()), TASK_FLOOR)
    signals = {a: C.arm_signal(a, eval_start=L["warm_start_mean"], eval_end=m, what="held-out success")
               for a, m in L["success_mean"].items()}
    routed, *others = list(L["success_mean"])
    claims = [C.judge("routed multi-teacher distillation beats a single teacher and no distillation",
                      _seed_rule([L["success_mean"][routed]], [max(L["success_mean"][o] for o in others)], setup["seeds"],
                                 "routed vs the better of the other arms"), [teachers, *signals.values()])]
    arms = {a: _arm(setup["steps"], setup["seeds"], s) for a, s in signals.items()}
    return dict(paper="Agents-A1", claims=claims, arms=arms, scale=_agent_scale(setup), command="longhorizon repro agents-a1")


def canopy(L: dict, path: Path) -> dict:
    setup = L["setup"]
    betas = [f"{b:g}" for b in L["betas"]]
    signals = {b: C.arm_signal(f"beta={b}", [L["training_curves"][b]["reward"]], eval_start=L["warm_start_success"],
                               eval_end=L["final_success"][b], what="training reward") for b in betas}
    free, anchored = betas[0], betas[-1]
    claims = [
        C.judge("the KL anchor keeps the policy closer to its start (lower KL to pi_0, entropy preserved)",
                _seed_rule([L["kl_to_start"][anchored][0]], [L["kl_to_start"][free][0]], setup["seeds"],
                           f"KL to pi_0 at beta={anchored} vs beta={free}"), [signals[free]]),
        C.judge("the KL anchor loses no held-out success",
                _seed_rule(L["final_success"][anchored], L["final_success"][free], setup["seeds"],
                           f"success at beta={anchored} vs beta={free}"), list(signals.values())),
    ]
    arms = {f"beta={b}": _arm(setup["steps"], setup["seeds"], signals[b]) for b in betas}
    curves = {f"beta={b}": [{"step": i + 1, **{k: v[i] for k, v in L["training_curves"][b].items()}}
                            for i in range(len(L["training_curves"][b]["reward"]))] for b in betas}
    return dict(paper="CANOPY", claims=claims, arms=arms, scale=_agent_scale(setup), curves=curves,
                command="longhorizon repro canopy")


def treeopsd(L: dict, path: Path) -> dict:
    setup = L["setup"]
    signals = {a: C.arm_signal(a, [[s for _, s in run] for run in runs], eval_start=L["warm_start_success"],
                               eval_end=L["final_success"][a], what="held-out success over training")
               for a, runs in L["curves"].items()}
    tree, grpo = "TreeOPSD (tree credit + bounded teacher)", "GRPO (trajectory credit)"
    claims = [C.judge("tree credit with a bounded teacher beats GRPO at equal sampled tokens",
                      _seed_rule(L["success_at_equal_tokens"][tree], L["success_at_equal_tokens"][grpo], setup["seeds"],
                                 f"success at {L['equal_tokens']:.0f} tokens"), list(signals.values()))]
    arms = {a: _arm(setup["steps"], setup["seeds"], s) for a, s in signals.items()}
    curves = {a: _per_seed_curves(runs[0]) for a, runs in L["curves"].items()}
    return dict(paper="TreeOPSD", claims=claims, arms=arms, scale=_agent_scale(setup), curves=curves,
                command="longhorizon repro treeopsd")


def iterresearch(L: dict, path: Path) -> dict:
    setup = L["setup"]
    warm = {"full history": L["warm_start_success"]["full"], "workspace": L["warm_start_success"]["workspace"],
            "workspace + EAPO (gamma 0.9)": L["warm_start_success"]["workspace"]}
    signals = {a: C.arm_signal(a, eval_start=warm[a], eval_end=v, what="held-out success")
               for a, v in L["final_success"].items()}
    ctx = L["context_tokens"]
    claims = [
        C.judge("the workspace keeps the context bounded while the full history grows",
                inconclusive("one measurement per number of items (no seeds), so no slope interval; recorded growth "
                               f"from 2 to 16 items: workspace x{ctx['workspace']['16'] / ctx['workspace']['2']:.2f}, "
                               f"full history x{ctx['full']['16'] / ctx['full']['2']:.2f}", context_tokens=ctx)),
        C.judge("the workspace agent learns no worse than the full-history agent",
                _seed_rule(L["final_success"]["workspace"], L["final_success"]["full history"], setup["seeds"],
                           "workspace vs full history"), [signals["workspace"], signals["full history"]]),
        C.judge("EAPO keeps success and shortens episodes",
                _seed_rule(L["final_success"]["workspace + EAPO (gamma 0.9)"], L["final_success"]["workspace"],
                           setup["seeds"], "EAPO vs workspace"), [signals["workspace + EAPO (gamma 0.9)"], signals["workspace"]]),
    ]
    arms = {a: _arm(setup["steps"], setup["seeds"], s) for a, s in signals.items()}
    return dict(paper="IterResearch", claims=claims, arms=arms, scale=_agent_scale(setup), command="longhorizon repro iterresearch")


def trpo_agent(L: dict, path: Path) -> dict:
    setup = L["setup"]
    signals = {a: C.arm_signal(a, eval_start=L["warm_start_success"], eval_end=v, what="held-out success")
               for a, v in L["final_success"].items()}
    traj, turn = list(L["final_success"])
    claims = [C.judge("trajectory-level advantages train at least as well as per-turn credit",
                      _seed_rule(L["final_success"][traj], L["final_success"][turn], setup["seeds"], "trajectory vs per-turn"),
                      list(signals.values()))]
    arms = {a: _arm(setup["steps"], setup["seeds"], s) for a, s in signals.items()}
    return dict(paper="Mobile-Agent-v3", claims=claims, arms=arms, scale=_agent_scale(setup), command="longhorizon repro trpo-agent")


def fees(L: dict, path: Path) -> dict:
    setup = L["setup"]
    signals = {a: C.arm_signal(a, [run[1] for run in runs], eval_start=L["warm_start_success"][a],
                               eval_end=L["final_success_own_mode"][a], what="held-out success over training")
               for a, runs in L["curves"].items()}
    claims = [C.judge("structured feedback speeds up learning at equal tokens",
                      _seed_rule(L["success_at_equal_tokens"]["structured"], L["success_at_equal_tokens"]["plain"],
                                 setup["seeds"], f"success at {L['equal_tokens']} tokens"), list(signals.values()))]
    arms = {a: _arm(setup["steps"], setup["seeds"], s) for a, s in signals.items()}
    curves = {a: _per_seed_curves(zip(*runs[0])) for a, runs in L["curves"].items()}
    return dict(paper="FEEs", claims=claims, arms=arms, scale=_agent_scale(setup), curves=curves, command="longhorizon repro fees")


# ----------------------------------------------------------------------------------------------- helpers
def combine(parts: dict[str, C.Claim], what: str, unanimous: bool = False) -> C.Claim:
    """A claim "at every X": holds if every part holds, contradicted if any part is contradicted (``unanimous``:
    only if every part is, the rule a run stated before it ran), else inconclusive."""
    verdicts = [p.verdict for p in parts.values()]
    against = all(v == C.CONTRADICTED for v in verdicts) if unanimous else C.CONTRADICTED in verdicts
    verdict = C.CONTRADICTED if against else C.HOLDS if all(v == C.HOLDS for v in verdicts) else C.INCONCLUSIVE
    seeds = [p.evidence["seeds"] for p in parts.values() if "seeds" in p.evidence]
    rule = (f"at every {what}: holds if every part holds, contradicted if {'every' if unanimous else 'any'} part is; "
            f"each part: {next(iter(parts.values())).rule}")
    return C.Claim("", verdict, rule, {"reason": "; ".join(f"{k}: {p.verdict}" for k, p in parts.items()),
                                       "parts": {k: {"verdict": p.verdict, **p.evidence} for k, p in parts.items()},
                                       **({"seeds": min(seeds)} if seeds else {})})


def _first_finite(rows) -> list[float]:
    """The first finite value of each seed's column in ``rows [points, seeds]`` (None = no finished episode)."""
    a = np.array([[np.nan if v is None else v for v in r] for r in rows], np.float64)
    return [float(col[np.isfinite(col)][0]) for col in a.T]


# ----------------------------------------------------------------------------------------------- language models
def h1(L: dict, path: Path) -> dict:
    runs, config = json.loads((path / "runs.json").read_text()), json.loads((path / "config.json").read_text())["setup"]
    hs = config["eval_horizons"]
    cols = lambda pred: [i for i, h in enumerate(hs) if pred(h)]  # noqa: E731
    acc = {a: np.array([[r["by_horizon"][str(h)] for h in hs] for r in rs]) for a, rs in runs["results"].items()}
    long = {a: m[:, cols(lambda h: h >= 4)].mean(1) for a, m in acc.items()}
    beyond = {a: m[:, cols(lambda h: h > max(config["train_horizons"]))].mean(1) for a, m in acc.items()}
    signals = {}
    for arm, curves in runs["curves"].items():
        equal = np.mean([c["groups_all_equal"] / c["groups"] for seed in curves for c in seed])
        signals[arm] = [C.group_signal(arm, 1.0 - equal),
                        C.arm_signal(arm, eval_start=long["base"], eval_end=long[arm], what="long-chain accuracy (h >= 4)")]
    rivals = [a for a in runs["curves"] if a != "curriculum"]
    best = max(rivals, key=lambda a: long[a].mean())
    cur = signals["curriculum"]
    claims = [
        C.judge("the curriculum is best on long chains (mean accuracy over h >= 4)",
                C.difference(long["curriculum"], long[best]), [*cur, *signals[best]]),
        C.judge("the curriculum generalises beyond the longest training horizon (h = 6..8 above the base)",
                C.difference(beyond["curriculum"], beyond["base"]), cur),
        C.judge("h = 5 alone learns little because its rewards are rare (the curriculum gains more on h >= 4)",
                C.difference(long["curriculum"], long["only_h5"]), cur),
    ]
    steps = config["rl_steps"]
    arms = {a: _arm(steps, len(runs["results"][a]), *signals[a]) for a in runs["curves"]}
    curves = {a: [dict(c, seed=i) for i, seed in enumerate(cs) for c in seed] for a, cs in runs["curves"].items()}
    scale = (f"character model d={config['d_model']} x {config['n_layers']} layers; {steps} RL steps x "
             f"{config['prompts_per_step']} prompts x {config['num_generations']} generations per arm; {config['seeds']} seeds; "
             f"{config['eval_per_horizon']} held-out chains per horizon")
    return dict(paper="h1", claims=claims, arms=arms, scale=scale, curves=curves, command=f"longhorizon repro {path.name}")


def es_finetune(L: dict, path: Path) -> dict:
    setup, train = L["setup"], [str(h) for h in L["setup"]["train_horizons"]]
    per = {a: np.array([[row[h] for h in train] for row in rows]).mean(1) for a, rows in L["accuracy_by_horizon_per_seed"].items()}
    base = float(np.mean([L["accuracy_by_horizon"]["base"][h] for h in train]))
    es = C.arm_signal("ES", eval_start=base, eval_end=per["es"], what="accuracy on the training horizons")
    grpo = C.baseline_signal("GRPO", per["grpo"], base, what="the base it started from")
    mem = L["memory_bytes"]
    claims = [
        C.judge("ES raises the base's accuracy on the training horizons", C.difference(per["es"], base)),
        C.judge("ES needs less memory than GRPO's update step",
                C.agreement(mem["es_update"], mem["grpo_update"], tolerance=0.0, side="below")),
        C.judge("at equal rollouts ES is at least as accurate as GRPO (margin -0.02, the run's stated bar)",
                C.difference(per["es"], per["grpo"], margin=-0.02), [es, grpo]),
    ]
    arms = {"ES": _arm(setup["steps"], L["seeds"], es), "GRPO": _arm(setup["steps"], L["seeds"], grpo)}
    scale = (f"h1's character base; {setup['steps']} steps, {L['rollouts_per_arm']} rollouts per arm; {L['seeds']} seeds; "
             f"{setup['eval_per_horizon']} held-out chains per horizon")
    return dict(paper="ES fine-tuning", claims=claims, arms=arms, scale=scale, command="longhorizon repro es-finetune")


# ----------------------------------------------------------------------------------------------- control
# Uniform-random policy returns, measured for the re-judging (gymnax 1.0.1, 256 episodes, PRNGKey(0)):
# Pendulum-v1 -1207.4 (sd 277), MountainCarContinuous-v0 -32.8 (sd 6.9).
RANDOM_RETURN = {"Pendulum-v1": -1207.4, "MountainCarContinuous-v0": -32.8}


def mbdpo(L: dict, path: Path) -> dict:
    setup, claims, arms = L["setup"], [], {}
    for task, runs in L["runs"].items():
        signals = {}
        for arm, run in runs.items():
            finals = run["final"]
            if all(v is not None for r in run["returns"] for v in r):
                signals[arm] = C.arm_signal(f"{arm} ({task})", np.array(run["returns"]).T, eval_start=_first_finite(run["returns"]),
                                            eval_end=finals, what="evaluation return")
            else:
                signals[arm] = C.arm_signal(f"{arm} ({task})", eval_start=_first_finite(run["returns"]), eval_end=finals,
                                            what="evaluation return")
            arms[f"{arm} ({task})"] = _arm(setup["total_steps"], setup["seeds"], signals[arm])
        base = {b: C.baseline_signal(f"{b} ({task})", runs[b]["final"], RANDOM_RETURN[task], what="a uniform-random policy")
                for b in ("mppi", "ppo")}
        for b in ("mppi", "ppo"):
            arms[f"{b} ({task})"]["signal"] = {"tests": [signals[b], base[b]], "moved": signals[b]["moved"] and base[b]["moved"]}
        mb = f"mbdpo-{setup['width']}"
        claims.append(C.judge(f"MBDPO's flow policy beats MPPI planning on the same world model at equal environment steps ({task})",
                              C.difference(runs[mb]["final"], runs["mppi"]["final"], paired=False),
                              [signals[mb], signals["mppi"], base["mppi"]]))
        claims.append(C.judge(f"MBDPO beats PPO at equal environment steps ({task})",
                              C.difference(runs[mb]["final"], runs["ppo"]["final"], paired=False),
                              [signals[mb], signals["ppo"], base["ppo"]]))
        widths = [w for w in setup["widths"] if f"mbdpo-{w}" in runs]
        if len(widths) > 2:
            claims.append(C.judge(f"MBDPO's return rises with policy size ({task})",
                                  C.trend(np.log2(widths), np.array([runs[f"mbdpo-{w}"]["final"] for w in widths]).T),
                                  [signals[f"mbdpo-{w}"] for w in widths]))
    curves = {f"{arm} ({task})": [{"step": st, "seed": i, "eval_return": r[i]} for st, r in zip(run["steps"], run["returns"])
                                  for i in range(len(r))] for task, runs in L["runs"].items() for arm, run in runs.items()}
    scale = f"{setup['total_steps']:,} environment steps per seed, {setup['seeds']} seeds, {setup['eval_episodes']} evaluation episodes"
    return dict(paper="MBDPO", claims=claims, arms=arms, scale=scale, curves=curves, command="longhorizon repro mbdpo")


def carl(L: dict, path: Path) -> dict:
    setup = L["setup"]
    sizes = [str(b) for b in setup["minibatch_sizes"]]
    x = np.log2(setup["minibatch_sizes"])
    rc = {r: np.array([L["runs"][r][b]["rc_per_seed"] for b in sizes]).T for r in setup["rewards"]}
    arms = {f"{r}, B={b}": _arm(setup["updates"], setup["seeds"], _not_recorded(
        f"{r}, B={b}", "the run kept final route completion only (no training curve, no initial evaluation)"))
        for r in setup["rewards"] for b in sizes}
    claims = [
        C.judge("PPO on the summed shaped reward degrades as the minibatch grows (equal samples)",
                C.trend(x, rc["shaped"], direction="decreasing")),
        C.judge("PPO on CaRL's route-completion reward does not degrade as the minibatch grows (equal samples): "
                "route completion against log2 minibatch, slope not below 0",
                C.trend(x, rc["carl"], direction="increasing")),
    ]
    scale = (f"driving environment, {setup['num_envs']} envs x {setup['num_steps']} steps x {setup['updates']} updates "
             f"({setup['num_envs'] * setup['num_steps'] * setup['updates']:,} samples per seed), {setup['seeds']} seeds")
    return dict(paper="CaRL", claims=claims, arms=arms, scale=scale, command="longhorizon repro carl")


def mad_pinn(L: dict, path: Path) -> dict:
    grid, dep = L["grid_check"], L["deployment"]
    sizes = sorted(dep, key=int)
    floors = {n: C.task_floor(f"MAD-PINN, N={n}", dep[n]["MAD-PINN"]["success"], TASK_FLOOR) for n in sizes}
    ppo = L["ppo_training"]
    seeds = len(dep[sizes[0]]["MAD-PINN"]["success"])
    per_n = lambda other, key, lower=True: {f"N={n}": C.difference(dep[n]["MAD-PINN"][key], dep[n][other][key],  # noqa: E731
                                                                   higher_is_better=not lower) for n in sizes}
    collisions = np.array([dep[n]["MAD-PINN"]["collision_rate"] for n in sizes]).T
    claims = [
        C.judge("the PINN matches the grid solution of the reduced problem (safe sets and values)",
                C.agreement([1.0 - grid["safe_set_agreement"], grid["value_mae"] / grid["value_range"]], [0.0, 0.0],
                            tolerance=0.1)),
        C.judge("decentralised MAD-PINN collides no more often than the CBF-QP at every team size",
                combine({k: C.difference(v.evidence["a"], v.evidence["b"], margin=-0.05, higher_is_better=False)
                         for k, v in per_n("CBF-QP", "collision_rate").items()}, "team size"), list(floors.values())),
        C.judge("MAD-PINN reaches the goals sooner than the CBF-QP at every team size",
                combine(per_n("CBF-QP", "time_to_goal"), "team size"), list(floors.values())),
        C.judge("MAD-PINN's collision rate does not grow with the number of agents (slope on log2 N below 0.05)",
                C.trend(np.log2([int(n) for n in sizes]), collisions, direction="decreasing", margin=0.05),
                list(floors.values())),
        C.judge("MAD-PINN collides no more often than independent PPO at every team size",
                combine(per_n("independent PPO", "collision_rate"), "team size"), list(floors.values())),
    ]
    arms = {f"MAD-PINN, N={n}": _arm(None, seeds, floors[n]) for n in sizes}
    arms["independent PPO"] = _arm(ppo["steps"], len(ppo["episode_return"]), _not_recorded(
        "independent PPO", "pair arrival rate " + ", ".join(f"{v:.2f}" for v in ppo["pair_arrival_rate"])))
    scale = f"team sizes {', '.join(sizes)}; {seeds} deployment seeds; PINN and grid on the reduced 2-agent problem"
    return dict(paper="MAD-PINN", claims=claims, arms=arms, scale=scale, command="longhorizon repro mad-pinn")


# ----------------------------------------------------------------------------------------------- structured
def eamod(L: dict, path: Path) -> dict:
    m, setup = L["measured"], L["setup"]
    seeds = m["seeds"]
    curve = np.array([s["curve"] for s in seeds])
    rl = C.arm_signal("graph RL", curve, what="training return")
    heur = m["heuristics"]
    profit = {c: np.array([np.mean(s[c]["profit"]) for s in seeds]) for c in ("A", "B")}
    optimum = float(np.mean(heur["A"]["optimum"]))
    lp_seconds = float(np.median(heur["A"]["optimum_seconds"]))
    speedup = np.array([lp_seconds / (s["A"]["seconds_rebalance"] + s["A"]["seconds_forward"]) for s in seeds])
    best = {c: max(("no rebalancing", "equal distribution"), key=lambda h: np.mean(heur[c][h])) for c in ("A", "B")}
    claims = [
        C.judge("graph RL reaches >= 80% of the full-information LP optimum (paper: up to 89%)",
                C.difference(100.0 * profit["A"] / optimum, 80.0), [rl]),
        C.judge(f"graph RL earns more than the best heuristic ({best['A']})",
                C.difference(profit["A"], float(np.mean(heur["A"][best["A"]]))), [rl]),
        C.judge(f"the policy trained on city A beats the best heuristic ({best['B']}) on city B without retraining",
                C.difference(profit["B"], float(np.mean(heur["B"][best["B"]]))), [rl]),
        C.judge("a graph-RL decision is > 100x faster than solving the horizon LP (median LP time over the days)",
                C.difference(speedup, 100.0)),  # a timing: it does not depend on what the policy learned
    ]
    cfg = setup["config"]
    arms = {"graph RL": _arm(cfg["updates"], len(seeds), rl)}
    curves = {"graph RL": [{"update": i + 1, "seed": s, "train_return": v} for s, row in enumerate(curve) for i, v in enumerate(row)]}
    scale = (f"two small cities (5 and 6 regions), {cfg['updates']} updates x {cfg['episodes']} episodes, {len(seeds)} seeds, "
             f"{setup['eval_days']} evaluation days")
    return dict(paper="E-AMoD", claims=claims, arms=arms, scale=scale, curves=curves, command="longhorizon repro eamod")


def sequoia(L: dict, path: Path) -> dict:
    setup, per = L["setup"], L["per_seed"]
    fams = setup["families"]
    seeds = setup["seeds"]
    val = lambda f, m: np.array([row[m] for row in sorted(per[f], key=lambda r: r["seed"])])  # noqa: E731
    gain = np.mean([(val(f, "sequoia") - val(f, L["best_baseline"][f])) / val(f, L["best_baseline"][f]) for f in fams], 0)
    rand = np.mean([val(f, "random") for f in fams], 0)
    sq = C.baseline_signal("SEQUOIA", np.mean([val(f, "sequoia") for f in fams], 0), rand, what="a random policy")
    bb = C.baseline_signal("best baseline", np.mean([val(f, L["best_baseline"][f]) for f in fams], 0), rand,
                           what="a random policy")
    claims = [C.judge("the MILP-embedded Q-learner (SEQUOIA) beats the best baseline on average (paper: +24.8%): "
                      "relative gain averaged over the four families, per seed", C.difference(gain, 0.0), [sq, bb])]
    arms = {"SEQUOIA": _arm(setup["total_steps"], seeds, sq), "best baseline": _arm(None, seeds, bb)}
    scale = f"{len(fams)} families, N = {setup['n_arms']} arms, {setup['total_steps']} environment steps, {seeds} seeds"
    return dict(paper="SEQUOIA", claims=claims, arms=arms, scale=scale, command="longhorizon repro sequoia")


# ----------------------------------------------------------------------------------------------- theory
def latent_mdp(L: dict, path: Path) -> dict:
    setup, rows = L["setup"], L["rows"]
    hs = setup["horizons"]
    final = lambda kind, learner: np.array([rows[f"{kind} H={h}"][learner]["final"] for h in hs]).T  # noqa: E731
    rate = lambda kind, h, learner: rows[f"{kind} H={h}"][learner]["rate"]["per_seed"]  # noqa: E731

    def learns(kind, learner):
        out = []
        for h in hs:
            slope, low, high = C.t_interval(rate(kind, h, learner))
            out.append({"arm": f"{learner}, {kind} H={h}", "test": "regret sublinear: last-decade log-log slope's interval below 1",
                        "slope": slope, "interval": [low, high], "moved": bool(high < 1.0),
                        "what": f"{learner} ({kind}, H={h}): regret did not become sublinear within K (last-decade slope "
                                f"{slope:.2f}, interval [{low:.2f}, {high:.2f}] not below 1)"})
        return out

    sig = {(k, l): learns(k, l) for k in ("stochastic", "deterministic") for l in ("bernstein", "hoeffding")}
    logh = np.log(hs)
    bern = C.trend(logh, np.log(final("stochastic", "bernstein")), direction="decreasing", margin=0.25)
    hoef = C.trend(logh, np.log(final("stochastic", "hoeffding")))
    ratio = final("deterministic", "bernstein") / final("stochastic", "bernstein")
    claims = [
        C.judge("the value-optimistic (Bernstein) learner's regret at K=3000 does not grow polynomially in H "
                "(slope of log regret on log H below 0.25, stochastic instance)", bern, sig["stochastic", "bernstein"]),
        C.judge("the Hoeffding-bonus baseline's regret grows faster in H than the Bernstein learner's (per-seed slopes)",
                C.difference(hoef.evidence["slopes"], bern.evidence["slopes"]),
                sig["stochastic", "bernstein"] + sig["stochastic", "hoeffding"]),
        C.judge("a deterministic (zero-variance) LMDP has much smaller regret (ratio to the stochastic one <= 0.25 at every H)",
                combine({f"H={h}": C.difference(ratio[:, i], 0.25, higher_is_better=False) for i, h in enumerate(hs)}, "H"),
                sig["stochastic", "bernstein"] + sig["deterministic", "bernstein"]),
        C.judge("regret grows as sqrt(K) or slower on the stochastic instance (last-decade log-log slope below 0.6 at every H)",
                combine({f"H={h}": C.difference(rate("stochastic", h, "bernstein"), 0.6, higher_is_better=False) for h in hs}, "H"),
                sig["stochastic", "bernstein"]),
        C.judge("regret is (poly)logarithmic in K on the deterministic instance (last-decade slope below 0.25 at every H)",
                combine({f"H={h}": C.difference(rate("deterministic", h, "bernstein"), 0.25, higher_is_better=False)
                         for h in hs}, "H"), sig["deterministic", "bernstein"]),
    ]
    arms = {f"{l}, {k}": _arm(setup["episodes"], setup["seeds"], *sig[k, l]) for k, l in sig}
    scale = (f"S={setup['states']}, A={setup['actions']}, H in {hs}, K={setup['episodes']} episodes, {setup['seeds']} seeds")
    return dict(paper="Latent MDPs", claims=claims, arms=arms, scale=scale, command="longhorizon repro latent-mdp")


def effective_horizon(L: dict, path: Path) -> dict:
    from scipy import stats

    rows = json.loads((path / "table.json").read_text())["rows"]
    algos, seeds, budget = list(rows[0]["sample_complexity"]), L["seeds"], float(L["budget"])
    h = np.array([r["effective_horizon_tight"] if r.get("effective_horizon_tight") is not None
                  else r["effective_horizon_simple"] for r in rows])
    steps = {a: np.array([[budget if v is None else v for v in r["sample_complexity"][a]["per_seed"]] for r in rows]).T
             for a in algos}  # [seeds, envs]; not solved within the budget -> the budget (a lower bound)
    solved = {a: sum(not r["sample_complexity"][a]["censored"] for r in rows) for a in algos}
    sig = {a: {"arm": a, "test": "solves at least one environment within the budget", "solved": solved[a],
               "of": len(rows), "moved": solved[a] > 0, "what": f"{a}: solved no environment within the budget"} for a in algos}
    claims = []
    for a in algos:
        rho = [float(stats.spearmanr(h, row).statistic) for row in steps[a]]
        claims.append(C.judge(f"{a}'s sample complexity rank-correlates with the effective horizon (per-seed Spearman rho > 0)",
                              C.difference(rho, 0.0), [sig[a]]))
    for a in algos:
        claims.append(C.judge(f"{a}'s sample complexity grows exponentially with the effective horizon "
                              "(slope of log10 steps on H above 0; unsolved counted at the budget)",
                              C.trend(h, np.log10(steps[a])), [sig[a]]))
    others = [a for a in algos if a != "sqirl"]
    differ = [(not r["sample_complexity"]["sqirl"]["censored"]) != any(not r["sample_complexity"][o]["censored"] for o in others)
              for r in rows]
    claims.append(C.judge("SQIRL succeeds where PPO or PQN do (share of environments with a different outcome <= 0.25, "
                          "the run's stated bar)", C.agreement(float(np.mean(differ)), 0.0, tolerance=0.25, side="below"),
                          list(sig.values())))
    arms = {a: _arm(budget, seeds, sig[a]) for a in algos}
    scale = f"{len(rows)} tabularised MiniGrid / DeepSea environments, budget {budget:,.0f} steps, {seeds} seeds"
    return dict(paper="Effective Horizon / SQIRL", claims=claims, arms=arms, scale=scale,
                command="longhorizon repro effective-horizon")


# ----------------------------------------------------------------------------------------------- offline
def hecrl(L: dict, path: Path) -> dict:
    setup, rows = L["setup"], L["rows"]
    methods = setup["methods"]
    multi = [r for r in rows if r["moved"] >= 2]
    succ = {m: np.mean([r[m]["success_per_seed"] for r in multi], 0) for m in methods}
    short = [r for r in rows if r["moved"] == 1 and r["blocks"] >= 2]
    low = {m: C.task_floor(f"{m} on one-move tasks with 2-3 blocks", [r[m]["success_per_seed"] for r in short], TASK_FLOOR)
           for m in ("flat", "hiql")}
    three = {r["moved"]: r["flat"]["success_per_seed"] for r in rows if r["blocks"] == 3}
    claims = [
        C.judge("subgoal diffusion raises the flat agent's success on multi-block tasks (moved >= 2); it hands subgoals "
                "to the flat agent, which must do one-move tasks", C.difference(succ["hecrl"], succ["flat"]), [low["flat"]]),
        C.judge("the flat agent's success falls with the horizon (3 blocks, moved 1 -> 3)",
                C.trend(sorted(three), np.array([three[k] for k in sorted(three)]).T, direction="decreasing"),
                [C.task_floor("flat on one-move tasks with 3 blocks", three[1], TASK_FLOOR)]),
        C.judge("subgoal diffusion raises HIQL's success on multi-block tasks (moved >= 2)",
                C.difference(succ["hiql-hecrl"], succ["hiql"]), [low["hiql"]]),
        C.judge("GCIVL + subgoal diffusion beats HIQL on multi-block tasks (moved >= 2)",
                C.difference(succ["hecrl"], succ["hiql"]), [low["flat"], low["hiql"]]),
    ]
    arms = {m: _arm(setup["updates"], setup["seeds"], C.task_floor(m, succ[m], TASK_FLOOR)) for m in methods}
    arms["flat"]["signal"], arms["hiql"]["signal"] = low["flat"], low["hiql"]
    scale = (f"push world with 1-3 blocks, {setup['trajectories']} trajectories, {setup['updates']} updates, "
             f"{setup['seeds']} seeds, {setup['tasks_per_cell']} tasks per cell")
    return dict(paper="HECRL", claims=claims, arms=arms, scale=scale, command="longhorizon repro hecrl")


def recorded_interval(low: float, high: float, bound: float, *, below: bool, seeds: int, how: str) -> C.Claim:
    """A trend whose 95% interval the run recorded (a bootstrap over seeds, which the rules allow), judged
    against ``bound``: the claim is that the slope lies below (``below``) or above it."""
    if seeds < C.MIN_SEEDS:
        verdict = C.INCONCLUSIVE
    elif (high < bound) if below else (low > bound):
        verdict = C.HOLDS
    elif (low > bound) if below else (high < bound):
        verdict = C.CONTRADICTED
    else:
        verdict = C.INCONCLUSIVE
    rule = (f"trend: {how}, 95% bootstrap interval over seeds (recorded by the run); holds if it lies "
            f"{'below' if below else 'above'} {bound:g}, contradicted if wholly on the other side; >= {C.MIN_SEEDS} seeds")
    return C.Claim("", verdict, rule, {"interval": [low, high], "bound": bound, "seeds": seeds})


def adversarial_linear(L: dict, path: Path) -> dict:
    sc, rows = L["scale"], {(r["learner"], r["adversary"]): r for r in L["rows"]}
    seeds, limit = sc["seeds"], 0.65  # SLOPE_LIMIT of the reproduction, stated before the run
    sig = {adv: {"arm": f"log-barrier FTRL ({adv})", "test": "regret sublinear: the log-log slope's interval below 1",
                 "interval": rows["log_barrier", adv]["slope_ci"], "moved": rows["log_barrier", adv]["slope_ci"][1] < 1.0,
                 "what": f"log-barrier FTRL ({adv}): regret not sublinear"} for adv in ("switching", "adaptive")}
    how = "least-squares slope of log mean regret on log K"
    claims = [C.judge(f"log-barrier FTRL's regret grows at most as sqrt(K) against the {adv} adversary (slope below 0.65)",
                      recorded_interval(*rows["log_barrier", adv]["slope_ci"], limit, below=True, seeds=seeds, how=how),
                      [sig[adv]]) for adv in ("switching", "adaptive")]
    lb = [rows["log_barrier", a] for a in ("switching", "adaptive")]
    claims.append(C.judge(
        "the linear-Q estimates are arbitrarily negative and log-barrier FTRL tolerates them (no skipped update, "
        "no zero probability)",
        C.agreement([r["skipped_share"] for r in lb] + [-min(r["min_prob"] for r in lb)], [0.0, 0.0, 0.0], tolerance=0.0,
                    side="below")))
    claims.append(C.judge("Hedge with the same estimator and step size is unstable: larger regret (per-seed log ratio "
                          "to log-barrier FTRL above 0)",
                          combine({adv: C.difference(np.log(rows["hedge", adv]["regret_final"]),
                                                     np.log(rows["log_barrier", adv]["regret_final"]))
                                   for adv in ("switching", "adaptive")}, "adversary"), list(sig.values())))
    arms = {f"{l} ({a})": _arm(sc["chunk"] * sc["chunks"], seeds, sig[a] if l == "log_barrier" else _not_recorded(
        f"{l} ({a})", "the unstable comparison arm; its instability is the claim")) for l, a in rows}
    scale = f"{sc['chunk'] * sc['chunks']:,} episodes, {seeds} seeds, {L['mdp']['layers']}-layer linear-Q MDP"
    return dict(paper="Adversarial linear MDPs", claims=claims, arms=arms, scale=scale, command="longhorizon repro adversarial-linear")


def horizon_free_rfe(L: dict, path: Path) -> dict:
    hs, seeds, claims, arms = L["horizons"], L["seeds"], [], {}
    for inst, res in L["results"].items():
        k = {l: np.array([res["runs"][f"{l}@{h}"]["k_eps"] for h in hs]).T for l in ("hf-ucrl-rfe++", "ucrl-rfe")}
        cens = {l: float(np.mean([res["runs"][f"{l}@{h}"]["censored"] for h in hs])) for l in k}
        sig = {l: {"arm": f"{l} ({inst})", "test": "K(eps) measured (not censored at the episode budget) in most runs",
                   "censored_share": cens[l], "moved": cens[l] < 0.5,
                   "what": f"{l} ({inst}): K(eps) censored at the {L['episodes']}-episode budget in {cens[l]:.0%} of runs"}
               for l in k}
        claims.append(C.judge(f"HF-UCRL-RFE++: K(eps) is flat (polylog) in H ({inst}): slope of log K on log H below 0.25",
                              C.trend(np.log(hs), np.log(k["hf-ucrl-rfe++"]), direction="decreasing", margin=L["flat_slope"]),
                              [sig["hf-ucrl-rfe++"]]))
        claims.append(C.judge(f"UCRL-RFE: K(eps) grows with H ({inst}): slope of log K on log H above 0.25",
                              C.trend(np.log(hs), np.log(k["ucrl-rfe"]), direction="increasing", margin=L["flat_slope"]),
                              [sig["ucrl-rfe"]]))
        arms.update({f"{l} ({inst})": _arm(L["episodes"], seeds, sig[l]) for l in k})
    scale = f"H in {hs}, up to {L['episodes']} exploration episodes, eps = {L['eps']}, {seeds} seeds"
    return dict(paper="Horizon-free RFE", claims=claims, arms=arms, scale=scale, command="longhorizon repro horizon-free-rfe")


def shared_policy_collapse(L: dict, path: Path) -> dict:
    setup, res = L["setup"], L["results"]
    b = f"{max(setup['harshness']):g}"
    eps = np.array(setup["epsilons"])
    coop = {a: np.array(r["by_b"][b]["greedy_cooperation"]).T for a, r in res.items()}  # [seeds, eps]
    floor = L["collapse_threshold"]
    sig = {a: C.task_floor(f"{a} at the smallest epsilon", coop[a][:, 0], floor) for a in coop}
    for a in sig:
        sig[a]["what"] = f"{a}: greedy cooperation {sig[a]['success']:.3g} at the smallest epsilon, below {floor:g}: it never cooperated"
    mean = {a: c.mean(1) for a, c in coop.items()}
    claims = [
        C.judge("under a shared network, cooperation collapses as epsilon rises", C.trend(eps, coop["shared"], direction="decreasing"),
                [sig["shared"]]),
        C.judge(f"with independent networks, cooperation does not collapse (slope on epsilon above -{floor:g})",
                C.trend(eps, coop["independent"], direction="increasing", margin=-floor), [sig["independent"]]),
        C.judge("grouped sharing delays the collapse (mean greedy cooperation over the epsilon grid above shared's)",
                C.difference(mean["grouped"], mean["shared"]), [sig["grouped"], sig["shared"]]),
        C.judge("state augmentation with exploration signals delays the collapse",
                C.difference(mean["shared+exploration"], mean["shared"]), [sig["shared+exploration"], sig["shared"]]),
    ]
    arms = {a: _arm(setup["total_steps"], setup["seeds"], sig[a]) for a in coop}
    scale = f"networked Prisoner's Dilemma, b = {b}, epsilons {setup['epsilons']}, {setup['total_steps']} steps, {setup['seeds']} seeds"
    return dict(paper="Shared-policy collapse", claims=claims, arms=arms, scale=scale, command="longhorizon repro shared-policy-collapse")


def qarl(L: dict, path: Path) -> dict:
    ex, ln, setup = L["exact"], L["learners"], L["setup"]
    gamma = setup.get("gamma", 0.97)
    worst = {a: np.array(r["worst_case"]) for a, r in ln.items()}  # [seeds, points]
    sig = {a: C.arm_signal(a, w, what="worst-case value over training") for a, w in worst.items()}
    final = {a: w[:, -1] for a, w in worst.items()}
    claims = [
        C.judge("the regularised game's QRE is an exact fixed point (stage residual < 1e-10) reached by a gamma-contraction",
                combine({"residual": C.agreement(max(q["residual"] for q in ex["qre"]), 0.0, tolerance=1e-10),
                         "contraction": C.agreement(max(q["max_contraction_ratio"] for q in ex["qre"]), gamma, tolerance=0.0,
                                                    side="below")}, "check")),
        C.judge("QARL's protagonist has a better worst-case value than RARL's at equal training budget",
                C.difference(final["qarl"], final["rarl"], paired=False), [sig["qarl"], sig["rarl"]]),
        C.judge("a linear temperature schedule's protagonist has a better worst-case value than RARL's",
                C.difference(final["linear"], final["rarl"], paired=False), [sig["linear"], sig["rarl"]]),
    ]
    steps = ln["rarl"]["steps"][-1]
    arms = {a: _arm(steps, len(w), sig[a]) for a, w in worst.items()}
    curves = {a: [{"step": st, "seed": i, "worst_case": w[i, j], "train_return": r["train_return"][i][j]}
                  for i in range(len(w)) for j, st in enumerate(r["steps"])] for (a, w), r in zip(worst.items(), ln.values())}
    scale = f"adversarial-wind corridor, {steps:,} steps per learner, {len(worst['rarl'])} seeds"
    return dict(paper="QARL", claims=claims, arms=arms, scale=scale, curves=curves, command="longhorizon repro qarl")


def sgpo(L: dict, path: Path) -> dict:
    runs = json.loads((path / "runs.json").read_text())
    seeds = len(runs)
    acc = {a: np.array([[p["accuracy"] for p in r[a]["curve"]] for r in runs]) for a in ("grpo", "sgpo")}
    base = [r["comparison"]["base_accuracy"] for r in runs]
    sig = {a: C.arm_signal(a.upper() if a == "grpo" else "sGPO", acc[a], eval_start=base, eval_end=acc[a][:, -1],
                           what="held-out accuracy over training") for a in acc}
    cmp = [r["comparison"] for r in runs]
    claims = [C.judge("sGPO reaches GRPO's final accuracy (within 0.02, the run's stated tolerance) with fewer training tokens",
                      combine({"accuracy": C.difference([c["sgpo_final_accuracy"] for c in cmp],
                                                        [c["grpo_final_accuracy"] for c in cmp], margin=-0.02),
                               "tokens": C.difference([c["sgpo_final_tokens"] for c in cmp], [c["grpo_tokens"] for c in cmp],
                                                      higher_is_better=False)}, "part"), list(sig.values()))]
    steps = runs[0]["grpo"]["curve"][-1]["step"]
    arms = {("GRPO" if a == "grpo" else "sGPO"): _arm(steps, seeds, sig[a]) for a in acc}
    curves = {("GRPO" if a == "grpo" else "sGPO"): [dict(p, seed=i) for i, r in enumerate(runs) for p in r[a]["curve"]] for a in acc}
    scale = f"character model from h1's base; {steps} RL steps per arm; {seeds} seeds"
    return dict(paper="sGPO", claims=claims, arms=arms, scale=scale, curves=curves, command=f"longhorizon repro {path.name}")


def _smollm2_scale(setup: dict) -> str:
    return (f"SmolLM2-135M-Instruct; {setup['steps']} RL steps x {setup['prompts_per_step']} prompts x "
            f"{setup['num_generations']} generations; {setup['seeds']} seed(s); {setup['eval_per_horizon']} held-out problems per horizon")


def h1_smollm2(L: dict, path: Path) -> dict:
    setup, checks = L["setup"], L["claims"][0]["checks"]
    base = L["claims"][0]["base_long_accuracy"]
    arms_names = list(checks[0]["long_accuracy"])
    long = {a: [c["long_accuracy"][a] for c in checks] for a in arms_names}
    sig = {a: C.arm_signal(a, eval_start=base, eval_end=long[a], what="long-chain accuracy") for a in arms_names}
    best = max((a for a in arms_names if a != "curriculum"), key=lambda a: np.mean(long[a]))
    claims = [C.judge("h1: a composition curriculum (h = 1 -> 3) beats fixed-horizon training on long chained problems",
                      C.difference(long["curriculum"], long[best]), [sig["curriculum"], sig[best]])]
    arms = {a: _arm(setup["steps"], setup["seeds"], sig[a]) for a in arms_names}
    return dict(paper="h1", claims=claims, arms=arms, scale=_smollm2_scale(setup), command="longhorizon repro h1-smollm2")


def sgpo_smollm2(L: dict, path: Path) -> dict:
    setup, res = L["setup"], L["results"]
    sig = {a: C.arm_signal(a, eval_start=L["base_accuracy"], eval_end=[r[a]["accuracy"] for r in res], what="held-out accuracy")
           for a in ("grpo", "sgpo")}
    claims = [C.judge("sGPO reaches GRPO's accuracy with fewer training tokens",
                      C.difference([r["sgpo"]["accuracy"] for r in res], [r["grpo"]["accuracy"] for r in res]),
                      list(sig.values()))]
    arms = {a: _arm(setup["steps"], setup["seeds"], sig[a]) for a in sig}
    return dict(paper="sGPO", claims=claims, arms=arms, scale=_smollm2_scale(setup), command="longhorizon repro sgpo-smollm2")


def rhorizon_smollm2(L: dict, path: Path) -> dict:
    setup, base, trained = L["setup"], L["base_by_n"], L["trained_by_n"]
    composed = [n for n in base if int(n) >= 2]
    sig = C.arm_signal("RL on composed problems", eval_start=[base[n] for n in composed],
                       eval_end=[t[n] for t in trained for n in composed], what="accuracy on composed problems (n >= 2)")
    claims = [
        C.judge("the base model's all-or-nothing accuracy falls as problems are composed",
                C.trend([int(n) for n in base], [list(base.values())], direction="decreasing")),
        C.judge("RL on composed problems raises accuracy at n >= 2",
                C.difference([np.mean([t[n] for n in composed]) for t in trained], float(np.mean([base[n] for n in composed]))),
                [sig]),
    ]
    return dict(paper="R-HORIZON", claims=claims, arms={"RL on composed problems": _arm(setup["steps"], setup["seeds"], sig)},
                scale=_smollm2_scale(setup), command="longhorizon repro rhorizon-smollm2")


def banded(value: float, holds_at_most: float, contradicted_at_least: float, what: str) -> C.Claim:
    """An exact number against two thresholds stated before the run: holds at or below the first, contradicted at
    or above the second, inconclusive between them."""
    verdict = (C.HOLDS if value <= holds_at_most else C.CONTRADICTED if value >= contradicted_at_least else C.INCONCLUSIVE)
    return C.Claim("", verdict, f"exact computation: {what} holds at <= {holds_at_most:g}, contradicted at >= "
                   f"{contradicted_at_least:g} (thresholds stated before the run)",
                   {"value": value, "holds_at_most": holds_at_most, "contradicted_at_least": contradicted_at_least})


def nash_mp(L: dict, path: Path) -> dict:
    setup, games, budget = L["setup"], L["games"], L["setup"]["queries"]
    queries = lambda m: [budget if g["methods"][m]["queries_to_target"] is None else g["methods"][m]["queries_to_target"]  # noqa: E731
                         for g in games]
    claims = [
        C.judge("Nash-MP's KL(pi*_beta || pi_k) <= KL_0 (1 + 2 beta)^(-N/2) at every N (eta = 2), on every game",
                C.agreement([0.0 if g["bound_holds"] else 1.0 for g in games], 0.0, tolerance=0.0)),
        C.judge("Nash-MP's rate does not degrade with n: its per-query factor is <= (1 + 2 beta)^(-1/2) on every game",
                C.agreement([g["methods"]["nash-mp"]["factor"] for g in games], [(1 + 2 * g["beta"]) ** -0.5 for g in games],
                            tolerance=0.0, side="below")),
    ]
    for method in ("nash-md", "omd", "extragradient"):
        claims.append(C.judge(f"Nash-MP (best grid step) needs fewer queries than {method} to reach KL <= {L['target']:g} KL_0 "
                              f"(paired over the {len(games)} games; never reached counts as the {budget}-query budget)",
                              C.difference(queries("nash-mp-grid"), queries(method), higher_is_better=False)))
    cyc = L["mwu_cycle"]
    claims.append(C.judge("unregularised MWU's last iterate does not converge on the 3x3 intransitive game, its average does",
                          combine({"last iterate never closer than at the start": C.agreement(
                                       cyc["kl_start"] * (1 - 1e-9), cyc["kl_last_min"], tolerance=0.0, side="below"),
                                   "average 10x closer": C.agreement(cyc["kl_average_end"], 0.1 * cyc["kl_start"],
                                                                     tolerance=0.0, side="below")}, "part")))
    sig = {"arm": "Nash-MP", "test": "not applicable: exact closed-form updates on known games", "moved": True}
    arms = {m: _arm(budget, len(games), dict(sig, arm=m)) for m in games[0]["methods"]}
    scale = (f"exact tabular preference games, n in {setup['sizes']}, beta in {setup['betas']}, {setup['seeds']} random games "
             f"per size, {budget} queries")
    return dict(paper="Nash-MP", claims=claims, arms=arms, scale=scale, command="longhorizon repro nash-mp")


def cce(L: dict, path: Path) -> dict:
    from longhorizon.repro.cce import (  # the run's thresholds, stated before it ran
        APART,
        EXACT,
        FALLS,
        STAYS,
    )

    games = L["games"]
    falls, apart = {}, {}
    for g in games:
        for rate, h in g["hedge"].items():
            label = f"{g['game']} eta={rate}"
            m0, m, hist = h["markov_gap"][0], h["markov_gap"][-1], h["history_gap"][-1]
            falls[label] = banded(m / m0, FALLS, STAYS, "Markov gap at T_max / at T = 1")
            stays = hist >= APART * m and hist >= FALLS * m0
            apart[label] = C.Claim("", C.HOLDS if stays else C.CONTRADICTED if hist <= 1.5 * m + EXACT else C.INCONCLUSIVE,
                                   f"exact computation: history gap >= {APART:g} x the Markov gap and >= {FALLS:g} x its T = 1 "
                                   "value holds; within 1.5 x the Markov gap contradicts", {"history_gap": hist, "markov_gap": m})
    both = [k for k in falls if falls[k].verdict == apart[k].verdict == C.HOLDS]
    exist = C.Claim("", C.HOLDS if both else C.CONTRADICTED if all(a.verdict == C.CONTRADICTED for a in apart.values())
                    else C.INCONCLUSIVE, "existence: holds if some setting has both parts holding (exact computation)",
                    {"settings": both, "reason": f"{len(both)} of {len(falls)} settings show both"})
    worst = max(max(g["cce"]["markov_gap"], g["cce"]["history_gap"]) for g in games)
    claims = [
        C.judge("the backward-induction Markov CCE is a CCE against Markov and history-dependent deviations (gap <= 1e-8)",
                C.agreement(worst, 0.0, tolerance=EXACT)),
        C.judge("independent Hedge learners' uniform mixture approaches a CCE against Markov deviations as T grows",
                combine(falls, "setting", unanimous=True)),
        C.judge("independent Hedge learners' mixture can approach a CCE against Markov deviations while staying away from "
                "one against history-dependent deviations", exist),
    ]
    arms = {f"Hedge eta={r}": _arm(games[0]["rounds"][-1], len(games), {"arm": f"Hedge eta={r}", "moved": True,
            "test": "not applicable: exact full-information dynamics on known games"}) for r in games[0]["hedge"]}
    scale = f"{len(games)} exact Markov games, Hedge rates {L['rates']}, T up to {games[0]['rounds'][-1]:,}"
    return dict(paper="Sparse CCE", claims=claims, arms=arms, scale=scale, command="longhorizon repro cce")


def qgf(L: dict, path: Path) -> dict:
    setup, chosen = L["setup"], L["chosen"]
    row = lambda method, key, value: next(r for r in L["rows"] if r["split"] == "report" and r["method"] == method  # noqa: E731
                                         and r["setting"].get(key) == value)
    bc, best, top = row("bc", "w", 0.0), row("qgf", "w", chosen["w"]), row("qgf", "w", max(setup["weights"]))
    bon, fql = row("best_of_n", "N", chosen["best_of_n_at_equal_compute"]), row("fql", "alpha", chosen["alpha"])
    cube = {(r["method"], json.dumps(r["setting"])): r["success"] for r in L["cube"]["rows"]}
    cube_bc = C.task_floor("BC on cube-single", cube["bc", json.dumps({"w": 0.0})], TASK_FLOOR)
    cube_best = max((k for k in cube if k[0] == "qgf"), key=lambda k: np.mean(cube[k]))
    w = f"w={chosen['w']:g} (chosen on the selection split)"
    claims = [
        C.judge(f"critic-gradient guidance raises return over BC ({w}; report split)", C.difference(best["return"], bc["return"])),
        C.judge(f"too large a weight (w={max(setup['weights']):g}) leaves the data's support and hurts",
                combine({"hurts": C.difference(best["return"], top["return"]),
                         "leaves the support": C.difference(top["off_support"], best["off_support"])}, "part")),
        C.judge(f"QGF beats best-of-{bon['setting']['N']} at equal compute ({best['evaluations']['total']} vs "
                f"{bon['evaluations']['total']} evaluations per action)", C.difference(best["return"], bon["return"])),
        C.judge(f"test-time guidance (QGF) is at least as good as training a policy per alpha (FQL, alpha={chosen['alpha']:g})",
                C.difference(best["return"], fql["return"])),
        C.judge("guidance raises success on OGBench cube-single (best weight)",
                C.difference(cube[cube_best], cube["bc", json.dumps({"w": 0.0})]), [cube_bc]),
    ]
    note = "offline: the flow and critic are trained once per seed; BC returns the data's level"
    arms = {"BC": _arm(setup["flow_updates"], setup["seeds"], _not_recorded("BC", note)),
            "QGF": _arm(setup["critic_updates"], setup["seeds"], _not_recorded("QGF", note)),
            "FQL": _arm(setup["fql_updates"], setup["seeds"], _not_recorded("FQL", note)),
            "BC on cube-single": _arm(L["cube"]["setup"]["updates"], L["cube"]["setup"]["seeds"], cube_bc)}
    scale = (f"toy 2-D multi-modal task ({setup['dataset_size']:,} transitions), {setup['flow_updates']} flow / "
             f"{setup['critic_updates']} critic updates, {setup['seeds']} seeds; cube-single at {L['cube']['setup']['updates']} updates")
    return dict(paper="QGF", claims=claims, arms=arms, scale=scale, command="longhorizon repro qgf")


def ota(L: dict, path: Path) -> dict:
    mech, ss = L["mechanism"], L["success_setup"]
    arms_m = {a["arm"]: a for a in mech["arms"]}

    def far(arm):  # per seed: advantage-sign accuracy over the far half of the distance bins, weighted by counts
        half = len(arm["sign_count"]) // 2
        return [np.average(p["sign_accuracy"][half:], weights=p["sign_count"][half:]) for p in arm["per_seed"]]

    claims = [C.judge(f"{name} orders far subgoals better than HIQL (far-half advantage-sign accuracy, per seed)",
                      C.difference(far(arm), far(arms_m["HIQL"]))) for name, arm in arms_m.items() if name != "HIQL"]
    rows = {(r["dataset"], r["agent"], r["option_length"]): r["success_per_seed"] for r in L["success"]}
    arms = {name: _arm(mech["setup"]["updates"], mech["setup"]["seeds"], _not_recorded(
        name, "the mechanism compares the trained values' advantage signs; no learning curve kept")) for name in arms_m}
    default = ss["option_lengths"][0]
    for dataset in ss["datasets"]:
        hiql = rows[dataset, "hiql", None]
        for n in ss["option_lengths"]:
            label = f"OTA n={n}" if n != default else "OTA"
            sig = C.arm_signal(f"{label} ({dataset})", eval_start=0.0, eval_end=rows[dataset, "ota", n],
                               what="held-out success (an untrained agent's is at least 0)")
            claims.append(C.judge(f"{label} beats HIQL on {dataset}", C.difference(rows[dataset, "ota", n], hiql), [sig]))
            arms[f"{label} ({dataset})"] = _arm(ss["updates"], ss["seeds"], sig)
    scale = (f"mechanism: pointmaze-{mech['setup']['maze']}, {mech['setup']['updates']} updates, {mech['setup']['seeds']} seeds; "
             f"success: {len(ss['datasets'])} OGBench pointmaze datasets at {ss['updates']:,} updates (paper: 1M), "
             f"{ss['seeds']} seeds, {ss['episodes']} episodes")
    return dict(paper="OTA", claims=claims, arms=arms, scale=scale, command="longhorizon repro ota")


CONVERTERS = {"router-r1": router_r1, "asearcher": asearcher, "agents-a1": agents_a1, "canopy": canopy,
              "treeopsd": treeopsd, "iterresearch": iterresearch, "trpo-agent": trpo_agent, "fees": fees,
              "h1": h1, "h1-chain-base": h1, "es-finetune": es_finetune, "mbdpo": mbdpo, "carl": carl,
              "mad-pinn": mad_pinn, "eamod": eamod, "sequoia": sequoia, "latent-mdp": latent_mdp,
              "effective-horizon": effective_horizon, "hecrl": hecrl, "adversarial-linear": adversarial_linear,
              "horizon-free-rfe": horizon_free_rfe, "shared-policy-collapse": shared_policy_collapse, "qarl": qarl,
              "sgpo": sgpo, "sgpo-chain-base": sgpo, "h1-smollm2": h1_smollm2, "sgpo-smollm2": sgpo_smollm2,
              "rhorizon-smollm2": rhorizon_smollm2, "nash-mp": nash_mp, "cce": cce,
              "qgf": qgf, "ota": ota}


# ----------------------------------------------------------------------------------------------- writing
def convert(folder: str, legacy: dict, results: Path = RESULTS) -> tuple[dict, dict]:
    """``(summary, curves)`` for ``folder`` from its legacy summary."""
    out = CONVERTERS[folder](legacy, results / folder)
    wall = next((legacy[k] for k in ("wall_seconds", "wall_s") if isinstance(legacy.get(k), (int, float))), None)
    if wall is None and isinstance(legacy.get("seconds"), dict) and "total" in legacy["seconds"]:
        wall = legacy["seconds"]["total"]
    summary = {"paper": out["paper"], "claims": [c.to_dict() for c in out["claims"]], "arms": C._plain(out["arms"]),
               "scale": out["scale"], "quick": bool(legacy.get("quick") or False), "command": out["command"],
               "commit": COMMIT, "wall_seconds": None if wall is None else float(wall), "rejudged": REJUDGED,
               "legacy": legacy}
    problems = C.validate_summary(summary)
    if problems:
        raise ValueError(f"{folder}: " + "; ".join(problems))
    return summary, out.get("curves", {})


BEGIN, END = "<!-- claims-module verdicts -->", "<!-- /claims-module verdicts -->"


def readme_block(summary: dict) -> str:
    lines = [BEGIN, "", NOTE, "", "Verdicts (`longhorizon.repro.claims`; the rule and numbers of each are in `summary.json`):", ""]
    for c in summary["claims"]:
        reason = c["evidence"].get("did_not_move") or c["evidence"].get("reason")
        why = "; ".join(reason) if isinstance(reason, list) else reason
        lines.append(f"- {c['claim']}: **{c['verdict']}**" + (f" ({why})" if why else ""))
    return "\n".join([*lines, "", END])


SUPERSEDED = " (as first written; superseded by the re-judged verdicts above)"


def update_readme(path: Path, summary: dict) -> None:
    """Put the re-judged verdicts under the README's title; mark its old verdict headings as superseded."""
    text = path.read_text() if path.exists() else f"# {path.parent.name}\n"
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head.rstrip("\n") + "\n\n" + rest.split(END, 1)[1].lstrip("\n")
    title, _, body = text.partition("\n")
    body = re.sub(r"^(## Verdicts?|\*\*Verdicts?\*\*)(?! \(as first written)", lambda m: m.group(1) + SUPERSEDED, body,
                  flags=re.MULTILINE)
    path.write_text(f"{title}\n\n{readme_block(summary)}\n\n{body.lstrip()}")


def migrate(folder: str, results: Path = RESULTS) -> dict:
    path = results / folder / "summary.json"
    current = json.loads(path.read_text())
    legacy = current.get("legacy", current) if "paper" in current else current
    summary, curves = convert(folder, legacy, results)
    for arm, rows in curves.items():
        C.write_curve(results / folder, arm, rows)
    path.write_text(json.dumps(summary, indent=2) + "\n")
    update_readme(results / folder / "README.md", summary)
    return summary


def main(argv: list[str]) -> None:
    for folder in argv or list(CONVERTERS):
        s = migrate(folder)
        print(folder, ", ".join(c["verdict"] for c in s["claims"]))


if __name__ == "__main__":
    main(sys.argv[1:])
