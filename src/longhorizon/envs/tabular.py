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
    tables: Any = None  # (next_states, cumulative probs, rewards, horizon) when they travel in the state


@struct.dataclass
class TabularParams:
    max_steps_in_episode: int = struct.field(pytree_node=False)


class TabularEnv(Environment):
    """Steps a :class:`~longhorizon.tabular.mdp.TabularMDP` under jit.

    By default the MDP's arrays are compile-time constants. With ``tables_in_state=True`` they travel
    in the environment state instead, and ``pad_to`` pads the one-hot observation (and the tables,
    with unreachable states that end the episode) to a fixed size: MDPs with the same padded size and
    action and outcome counts then run the same compiled program (a study over many MDPs compiles once).
    """

    def __init__(self, mdp: Any, horizon: int | None = None, env_id: str | None = None, pad_to: int | None = None,
                 tables_in_state: bool = False):
        self.mdp = mdp
        self.id = env_id or mdp.name
        self.horizon = mdp.resolve_horizon(horizon)
        self.num_states = int(pad_to or mdp.num_states)
        if self.num_states < mdp.num_states:
            from longhorizon.errors import UsageError

            raise UsageError(f"pad_to={pad_to} is below the MDP's {mdp.num_states} states; pass at least {mdp.num_states}.")
        self.tables_in_state = bool(tables_in_state)
        self._params = TabularParams(self.horizon)
        pad, (_, a, k) = self.num_states - mdp.num_states, mdp.next_states.shape
        # -1 (episode ends) is kept; gathers below clip it to a valid row and mask it out.
        self._tables = (np.concatenate([np.asarray(mdp.next_states, np.int32), np.full((pad, a, k), -1, np.int32)]),
                        np.concatenate([np.cumsum(mdp.next_probs, -1).astype(np.float32), np.ones((pad, a, k), np.float32)]),
                        np.concatenate([np.asarray(mdp.next_rewards, np.float32), np.zeros((pad, a, k), np.float32)]),
                        np.int32(self.horizon))
        _ = self.obs_info, self.act_info

    @property
    def default_params(self) -> TabularParams:
        return self._params

    @property
    def max_episode_steps(self) -> int:
        return self.horizon

    def observation(self, state: jax.Array) -> jax.Array:
        return jax.nn.one_hot(state, self.num_states, dtype=jnp.float32)

    def reset(self, key, params=None):
        tables = tuple(jnp.asarray(t) for t in self._tables) if self.tables_in_state else None
        state = TabularState(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), tables)
        return self.observation(state.state), state

    def step(self, key, state: TabularState, action, params=None):
        tables = state.tables if self.tables_in_state else tuple(jnp.asarray(t) for t in self._tables)
        next_states, cum_probs, next_rewards, horizon = tables
        # Outcome j is the first whose cumulative probability exceeds a uniform draw (K = 1: always 0).
        cum = cum_probs[state.state, action]
        outcome = jnp.minimum(jnp.sum(jax.random.uniform(key) * cum[-1] >= cum), cum.shape[0] - 1)
        next_state = next_states[state.state, action, outcome]
        reward = next_rewards[state.state, action, outcome]
        time = state.time + 1
        terminated = next_state < 0
        truncated = jnp.logical_and(time >= horizon, ~terminated)
        done = jnp.logical_or(terminated, truncated)
        final_obs = jnp.where(terminated, jnp.zeros(self.num_states, jnp.float32),
                              self.observation(jnp.maximum(next_state, 0)))
        new_state = state.replace(state=jnp.where(done, 0, jnp.maximum(next_state, 0)), time=jnp.where(done, 0, time))
        return (self.observation(new_state.state), new_state, reward, terminated, truncated, {"final_obs": final_obs})

    def observation_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Box(0.0, 1.0, (self.num_states,), jnp.float32)

    def action_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Discrete(self.mdp.num_actions)


SETTINGS = ("horizon", "pad_to", "tables_in_state")


def make_tabular(path: str, **overrides: Any) -> TabularEnv:
    """``make`` for an ``.npz`` path; settings: ``horizon``, ``pad_to``, ``tables_in_state``."""
    from longhorizon.errors import UsageError
    from longhorizon.tabular.mdp import load_npz

    bad = [k for k in overrides if k not in SETTINGS]
    if bad:
        raise UsageError(f"'{bad[0]}' is not a setting of a tabular MDP environment; its settings are {', '.join(SETTINGS)}.")
    horizon = overrides.get("horizon")
    mdp = load_npz(path, horizon=None if horizon is None else int(horizon))
    if mdp.horizon is None:
        raise UsageError(f"MDP file '{path}' stores no horizon; pass one with --env-arg horizon=T (e.g. 100).")
    return TabularEnv(mdp, env_id=path, pad_to=overrides.get("pad_to"),
                      tables_in_state=bool(overrides.get("tables_in_state", False)))
