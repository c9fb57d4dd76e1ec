"""Small pure wrappers over the functional API: auto-reset, episode statistics, vectorisation and
observation/reward normalisation. Each keeps its own data inside the environment state."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from longhorizon.core.normalize import RunningMeanStd
from longhorizon.envs.api import Environment


class Wrapper(Environment):
    def __init__(self, env: Environment):
        self.env = env
        self.id = env.id

    @property
    def default_params(self):
        return self.env.default_params

    def observation_space(self, params=None):
        return self.env.observation_space(params)

    def action_space(self, params=None):
        return self.env.action_space(params)

    @property
    def obs_info(self):
        return self.env.obs_info

    @property
    def act_info(self):
        return self.env.act_info

    @property
    def max_episode_steps(self) -> int:
        return self.env.max_episode_steps

    def __getattr__(self, name):  # reach attributes of the wrapped environment (e.g. ``inner``)
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r})"


class AutoReset(Wrapper):
    """Turns an environment whose ``step`` does not reset into one that does.

    When the step ends the episode (terminated or truncated) the observation and state returned are
    those of a fresh reset; the true last observation is kept in ``info["final_obs"]`` and the
    ``terminated``/``truncated`` flags are passed through unchanged.
    """

    def reset(self, key, params=None):
        return self.env.reset(key, params)

    def step(self, key, state, action, params=None):
        key_step, key_reset = jax.random.split(key)
        obs, next_state, reward, terminated, truncated, info = self.env.step(key_step, state, action, params)
        done = jnp.logical_or(terminated, truncated)
        reset_obs, reset_state = self.env.reset(key_reset, params)
        pick = lambda a, b: jax.lax.select(done, a, b)  # noqa: E731
        next_state = jax.tree.map(pick, reset_state, next_state)
        new_obs = jax.tree.map(pick, reset_obs, obs)
        return new_obs, next_state, reward, terminated, truncated, {**info, "final_obs": obs}


@struct.dataclass
class EpisodeStatsState:
    env_state: Any
    episode_return: jax.Array
    episode_length: jax.Array
    returned_episode_return: jax.Array
    returned_episode_length: jax.Array


class EpisodeStatistics(Wrapper):
    """Tracks the undiscounted return and length of the running episode.

    ``info["episode_return"]`` / ``info["episode_length"]`` hold the statistics of the episode that
    ended at this step (valid where ``info["episode_done"]``), or of the last finished one.
    """

    def reset(self, key, params=None):
        obs, env_state = self.env.reset(key, params)
        batch = getattr(self.env, "batch_shape", ())  # () per copy, (n,) over a natively vectorised env
        zero_f, zero_i = jnp.zeros(batch, jnp.float32), jnp.zeros(batch, jnp.int32)
        return obs, EpisodeStatsState(env_state, zero_f, zero_i, zero_f, zero_i)

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self.env.step(key, state.env_state, action, params)
        done = jnp.logical_or(terminated, truncated)
        ret = state.episode_return + reward
        length = state.episode_length + 1
        new_state = EpisodeStatsState(
            env_state,
            episode_return=ret * (1 - done),
            episode_length=length * (1 - done),
            returned_episode_return=jnp.where(done, ret, state.returned_episode_return),
            returned_episode_length=jnp.where(done, length, state.returned_episode_length),
        )
        info = {**info, "episode_return": new_state.returned_episode_return,
                "episode_length": new_state.returned_episode_length, "episode_done": done}
        return obs, new_state, reward, terminated, truncated, info


class VecEnv(Wrapper):
    """``num_envs`` copies stepped in lock-step with ``vmap``; keys are split per copy."""

    def __init__(self, env: Environment, num_envs: int):
        super().__init__(env)
        self.num_envs = num_envs

    def reset(self, key, params=None):
        keys = jax.random.split(key, self.num_envs)
        return jax.vmap(self.env.reset, in_axes=(0, None))(keys, params)

    def step(self, key, state, action, params=None):
        keys = jax.random.split(key, self.num_envs)
        return jax.vmap(self.env.step, in_axes=(0, 0, 0, None))(keys, state, action, params)


@struct.dataclass
class NormalizeObsState:
    env_state: Any
    obs_rms: RunningMeanStd


class NormalizeObservation(Wrapper):
    """Normalises observations of a vectorised env by running mean/std over all copies and steps.

    ``info["final_obs"]`` is normalised with the same statistics. ``update=False`` freezes them
    (for evaluation with the statistics of a training run).
    """

    def __init__(self, env: Environment, update: bool = True, clip: float = 10.0):
        super().__init__(env)
        self.update, self.clip = update, clip

    def reset(self, key, params=None):
        obs, env_state = self.env.reset(key, params)
        rms = RunningMeanStd.create(obs.shape[1:])
        rms = rms.update(obs) if self.update else rms
        return rms.normalize(obs, self.clip), NormalizeObsState(env_state, rms)

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self.env.step(key, state.env_state, action, params)
        rms = state.obs_rms.update(obs) if self.update else state.obs_rms
        info = {**info, "final_obs": rms.normalize(info["final_obs"], self.clip)}
        return rms.normalize(obs, self.clip), NormalizeObsState(env_state, rms), reward, terminated, truncated, info


@struct.dataclass
class NormalizeRewardState:
    env_state: Any
    discounted_return: jax.Array
    return_rms: RunningMeanStd


class NormalizeReward(Wrapper):
    r"""Scales rewards of a vectorised env by the running std of the discounted return
    :math:`R_t = \gamma R_{t-1}(1 - \text{done}_{t-1}) + r_t` (reward scaling as in PPO
    implementations). ``info["raw_reward"]`` keeps the unscaled reward."""

    def __init__(self, env: Environment, gamma: float = 0.99, clip: float = 10.0):
        super().__init__(env)
        self.gamma, self.clip = gamma, clip

    def reset(self, key, params=None):
        obs, env_state = self.env.reset(key, params)
        n = obs.shape[0]
        return obs, NormalizeRewardState(env_state, jnp.zeros((n,), jnp.float32), RunningMeanStd.create(()))

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self.env.step(key, state.env_state, action, params)
        done = jnp.logical_or(terminated, truncated)
        ret = state.discounted_return * self.gamma + reward
        rms = state.return_rms.update(ret)
        scaled = jnp.clip(reward / jnp.sqrt(rms.var + 1e-8), -self.clip, self.clip)
        new_state = NormalizeRewardState(env_state, ret * (1 - done), rms)
        return obs, new_state, scaled, terminated, truncated, {**info, "raw_reward": reward}


@struct.dataclass
class TimeFeatureState:
    env_state: Any
    time: jax.Array  # steps taken in the running episode


class TimeFeature(Wrapper):
    """Flattens the observation and appends the fraction of the episode's step budget used,
    ``t / max_episode_steps``, so that a finite-horizon, time-indexed policy can read the time step
    from its observation (SQIRL's per-timestep policies need it)."""

    def __init__(self, env: Environment):
        super().__init__(env)
        self.horizon = env.max_episode_steps

    def _with_time(self, obs, time):
        flat = jnp.reshape(obs, time.shape + (-1,)).astype(jnp.float32)  # time.shape: the batch shape
        return jnp.concatenate([flat, (time / self.horizon)[..., None].astype(jnp.float32)], axis=-1)

    def reset(self, key, params=None):
        obs, state = self.env.reset(key, params)
        time = jnp.zeros(getattr(self.env, "batch_shape", ()), jnp.int32)
        return self._with_time(obs, time), TimeFeatureState(state, time)

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self.env.step(key, state.env_state, action, params)
        time = state.time + 1
        done = jnp.logical_or(terminated, truncated)
        info = {**info, "final_obs": self._with_time(info["final_obs"], time)}
        time = jnp.where(done, 0, time)
        return self._with_time(obs, time), TimeFeatureState(env_state, time), reward, terminated, truncated, info

    def observation_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Box(-jnp.inf, jnp.inf, (int(np.prod(self.env.obs_info.shape)) + 1,), jnp.float32)

    obs_info = Environment.obs_info  # this wrapper changes the observation space: describe its own
