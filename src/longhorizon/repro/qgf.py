"""qgf ("Test-Time Gradient Guidance of Flow Policies"): guide a behaviour-cloned flow policy with a critic's
gradient at sampling time only.

Claims checked, on the toy multi-modal 2-D task of ``offline.toy`` (one step, one state, four modes
of different reward and some bad data), >= 3 seeds, the flow and the IQL critic trained once per seed:

1. guidance raises the return over plain BC (``w = 0``) for some ``w > 0``;
2. too large a ``w`` leaves the data support and the return falls again;
3. at equal sampling compute (network evaluations per action) QGF is at least as good as best-of-N;
4. QGF (test time, nothing retrained) against FQL's one-step policy (training time), each at its best
   setting.

Settings (``w``, ``alpha``) are chosen on one set of evaluation samples and reported on a second,
independent set (other noise), so the chosen setting's number is not the maximum of noisy estimates.
Differences from the paper and the scale are stated in the written README (:data:`NOTES`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.repro.qgf_cube import CubeSetup, _cell, _stats, cube_claim, cube_lines, run_cube


@dataclasses.dataclass(frozen=True)
class Setup:
    seeds: int = 3
    dataset_size: int = 20_000
    hidden: tuple[int, ...] = (64, 64)  # velocity field, critic and one-step policy
    flow_updates: int = 3000
    critic_updates: int = 3000
    fql_updates: int = 2000
    num_steps: int = 10  # K Euler steps for every flow sample
    weights: tuple[float, ...] = (0.0, 0.1, 0.3, 0.6, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0)
    best_of_n: tuple[int, ...] = (1, 2, 4, 8, 16)
    alphas: tuple[float, ...] = (0.3, 1.0, 3.0, 10.0)
    eval_samples: int = 2000
    support_radius: float = 0.1  # an action farther than this from every dataset action is off-support

    def __post_init__(self):
        if self.seeds < 2:
            raise UsageError(f"qgf needs at least 2 seeds for standard errors, got {self.seeds}; use 3 or more.")
        if 0.0 not in self.weights or len(self.weights) < 3:
            raise UsageError("qgf weights must include 0 (plain BC) and at least two guided weights.")


QUICK = Setup(seeds=3, dataset_size=4000, hidden=(32, 32), flow_updates=300, critic_updates=300, fql_updates=200,
              weights=(0.0, 1.0, 3.0, 30.0), best_of_n=(2, 4), alphas=(1.0, 10.0), eval_samples=500)


def run_toy(setup: Setup, log=print) -> dict[str, Any]:
    """Train flow BC and the critic once per seed; evaluate BC, QGF over ``w``, best-of-N over ``N`` and
    FQL over ``alpha``. Returns per-setting rows (per-seed return, success, off-support share) and samples."""
    import jax
    import jax.numpy as jnp

    from longhorizon.offline import flows, fql, iql, toy

    task = toy.ToyConfig(size=setup.dataset_size)
    data = {k: jnp.asarray(v) for k, v in toy.make_dataset(task).items()}
    flow_config = flows.FlowConfig(hidden=setup.hidden, num_updates=setup.flow_updates, num_steps=setup.num_steps)
    critic_config = iql.IQLConfig(hidden=setup.hidden, num_updates=setup.critic_updates)
    fql_config = fql.FQLConfig(hidden=setup.hidden, num_updates=setup.fql_updates, flow_steps=setup.num_steps)
    key = jax.random.PRNGKey(0)
    k_flow, k_critic, k_fql, k_eval = jax.random.split(key, 4)
    timings = {}

    t0 = time.perf_counter()
    flow_params, flow_losses = flows.train_seeds(*flows.make_train(flow_config, toy.OBS_DIM, toy.ACTION_DIM),
                                                 jax.random.split(k_flow, setup.seeds), data)
    flows.check_finite(flow_losses, "flow BC")
    timings["flow_s"] = time.perf_counter() - t0
    log(f"qgf: flow BC trained ({setup.seeds} seeds, {setup.flow_updates} updates, {timings['flow_s']:.0f} s)")
    t0 = time.perf_counter()
    critic_params, critic_metrics = flows.train_seeds(*iql.make_train(critic_config, toy.OBS_DIM, toy.ACTION_DIM),
                                                      jax.random.split(k_critic, setup.seeds), data)
    flows.check_finite(critic_metrics["q_loss"], "IQL critic")
    timings["critic_s"] = time.perf_counter() - t0
    log(f"qgf: IQL critic trained ({setup.critic_updates} updates, {timings['critic_s']:.0f} s)")

    network = flows.velocity_network(flow_config, toy.ACTION_DIM)
    velocity_apply = lambda p, o, x, t: network.apply(p, o, x, t)  # noqa: E731
    q_apply = iql.q_apply(critic_config)
    obs = jnp.zeros((setup.eval_samples, toy.OBS_DIM))
    support = data["actions"][:: max(1, setup.dataset_size // 4000)]

    @jax.jit
    def _measure(actions):  # [seeds, B, 2] -> per-seed return, success and off-support share
        far = jax.vmap(lambda a: jnp.min(jnp.linalg.norm(a[:, None] - support[None], axis=-1), axis=1))(actions)
        return {"return": toy.reward(task, actions).mean(-1), "success": toy.success(task, actions).mean(-1),
                "off_support": (far > setup.support_radius).mean(-1)}

    def measure(actions):
        return {k: np.asarray(v) for k, v in _measure(actions).items()}

    def qgf_one(fp, cp, w, key):
        noise = jax.random.normal(key, (setup.eval_samples, toy.ACTION_DIM))
        grad = flows.q_action_grad(lambda o, a: q_apply(cp, o, a))
        return flows.euler_sample(lambda o, x, t: velocity_apply(fp, o, x, t), obs, noise, setup.num_steps, grad, w)

    qgf = jax.jit(jax.vmap(qgf_one, in_axes=(0, 0, None, 0)))  # one program for every w (w is traced)
    best_of_programs = {n: jax.jit(jax.vmap(lambda fp, cp, k, n=n: flows.sample_best_of_n(
        lambda o, x, t: velocity_apply(fp, o, x, t), lambda o, a: q_apply(cp, o, a), obs, k, n, setup.num_steps,
        toy.ACTION_DIM))) for n in setup.best_of_n}

    def best_of(n, key):
        return best_of_programs[n](flow_params, critic_params, jax.random.split(key, setup.seeds))

    t0 = time.perf_counter()
    rows, samples = [], {}
    for split, k_split in (("select", 0), ("report", 1)):
        k_split = jax.random.fold_in(k_eval, k_split)
        for w in setup.weights:
            actions = qgf(flow_params, critic_params, jnp.float32(w), jax.random.split(k_split, setup.seeds))
            method = "bc" if w == 0 else "qgf"
            rows.append({"split": split, "method": method, "setting": {"w": w}, **measure(actions),
                         "evaluations": flows.evaluations_per_action(method, setup.num_steps)})
            if split == "report":
                samples[f"w={w:g}"] = np.asarray(actions[0])
        for n in setup.best_of_n:
            actions = best_of(n, jax.random.fold_in(k_split, 1000 + n))
            rows.append({"split": split, "method": "best_of_n", "setting": {"N": n}, **measure(actions),
                         "evaluations": flows.evaluations_per_action("best_of_n", setup.num_steps, n)})
    timings["sampling_s"] = time.perf_counter() - t0

    # FQL: one vmapped program over (seed, alpha) pairs, the flow and the critic of that seed fixed.
    t0 = time.perf_counter()
    finit, ftrain = fql.make_train(fql_config, toy.OBS_DIM, toy.ACTION_DIM, velocity_apply, q_apply)
    pairs = [(s, a) for a in setup.alphas for s in range(setup.seeds)]
    seed_idx = jnp.array([s for s, _ in pairs])
    alphas = jnp.array([a for _, a in pairs], jnp.float32)
    policy = flows.init_seeds(finit, jax.random.split(k_fql, len(pairs)))
    pick = lambda tree: jax.tree.map(lambda x: x[seed_idx], tree)  # noqa: E731
    policy, fql_metrics = jax.jit(jax.vmap(ftrain, in_axes=(0, 0, None, 0, 0, 0)))(
        policy, jax.random.split(jax.random.fold_in(k_fql, 1), len(pairs)), data, pick(flow_params),
        pick(critic_params), alphas)
    flows.check_finite(fql_metrics["distill_loss"], "FQL one-step policy")
    timings["fql_s"] = time.perf_counter() - t0
    log(f"qgf: FQL trained ({len(pairs)} seed x alpha pairs, {setup.fql_updates} updates, {timings['fql_s']:.0f} s)")
    fql_sample = jax.jit(jax.vmap(lambda p, k: fql.sample(fql_config, p, obs, k, toy.ACTION_DIM)))
    for split, k_split in (("select", 0), ("report", 1)):
        keys = jax.random.split(jax.random.fold_in(k_eval, 10 + k_split), len(pairs))
        actions = fql_sample(policy, keys)
        actions = actions.reshape(len(setup.alphas), setup.seeds, *actions.shape[1:])
        for i, alpha in enumerate(setup.alphas):
            rows.append({"split": split, "method": "fql", "setting": {"alpha": alpha}, **measure(actions[i]),
                         "evaluations": flows.evaluations_per_action("fql")})
            if split == "report":
                samples[f"fql alpha={alpha:g}"] = np.asarray(actions[i, 0])
    samples["data"] = np.asarray(data["actions"][:2000])
    optimum = float(toy.reward(task, jnp.asarray(task.centers[task.best])))
    return {"rows": rows, "samples": samples, "timings": timings, "task": dataclasses.asdict(task), "optimum": optimum,
            "data_return": float(np.mean(np.asarray(data["rewards"])))}


# ----------------------------------------------------------------------------- claims
def _rows(result, split: str, method: str | None = None) -> list[dict[str, Any]]:
    return [r for r in result["rows"] if r["split"] == split and (method is None or r["method"] == method)]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["method"] == b["method"] and a["setting"] == b["setting"]


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """Pick QGF's ``w`` and FQL's ``alpha`` on the selection samples, compare on the report samples.
    A difference counts when it exceeds two standard errors of the per-seed paired difference."""
    def report_row(chosen):
        return next(r for r in _rows(result, "report") if _same(r, chosen))

    def diff(a, b, key="return"):
        d = np.asarray(a[key]) - np.asarray(b[key])
        return _stats(d)

    bc = report_row(_rows(result, "select", "bc")[0])
    guided = _rows(result, "select", "qgf")
    best_w = report_row(max(guided, key=lambda r: np.mean(r["return"])))
    largest = report_row(max(guided, key=lambda r: r["setting"]["w"]))
    fql_best = report_row(max(_rows(result, "select", "fql"), key=lambda r: np.mean(r["return"])))
    budget = best_w["evaluations"]["total"]
    bon = sorted(_rows(result, "report", "best_of_n"), key=lambda r: r["evaluations"]["total"])
    equal = next((r for r in bon if r["evaluations"]["total"] >= budget), bon[-1])  # the first N at >= QGF's count

    claims = {}
    d = diff(best_w, bc)
    claims["guidance_raises_return_over_bc"] = (
        ("held" if d["mean"] > 2 * d["se"] else "did not hold")
        + f" (w={best_w['setting']['w']:g}: return {np.mean(best_w['return']):.3f} vs BC {np.mean(bc['return']):.3f}, "
          f"difference {d['mean']:+.3f} +- {d['se']:.3f} SE)")
    d = diff(best_w, largest)
    claims["too_large_w_leaves_the_support_and_hurts"] = (
        ("held" if d["mean"] > 2 * d["se"] and np.mean(largest["off_support"]) > np.mean(best_w["off_support"]) else "did not hold")
        + f" (w={largest['setting']['w']:g}: return {np.mean(largest['return']):.3f}, off-support share "
          f"{np.mean(largest['off_support']):.2f} vs {np.mean(best_w['off_support']):.2f} at w={best_w['setting']['w']:g})")
    d = diff(best_w, equal)
    verdict = "held" if d["mean"] > 2 * d["se"] else ("held (tie within 2 SE)" if d["mean"] > -2 * d["se"] else "did not hold")
    claims["qgf_beats_best_of_n_at_equal_compute"] = (
        verdict + f" (QGF {budget} evaluations/action: {np.mean(best_w['return']):.3f}; best-of-{equal['setting']['N']} "
                  f"{equal['evaluations']['total']} evaluations: {np.mean(equal['return']):.3f}; difference "
                  f"{d['mean']:+.3f} +- {d['se']:.3f})")
    d = diff(best_w, fql_best)
    claims["qgf_vs_fql"] = (
        ("QGF higher" if d["mean"] > 2 * d["se"] else "FQL higher" if d["mean"] < -2 * d["se"] else "tie within 2 SE")
        + f" (QGF w={best_w['setting']['w']:g} {np.mean(best_w['return']):.3f} with {budget} evaluations/action; "
          f"FQL alpha={fql_best['setting']['alpha']:g} {np.mean(fql_best['return']):.3f} with 1, after "
          "training a policy per alpha)")
    verdict = "qgf (toy 2-D task): " + "; ".join(f"{k}: {v}" for k, v in claims.items())
    return {"claims": claims, "verdict": verdict, "chosen": {"w": best_w["setting"]["w"],
            "alpha": fql_best["setting"]["alpha"], "best_of_n_at_equal_compute": equal["setting"]["N"]}}


# ----------------------------------------------------------------------------- report
def plot(path: Path, result: dict[str, Any], summary: dict[str, Any], setup: Setup) -> None:
    """Top: the data, BC, QGF at three weights and FQL over the reward's contours; bottom: return vs w
    (BC, best-of-N at equal compute, FQL as lines) and return vs evaluations per action."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from longhorizon.offline import toy

    task = toy.ToyConfig(**{k: tuple(map(tuple, v)) if k == "centers" else tuple(v) if isinstance(v, list) else v
                            for k, v in result["task"].items()})
    grid = np.linspace(-1, 1, 101)
    xx, yy = np.meshgrid(grid, grid)
    rr = np.asarray(toy.reward(task, np.stack([xx, yy], -1).astype(np.float32)))
    w_star = summary["chosen"]["w"]
    shown = ["data", "w=0", f"w={w_star:g}", f"w={max(setup.weights):g}", f"fql alpha={summary['chosen']['alpha']:g}"]
    fig = plt.figure(figsize=(16, 7.5))
    gs = fig.add_gridspec(2, len(shown), height_ratios=[1, 1.1])
    for i, name in enumerate(shown):
        ax = fig.add_subplot(gs[0, i])
        ax.contourf(xx, yy, rr, levels=12, cmap="Greys", alpha=0.5)
        a = result["samples"][name][:1000]
        ax.scatter(a[:, 0], a[:, 1], s=2, color="tab:blue" if name == "data" else "tab:red", alpha=0.5)
        title = {"data": "dataset", "w=0": "BC (w = 0)"}.get(name, "QGF " + name if name.startswith("w") else name.upper())
        ax.set_title(title, fontsize=10)
        ax.set_xlim(-1, 1), ax.set_ylim(-1, 1), ax.set_aspect("equal"), ax.set_xticks([]), ax.set_yticks([])
    report = _rows(result, "report")
    ax = fig.add_subplot(gs[1, : len(shown) // 2 + 1])
    ws = sorted({r["setting"]["w"] for r in report if r["method"] in ("bc", "qgf")})
    pts = [next(r for r in report if r["method"] in ("bc", "qgf") and r["setting"]["w"] == w) for w in ws]
    xs = [max(w, ws[1] / 3) for w in ws]  # w = 0 drawn at the left edge of the log axis
    mean = np.array([np.mean(p["return"]) for p in pts])
    se = np.array([np.std(p["return"], ddof=1) / np.sqrt(len(p["return"])) for p in pts])
    ax.errorbar(xs, mean, yerr=se, marker="o", color="tab:red", label="QGF (w = 0: BC)", capsize=3)
    ax.plot(xs, [np.mean(p["off_support"]) for p in pts], ls=":", color="tab:red", label="QGF off-support share")
    for r, color, label in (
            (next(r for r in report if r["method"] == "best_of_n" and r["setting"]["N"] == summary["chosen"]["best_of_n_at_equal_compute"]),
             "tab:green", "best-of-N at QGF's compute"),
            (next(r for r in report if r["method"] == "fql" and r["setting"]["alpha"] == summary["chosen"]["alpha"]),
             "tab:purple", "FQL (best alpha)")):
        name = f"N={r['setting']['N']}" if "N" in r["setting"] else f"alpha={r['setting']['alpha']:g}"
        ax.axhline(np.mean(r["return"]), color=color, ls="--", label=f"{label}, {name}")
    ax.axhline(result["optimum"], color="grey", ls="-.", lw=0.8, label="best mode's reward")
    ax.set_xscale("log"), ax.set_xlabel("guidance weight w (log; leftmost point: w = 0)"), ax.set_ylabel("return")
    ax.legend(fontsize=7, loc="lower left")
    ax = fig.add_subplot(gs[1, len(shown) // 2 + 1:])
    bon = sorted((r for r in report if r["method"] == "best_of_n"), key=lambda r: r["setting"]["N"])
    ax.errorbar([r["evaluations"]["total"] for r in bon], [np.mean(r["return"]) for r in bon],
                yerr=[np.std(r["return"], ddof=1) / np.sqrt(len(r["return"])) for r in bon], marker="s",
                color="tab:green", label="best-of-N (N = 1, 2, ...)", capsize=3)
    best = next(r for r in report if r["method"] in ("bc", "qgf") and r["setting"]["w"] == w_star)
    ax.scatter([best["evaluations"]["total"]], [np.mean(best["return"])], color="tab:red", zorder=3, label=f"QGF w={w_star:g}")
    fq = next(r for r in report if r["method"] == "fql" and r["setting"]["alpha"] == summary["chosen"]["alpha"])
    ax.scatter([1], [np.mean(fq["return"])], color="tab:purple", zorder=3, label="FQL (best alpha)")
    ax.set_xscale("log"), ax.set_xlabel("network evaluations per action"), ax.set_ylabel("return")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(root: Path, result: dict[str, Any], summary: dict[str, Any], setup: Setup, quick: bool,
                 cube: dict[str, Any] | None = None) -> None:
    plot(root / "qgf.png", result, summary, setup)
    lines = ["# qgf: test-time gradient guidance of a flow policy vs best-of-N and FQL (toy multi-modal 2-D task)", "",
             f"Command: `longhorizon repro qgf{' --quick' if quick else ''} --out {root}` ({setup.seeds} seeds; "
             f"{sum(result['timings'].values()) / 60:.1f} min of compute, niced on 2 shared CPU cores).", "",
             f"Return: the true mean reward of {setup.eval_samples} sampled actions per seed (the best mode's peak is "
             f"{result['optimum']:.3f}; the dataset's mean reward {result['data_return']:.3f}); success: the share within "
             f"{result['task']['success_radius']} of the best mode's centre; off-support: the share farther than "
             f"{setup.support_radius} from every dataset action. Mean +- standard error over seeds, on the report "
             "samples (settings were chosen on a separate set of samples).", "",
             "| method | setting | evaluations / action (velocity + critic + policy) | return | success | off-support |",
             "|---|---|---|---|---|---|"]
    for r in _rows(result, "report"):
        e = r["evaluations"]
        setting = ", ".join(f"{k}={v:g}" for k, v in r["setting"].items())
        lines.append(f"| {r['method']} | {setting} | {e['total']} ({e['velocity']} + {e['critic']} + {e['policy']}) | "
                     f"{_cell(r['return'])} | {_cell(r['success'])} | {_cell(r['off_support'])} |")
    lines += ["", "## Verdict", ""] + [f"- {k}: **{v}**" for k, v in summary["claims"].items()]
    lines += ["", "![samples and curves](qgf.png)", ""] + cube_lines(cube) + [
        "", NOTES.format(**dataclasses.asdict(setup), **result["timings"])]
    (root / "README.md").write_text("\n".join(lines) + "\n")


NOTES = """## How it was measured, and how it differs from the paper

- Task (`longhorizon.offline.toy`): one step, one state; actions in [-1, 1]^2; reward a sum of Gaussian
  bumps (width 0.3) of heights 1, 0.7, 0.4, 0.1 at the four diagonals (radius 0.6). Data: {dataset_size:,}
  actions, 80% from the four modes (std 0.08, equal weights), 20% "bad" actions from a broad Gaussian at the
  origin (std 0.25). The corners beyond the modes hold no data.
- Per seed, trained once: flow BC (linear-path conditional flow matching, MLP {hidden}, {flow_updates} updates,
  batch 256, Adam 3e-4) and the IQL critic (twin Q with expectile-0.7 V and Polyak targets, the same MLP
  size, {critic_updates} updates). Nothing is retrained per guidance weight. Sampling: {num_steps} Euler steps.
- QGF: at every Euler step the one-step denoised action a_hat = x + (1 - t) v, the gradient of
  min(Q1, Q2) at a_hat (Jacobian replaced by the identity) added to the velocity with weight w, for
  w in {weights}. Best-of-N: N = {best_of_n} BC samples, the one with the highest min(Q1, Q2) kept.
  FQL: a one-step policy per alpha in {alphas}, {fql_updates} updates against the same fixed critic and
  flow (distillation to the flow's {num_steps}-step map from the same noise, Q normalised by its batch
  mean magnitude).
- Compute is counted in network evaluations per action; a critic gradient counts as one critic
  evaluation (a forward and a backward pass of the twin critic). QGF costs 2K, best-of-N N(K + 1),
  FQL 1; "equal compute" compares QGF with the smallest N whose count is at least QGF's (the baseline
  gets the larger budget).
- A claim counts as held when the per-seed paired difference exceeds two standard errors.
- Differences from the paper: a toy task with a known reward instead of OGBench/D4RL; small MLPs;
  the critic is IQL's (the paper's choice of critic may differ), and FQL uses that shared critic,
  not its own critic trained jointly with the one-step policy (on a one-step task both estimate Q = r);
  w, alpha and N are swept rather than tuned per task.
- Time: flow {flow_s:.0f} s, critic {critic_s:.0f} s, sampling {sampling_s:.0f} s, FQL {fql_s:.0f} s.
"""


def run(out_dir: str, quick: bool = False, setup: Setup | None = None,
        cube: CubeSetup | None | str = "default") -> dict[str, Any]:
    """Run the study (``QUICK`` with ``quick``) and write README.md, summary.json and qgf.png into ``out_dir``.
    The full run adds OGBench cube-single (``cube``; None skips it; ``--quick`` never runs it)."""
    setup = setup or (QUICK if quick else Setup())
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    result = run_toy(setup)
    summary = summarise(result)
    cube_result = None
    if not quick and cube is not None:
        try:
            import ogbench  # noqa: F401
        except ImportError:
            print("qgf: ogbench is not installed (pip install 'longhorizon[offline]'); cube-single skipped")
        else:
            cube_result = run_cube(CubeSetup() if cube == "default" else cube)
            summary["claims"]["qgf_raises_success_on_cube_single"] = cube_claim(cube_result)
            summary["verdict"] += f"; qgf_raises_success_on_cube_single: {summary['claims']['qgf_raises_success_on_cube_single']}"
    write_report(root, result, summary, setup, quick, cube_result)
    rows = [{**{k: v for k, v in r.items() if k not in ("return", "success", "off_support")},
             **{k: [float(x) for x in r[k]] for k in ("return", "success", "off_support")}} for r in result["rows"]]
    out = {**summary, "setup": dataclasses.asdict(setup), "quick": quick, "rows": rows, "optimum": result["optimum"],
           "data_return": result["data_return"], "timings": result["timings"], "cube": cube_result}
    (root / "summary.json").write_text(json.dumps(out, indent=2) + "\n")
    return out
