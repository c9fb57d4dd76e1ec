"""Environment layer: registry errors, auto-reset semantics, episode statistics, normalisation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from hypothesis import given, settings
from hypothesis import strategies as st

from longhorizon.core.normalize import RunningMeanStd
from longhorizon.envs import AutoReset, EpisodeStatistics, NormalizeObservation, VecEnv, make, vectorize
from longhorizon.envs.api import Environment
from longhorizon.errors import UsageError


@struct.dataclass
class CounterState:
    count: jax.Array
    time: jax.Array


@struct.dataclass
class CounterParams:
    goal: int = 3
    max_steps_in_episode: int = 5


class Counter(Environment):
    """Action 1 adds one to the count; reaching ``goal`` terminates; ``max_steps`` truncates.
    Reward = the action. Observation = [count, time]. Does not reset by itself."""

    id = "Counter"

    @property
    def default_params(self):
        return CounterParams()

    def reset(self, key, params=None):
        s = CounterState(jnp.int32(0), jnp.int32(0))
        return jnp.array([0.0, 0.0]), s

    def step(self, key, state, action, params=None):
        p = params or self.default_params
        s = CounterState(state.count + action, state.time + 1)
        terminated = s.count >= p.goal
        truncated = jnp.logical_and(~terminated, s.time >= p.max_steps_in_episode)
        obs = jnp.array([s.count, s.time], jnp.float32)
        return obs, s, action.astype(jnp.float32), terminated, truncated, {}


def _rollout(env, actions):
    obs, state = env.reset(jax.random.PRNGKey(0))
    out = []
    for i, a in enumerate(actions):
        obs, state, r, term, trunc, info = env.step(jax.random.PRNGKey(i), state, jnp.int32(a))
        out.append((np.asarray(obs), float(r), bool(term), bool(trunc), info))
    return out


def test_auto_reset_keeps_final_observation_and_flags():
    steps = _rollout(EpisodeStatistics(AutoReset(Counter())), [1, 1, 1, 0, 0, 0, 0, 0])
    # termination at step 3 (count reaches 3): obs is the reset obs, final_obs the true last one
    obs, r, term, trunc, info = steps[2]
    assert term and not trunc
    np.testing.assert_array_equal(obs, [0, 0])
    np.testing.assert_array_equal(info["final_obs"], [3, 3])
    assert float(info["episode_return"]) == 3.0 and int(info["episode_length"]) == 3
    # the next episode never counts up and is truncated after 5 steps
    obs, r, term, trunc, info = steps[7]
    assert trunc and not term
    np.testing.assert_array_equal(info["final_obs"], [0, 5])
    assert int(info["episode_length"]) == 5 and float(info["episode_return"]) == 0.0


def test_gymnax_time_limit_is_truncation_not_termination():
    env = make("CartPole-v1", max_steps_in_episode=4)
    steps = _rollout(EpisodeStatistics(env), [0, 1, 0, 1])
    obs, r, term, trunc, info = steps[-1]
    assert trunc and not term
    assert not np.allclose(obs, info["final_obs"])  # auto-reset happened, final obs kept
    assert int(info["episode_length"]) == 4


def test_vectorised_episode_statistics_shapes():
    venv = vectorize(make("CartPole-v1"), 3)
    obs, state = venv.reset(jax.random.PRNGKey(0))
    obs, state, r, term, trunc, info = venv.step(jax.random.PRNGKey(1), state, jnp.zeros(3, jnp.int32))
    assert obs.shape == (3, 4) and r.shape == (3,) and info["episode_done"].shape == (3,)


def test_unknown_env_lists_closest_ids():
    with pytest.raises(UsageError, match="did you mean CartPole-v1"):
        make("CartPol-v1")


def test_unknown_env_setting_names_the_valid_ones():
    with pytest.raises(UsageError, match="max_steps_in_episode"):
        make("CartPole-v1", max_step=3)


def test_constructor_override():
    assert make("DeepSea-bsuite", size=5).obs_info.shape == (5, 5)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.floats(-100, 100), min_size=3, max_size=3), min_size=2, max_size=12),
       st.integers(1, 5))
def test_running_moments_equal_full_batch_moments(rows, split):
    data = np.asarray(rows, np.float32)
    split = min(split, len(data) - 1)
    rms = RunningMeanStd.create((3,)).update(data[:split]).update(data[split:])
    # Expected: the pooled moments of the data and the prior pseudo-sample (count c, mean 0, var 1).
    c, n = 1e-4, len(data)
    mean = n * data.mean(0) / (n + c)
    var = (c * 1.0 + n * data.var(0) + data.mean(0) ** 2 * c * n / (n + c)) / (n + c)
    np.testing.assert_allclose(rms.mean, mean, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rms.var, var, rtol=1e-3, atol=1e-3)


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(st.integers(1, 4), st.integers(1, 8))
def test_normalize_observation_uses_statistics_of_all_copies(num_envs, steps):
    env = NormalizeObservation(VecEnv(AutoReset(Counter()), num_envs))
    obs, state = env.reset(jax.random.PRNGKey(0))
    raw = [np.zeros((num_envs, 2))]
    for i in range(steps):
        obs, state, *_ = env.step(jax.random.PRNGKey(i), state, jnp.ones(num_envs, jnp.int32))
    # raw observations are [count, time] with auto-reset at count 3: reconstruct and compare moments
    count, time = 0, 0
    for _ in range(steps):
        count, time = count + 1, time + 1
        if count >= 3:  # terminated: the returned observation is already the reset one
            count, time = 0, 0
        raw.append(np.tile([count, time], (num_envs, 1)))
    data = np.concatenate(raw)
    np.testing.assert_allclose(state.obs_rms.mean, data.mean(0), atol=1e-3)
