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
Each claim is judged by :func:`judge` (per-seed paired differences, Student-t 95% intervals over >= 3 seeds).
How it was measured and how it differs from the paper: docs/results/qgf/NOTES.md.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.repro import claims as C
from longhorizon.repro.qgf_cube import CubeSetup, _cell, cube_lines, run_cube
from longhorizon.repro.report import block_means, verdict_lines


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
        return {"return": toy.reward(task, actions).mean(-1), "success": toy.success(task, actions).mean(-1),
                "off_support": toy.off_support(actions, support, setup.support_radius).mean(-1)}

    def measure(actions):
        return {k: np.asarray(v) for k, v in _measure(actions).items()}

    def qgf_one(fp, cp, w, key):
        return flows.sample("qgf", lambda o, x, t: velocity_apply(fp, o, x, t), lambda o, a: q_apply(cp, o, a), obs, key,
                            setup.num_steps, toy.ACTION_DIM, w)

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
    # the reference a trained policy must beat: actions uniform on [-1, 1]^2, per seed
    uniform = jax.random.uniform(jax.random.fold_in(k_eval, 99), (setup.seeds, setup.eval_samples, toy.ACTION_DIM),
                                 minval=-1.0, maxval=1.0)
    random_return = measure(uniform)["return"]
    optimum = float(toy.reward(task, jnp.asarray(task.centers[task.best])))
    fql_distill = np.asarray(fql_metrics["distill_loss"]).reshape(len(setup.alphas), setup.seeds, -1)
    training = {"flow BC": blocks(flow_losses), "IQL critic": blocks(critic_metrics["q_loss"]),
                **{f"FQL alpha={a:g}": blocks(fql_distill[i]) for i, a in enumerate(setup.alphas)}}
    return {"rows": rows, "samples": samples, "timings": timings, "task": dataclasses.asdict(task), "optimum": optimum,
            "data_return": float(np.mean(np.asarray(data["rewards"]))), "training": training,
            "random_return": [float(x) for x in random_return]}


def blocks(losses, points: int = 50) -> dict[str, list]:
    """A training-loss curve per seed (``losses [seeds, updates]``) as the means of ``points`` equal blocks of
    updates; ``step`` is each block's last update."""
    steps, means = block_means(losses, points)
    return {"step": steps, "loss": means.tolist()}


# ----------------------------------------------------------------------------- claims
def _rows(result, split: str, method: str | None = None) -> list[dict[str, Any]]:
    return [r for r in result["rows"] if r["split"] == split and (method is None or r["method"] == method)]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["method"] == b["method"] and a["setting"] == b["setting"]


def choose(result: dict[str, Any]) -> dict[str, Any]:
    """QGF's ``w`` and FQL's ``alpha`` picked on the selection samples (best mean return), and the smallest
    best-of-N whose compute is at least the chosen QGF's (the baseline gets the larger budget)."""
    best = max(_rows(result, "select", "qgf"), key=lambda r: np.mean(r["return"]))
    fql = max(_rows(result, "select", "fql"), key=lambda r: np.mean(r["return"]))
    budget = next(r for r in _rows(result, "report") if _same(r, best))["evaluations"]["total"]
    bon = sorted(_rows(result, "report", "best_of_n"), key=lambda r: r["evaluations"]["total"])
    equal = next((r for r in bon if r["evaluations"]["total"] >= budget), bon[-1])
    return {"w": best["setting"]["w"], "alpha": fql["setting"]["alpha"], "best_of_n_at_equal_compute": equal["setting"]["N"]}


