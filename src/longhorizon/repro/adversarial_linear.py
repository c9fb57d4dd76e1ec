"""`longhorizon repro adversarial-linear`: log-barrier FTRL vs Hedge in adversarial linear-Q MDPs.

Paper: Dai, Luo, Wei, Zimmert, "Refined Regret for Adversarial MDPs with Linear Function Approximation"
(ICML 2023). With a simulator, per-state FTRL with the log-barrier regulariser and the unbiased linear-Q
estimator Qhat = phi^T Sigma^{-1} phi(s_h, a_h) L_h has regret O~(sqrt K); the refined analysis lets Qhat be
arbitrarily negative, which exponential weights (Hedge) cannot afford.

Measured (:mod:`longhorizon.theory.ftrl`, float64, seeds and the four (learner, adversary) arms in one
vmapped program): the regret Regret_K against the best fixed policy in hindsight at K from 1e3 to 1e5,
its log-log slope with a bootstrap (over seeds) confidence interval, the smallest estimate, the smallest
probability and the updates Hedge could not form (its covariance singular).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro.report import bootstrap_slope, verdict_lines, write_run

SLOPE_LIMIT = 0.65  # sqrt(K) up to logs over two decades: a fitted slope whose interval lies below this holds
ARMS = (("log_barrier", "switching"), ("hedge", "switching"), ("log_barrier", "adaptive"), ("hedge", "adaptive"))
LABELS = {"log_barrier": "log-barrier FTRL", "hedge": "Hedge"}


@dataclasses.dataclass(frozen=True)
class Scale:
    seeds: int
    chunk: int  # episodes between recorded checkpoints
    chunks: int
    fit_from: int  # smallest K in the slope fit
    eta0: float = 5.0  # eta_k = eta0 / sqrt(k), the same for both learners (pilot: eta0 in {1, 5, 20} at K = 2e4)
    period: int = 100
    amplitude: float = 0.5
    bootstrap: int = 2000

    @property
    def episodes(self) -> int:
        return self.chunk * self.chunks


FULL = Scale(seeds=8, chunk=1000, chunks=100, fit_from=1000)
QUICK = Scale(seeds=3, chunk=100, chunks=20, fit_from=200, bootstrap=500)


def fit_slope(ks: np.ndarray, regret: np.ndarray, bootstrap: int, seed: int = 0) -> tuple[float, float, float]:
    """OLS slope of log(mean_seeds regret) on log K; 95% CI by resampling seeds. regret [seeds, len(ks)].

    Returns (slope, lo, hi), NaNs where a mean regret is not positive (no log-log rate to fit).
    """
    def log_mean(rows):
        mean = rows.mean(0)
        return np.log(mean) if np.all(mean > 0) else np.full_like(mean, np.nan)

    return bootstrap_slope(np.log(ks), regret, summary=log_mean, resamples=bootstrap, rng=seed)


def measure(scale: Scale, log=print) -> dict:
    import jax

    from longhorizon.theory import adversarial_mdp as amdp
    from longhorizon.theory import ftrl

    mdp_config = amdp.LinearMDPConfig()
    with jax.enable_x64(True):
        mdp = amdp.make_linear_mdp(mdp_config)
        tables = amdp.switching_tables(amdp.AdversaryConfig(), mdp_config.layers, mdp_config.dim)
        arms = ftrl.stack_arms([ftrl.make_arm(ftrl.LearnerConfig(alg, scale.eta0),
                                              amdp.AdversaryConfig(kind, scale.period, scale.amplitude))
                                for alg, kind in ARMS for _ in range(scale.seeds)])
        keys = jax.random.split(jax.random.PRNGKey(0), len(ARMS) * scale.seeds)
        run = ftrl.make_run(mdp, tables, scale.chunks, scale.chunk)
        start = time.time()
        compiled = run.lower(arms, keys).compile()
        compile_s = time.time() - start
        log(f"adversarial-linear: compiled in {compile_s:.1f} s; {len(ARMS)} arms x {scale.seeds} seeds x "
            f"{scale.episodes} episodes")
        start = time.time()
        history, regret = jax.block_until_ready(compiled(arms, keys))
        run_s = time.time() - start
        regret = np.asarray(regret).reshape(len(ARMS), scale.seeds, scale.chunks)

    def per_arm(field):
        return np.asarray(getattr(history, field))[:, -1].reshape(len(ARMS), scale.seeds)

    ks = scale.chunk * np.arange(1, scale.chunks + 1)
    fit = ks >= scale.fit_from
    min_q, min_p, skipped = per_arm("min_q_hat"), per_arm("min_prob"), per_arm("skipped")
    rows = []
    for i, (alg, kind) in enumerate(ARMS):
        slope, lo, hi = fit_slope(ks[fit], regret[i][:, fit], scale.bootstrap)
        rows.append({"learner": alg, "adversary": kind, "slope": slope, "slope_ci": [lo, hi],
                     "regret_final": regret[i][:, -1].tolist(), "min_q_hat": float(min_q[i].min()),
                     "min_prob": float(min_p[i].min()), "skipped_updates": int(skipped[i].sum()),
                     "skipped_share": float(skipped[i].sum() / (scale.seeds * scale.episodes))})
    return {"ks": ks.tolist(), "regret": regret, "rows": rows, "fit_from": scale.fit_from, "compile_s": compile_s, "run_s": run_s,
            "layers": mdp_config.layers, "mdp": dataclasses.asdict(mdp_config)}


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded rows: log-barrier FTRL's log-log slope against :data:`SLOPE_LIMIT` by its
    bootstrap interval over seeds (``no signal`` unless its regret is sublinear, the interval below 1); the
    tolerance of negative estimates as an exact agreement (no skipped update, no zero probability); Hedge's
    instability as per-seed log regret ratios to FTRL's, Student-t 95% intervals over seeds."""
    sc = L["setup"] if "setup" in L else L["scale"]  # "scale" in a summary written before the claims schema
    rows, seeds = {(r["learner"], r["adversary"]): r for r in L["rows"]}, sc["seeds"]
    sig = {adv: {"arm": f"log-barrier FTRL ({adv})", "test": "regret sublinear: the log-log slope's interval below 1",
                 "interval": rows["log_barrier", adv]["slope_ci"], "moved": rows["log_barrier", adv]["slope_ci"][1] < 1.0,
                 "what": f"log-barrier FTRL ({adv}): regret not sublinear"} for adv in ("switching", "adaptive")}
    how = "least-squares slope of log mean regret on log K"
    claims = [C.judge(f"log-barrier FTRL's regret grows at most as sqrt(K) against the {adv} adversary (slope below {SLOPE_LIMIT:g})",
                      C.bootstrap_interval(*rows["log_barrier", adv]["slope_ci"], SLOPE_LIMIT, below=True, seeds=seeds, how=how),
                      [sig[adv]], quick=quick) for adv in ("switching", "adaptive")]
    lb = [rows["log_barrier", a] for a in ("switching", "adaptive")]
    claims.append(C.judge(
        "the linear-Q estimates are arbitrarily negative and log-barrier FTRL tolerates them (no skipped update, "
        "no zero probability)",
        C.agreement([r["skipped_share"] for r in lb] + [float(min(r["min_prob"] for r in lb) <= 0.0)], [0.0, 0.0, 0.0],
                    tolerance=0.0, side="below"), quick=quick))  # skipped shares, then 1 if a probability reached 0
    claims.append(C.judge("Hedge with the same estimator and step size is unstable: larger regret (per-seed log ratio "
                          "to log-barrier FTRL above 0)",
                          C.combine({adv: C.difference(np.log(rows["hedge", adv]["regret_final"]),
                                                       np.log(rows["log_barrier", adv]["regret_final"]))
                                     for adv in ("switching", "adaptive")}, "adversary"), list(sig.values()), quick=quick))
    arms = {f"{a} ({adv})": C.arm(sc["chunk"] * sc["chunks"], seeds, sig[adv] if a == "log_barrier" else C.not_applied(
        f"{a} ({adv})", "the unstable comparison arm; its instability is the claim")) for a, adv in rows}
    return claims, arms


