"""Greedy evaluation: the mean undiscounted return of the first episode of ``num_episodes``
parallel environments, per seed, in one jitted program (for an environment stepped on the host,
gymnasium: a jitted act-and-step called from a Python loop that stops once every episode ended)."""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.engine.fused import RunOnce
from longhorizon.envs import vectorize
from longhorizon.envs.gymnasium import is_host_env


def episode_returns(algo: ModuleType, params: Any, env: Any, key: jax.Array, num_episodes: int,
                    greedy: bool = True, max_steps: int | None = None) -> jax.Array:
    """Returns of one complete episode in each of ``num_episodes`` environment copies."""
    venv = vectorize(env, num_episodes)
    max_steps = max_steps or env.max_episode_steps
    key, reset_key = jax.random.split(key)
    obs, env_state = venv.reset(reset_key)

    def step(carry, _):
        obs, env_state, key, finished, returns = carry
        key, act_key, step_key = jax.random.split(key, 3)
        action = algo.act(params, obs, act_key, greedy)
        obs, env_state, _, _, _, info = venv.step(step_key, env_state, action)
        newly = jnp.logical_and(info["episode_done"], ~finished)
        returns = jnp.where(newly, info["episode_return"], returns)
        return (obs, env_state, key, finished | info["episode_done"], returns), None

    init = (obs, env_state, key, jnp.zeros(num_episodes, bool), jnp.zeros(num_episodes, jnp.float32))
    (_, env_state, _, finished, returns), _ = jax.lax.scan(step, init, None, max_steps)
    # An episode still running after max_steps (no time limit reached) counts with its return so far.
    returns = jnp.where(finished, returns, env_state.episode_return)
    return returns


@lru_cache(maxsize=16)
def _host_eval_program(algo: ModuleType, env: Any, num_episodes: int, greedy: bool):
    """Jitted ``reset(key)`` and one ``act -> step`` of ``num_episodes`` host-stepped copies."""
    venv = vectorize(env, num_episodes)

    def step(params, obs, env_state, key):
        key, act_key, step_key = jax.random.split(key, 3)
        obs, env_state, _, _, _, info = venv.step(step_key, env_state, algo.act(params, obs, act_key, greedy))
        return obs, env_state, key, info["episode_done"], info["episode_return"]

    return jax.jit(venv.reset), jax.jit(step)


def host_episode_returns(algo: ModuleType, params: Any, env: Any, key: jax.Array, num_episodes: int,
                         greedy: bool = True) -> np.ndarray:
    """:func:`episode_returns` for one seed's ``params`` on an environment stepped on the host."""
    reset, step = _host_eval_program(algo, env, num_episodes, greedy)
    key, reset_key = jax.random.split(key)
    obs, env_state = reset(reset_key)
    finished, returns = np.zeros(num_episodes, bool), np.zeros(num_episodes, np.float32)
    for _ in range(env.max_episode_steps):
        obs, env_state, key, done, episode_return = step(params, obs, env_state, key)
        done, episode_return = np.asarray(done), np.asarray(episode_return)
        returns = np.where(done & ~finished, episode_return, returns)
        finished |= done
        if finished.all():
            break
    # An episode still running after max_episode_steps (no time limit reached) counts with its return so far.
    return np.where(finished, returns, np.asarray(env_state.episode_return))


@lru_cache(maxsize=16)
def _compiled_eval(algo: ModuleType, env: Any, num_episodes: int, greedy: bool):
    def one_seed(params, key):
        return episode_returns(algo, params, env, key, num_episodes, greedy).mean()

    return RunOnce(jax.vmap(one_seed))


def evaluate(algo: ModuleType, state: Any, env: Any, key: jax.Array, num_episodes: int = 10,
             greedy: bool = True, seed_indices: list[int] | None = None) -> list[float]:
    """Mean greedy-evaluation return for each seed of a seed-vmapped training ``state``.

    Seed ``i`` evaluates with ``split(key, num_seeds)[i]``; ``seed_indices`` (a sweep's rows) names
    each row's seed, so every combination's seed ``i`` meets the episodes of a plain run's seed ``i``."""
    params = algo.agent_params(state)
    num_seeds = jax.tree.leaves(params)[0].shape[0]
    if seed_indices is None:
        keys = jax.random.split(key, num_seeds)
    else:
        keys = jax.random.split(key, max(seed_indices) + 1)[np.asarray(seed_indices)]
    if is_host_env(env):
        return [float(np.mean(host_episode_returns(algo, jax.tree.map(lambda x: x[i], params), env, keys[i],
                                                   num_episodes, greedy))) for i in range(num_seeds)]
    returns = _compiled_eval(algo, env, num_episodes, greedy)(params, keys)
    return [float(r) for r in jax.device_get(returns)]
