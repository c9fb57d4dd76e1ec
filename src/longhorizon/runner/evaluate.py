"""Greedy evaluation: the mean undiscounted return of the first episode of ``num_episodes``
parallel environments, per seed, in one jitted program."""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from longhorizon.envs import vectorize


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
def _compiled_eval(algo: ModuleType, env: Any, num_episodes: int, greedy: bool):
    def one_seed(params, key):
        return episode_returns(algo, params, env, key, num_episodes, greedy).mean()

    return jax.jit(jax.vmap(one_seed))


def evaluate(algo: ModuleType, state: Any, env: Any, key: jax.Array, num_episodes: int = 10,
             greedy: bool = True) -> list[float]:
    """Mean greedy-evaluation return for each seed of a seed-vmapped training ``state``."""
    params = algo.agent_params(state)
    num_seeds = jax.tree.leaves(params)[0].shape[0]
    keys = jax.random.split(key, num_seeds)
    returns = _compiled_eval(algo, env, num_episodes, greedy)(params, keys)
    return [float(r) for r in jax.device_get(returns)]