def curves(m: dict) -> dict:
    """Each arm's regret curve (its training curve): K, the mean regret over seeds and each seed's regret."""
    out = {}
    for i, r in enumerate(m["rows"]):
        regret = m["regret"][i]
        out[f"{r['learner']} ({r['adversary']})"] = [
            {"step": k, "regret_mean": regret[:, j].mean(), **{f"regret_seed{s}": regret[s, j] for s in range(len(regret))}}
            for j, k in enumerate(m["ks"])]
    return out


def plot(path: Path, m: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = np.asarray(m["ks"])
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, r in enumerate(m["rows"]):
        curve = m["regret"][i]
        mean, se = curve.mean(0), curve.std(0, ddof=1) / np.sqrt(len(curve)) if len(curve) > 1 else 0 * curve[0]
        style = "-" if r["learner"] == "log_barrier" else "--"
        label = (f"{LABELS[r['learner']]}, {r['adversary']} "
                 f"(slope {r['slope']:.2f} [{r['slope_ci'][0]:.2f}, {r['slope_ci'][1]:.2f}])")
        line, = ax.plot(ks, np.maximum(mean, 1e-3), style, label=label)
        ax.fill_between(ks, np.maximum(mean - se, 1e-3), np.maximum(mean + se, 1e-3), color=line.get_color(), alpha=0.2)
        fit = ks >= m["fit_from"]
        if np.isfinite(r["slope"]):  # the fitted power law through the fitted range's geometric-mean point
            anchor_k, anchor_r = np.exp(np.log(ks[fit]).mean()), np.exp(np.log(mean[fit]).mean())
            ax.plot(ks[fit], anchor_r * (ks[fit] / anchor_k) ** r["slope"], color="black", lw=0.6, alpha=0.6)
    ref = m["regret"][0].mean(0)[-1] * np.sqrt(ks / ks[-1])
    ax.plot(ks, ref, ":", color="gray", label="sqrt(K) reference")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("episodes K")
    ax.set_ylabel("regret vs best fixed policy")
    ax.set_title("adversarial linear-Q MDP: regret (mean, +-1 SE; thin: fitted slopes)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def readme(summary: dict, scale: Scale) -> str:
    ks = summary["ks"]
    targets = np.geomspace(scale.fit_from, ks[-1], 5)  # five log-spaced columns over the fitted range
    shown = sorted({int(np.argmin(np.abs(np.log(ks) - np.log(t)))) for t in targets})
    lines = [
        "# Adversarial MDPs with linear Q: log-barrier FTRL vs Hedge",
        "",
        "Claim (Dai, Luo, Wei, Zimmert 2023, *Refined Regret for Adversarial MDPs with Linear Function Approximation*): "
        "with a simulator, per-state FTRL with the log-barrier regulariser and the unbiased linear-Q estimator "
        "Qhat_h(s,a) = phi_h(s,a)^T Sigma_h^-1 phi_h(s_h,a_h) L_h has regret O~(sqrt K), although Qhat can be "
        "arbitrarily negative; Hedge with the same estimator is not stable.",
        "",
        f"Scale: a random linear MDP (H={summary['mdp']['layers']} layers, S={summary['mdp']['states']} states per layer, "
        f"A={summary['mdp']['actions']} actions, d={summary['mdp']['dim']} Dirichlet({summary['mdp']['concentration']}) "
        f"simplex features, P = phi^T mu, losses phi^T theta_k in [0, 1]), {scale.episodes} episodes, "
        f"{scale.seeds} seeds, float64. Adversaries: switching between two random loss tables every {scale.period} "
        f"episodes; adaptive, theta_k,h = clip(1/2 + {scale.amplitude} d (E_pi_k[phi_h] - 1/d), 0, 1). "
        f"Step size eta_k = {scale.eta0} / sqrt(k) for both learners (eta0 picked from {{1, 5, 20}} on a "
        "2e4-episode pilot, before any claim was scored).",
        "",
        "Differences from the paper: the covariance Sigma_h of the current policy is computed exactly from the known "
        "transitions (the paper estimates it from simulator rollouts); one anytime run with eta_k ~ 1/sqrt(k) gives "
        "the regret at every K instead of one run per K with eta tuned to K; regret uses the exact values "
        "V^pi_k(theta_k) (pseudo-regret) against the best fixed policy in hindsight (a min-DP on sum_k theta_k). "
        "When Hedge's probabilities underflow to exactly 0 the covariance is singular and that episode's update is "
        "skipped (counted below).",
        "",
        "| learner | adversary | " + " | ".join(f"regret K={ks[i]}" for i in shown)
        + " | min-max over seeds at the last K | slope [95% CI] | min Qhat | min p | skipped updates |",
        "|---|---|" + "---|" * (len(shown) + 5),
    ]
    for i, r in enumerate(summary["rows"]):
        curve = np.asarray(summary["regret_mean"][i])
        lines.append(f"| {LABELS[r['learner']]} | {r['adversary']} | " + " | ".join(f"{curve[j]:.1f}" for j in shown)
                     + f" | {min(r['regret_final']):.0f}-{max(r['regret_final']):.0f} | {r['slope']:.2f} [{r['slope_ci'][0]:.2f}, {r['slope_ci'][1]:.2f}] | {r['min_q_hat']:.3g} | "
                     f"{r['min_prob']:.2g} | {r['skipped_updates']} ({r['skipped_share']:.1%}) |")
    lines += ["", f"Slopes: OLS of log mean regret on log K for K >= {scale.fit_from}; CI: 2.5-97.5 percentiles over "
              f"{scale.bootstrap} resamplings of the seeds. Hedge's instability is judged on per-seed log ratios of its "
              "regret to FTRL's (its regret is heavy-tailed: a log tames one seed whose probabilities collapsed).", "",
              "![regret vs K](adversarial_linear.png)", "",
              "Each arm's regret curve (mean and per seed, at every recorded K) is in `curves/`.", "",
              "## Verdict", ""]
    lines += verdict_lines(summary)
    lines += ["", "Rules: `longhorizon.repro.adversarial_linear.judge` (each claim's rule and numbers are in `summary.json`).", "",
              f"Wall time {summary['wall_seconds']:.0f} s on a shared CPU: compile {summary['compile_s']:.1f} s, run "
              f"{summary['run_s']:.1f} s (all arms and seeds in one program). Produced by:",
              "", "```bash", "longhorizon repro adversarial-linear" + (" --quick" if summary["quick"] else ""), "```"]
    return "\n".join(lines)


def run(out_dir: str, quick: bool = False, log=print) -> dict:
    """Measure every arm, write README.md, summary.json, adversarial_linear.png and curves/ into ``out_dir``."""
    scale = QUICK if quick else FULL
    out = Path(out_dir)
    m = measure(scale, log)
    recorded = C.as_recorded({"setup": dataclasses.asdict(scale), "ks": m["ks"], "regret_mean": m["regret"].mean(1),
                              "rows": m["rows"], "mdp": m["mdp"], "compile_s": m["compile_s"], "run_s": m["run_s"]})
    claims, arms = judge(recorded, quick)
    summary = C.summary(paper="Adversarial linear MDPs", claims=claims, arms=arms, quick=quick,
                        scale=f"{scale.episodes:,} episodes, {scale.seeds} seeds, {m['mdp']['layers']}-layer linear-Q MDP",
                        command="longhorizon repro adversarial-linear" + (" --quick" if quick else ""),
                        wall_seconds=m["compile_s"] + m["run_s"], **recorded)
    out.mkdir(parents=True, exist_ok=True)
    plot(out / "adversarial_linear.png", m)
    write_run(out, summary, [readme(summary, scale)], curves(m))
    return summary
