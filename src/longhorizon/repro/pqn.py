r"""`longhorizon repro pqn`: PQN (Gallici et al., 2024, "Simplifying Deep Temporal Difference Learning").

The paper's claims, and how each is judged here:

(a) **Stability.** Off-policy TD with function approximation can diverge (the deadly triad); the paper proves
    that LayerNorm with l2 regularisation makes TD stable without a target network or a replay buffer: for
    the critic ``v(s) = w^T ReLU(LN(M x(s)))`` (LN scaled so each hidden vector has norm <= 1) the
    off-policy part of the TD Jacobian is bounded by ``(gamma/2)^2 ||w||^2``, so l2 on ``w`` with
    ``eta > (gamma/2)^2`` makes it stable (in the wide limit, where the network's own nonlinearity term
    vanishes; our reading of the paper's analysis). PQN also uses lambda-returns. Measured on Baird's counterexample
    (:mod:`longhorizon.tabular.baird`: 7 states, 8 features, gamma 0.99, alpha 0.01, Sutton & Barto's start),
    with *expected* semi-gradient updates (exact, no sampling; one ``lax.scan`` per family of arms, vmapped
    over arms and network initialisations) and, for TD(0) and LayerNorm + l2, a seeded *sampled* version
    on the behaviour's trajectory:

    1. linear TD(0) diverges: ``||w_T|| >= DIVERGE x ||w_0||`` and ``||w_T|| > ||w_{T/2}||`` (agreement);
       sampled: the slope of ``log ||w_t||`` over the second half is positive (trend over seeds);
    2. LayerNorm critic + l2 ``eta = 0.25 > (0.99/2)^2`` stays bounded: ``max_t ||w_t|| <= BOUND x ||w_0||`` and
       ``max_t max_s |v_t(s)| <= BOUND x max_s |v_0(s)|`` on every initialisation (agreement; sampled too);
    3. lambda-returns (per-decision importance sampling in place of PQN's max; the module docstring of
       :mod:`longhorizon.tabular.baird`) stay bounded, at PQN's MinAtar lambda 0.65 and its classic-control 0.95.

(b) **PQN vs DQN on MinAtar** (Breakout, Asterix, SpaceInvaders, Freeway), 3 seeds vmapped per arm, the same
    env steps for both, one training loop (:func:`longhorizon.runner.run.train`), greedy evaluation after
    every chunk. Per game, the target return is the midpoint between the lower of the two arms' first
    evaluations and the higher of their final evaluations (means over seeds), fixed by this rule before the
    run. Claims per game: PQN reaches the target in less training wall time than DQN (Welch 95% over
    seeds; a seed that never reaches it is censored at its run's length, and a censored seed that could
    flip the verdict makes it inconclusive), and PQN's final greedy return is higher (Welch). An arm
    whose evaluation did not rise (:func:`~longhorizon.repro.claims.arm_signal`) gives ``no signal``.

(c) **"Up to 50x faster than DQN"**, as the paper frames it: PQN trained end to end on one GPU against a
    DQN whose environments and replay buffer live on the CPU, wall time to the same return. Run on a GPU
    machine with ``python -m longhorizon.repro.pqn gpu`` (writes ``OUT/gpu/arms``); a later
    ``longhorizon repro pqn`` folds it in. Without it the claim is ``inconclusive`` ("not run: no GPU").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro.report import verdict_lines, write

PAPER = "PQN"
COMMAND = "longhorizon repro pqn"
GPU_COMMAND = "python -m longhorizon.repro.pqn gpu --out docs/results/pqn"

# ---------------------------------------------------------------- (a) Baird: settings and tolerances, fixed before the run
DIVERGE = 100.0  # diverged: ||w_T|| at least this multiple of ||w_0|| (and still growing)
BOUND = 10.0  # bounded: max_t ||w_t|| and max_t max_s |v_t(s)| at most this multiple of their start
ETA = 0.25  # l2 strength of the claim arms: above the paper's (gamma/2)^2 = 0.245
WIDTH = 64  # hidden width k of the LayerNorm critic


@dataclasses.dataclass(frozen=True)
class BairdArm:
    name: str
    critic: str  # linear | layernorm
    lam: float = 0.0
    eta: float = 0.0
    sampled: bool = False
    claim: str = ""  # "" for an ablation (reported, not judged)
    expect: str = "bounded"  # what the claim says: diverges | bounded


BAIRD_ARMS = (
    BairdArm("baird linear TD(0)", "linear", claim="off-policy linear semi-gradient TD(0) diverges on Baird's "
             "counterexample (expected updates)", expect="diverges"),
    BairdArm("baird linear TD(0) sampled", "linear", sampled=True, claim="off-policy linear semi-gradient TD(0) "
             "diverges on Baird's counterexample (sampled: log ||w|| keeps rising)", expect="diverges"),
    BairdArm("baird LayerNorm + l2", "layernorm", eta=ETA, claim=f"TD with a LayerNorm critic and l2 eta = {ETA} > "
             "(gamma/2)^2 stays bounded on Baird's counterexample (expected updates)"),
    BairdArm("baird LayerNorm + l2 sampled", "layernorm", eta=ETA, sampled=True, claim=f"TD with a LayerNorm critic "
             f"and l2 eta = {ETA} stays bounded on Baird's counterexample (sampled)"),
    BairdArm("baird TD(lambda 0.65)", "linear", lam=0.65, claim="off-policy TD with PQN's MinAtar lambda-returns "
             "(lambda 0.65) stays bounded on Baird's counterexample (expected updates)"),
    BairdArm("baird TD(lambda 0.95)", "linear", lam=0.95, claim="off-policy TD with PQN's classic-control "
             "lambda-returns (lambda 0.95) stays bounded on Baird's counterexample (expected updates)"),
    # ablations: which ingredient does the work
    BairdArm("baird LayerNorm, no l2", "layernorm"),
    BairdArm("baird linear + l2", "linear", eta=ETA),
    BairdArm("baird LayerNorm + l2 0.1", "layernorm", eta=0.1),
    BairdArm("baird linear + l2 0.1", "linear", eta=0.1),
)

# ---------------------------------------------------------------- (b) MinAtar
GAMES = ("Breakout-MinAtar", "Asterix-MinAtar", "SpaceInvaders-MinAtar", "Freeway-MinAtar")
ALGOS = ("pqn", "dqn")
PQN_STEPS_PER_UPDATE = 128 * 32  # the MinAtar reference: 128 environments x 32 steps
# DQN at the replay ratio of CleanRL's DQN and the MinAtar baselines' cadence: 8 environments x 4 steps, then
# 8 gradient steps of 32 (one per 4 env steps); target copied every 250 gradient steps = 1000 env steps. The
# library's MinAtar default takes 1 gradient step per 32 env steps, which learned far less per step in the pilot.
DQN_OVERRIDES = {"gradient_steps": "8"}
TARGET_FRACTION = 0.5  # the target: this far from the lower first evaluation to the higher final one
GPU_SPEEDUP = 50.0


@dataclasses.dataclass(frozen=True)
class Scale:
    baird_updates: int  # T
    baird_inits: int  # LayerNorm critic initialisations (expected updates)
    baird_seeds: int  # sampled runs
    games: tuple[str, ...]
    seeds: int
    pqn_updates: int  # the env-step budget, in PQN updates of 4096 steps; DQN gets the same env steps
    chunks: int  # evaluations (one after each chunk)
    eval_episodes: int

    @property
    def env_steps(self) -> int:
        return self.pqn_updates * PQN_STEPS_PER_UPDATE


FULL = Scale(baird_updates=5000, baird_inits=5, baird_seeds=10, games=GAMES, seeds=3, pqn_updates=10, chunks=5,
             eval_episodes=10)
QUICK = Scale(baird_updates=400, baird_inits=3, baird_seeds=3, games=GAMES[:1], seeds=3, pqn_updates=1, chunks=1,
              eval_episodes=2)


# ================================================================ (a) Baird's counterexample
def baird_measure(scale: Scale) -> dict:
    """Every Baird arm's trace: ``w_norm`` and ``max_value`` ``[runs, T + 1]`` (runs: 1 for an exact
    linear arm, ``baird_inits`` for an exact LayerNorm arm, ``baird_seeds`` for a sampled arm)."""
    import jax
    import jax.numpy as jnp

    from longhorizon.tabular import baird

    steps = scale.baird_updates
    start = time.perf_counter()
    with jax.enable_x64(True):
        mdp = baird.baird()
        linear, layernorm = baird.linear_values(mdp), baird.layer_norm_values(mdp)
        w0 = {"w": jnp.asarray(baird.W0)}
        init = jax.vmap(lambda k: baird.init_layer_norm(k, WIDTH))
        inits = init(jax.random.split(jax.random.PRNGKey(0), scale.baird_inits))  # exact runs
        keys = jax.random.split(jax.random.PRNGKey(1), scale.baird_seeds)  # sampled runs: trajectory ...
        seeded_inits = init(jax.random.split(jax.random.PRNGKey(2), scale.baird_seeds))  # ... and initialisation

        def exact(arms, values, runs):
            """Expected updates of every arm (its lambda, eta) from every run's start (leading axis): one scan."""
            out = baird.run_expected_settings(mdp, values, runs, steps, [a.lam for a in arms], [a.eta for a in arms])
            return {a.name: jax.tree.map(lambda x, i=i: np.asarray(x[i]), out) for i, a in enumerate(arms)}

        traces = {**exact([a for a in BAIRD_ARMS if a.critic == "linear" and not a.sampled], linear,
                          {"w": w0["w"][None]}),
                  **exact([a for a in BAIRD_ARMS if a.critic == "layernorm" and not a.sampled], layernorm, inits)}
        for arm in (a for a in BAIRD_ARMS if a.sampled):
            values, params, axes = (linear, w0, (None, 0)) if arm.critic == "linear" else (layernorm, seeded_inits, (0, 0))
            run = jax.jit(jax.vmap(lambda p, k, e=arm.eta, v=values: baird.run_sampled(mdp, v, p, k, steps, baird.ALPHA, e),
                                   in_axes=axes))
            traces[arm.name] = jax.tree.map(np.asarray, run(params, keys))
        eigen = {a.name: baird.min_real_eigenvalue(mdp, a.lam, a.eta) for a in BAIRD_ARMS if a.critic == "linear"}
    return {"traces": {k: {"w_norm": v.w_norm, "max_value": v.max_value} for k, v in traces.items()},
            "min_real_eigenvalue": eigen, "critical_gamma": baird.critical_gamma(),
            "critical_lambda": baird.critical_lambda(), "seconds": time.perf_counter() - start, "steps": steps}


