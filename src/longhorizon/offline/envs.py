r"""The real OGBench environments of a dataset, and evaluation of a goal-conditioned policy on their tasks.

Each OGBench environment has 5 fixed evaluation tasks (``reset(options={"task_id": k})``, k = 1..5):
an initial state and a goal, whose observation ``info["goal"]`` the policy is conditioned on. An
episode succeeds when the environment reports ``info["success"]`` (it then terminates, as in OGBench's
evaluation) before its time limit (``max_episode_steps`` of the registration, 1000 for PointMaze,
200 for cube-single).

:func:`evaluate` steps the ``B = episodes_per_task`` episodes of a task together: one call of the
(jitted, batched) policy per step for all of them,

.. math:: a_t = \pi(o_t [B, obs],\; g [B, obs],\; k_t) \in [B, act], \qquad k_t = \mathrm{fold\_in}(k, t),

and the success rate per task is the fraction of its ``B`` episodes that succeed. Finished episodes
keep their last observation in the batch (so the policy's shapes never change) and are not stepped.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np

from longhorizon.errors import UsageError

Policy = Callable[..., object]  # (observations [B, obs], goals [B, obs], key) -> actions [B, act]


def env_id(name: str) -> str:
    """The ogbench environment id of a dataset name, by OGBench's rule: drop the dataset type
    (``pointmaze-giant-stitch-v0`` -> ``pointmaze-giant-v0``; ``cube-single-play-singletask-task2-v0``
    -> ``cube-single-singletask-task2-v0``)."""
    parts = name.split("-")
    if "singletask" in parts:
        pos = parts.index("singletask")
        return "-".join(parts[:pos - 1] + parts[pos:])
    return "-".join(parts[:-2] + parts[-1:]) if len(parts) >= 3 else name


def make_env(name: str, **kwargs):
    """The gymnasium environment of dataset ``name`` (OGBench's ``make_env_and_datasets(..., env_only=True)``).

    Nothing is downloaded. An unknown name, or ogbench not installed, is a UsageError.
    """
    try:
        import gymnasium

        import ogbench  # noqa: F401  (registers the environments)
    except ImportError:
        raise UsageError("the OGBench environments need the offline extra; run "
                         "`pip install 'longhorizon[offline]'`.") from None
    import warnings

    eid = name if name in gymnasium.registry else env_id(name)  # an environment id works too
    if eid not in gymnasium.registry:
        from longhorizon.offline.datagen import recipe

        recipe(name)  # raises with the closest dataset names
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # glfw's "no DISPLAY" and gymnasium's checker warnings
        return gymnasium.make(eid, **kwargs)


@lru_cache(maxsize=None)
def env_spaces(name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(observation shape, action shape) of dataset ``name``'s environment."""
    import warnings

    env = make_env(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # manipspace builds its action Box anew, with a precision warning, per access
        shapes = tuple(env.observation_space.shape), tuple(env.action_space.shape)
    env.close()
    return shapes


# --------------------------------------------------------------------------- B environments stepped together


def _reset(envs: list, seeds: Sequence[int], task: int) -> tuple[np.ndarray, np.ndarray]:
    """Reset each environment on ``task`` with its seed: (observations [B, obs], goals [B, obs])."""
    obs, goals = [], []
    for env, episode_seed in zip(envs, seeds):
        saved = np.random.get_state()  # ogbench's mazes add start/goal noise from the global generator
        np.random.seed(episode_seed)
        ob, info = env.reset(seed=int(episode_seed), options=dict(task_id=int(task)))
        np.random.set_state(saved)
        obs.append(ob), goals.append(info["goal"])
    return np.stack(obs).astype(np.float32), np.stack(goals).astype(np.float32)


def _step(envs: list, actions: np.ndarray, running: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step the running environments: (observations [B, obs], success [B], done [B]); others are left as they are."""
    obs, success, done = [None] * len(envs), np.zeros(len(envs), bool), ~running
    for e in np.flatnonzero(running):
        obs[e], _, terminated, truncated, info = envs[e].step(actions[e])
        success[e] = bool(info.get("success"))
        done[e] = terminated or truncated or success[e]
    return obs, success, done


class _Workers:
    """``B`` environments split over worker processes (spawned), each stepping its share per call."""

    def __init__(self, name: str, count: int, workers: int):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.slices = np.array_split(np.arange(count), workers)
        self.conns, self.procs = [], []
        for part in self.slices:
            parent, child = context.Pipe()
            proc = context.Process(target=_serve, args=(child, name, len(part)), daemon=True)
            proc.start()
            self.conns.append(parent), self.procs.append(proc)
        self.num_tasks, self.max_episode_steps = self._gather()[0]

    def _gather(self) -> list:
        replies = [conn.recv() for conn in self.conns]
        for reply in replies:
            if isinstance(reply, str):
                raise RuntimeError(f"an evaluation worker failed: {reply}")
        return replies

    def reset(self, seeds, task):
        for conn, part in zip(self.conns, self.slices):
            conn.send(("reset", [seeds[i] for i in part], task))
        obs, goals = zip(*self._gather())
        return np.concatenate(obs), np.concatenate(goals)

    def step(self, actions, running):
        for conn, part in zip(self.conns, self.slices):
            conn.send(("step", actions[part], running[part]))
        obs, success, done = zip(*self._gather())
        return [o for part in obs for o in part], np.concatenate(success), np.concatenate(done)

    def close(self) -> None:
        for conn in self.conns:
            conn.send(("close",))
        for proc in self.procs:
            proc.join(timeout=5)


def _serve(conn, name: str, count: int) -> None:
    """A worker's loop: its environments, then reset/step requests until "close"."""
    import warnings

    warnings.filterwarnings("ignore")
    try:
        envs = [make_env(name) for _ in range(count)]
        conn.send((envs[0].unwrapped.num_tasks, envs[0].spec.max_episode_steps))
        while (request := conn.recv())[0] != "close":
            conn.send((_reset if request[0] == "reset" else _step)(envs, *request[1:]))
    except Exception as error:  # the parent raises it with this text
        conn.send(f"{type(error).__name__}: {error}")


_POOL: dict[str, list] = {}
_WORKER_POOLS: dict[tuple[str, int, int], _Workers] = {}


def _pooled_envs(name: str, count: int) -> list:
    """``count`` environments of ``name``, created once per process and reused by later evaluations
    (a cube environment takes about 2 s to build; every episode starts with a reset anyway)."""
    pool = _POOL.setdefault(name, [])
    pool.extend(make_env(name) for _ in range(count - len(pool)))
    return pool[:count]


def _pooled_workers(name: str, count: int, workers: int) -> _Workers:
    key = (name, count, workers)
    if key not in _WORKER_POOLS:
        make_env(name)  # an unknown name fails here, not in a worker
        _WORKER_POOLS[key] = _Workers(name, count, workers)
    return _WORKER_POOLS[key]


def evaluate(policy: Policy, name: str, *, task_ids: Sequence[int] = (1, 2, 3, 4, 5), episodes_per_task: int = 20,
             seed: int = 0, max_steps: int | None = None, envs: list | None = None, workers: int = 1) -> dict:
    """Success rate of ``policy`` on dataset ``name``'s evaluation tasks, in the real OGBench environment.

    ``policy(observations [B, obs], goals [B, obs], key) -> actions [B, act]`` with ``B =
    episodes_per_task`` (OGBench's default: 20); actions are clipped to [-1, 1] as in OGBench.
    ``max_steps`` caps the episode length (default: the environment's limit). ``envs``: ``B``
    environments from :func:`make_env` (default: ones kept for this process). ``workers > 1`` steps
    the ``B`` environments in that many processes (kept for later calls); the episodes are the same.
    Returns ``{"success": mean over tasks, "tasks": {task_id: rate}, "episodes", "steps", "seconds",
    "episodes_per_second"}``.
    """
    import jax

    if episodes_per_task < 1:
        raise UsageError(f"episodes_per_task must be at least 1 (got {episodes_per_task}).")
    if max_steps is not None and max_steps < 1:
        raise UsageError(f"max_steps must be at least 1 (got {max_steps}).")
    if workers < 1 or (workers > 1 and envs is not None):
        raise UsageError(f"workers must be at least 1 (got {workers}) and cannot be combined with envs; pass one.")
    if workers > 1:
        batch = _pooled_workers(name, episodes_per_task, min(workers, episodes_per_task))
        num_tasks, env_limit = batch.num_tasks, batch.max_episode_steps
        reset, step = batch.reset, batch.step
    else:
        envs = envs if envs is not None else _pooled_envs(name, episodes_per_task)
        if len(envs) != episodes_per_task:
            raise UsageError(f"{len(envs)} environments were given for {episodes_per_task} episodes per task; "
                             "pass as many.")
        num_tasks, env_limit = envs[0].unwrapped.num_tasks, envs[0].spec.max_episode_steps
        reset, step = (lambda seeds, task: _reset(envs, seeds, task)), (lambda a, r: _step(envs, a, r))
    bad = [t for t in task_ids if not 1 <= int(t) <= num_tasks]
    if bad or not task_ids:
        raise UsageError(f"task ids must be in 1..{num_tasks} (got {list(task_ids)}); OGBench has {num_tasks} tasks.")
    limit = min(x for x in (max_steps, env_limit) if x is not None)

    key = jax.random.PRNGKey(seed)
    start, steps, rates = time.perf_counter(), 0, {}
    for task in task_ids:
        # one seed per (task, episode): the same episodes whatever the other tasks are
        obs, goals = reset([seed * 1_000_003 + 1000 * int(task) + e for e in range(episodes_per_task)], task)
        running = np.ones(episodes_per_task, dtype=bool)
        success = np.zeros(episodes_per_task, dtype=bool)
        task_key = jax.random.fold_in(key, int(task))
        for t in range(limit):
            actions = np.asarray(policy(obs, goals, jax.random.fold_in(task_key, t)))
            if not np.isfinite(actions).all():
                raise UsageError(f"the policy returned NaN or Inf actions at step {t} of task {task}; "
                                 "check the trained parameters.")
            actions = np.clip(actions, -1, 1)  # OGBench's evaluation clips to the action box
            new_obs, reached, done = step(actions, running)
            steps += int(running.sum())
            for e in np.flatnonzero(running):
                obs[e] = new_obs[e]
            success |= reached
            running &= ~done
            if not running.any():
                break
        rates[int(task)] = float(success.mean())
    seconds = time.perf_counter() - start
    episodes = len(task_ids) * episodes_per_task
    return {"success": float(np.mean(list(rates.values()))), "tasks": rates, "episodes": episodes, "steps": steps,
            "seconds": seconds, "episodes_per_second": episodes / seconds}
