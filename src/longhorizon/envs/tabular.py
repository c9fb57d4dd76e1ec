"""A finite tabular MDP (``longhorizon.tabular.TabularMDP``, e.g. a BRIDGE ``.npz``) as an environment.

The observation is the one-hot vector of the current state; an episode starts in state 0, ends when
a transition leads to ``-1`` (terminated) or after ``horizon`` steps (truncated), and the next
episode starts at once (auto-reset, ``info["final_obs"]`` holds the last observation). Stochastic
MDPs draw each step's outcome from ``next_probs``. ``make("path/to/consolidated.npz", horizon=T)``
builds one; the horizon defaults to the one stored in the file.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from longhorizon.envs.api import Environment


@struct.dataclass
class TabularState:
    state: jax.Array  # int32 index of the MDP state
    time: jax.Array  # int32 steps taken in this episode


@struct.dataclass
class TabularParams:
    max_steps_in_episode: int = struct.field(pytree_node=False)


class TabularEnv(Environment):
    """Steps a :class:`~longhorizon.tabular.mdp.TabularMDP` under jit (its arrays become constants)."""

    def __init__(self, mdp: Any, horizon: int | None = None, env_id: str | None = None):
        self.mdp = mdp
        self.id = env_id or mdp.name
        self.horizon = mdp.resolve_horizon(horizon)
        self._params = TabularParams(self.horizon)
        # -1 (episode ends) is kept; gathers below clip it to a valid row and mask it out.
        self._next_states = jnp.asarray(mdp.next_states, jnp.int32)
        self._cum_probs = jnp.asarray(np.cumsum(mdp.next_probs, axis=-1), jnp.float32)
        self._next_rewards = jnp.asarray(mdp.next_rewards, jnp.float32)
        _ = self.obs_info, self.act_info

    @property
    def default_params(self) -> TabularParams:
        return self._params

    @property
    def max_episode_steps(self) -> int:
        return self.horizon

    def observation(self, state: jax.Array) -> jax.Array:
        return jax.nn.one_hot(state, self.mdp.num_states, dtype=jnp.float32)

    def reset(self, key, params=None):
        state = TabularState(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
        return self.observation(state.state), state

    def step(self, key, state: TabularState, action, params=None):
        # Outcome j is the first whose cumulative probability exceeds a uniform draw (K = 1: always 0).
        cum = self._cum_probs[state.state, action]
        outcome = jnp.minimum(jnp.sum(jax.random.uniform(key) * cum[-1] >= cum), cum.shape[0] - 1)
        next_state = self._next_states[state.state, action, outcome]
        reward = self._next_rewards[state.state, action, outcome]
        time = state.time + 1
        terminated = next_state < 0
        truncated = jnp.logical_and(time >= self.horizon, ~terminated)
        done = jnp.logical_or(terminated, truncated)
        final_obs = jnp.where(terminated, jnp.zeros(self.mdp.num_states, jnp.float32),
                              self.observation(jnp.maximum(next_state, 0)))
        new_state = TabularState(jnp.where(done, 0, jnp.maximum(next_state, 0)), jnp.where(done, 0, time))
        return (self.observation(new_state.state), new_state, reward, terminated, truncated, {"final_obs": final_obs})

    def observation_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Box(0.0, 1.0, (self.mdp.num_states,), jnp.float32)

    def action_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Discrete(self.mdp.num_actions)


def make_tabular(path: str, **overrides: Any) -> TabularEnv:
    """``make`` for an ``.npz`` path: the only setting is ``horizon``."""
    from longhorizon.errors import UsageError
    from longhorizon.tabular.mdp import load_npz

    bad = [k for k in overrides if k != "horizon"]
    if bad:
        raise UsageError(f"'{bad[0]}' is not a setting of a tabular MDP environment; the only setting is horizon.")
    horizon = overrides.get("horizon")
    mdp = load_npz(path, horizon=None if horizon is None else int(horizon))
    if mdp.horizon is None:
        raise UsageError(f"MDP file '{path}' stores no horizon; pass one with --env-arg horizon=T (e.g. 100).")
    return TabularEnv(mdp, env_id=path)