def baird_row(arm: BairdArm, trace: dict, eigen: float | None) -> dict:
    """The numbers of one arm (:func:`~longhorizon.tabular.baird.trace_growth`, per run); for an exact linear arm,
    the growth rate its eigenvalues predict."""
    from longhorizon.tabular import baird

    growth = baird.trace_growth(trace["w_norm"], trace["max_value"])
    return {"arm": arm.name, "claim": bool(arm.claim), "critic": arm.critic, "lambda": arm.lam, "eta": arm.eta,
            "sampled": arm.sampled, "runs": len(growth["w0"]), **growth,
            "predicted_slope": None if eigen is None else baird.expected_log_growth(baird.baird(), arm.lam, arm.eta),
            "min_real_eigenvalue": eigen}


def baird_claims(m: dict, quick: bool) -> tuple[list, dict, list[dict]]:
    rows, found, arms = [], [], {}
    for arm in BAIRD_ARMS:
        trace = m["traces"][arm.name]
        row = baird_row(arm, trace, m["min_real_eigenvalue"].get(arm.name))
        rows.append(row)
        arms[arm.name] = C.arm(m["steps"], row["runs"], C.not_applied(
            arm.name, "exact or seeded TD on a fixed problem whose true values are all 0: nothing to learn, the claim is "
                      "about the size of the weights"))
        if not arm.claim:
            continue
        if arm.expect == "diverges" and arm.sampled:
            half = np.unique(np.linspace(m["steps"] // 2, m["steps"], 51).astype(int))  # 51 points of the second half
            ruling = C.trend(half, np.log(trace["w_norm"][:, half]), direction="increasing")
        elif arm.expect == "diverges":
            ruling = C.agreement([row["final_ratio"][0], row["half_to_end_ratio"][0]], [DIVERGE, 1.0], 0.0, side="above")
            ruling.evidence.update(reason=f"||w_T|| / ||w_0|| = {row['final_ratio'][0]:.3g} against {DIVERGE:g}, "
                                          f"||w_T|| / ||w_T/2|| = {row['half_to_end_ratio'][0]:.3g} against 1",
                                   what="[||w_T|| / ||w_0||, ||w_T|| / ||w_T/2||] against [DIVERGE, 1]",
                                   log_norm_slope=row["log_norm_slope"][0], predicted_slope=row["predicted_slope"],
                                   min_real_eigenvalue=row["min_real_eigenvalue"])
        else:
            ruling = C.agreement([max(row["max_w_ratio"]), max(row["max_value_ratio"])], [BOUND, BOUND], 0.0, side="below")
            ruling.evidence.update(reason=f"worst run: max_t ||w_t|| / ||w_0|| = {max(row['max_w_ratio']):.3g}, "
                                          f"max_t max_s |v_t| / max_s |v_0| = {max(row['max_value_ratio']):.3g}, "
                                          f"against {BOUND:g}",
                                   what="[max_t ||w_t|| / ||w_0||, max_t max_s |v_t| / max_s |v_0|], worst run, against "
                                        "[BOUND, BOUND]", runs=row["runs"], final_max_value=max(row["final_max_value"]),
                                   min_real_eigenvalue=row["min_real_eigenvalue"])
        found.append(C.judge(arm.claim, ruling, quick=quick))
    return found, arms, rows


# ================================================================ (b) MinAtar: one arm = one vmapped training run
def arm_overrides(algo: str, scale: Scale) -> dict[str, str]:
    overrides = {"total_steps": str(scale.env_steps)}
    if algo == "dqn":  # a buffer that holds the whole run samples exactly as the default 100k one (it never wraps)
        overrides.update(DQN_OVERRIDES, buffer_size=str(min(100_000, max(scale.env_steps, 1_000))))
    return overrides


def arm_settings(game: str, algo: str, scale: Scale) -> dict:
    return {"game": game, "algo": algo, "seeds": scale.seeds, "env_steps": scale.env_steps, "chunks": scale.chunks,
            "eval_episodes": scale.eval_episodes, "overrides": arm_overrides(algo, scale)}


def train_arm(game: str, algo: str, scale: Scale, out: Path, log=print) -> dict:
    """Train one (game, algorithm) arm with ``scale.seeds`` vmapped seeds and save ``out/arms/GAME-ALGO.json``;
    an arm whose JSON exists with the same settings is read back, not retrained."""
    import jax

    from longhorizon.runner.results import read_metrics, write_json_atomic
    from longhorizon.runner.run import RunSpec, train

    path = Path(out) / "arms" / f"{game}-{algo}.json"
    settings = arm_settings(game, algo, scale)
    if path.exists():
        record = json.loads(path.read_text())
        if record.get("settings") == settings:
            log(f"pqn repro: {game} {algo} already finished ({path}); skipped")
            return record
    run_dir = Path(out) / "runs" / f"{game}-{algo}"  # runs/ is not committed
    shutil.rmtree(run_dir, ignore_errors=True)  # an arm interrupted before its JSON was saved starts afresh
    spec = RunSpec(algo=algo, env=game, config_overrides=settings["overrides"], seeds=scale.seeds, seed=0,
                   out=str(run_dir), num_chunks=scale.chunks, eval_every=1, eval_episodes=scale.eval_episodes, quiet=True)
    log(f"pqn repro: training {game} {algo}: {scale.seeds} seeds x {scale.env_steps} env steps on {jax.default_backend()}")
    start = time.perf_counter()
    summary = train(spec)
    wall = time.perf_counter() - start
    rows = read_metrics(run_dir)
    points, clock, before = [], 0.0, 0
    for row in rows:  # the training clock: each chunk's env steps (all seeds) / its steps per second
        clock += scale.seeds * (row["env_steps"] - before) / row["steps_per_second"]
        before = row["env_steps"]
        points.append({"env_steps": row["env_steps"], "train_seconds": clock, "wall_seconds": row["wall_seconds"],
                       "return_per_seed": row.get("episode_return_per_seed"), "eval_per_seed": row["eval_return_per_seed"]})
    record = {"settings": settings, "platform": jax.default_backend(), "points": points,
              "final_eval_per_seed": summary["final_eval_return"], "compile_seconds": summary["compile_seconds"],
              "train_seconds": summary["train_seconds"], "wall_seconds": wall,
              "steps_per_second": summary["steps_per_second"], "status": summary["status"]}
    write_json_atomic(path, record)
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # DQN's replay buffer: ~1 GB per checkpoint
    log(f"pqn repro: {game} {algo}: final greedy return {np.mean(record['final_eval_per_seed']):.2f}, "
        f"{record['steps_per_second']:.0f} env steps/s (all seeds), {wall:.0f} s")
    return record


def evals(record: dict) -> np.ndarray:
    """Greedy evaluation per seed after each chunk, ``[seeds, chunks]``."""
    return np.asarray([p["eval_per_seed"] for p in record["points"]], np.float64).T


def training_curve(record: dict) -> np.ndarray | None:
    """Training return per seed after each chunk ``[seeds, points]``, over the chunks in which every seed ended
    an episode (none end within a chunk when episodes outlast it: Freeway's 2,500 steps, PQN's 128 envs)."""
    rows = [p["return_per_seed"] for p in record["points"]
            if p["return_per_seed"] and all(v is not None for v in p["return_per_seed"])]
    return np.asarray(rows, np.float64).T if len(rows) >= 2 else None


def arm_moved(arm: str, record: dict) -> dict:
    """The standard gate (:func:`~longhorizon.repro.claims.arm_signal`): the training return's last quarter above
    its first by a 95% interval over seeds, or the mean greedy evaluation above its first value at the end."""
    e = evals(record)
    return C.arm_signal(arm, training_curve(record), eval_start=e[:, 0], eval_end=e[:, -1], what="training return")


def to_target(record: dict, target: float) -> dict:
    """Per seed: env steps and training seconds at the first evaluation at or above ``target``; a seed that
    never reaches it is censored at the run's end (``reached`` false)."""
    e = evals(record)
    steps = np.asarray([p["env_steps"] for p in record["points"]], np.float64)
    seconds = np.asarray([p["train_seconds"] for p in record["points"]], np.float64)
    hit = e >= target
    first = np.where(hit.any(1), hit.argmax(1), e.shape[1] - 1)
    return {"reached": hit.any(1).tolist(), "env_steps": steps[first].tolist(), "seconds": seconds[first].tolist()}


def censored(ruling: C.Claim, pqn_reached, dqn_reached) -> C.Claim:
    """A censored time is a lower bound: a censored PQN seed cannot support ``holds`` (its true time may be
    longer), a censored DQN seed cannot support ``contradicted``; those verdicts become ``inconclusive``."""
    flips = ((ruling.verdict == C.HOLDS and not all(pqn_reached)) or
             (ruling.verdict == C.CONTRADICTED and not all(dqn_reached)))
    evidence = {**ruling.evidence, "pqn_reached": list(pqn_reached), "dqn_reached": list(dqn_reached)}
    if not flips:
        return dataclasses.replace(ruling, evidence=evidence)
    evidence.update(reason=f"{ruling.verdict} rests on a seed that never reached the target (its time is only a lower "
                           "bound)", rule_verdict=ruling.verdict)
    return dataclasses.replace(ruling, verdict=C.INCONCLUSIVE, evidence=evidence)


def game_claims(game: str, pqn: dict, dqn: dict, quick: bool) -> tuple[list, dict, dict]:
    """The two claims of one game, its arms' signals and its table row."""
    e = {"pqn": evals(pqn), "dqn": evals(dqn)}
    first = min(e[a][:, 0].mean() for a in ALGOS)
    best = max(e[a][:, -1].mean() for a in ALGOS)
    target = first + TARGET_FRACTION * (best - first)
    reach = {"pqn": to_target(pqn, target), "dqn": to_target(dqn, target)}
    signal = {a: arm_moved(f"{game} {a}", record) for a, record in (("pqn", pqn), ("dqn", dqn))}
    depends = [signal["pqn"], signal["dqn"]]
    timing = C.difference(reach["pqn"]["seconds"], reach["dqn"]["seconds"], paired=False, higher_is_better=False)
    timing.evidence.update(target=target, unit="training seconds to the target (compile, evaluation and checkpoint "
                                               "writes excluded)", pqn_env_steps=reach["pqn"]["env_steps"],
                           dqn_env_steps=reach["dqn"]["env_steps"])
    timing = censored(timing, reach["pqn"]["reached"], reach["dqn"]["reached"])
    final = C.difference(e["pqn"][:, -1], e["dqn"][:, -1], paired=False)
    found = [C.judge(f"{game}: PQN reaches the target return {target:.3g} in less training wall time than DQN "
                     f"(same env steps, this CPU)", timing, depends, quick),
             C.judge(f"{game}: at equal env steps PQN's final greedy return is higher than DQN's", final, depends, quick)]
    row = {"game": game, "target": target}
    for a, record in (("pqn", pqn), ("dqn", dqn)):
        row.update({f"{a}_final": e[a][:, -1].tolist(), **{f"{a}_{k}": v for k, v in reach[a].items()},
                    **{f"{a}_{k}": record[k] for k in ("train_seconds", "compile_seconds", "wall_seconds", "steps_per_second")}})
    return found, signal, row


def gpu_claim(out: Path, scale: Scale, quick: bool) -> list:
    """The 50x claim from ``out/gpu/arms`` (PQN on a GPU, DQN on the CPU), or ``inconclusive: not run``."""
    claim = (f"PQN trained end to end on one GPU reaches the target return at least {GPU_SPEEDUP:g}x faster in wall time "
             "than DQN with its environments and replay buffer on the CPU (the paper's framing)")
    rule = (f"difference (Welch Student-t 95% over seeds) of log training seconds to the target, DQN on the CPU minus "
            f"PQN on the GPU, per game: holds if the interval lies above log {GPU_SPEEDUP:g}")
    folder = Path(out) / "gpu" / "arms"
    records = {(g, a): folder / f"{g}-{a}.json" for g in scale.games for a in ALGOS}
    if quick or not all(p.exists() for p in records.values()):
        ruling = C.Claim("", C.INCONCLUSIVE, rule, {"reason": "not run: no GPU", "command": GPU_COMMAND})
        return [C.judge(claim, ruling, quick=quick)]
    found = []
    for game in scale.games:
        pqn, dqn = (json.loads(records[game, a].read_text()) for a in ALGOS)
        _, signal, row = game_claims(game, pqn, dqn, quick)
        ruling = C.difference(np.log(row["dqn_seconds"]), np.log(row["pqn_seconds"]), paired=False,
                              margin=math.log(GPU_SPEEDUP))
        ruling = censored(ruling, row["pqn_reached"], [True] * scale.seeds)
        ruling.evidence.update(target=row["target"], pqn_platform=pqn["platform"], dqn_platform=dqn["platform"],
                               speedup=float(np.exp(ruling.evidence["difference"])))
        found.append(C.judge(f"{game}: {claim}", dataclasses.replace(ruling, rule=rule), list(signal.values()), quick))
    return found


def gpu(out: str) -> None:
    """On a GPU machine: PQN arms on the GPU here, DQN arms on the CPU in a subprocess (JAX_PLATFORMS=cpu)."""
    import jax

    if jax.default_backend() != "gpu":
        print(f"`python -m longhorizon.repro.pqn gpu` needs a GPU; JAX sees {jax.default_backend()} only.", file=sys.stderr)
        raise SystemExit(2)
    folder = Path(out) / "gpu"
    for game in FULL.games:
        train_arm(game, "pqn", FULL, folder)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-m", "longhorizon.repro.pqn", "cpu-arms", "--algo", "dqn", "--out", str(folder)],
                   env=env, check=True)


# ================================================================ report
def curve_rows(record: dict) -> list[dict]:
    rows = []
    for p in record["points"]:
        row = {"step": p["env_steps"], "train_seconds": p["train_seconds"], "wall_seconds": p["wall_seconds"]}
        for i, value in enumerate(p["return_per_seed"] or []):
            row[f"train_return_seed{i}"] = value
        for i, value in enumerate(p["eval_per_seed"]):
            row[f"eval_seed{i}"] = value
        row["eval_mean"] = float(np.mean(p["eval_per_seed"]))
        rows.append(row)
    return rows


def baird_curve_rows(trace: dict, points: int = 201) -> list[dict]:
    w, v = trace["w_norm"], trace["max_value"]
    index = np.unique(np.linspace(0, w.shape[1] - 1, points).astype(int))
    return [{"step": int(t), **{f"w_norm_run{i}": float(w[i, t]) for i in range(w.shape[0])},
             **{f"max_abs_value_run{i}": float(v[i, t]) for i in range(v.shape[0])}} for t in index]


def plot(path: Path, m: dict, records: dict, scale: Scale) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = [g for g in scale.games if all((g, a) in records for a in ALGOS)]
    fig, axes = plt.subplots(2, 1 + len(games), figsize=(3.6 * (1 + len(games)), 6.4), squeeze=False)
    ax = axes[0, 0]
    for arm in BAIRD_ARMS:
        w = m["traces"][arm.name]["w_norm"]
        ax.plot(np.arange(w.shape[1]), np.median(w, 0), "-" if arm.claim else ":", lw=1.2, label=arm.name[6:])
    ax.set_yscale("log")
    ax.set_xlabel("expected / sampled updates")
    ax.set_ylabel("||w|| (median over runs)")
    ax.set_title("Baird's counterexample", fontsize=9)
    axes[1, 0].axis("off")
    axes[1, 0].legend(*ax.get_legend_handles_labels(), loc="center", fontsize=7, title="Baird arms (dotted: ablations)",
                      title_fontsize=7)
    for j, game in enumerate(games, start=1):
        for a in ALGOS:
            r = records[game, a]
            e = evals(r)
            mean = e.mean(0)
            se = e.std(0, ddof=1) / np.sqrt(e.shape[0]) if e.shape[0] > 1 else 0 * mean
            for row, x in ((0, [p["env_steps"] for p in r["points"]]), (1, [p["train_seconds"] for p in r["points"]])):
                axes[row, j].plot(x, mean, marker="o", ms=3, label=a.upper())
                axes[row, j].fill_between(x, mean - se, mean + se, alpha=0.2)
        axes[0, j].set_title(game, fontsize=9)
        axes[0, j].set_xlabel("env steps per seed")
        axes[1, j].set_xlabel("training seconds (3 seeds vmapped)")
        axes[0, j].set_ylabel("greedy return")
        axes[1, j].set_ylabel("greedy return")
        axes[0, j].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def reading(s: dict) -> str:
    """What the MinAtar table says in one paragraph, computed from it."""
    rows = s["minatar"]
    speed = [r["dqn_train_seconds"] / r["pqn_train_seconds"] for r in rows]
    ahead = [r["game"] for r in rows if np.mean(r["dqn_final"]) > np.mean(r["pqn_final"])]
    resolved = [c["claim"].split(":")[0] for c in s["claims"]
                if "final greedy return" in c["claim"] and c["verdict"] in (C.HOLDS, C.CONTRADICTED)]
    return (f"Reading: for the same env steps PQN's training took {min(speed):.1f}-{max(speed):.1f}x less time than DQN's "
            f"(it takes one gradient step per 64 env steps on batches of 128, DQN one per 4 on batches of 32). At this "
            f"budget, {s['minatar_budget_share']:.1%} of the paper's 1e7 steps, DQN's mean final greedy return is the "
            f"higher on {len(ahead)} of {len(rows)} games ({', '.join(ahead) or 'none'}); the 3-seed intervals resolve "
            f"{len(resolved)} of the final-return comparisons ({', '.join(resolved) or 'none'}).")


def _ci(values) -> str:
    mean, low, high = C.t_interval(values)
    return f"{mean:.3g}" if not np.isfinite(low) else f"{mean:.3g} [{low:.3g}, {high:.3g}]"


def readme(s: dict, scale: Scale) -> list[str]:
    ab = s["baird"]
    lines = [
        "# PQN: TD's stability on Baird's counterexample, and PQN vs DQN on MinAtar",
        "",
        "Paper: Gallici, Fellows, Ellis, Pou, Masmitja, Foerster, Martin, *Simplifying Deep Temporal Difference "
        "Learning* (ICLR 2025). Code: `src/longhorizon/repro/pqn.py` (claims and protocol), "
        "`src/longhorizon/tabular/baird.py` (the counterexample and the updates), `src/longhorizon/algos/pqn.py`, "
        "`src/longhorizon/algos/dqn.py`.",
        "",
        "## The paper's setting beside ours",
        "",
        "| | paper | here |",
        "|---|---|---|",
        "| stability result | LayerNorm + l2 (eta > (gamma/2)^2 on the last layer) makes TD stable, proved for "
        "w^T ReLU(LN(Mx)) in the wide limit (our reading of the paper's analysis) | Baird (Sutton & Barto Ex. 11.1, "
        "gamma 0.99, alpha 0.01, w0 = (1,1,1,1,1,1,10,1)); expected updates (exact) and sampled runs; LN critic of "
        f"width {WIDTH} (finite, not the wide limit), l2 eta = {ETA} on w |",
        "| lambda-returns | Peng's Q(lambda) with max bootstraps (control) | Baird is prediction: per-decision "
        "importance-sampled lambda-return, the same recursion with rho in place of the max |",
        "| MinAtar budget | 1e7 env steps per seed, GPU | "
        f"{scale.env_steps:,} env steps per seed ({scale.pqn_updates} PQN updates), {scale.seeds} seeds, 2 shared CPU cores |",
        "| PQN | 128 envs x 32 steps, 2 epochs x 32 minibatches, RAdam 5e-4, lambda 0.65, LayerNorm | the same "
        "(schedules are fractions of the budget: epsilon 1 -> 0.05 over the first 10%) |",
        "| DQN | a traditional DQN (CPU replay) | ours: 8 envs x 4 steps, 8 gradient steps of 32 per 32 env steps, Adam 1e-4, "
        "target every 250 gradient steps (1000 env steps), a replay buffer that holds the whole run (it never wraps, so "
        "it samples as the 100k default would), epsilon 1 -> 0.01 over 10%, "
        "5000 random steps first |",
        "| speed claim | up to 50x faster than DQN (GPU end to end vs CPU replay) | CPU here; the GPU run is a command "
        "(below) |",
        "",
        "## (a) Baird's counterexample",
        "",
        f"Expected semi-gradient updates for {ab['steps']} steps (exact, float64, arms vmapped in one `lax.scan` per "
        f"critic; all arms {ab['seconds']:.1f} s in this run, compilation included); LayerNorm arms over {scale.baird_inits} initialisations, "
        f"sampled arms over {scale.baird_seeds} seeds. Tolerances fixed before the run: diverged = ||w_T|| >= "
        f"{DIVERGE:g} ||w_0|| and still growing; bounded = max_t ||w_t|| and max_t max_s |v_t(s)| <= {BOUND:g} x "
        "their start, on every run. Ratios are worst over runs (median for the slope).",
        "",
        "| arm | lambda | l2 eta | runs | ||w_T||/||w_0|| | max_t ||w_t||/||w_0|| | max_t max|v|/start | slope of log||w|| (2nd half) | exact rate | min Re eig(A + eta I) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in ab["rows"]:
        exact = "-" if r["predicted_slope"] is None or r["sampled"] else f"{r['predicted_slope']:.2e}"
        eig = "-" if r["min_real_eigenvalue"] is None else f"{r['min_real_eigenvalue']:.4f}"
        lines.append(f"| {r['arm'][6:]}{'' if r['claim'] else ' (ablation)'} "
                     f"| {r['lambda']:g} | {r['eta']:g} | {r['runs']} | {max(r['final_ratio']):.3g} | "
                     f"{max(r['max_w_ratio']):.3g} | {max(r['max_value_ratio']):.3g} | {np.median(r['log_norm_slope']):.2e} "
                     f"| {exact} | {eig} |")
    lines += [
        "",
        f"Exact thresholds (eigenvalues of A = X^T D_mu (I - gamma lambda P_pi)^-1 (I - gamma P_pi) X): linear TD(0) "
        f"on Baird diverges for gamma > {ab['critical_gamma']:.5f}; at gamma 0.99, TD(lambda) diverges for lambda < "
        f"{ab['critical_lambda']:.5f}. Because P_pi^2 = P_pi here, TD(lambda) is TD(0) with the discount "
        "gamma (1 - lambda) / (1 - gamma lambda): lambda 0.65 gives 0.972 (diverges), 0.95 gives 0.832 (stable).",
        "",
        "Reading the ablations: on this instance l2 alone at the same eta = 0.25 also keeps linear TD bounded (A's most "
        "negative eigenvalue, -0.239, is just above -eta), so Baird cannot separate LayerNorm's share at the paper's "
        "eta. At eta = 0.1 it can: linear TD + l2 diverges, the LayerNorm critic + l2 converges. LayerNorm without l2 "
        "stays within the bound here but its values wander away from the true 0 instead of converging; the paper's "
        "guarantee needs the l2 term.",
        "",
        "## (b) PQN vs DQN on MinAtar",
        "",
    ]
    plan = s["plan"]
    lines += [
        "Budget, planned from step times measured first on this machine (Breakout-MinAtar, 3 vmapped seeds, "
        "while another engineer's tests shared the 2 cores): "
        + "; ".join(plan["measured"].values()) + ". " + plan["plan"],
        "",
        "Target per game (rule fixed before the run): the midpoint between the lower of the two arms' first greedy "
        "evaluations and the higher of their final ones (means over seeds). Time to target = training seconds "
        "(the compiled training program's clock, all 3 seeds vmapped together) up to the first evaluation at or above "
        "it; compilation, evaluations and checkpoint writes excluded (reported separately). A seed that never "
        "reaches it is censored at its run's length (marked *).",
        "",
        "| game | target | PQN final greedy | DQN final greedy | PQN s to target | DQN s to target | PQN env steps to target "
        "| DQN env steps to target | PQN train / compile / whole s | DQN train / compile / whole s | env steps/s PQN / DQN |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    def times(r, a, key):  # censored seeds are marked *
        return ", ".join(f"{t:.0f}{'' if ok else '*'}" for t, ok in zip(r[f"{a}_{key}"], r[f"{a}_reached"]))

    for r in s["minatar"]:
        lines.append(
            f"| {r['game']} | {r['target']:.3g} | {_ci(r['pqn_final'])} | {_ci(r['dqn_final'])} | {times(r, 'pqn', 'seconds')} | "
            f"{times(r, 'dqn', 'seconds')} | {times(r, 'pqn', 'env_steps')} | {times(r, 'dqn', 'env_steps')} | "
            f"{r['pqn_train_seconds']:.0f} / {r['pqn_compile_seconds']:.0f} / {r['pqn_wall_seconds']:.0f} | "
            f"{r['dqn_train_seconds']:.0f} / {r['dqn_compile_seconds']:.0f} / {r['dqn_wall_seconds']:.0f} | "
            f"{r['pqn_steps_per_second']:.0f} / {r['dqn_steps_per_second']:.0f} |")
    lines += [
        "",
        reading(s),
        "",
        "Final greedy returns: mean [95% t-interval] over seeds, each seed the mean of "
        f"{scale.eval_episodes} episodes. Curves per arm in `curves/` (env steps, training seconds, training return and "
        "greedy evaluation per seed); per-arm records in `arms/` (a rerun skips every arm found there).",
        "",
        "![Baird and MinAtar](pqn.png)",
        "",
        "## (c) The 50x claim on one GPU",
        "",
        "As the paper frames it: PQN trained end to end on the GPU (environments, acting and learning in one XLA "
        "program) against DQN with its environments and replay buffer on the CPU, wall time to the same target, at "
        "the protocol's budget. On a machine with one GPU, from the repository root:",
        "",
        "```bash",
        GPU_COMMAND + "   # PQN arms on the GPU, then DQN arms with JAX_PLATFORMS=cpu; writes gpu/arms/",
        COMMAND + "                                   # folds gpu/arms into the verdicts (finished arms are skipped)",
        "```",
        "",
        "Expected time on the lent H200 machine (an estimate, not measured): PQN about 30 s per game (mostly "
        "compilation; docs/pqn.md measured 756k env steps/s for 4 seeds there), DQN on its 16 CPU cores about "
        "1-2 min per game; about 8 min in all. " + s["gpu_status"],
        "",
        "## Verdicts",
        "",
    ]
    lines += verdict_lines(s)
    lines += ["", f"Protocol wall time: {s['wall_seconds']:.0f} s (Baird plus every arm's run, compilation, evaluations and "
                  "checkpoints included).", "", "```bash", COMMAND + (" --quick" if s["quick"] else ""),
              "```"]
    return lines


# ================================================================ run
# Step times measured before the protocol (Breakout-MinAtar, 3 vmapped seeds, this machine, shared): env steps/s.
MEASURED = {"pqn": (1918, "PQN at the reference settings (81,920 steps per seed, compile 14 s)"),
            "dqn": (482, "DQN as run here, 8 gradient steps per 32 env steps (24,576 steps per seed, compile 33 s, "
                         "load 7-8)"),
            "dqn_default": (3160, "DQN at the library's MinAtar default, 1 gradient step per 32 env steps (40,000 steps "
                                  "per seed, compile 20 s)")}
OVERHEAD_S = 60  # per arm: compilation, evaluations, checkpoints (measured 30-90 s in the pilots)


def plan_text(scale: Scale) -> dict:
    """The budget the measured step times give: the whole protocol in about 30 minutes."""
    pqn_s, dqn_s = (len(GAMES) * scale.seeds * scale.env_steps / MEASURED[a][0] for a in ALGOS)
    total = (pqn_s + dqn_s + 2 * len(GAMES) * OVERHEAD_S) / 60
    return {"measured": {k: f"{v[1]}: {v[0]:,} env steps/s" for k, v in MEASURED.items()},
            "plan": (f"{len(GAMES)} games x {scale.seeds} seeds x {scale.env_steps:,} env steps: PQN {pqn_s / 60:.0f} min + "
                     f"DQN {dqn_s / 60:.0f} min of training + about {OVERHEAD_S} s per arm of compilation, evaluation and "
                     f"checkpoints = about {total:.0f} min, the budget that fits about 30 minutes at those rates "
                     f"(the training budget is a multiple of PQN's 4,096-step update).")}


def run(out_dir: str, quick: bool = False, log=print) -> dict:
    """Baird's counterexample, then the MinAtar arms (each saved as it finishes), then the verdicts."""
    start = time.perf_counter()
    scale = QUICK if quick else FULL
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    m = baird_measure(scale)
    log(f"pqn repro: Baird's counterexample in {m['seconds']:.1f} s")
    records = {(game, algo): train_arm(game, algo, scale, out, log) for game in scale.games for algo in ALGOS}
    log(f"pqn repro: this invocation took {time.perf_counter() - start:.0f} s")
    # the protocol's wall time: Baird plus every arm's run, whether it ran now or was read back from arms/
    return report(out, scale, quick, m, records, m["seconds"] + sum(r["wall_seconds"] for r in records.values()))


def report(out: Path, scale: Scale, quick: bool, m: dict, records: dict, wall_seconds: float) -> dict:
    """Judge every claim from the Baird traces ``m`` and the MinAtar ``records[game, algo]``; write the curves,
    the plot, ``summary.json`` and ``README.md`` into ``out``."""
    out = Path(out)
    found, arms, rows = baird_claims(m, quick)
    for arm in BAIRD_ARMS:
        C.write_curve(out, arm.name, baird_curve_rows(m["traces"][arm.name]))
    table = []
    for game in scale.games:
        game_found, signals, row = game_claims(game, records[game, "pqn"], records[game, "dqn"], quick)
        found += game_found
        table.append(row)
        for algo in ALGOS:
            C.write_curve(out, f"{game} {algo}", curve_rows(records[game, algo]))
            arms[f"{game} {algo}"] = C.arm(scale.env_steps, scale.seeds, signals[algo])
    gpu_found = gpu_claim(out, scale, quick)
    found += gpu_found
    gpu_status = ("The GPU run has not been made: no GPU was lent to this session, so the claim reads inconclusive "
                  "(not run: no GPU)." if gpu_found[0].evidence.get("reason") == "not run: no GPU"
                  else "The GPU arms in gpu/arms are judged above.")
    plot(out / "pqn.png", m, records, scale)
    summary = C.summary(
        paper=PAPER, claims=found, arms=arms, quick=quick, command=COMMAND + (" --quick" if quick else ""),
        scale=(f"Baird: {scale.baird_updates} expected updates ({scale.baird_inits} LayerNorm inits, {scale.baird_seeds} "
               f"sampled seeds); MinAtar: {len(scale.games)} games x PQN/DQN x {scale.seeds} seeds x {scale.env_steps} "
               f"env steps, {scale.chunks} evaluations of {scale.eval_episodes} episodes"),
        wall_seconds=wall_seconds,
        baird={**{k: m[k] for k in ("steps", "seconds", "critical_gamma", "critical_lambda")}, "rows": rows},
        minatar=table, minatar_budget_share=scale.env_steps / 1e7, plan=plan_text(scale), gpu_status=gpu_status, gpu_command=GPU_COMMAND, verdict=verdict_line(found))
    history = out / "history.md"  # what changed between runs of this folder, kept beside the results
    write(out, summary, readme(summary, scale) + ([""] + history.read_text().splitlines() if history.exists() else []))
    return summary


def verdict_line(found) -> str:
    """One line for the terminal: how many claims got each verdict."""
    counts = {v: sum(c.verdict == v for c in found) for v in (*C.VERDICTS, C.QUICK)}
    return "pqn: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + " (the README lists them)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m longhorizon.repro.pqn", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    on_gpu = sub.add_parser("gpu", help="the 50x claim's arms on a GPU machine (PQN on the GPU, DQN on the CPU)")
    on_gpu.add_argument("--out", default="docs/results/pqn")
    arms = sub.add_parser("cpu-arms", help="(used by `gpu`) one algorithm's arms at the full scale, on this process's platform")
    arms.add_argument("--algo", choices=ALGOS, required=True)
    arms.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from longhorizon.runner.command_line import setup_compilation_cache

    setup_compilation_cache()
    if args.command == "gpu":
        gpu(args.out)
    else:
        for game in FULL.games:
            train_arm(game, args.algo, FULL, Path(args.out))


if __name__ == "__main__":
    main()
