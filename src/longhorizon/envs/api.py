"""The functional environment API (gymnax 1.0):

``reset(key, params) -> (obs, state)`` and
``step(key, state, action, params) -> (obs, state, reward, terminated, truncated, info)``.

``step`` auto-resets: when ``terminated or truncated`` the returned ``obs``/``state`` already belong
to the next episode and ``info["final_obs"]`` holds the true last observation of the finished one,
so algorithms can bootstrap on truncation and not on termination.

An environment object is static (hashable, closed over by jit); everything that changes lives in
``state``. ``env.default_params`` carries any overrides given to :func:`longhorizon.envs.make`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class Environment:
    """Base class. Subclasses implement ``reset`` and ``step`` with the signatures above."""

    id: str = "Environment"

    @property
    def default_params(self) -> Any:
        raise NotImplementedError

    def reset(self, key: jax.Array, params: Any = None):
        raise NotImplementedError

    def step(self, key: jax.Array, state: Any, action: jax.Array, params: Any = None):
        raise NotImplementedError

    def observation_space(self, params: Any = None):
        raise NotImplementedError

    def action_space(self, params: Any = None):
        raise NotImplementedError

    @property
    def obs_info(self) -> "SpaceInfo":
        """The observation space, described once outside of any trace (cached)."""
        if "_obs_info" not in self.__dict__:
            with jax.ensure_compile_time_eval():
                self._obs_info = space_info(self.observation_space())
        return self._obs_info

    @property
    def act_info(self) -> "SpaceInfo":
        if "_act_info" not in self.__dict__:
            with jax.ensure_compile_time_eval():
                self._act_info = space_info(self.action_space())
        return self._act_info

    @property
    def max_episode_steps(self) -> int:
        return int(getattr(self.default_params, "max_steps_in_episode", 1000))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id})"


class GymnaxEnv(Environment):
    """Adapter for a gymnax 1.0 environment: its ``step`` already auto-resets; we only rename the
    final observation into ``info["final_obs"]`` and keep only array-valued info (jit-friendly)."""

    def __init__(self, env_id: str, gymnax_env: Any, params: Any):
        self.id = env_id
        self.inner = gymnax_env
        self._params = params
        _ = self.obs_info, self.act_info  # describe the spaces now, never inside a trace

    @property
    def default_params(self):
        return self._params

    def reset(self, key, params=None):
        return self.inner.reset(key, self._params if params is None else params)

    def step(self, key, state, action, params=None):
        params = self._params if params is None else params
        obs, state, reward, terminated, truncated, info = self.inner.step(key, state, action, params)
        info = {"final_obs": info["final_observation"]}
        return obs, state, jnp.asarray(reward, jnp.float32), jnp.asarray(terminated, bool), jnp.asarray(truncated, bool), info

    def observation_space(self, params=None):
        return self.inner.observation_space(self._params if params is None else params)

    def action_space(self, params=None):
        return self.inner.action_space(self._params if params is None else params)


@dataclasses.dataclass(frozen=True)
class SpaceInfo:
    """What an algorithm needs to know about a space."""

    discrete: bool
    shape: tuple[int, ...]
    n: int | None = None  # number of actions for a discrete space
    low: Any = None
    high: Any = None

    def describe(self) -> str:
        if self.discrete:
            return f"Discrete({self.n})"
        return f"Box{self.shape}"


def space_info(space: Any) -> SpaceInfo:
    """Describe a gymnax space (Discrete or Box)."""
    if hasattr(space, "n"):
        return SpaceInfo(discrete=True, shape=(), n=int(space.n))
    shape = tuple(int(s) for s in getattr(space, "shape", ()))
    return SpaceInfo(discrete=False, shape=shape, low=np.asarray(space.low), high=np.asarray(space.high))


def true_next_obs(next_obs: jax.Array, info: dict, terminated: jax.Array, truncated: jax.Array) -> jax.Array:
    """The observation that really followed each step: ``info["final_obs"]`` where the episode
    ended (``obs`` is then already the next episode's first one), ``next_obs`` elsewhere. Values
    of it are what truncated steps bootstrap from."""
    done = jnp.logical_or(terminated, truncated)
    return jnp.where(done.reshape(done.shape + (1,) * (next_obs.ndim - done.ndim)), info["final_obs"], next_obs)


def require_discrete_actions(env: Environment, algo: str) -> None:
    """Refuse (before compiling) an environment with a continuous action space."""
    from longhorizon.errors import UsageError

    if not env.act_info.discrete:
        raise UsageError(f"{algo} needs a discrete action space but {env.id} has {env.act_info.describe()}; "
                         f"choose an environment with discrete actions or use ppo.")