def judge(L: dict[str, Any], quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers (``rows``: per-seed return, success and off-support share on
    the report samples; ``chosen``; ``setup``; ``cube``, None when not run), compared on the report samples."""
    setup, chosen = L["setup"], L["chosen"]
    row = lambda method, key, value: next(r for r in L["rows"] if r["split"] == "report" and r["method"] == method  # noqa: E731
                                         and r["setting"].get(key) == value)
    bc, best, top = row("bc", "w", 0.0), row("qgf", "w", chosen["w"]), row("qgf", "w", max(setup["weights"]))
    bon, fql = row("best_of_n", "N", chosen["best_of_n_at_equal_compute"]), row("fql", "alpha", chosen["alpha"])
    w = f"w={chosen['w']:g} (chosen on the selection split)"
    sig = signals(L, bc["return"], fql["return"])
    flow, critic = sig["flow BC"], sig["IQL critic"]
    claims = [
        C.judge(f"critic-gradient guidance raises return over BC ({w}; report split)", C.difference(best["return"], bc["return"]),
                [flow, critic], quick=quick),
        C.judge(f"too large a weight (w={max(setup['weights']):g}) leaves the data's support and hurts",
                C.combine({"hurts": C.difference(best["return"], top["return"]),
                           "leaves the support": C.difference(top["off_support"], best["off_support"])}, "part"),
                [flow, critic], quick=quick),
        C.judge(f"QGF beats best-of-{bon['setting']['N']} at equal compute ({best['evaluations']['total']} vs "
                f"{bon['evaluations']['total']} evaluations per action)", C.difference(best["return"], bon["return"]),
                [flow, critic], quick=quick),
        C.judge(f"test-time guidance (QGF) is at least as good as training a policy per alpha (FQL, alpha={chosen['alpha']:g})",
                C.difference(best["return"], fql["return"]), [flow, critic, sig["FQL"]], quick=quick),
    ]
    arms = {"BC": C.arm(setup["flow_updates"], setup["seeds"], sig["flow BC"]),
            "QGF": C.arm(setup["critic_updates"], setup["seeds"], sig["IQL critic"]),
            "FQL": C.arm(setup["fql_updates"], setup["seeds"], sig["FQL"])}
    if L.get("cube"):
        cube = {(r["method"], json.dumps(r["setting"])): r["success"] for r in L["cube"]["rows"]}
        floor = C.task_floor("BC on cube-single", cube["bc", json.dumps({"w": 0.0})], C.TASK_FLOOR)
        guided = max((k for k in cube if k[0] == "qgf"), key=lambda k: np.mean(cube[k]))
        claims.append(C.judge("guidance raises success on OGBench cube-single (best weight)",
                              C.difference(cube[guided], cube["bc", json.dumps({"w": 0.0})]), [floor], quick=quick))
        arms["BC on cube-single"] = C.arm(L["cube"]["setup"]["updates"], L["cube"]["setup"]["seeds"], floor)
    return claims, arms


def signals(L: dict, bc_return, fql_return) -> dict[str, dict]:
    """Did the trained networks learn? Flow BC and FQL (at the chosen alpha): their return (report split, mean
    over seeds) above a uniformly random action's (:func:`claims.baseline_signal`); the IQL critic: its log Q loss
    falls (:func:`claims.arm_signal`, last vs first window, Student-t over seeds; the log because the loss's scale
    differs by seed). A summary written before these numbers were kept cannot tell: not applied."""
    if "random_return" not in L:
        return {k: C.not_applied(k, "not recorded") for k in ("flow BC", "IQL critic", "FQL")}
    random = L["random_return"]
    return {"flow BC": C.baseline_signal("flow BC", bc_return, random, what="a uniformly random action"),
            "FQL": C.baseline_signal(f"FQL alpha={L['chosen']['alpha']:g}", fql_return, random,
                                     what="a uniformly random action"),
            "IQL critic": C.arm_signal("IQL critic", np.log(L["training"]["IQL critic"]["loss"]),
                                       higher_is_better=False, what="log Q loss")}


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
             f"Command: `{summary['command']}` ({setup.seeds} seeds; wall time {summary['wall_seconds'] / 60:.1f} min on "
             "a shared CPU, niced). Each trained network's loss curve (flow BC, IQL critic, FQL per alpha; per seed, "
             "means over blocks of updates) is in `curves/`.", "",
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
    lines += ["", "## Verdict", "", *verdict_lines(summary)]
    lines += ["", "![samples and curves](qgf.png)", ""] + cube_lines(cube) + [
        "", f"Time: flow {result['timings']['flow_s']:.0f} s, critic {result['timings']['critic_s']:.0f} s, sampling "
        f"{result['timings']['sampling_s']:.0f} s, FQL {result['timings']['fql_s']:.0f} s. How it was measured, and how it "
        "differs from the paper: docs/results/qgf/NOTES.md."]
    (root / "README.md").write_text("\n".join(lines) + "\n")


def run(out_dir: str, quick: bool = False, setup: Setup | None = None,
        cube: CubeSetup | None | str = "default") -> dict[str, Any]:
    """Run the study (``QUICK`` with ``quick``) and write README.md, summary.json and qgf.png into ``out_dir``.
    The full run adds OGBench cube-single (``cube``; None skips it; ``--quick`` never runs it)."""
    setup, t0 = setup or (QUICK if quick else Setup()), time.perf_counter()
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    result = run_toy(setup)
    cube_result = None
    if not quick and cube is not None:
        try:
            import ogbench  # noqa: F401
        except ImportError:
            print("qgf: ogbench is not installed (pip install 'longhorizon[offline]'); cube-single skipped")
        else:
            cube_result = run_cube(CubeSetup() if cube == "default" else cube)
    rows = [{**{k: v for k, v in r.items() if k not in ("return", "success", "off_support")},
             **{k: [float(x) for x in r[k]] for k in ("return", "success", "off_support")}} for r in result["rows"]]
    recorded = C.as_recorded({"chosen": choose(result), "setup": dataclasses.asdict(setup), "rows": rows,
                                      "optimum": result["optimum"], "data_return": result["data_return"],
                                      "timings": result["timings"], "training": result["training"],
                                      "random_return": result["random_return"], "cube": cube_result})
    claims, arms = judge(recorded, quick)
    summary = C.summary(paper="QGF", claims=claims, arms=arms, quick=quick,
                        scale=f"toy 2-D multi-modal task ({setup.dataset_size:,} transitions), {setup.flow_updates} flow / "
                              f"{setup.critic_updates} critic updates, {setup.seeds} seeds"
                              + ("" if cube_result is None else f"; cube-single at {cube_result['setup']['updates']} updates"),
                        command=f"longhorizon repro qgf{' --quick' if quick else ''}", wall_seconds=time.perf_counter() - t0,
                        **recorded)
    write_report(root, result, summary, setup, quick, cube_result)
    (root / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for name, curve in recorded["training"].items():
        C.write_curve(root, name, [{"step": step, "seed": seed, "loss": losses[k]}
                                   for seed, losses in enumerate(curve["loss"]) for k, step in enumerate(curve["step"])])
    return summary
