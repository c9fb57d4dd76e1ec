"""qgf on OGBench ``cube-single`` (part of ``longhorizon repro qgf``'s full run): BC vs QGF vs best-of-N with one
task's rewards from OGBench's own single-task relabelling, flow BC and the IQL critic trained once per seed,
success in the real MuJoCo environment."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np


def _stats(values: np.ndarray) -> dict[str, float]:
    """Mean and standard error over seeds of ``values [seeds]``."""
    return {"mean": float(np.mean(values)), "se": float(np.std(values, ddof=1) / np.sqrt(len(values)))}


def _cell(values) -> str:
    s = _stats(np.asarray(values))
    return f"{s['mean']:.3f} +- {s['se']:.3f}"


@dataclasses.dataclass(frozen=True)
class CubeSetup:
    """BC vs QGF vs best-of-N on OGBench ``cube-single`` with one task's rewards (OGBench's relabelling)."""

    dataset: str = "cube-single-play-v0"
    task: int = 1  # the single task whose rewards OGBench's relabelling assigns (singletask-task1)
    size: int = 100_000
    seeds: int = 3
    hidden: tuple[int, ...] = (128, 128)
    updates: int = 3000  # flow BC and the critic each
    expectile: float = 0.9
    weights: tuple[float, ...] = (0.0, 0.3, 1.0, 3.0)
    best_of_n: int = 2  # QGF's evaluation count at K steps, 2K, is best-of-2's N(K + 1) nearly
    episodes: int = 10
    num_steps: int = 10


def run_cube(setup: CubeSetup, log=print) -> dict[str, Any]:
    """Train flow BC and the IQL critic once per seed on the relabelled dataset; success in the real
    environment per method and seed."""
    import jax
    import jax.numpy as jnp
    from ogbench.relabel_utils import relabel_dataset

    from longhorizon.offline import datasets, envs, flows, iql

    name = setup.dataset.replace("-v0", f"-singletask-task{setup.task}-v0")
    raw = datasets.load_dataset(setup.dataset, size=setup.size)
    relabelled = dict(raw)
    relabel_dataset(name, envs.make_env(name), relabelled)  # OGBench's rewards (success - 1) and masks
    # a row whose next observation starts another trajectory is no transition (OGBench drops it too)
    keep = relabelled["valids"] > 0 if "valids" in relabelled else slice(None)
    data = {k: jnp.asarray(relabelled[k][keep], jnp.float32) for k in
            ("observations", "actions", "rewards", "masks", "next_observations")}
    obs_dim, act_dim = data["observations"].shape[1], data["actions"].shape[1]
    flow_config = flows.FlowConfig(hidden=setup.hidden, num_updates=setup.updates, num_steps=setup.num_steps)
    critic_config = iql.IQLConfig(hidden=setup.hidden, num_updates=setup.updates, expectile=setup.expectile)
    keys = jax.random.split(jax.random.PRNGKey(1), setup.seeds)
    t0 = time.perf_counter()
    flow_params, losses = flows.train_seeds(*flows.make_train(flow_config, obs_dim, act_dim), keys, data)
    flows.check_finite(losses, "flow BC")
    critic_params, metrics = flows.train_seeds(*iql.make_train(critic_config, obs_dim, act_dim), keys, data)
    flows.check_finite(metrics["q_loss"], "IQL critic")
    train_s = time.perf_counter() - t0
    log(f"qgf cube: flow and critic trained ({setup.seeds} seeds, {setup.updates} updates, {train_s:.0f} s)")
    network = flows.velocity_network(flow_config, act_dim)
    q_apply = iql.q_apply(critic_config)

    def sample(method, fp, cp, w, obs, key):  # one compiled program per method; parameters and w are traced
        return flows.sample(method, flows.velocity_fn(network, fp), lambda o, a: q_apply(cp, o, a), obs, key,
                            setup.num_steps, act_dim, w, setup.best_of_n)

    programs = {m: jax.jit(lambda *args, m=m: sample(m, *args)) for m in ("bc", "qgf", "best_of_n")}

    def policy_for(seed: int, method: str, w: float = 0.0):
        fp, cp = (jax.tree.map(lambda x: x[seed], t) for t in (flow_params, critic_params))
        # goals are unused: the rewards are single-task
        return lambda obs, goals, key: programs[method](fp, cp, jnp.float32(w), jnp.asarray(obs, jnp.float32), key)

    methods = [("bc" if w == 0 else "qgf", {"w": w}) for w in setup.weights] + [("best_of_n", {"N": setup.best_of_n})]
    rows, t0 = [], time.perf_counter()
    for method, setting in methods:
        success = []
        for seed in range(setup.seeds):
            result = envs.evaluate(policy_for(seed, method, setting.get("w", 0.0)), name, task_ids=(setup.task,),
                                   episodes_per_task=setup.episodes, seed=seed)
            success.append(result["success"])
        n = setting.get("N", 1)
        rows.append({"method": method, "setting": setting, "success": success,
                     "evaluations": flows.evaluations_per_action(method, setup.num_steps, n)})
        log(f"qgf cube: {method} {setting}: success {np.mean(success):.2f}")
    return {"rows": rows, "name": name, "train_s": train_s, "eval_s": time.perf_counter() - t0,
            "reward_mean": float(np.mean(relabelled["rewards"])), "success_rows": float(np.mean(relabelled["masks"] == 0)),
            "setup": dataclasses.asdict(setup)}



CUBE_COMMAND = "longhorizon repro qgf  # the full run adds OGBench cube-single (needs the offline extra)"


def cube_lines(cube: dict[str, Any] | None) -> list[str]:
    if cube is None:
        return ["## OGBench cube-single", "", "Not run here (`--quick`, or the offline extra is missing). "
                f"The full run does it: `{CUBE_COMMAND}`."]
    s = cube["setup"]
    lines = ["## OGBench cube-single", "",
             f"`{cube['name']}`: `{s['dataset']}` generated locally with OGBench's recipe ({s['size']:,} rows), "
             "rewards and masks from OGBench's own single-task relabelling (`ogbench.relabel_utils.relabel_dataset`: "
             f"reward = success - 1, mask = 1 - success; {cube['success_rows']:.1%} of rows are successes). Flow BC and "
             f"IQL (expectile {s['expectile']}) trained once per seed ({s['seeds']} seeds, MLP {tuple(s['hidden'])}, "
             f"{s['updates']} updates each, {cube['train_s'] / 60:.1f} min); success over {s['episodes']} episodes per "
             f"seed in the MuJoCo environment ({cube['eval_s'] / 60:.1f} min). OGBench trains 1M updates of 512x4 "
             "networks on 1M rows: this is orders of magnitude smaller.", "",
             "| method | setting | evaluations / action | success |", "|---|---|---|---|"]
    for r in cube["rows"]:
        setting = ", ".join(f"{k}={v:g}" for k, v in r["setting"].items())
        lines.append(f"| {r['method']} | {setting} | {r['evaluations']['total']} | {_cell(r['success'])} |")
    return lines + ["", "Its verdict is the last claim above (`longhorizon.repro.qgf.judge`)."]
