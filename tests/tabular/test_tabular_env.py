"""A tabular MDP used as an environment: outcome frequencies, termination vs. truncation, final
observations, the BRIDGE fixture through ``make`` and its errors."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.envs import make
from longhorizon.envs.tabular import TabularEnv
from longhorizon.errors import UsageError
from longhorizon.tabular.mdp import TabularMDP

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "bridge" / "MiniGrid-KeyCorridorS3R1-v0" / "consolidated.npz"


def coin_mdp() -> TabularMDP:
    """State 0: action 0 goes to state 1 with prob 0.25 (reward 1) or stays (reward 0); action 1 ends
    the episode with reward 5. State 1 loops on itself with reward 0."""
    next_states = np.array([[[1, 0], [-1, -1]], [[1, 1], [1, 1]]])
    next_probs = np.array([[[0.25, 0.75], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]])
    next_rewards = np.array([[[1.0, 0.0], [5.0, 5.0]], [[0.0, 0.0], [0.0, 0.0]]])
    return TabularMDP(next_states, next_probs, next_rewards, horizon=2, name="coin")


def test_outcomes_follow_the_transition_probabilities():
    env = TabularEnv(coin_mdp())
    _, state = env.reset(jax.random.PRNGKey(0))
    keys = jax.random.split(jax.random.PRNGKey(1), 4000)
    obs, _, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, None, None))(keys, state, 0)
    assert abs(float(reward.mean()) - 0.25) < 0.03  # 4000 draws: 3 standard deviations is about 0.021
    moved = np.asarray(info["final_obs"][:, 1]) == 1.0
    np.testing.assert_array_equal(moved, np.asarray(reward) == 1.0)
    assert not bool(terminated.any()) and not bool(truncated.any())  # horizon 2: one step is not the end


def test_termination_truncation_and_auto_reset():
    env = TabularEnv(coin_mdp())
    obs, state = env.reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(obs, [1.0, 0.0])
    obs, state2, reward, terminated, truncated, info = env.step(jax.random.PRNGKey(0), state, 1)
    assert bool(terminated) and not bool(truncated) and float(reward) == 5.0
    np.testing.assert_array_equal(info["final_obs"], [0.0, 0.0])  # the episode ended: no next state
    np.testing.assert_array_equal(obs, [1.0, 0.0])
    assert int(state2.time) == 0
    # Two steps of action 0 from state 0 reach the horizon: truncated, not terminated.
    for t in range(2):
        obs, state, reward, terminated, truncated, info = env.step(jax.random.PRNGKey(7), state, 0)
    assert bool(truncated) and not bool(terminated) and int(state.time) == 0


def test_bridge_fixture_through_make():
    env = make(str(FIXTURE), horizon=100)
    assert env.obs_info.shape == (168,) and env.act_info.n == 6 and env.max_episode_steps == 100
    with pytest.raises(UsageError, match="--env-arg horizon"):
        make(str(FIXTURE))
    with pytest.raises(UsageError, match="its settings are horizon, pad_to, tables_in_state"):
        make(str(FIXTURE), horizon=10, size=3)
    with pytest.raises(UsageError, match="does not exist"):
        make("no/such/file.npz", horizon=10)


@pytest.mark.parametrize("tables_in_state", [False, True])
def test_padding_and_tables_in_state_step_the_same_mdp(tables_in_state):
    plain = TabularEnv(coin_mdp())
    padded = TabularEnv(coin_mdp(), pad_to=5, tables_in_state=tables_in_state)
    assert padded.obs_info.shape == (5,)
    _, s1 = plain.reset(jax.random.PRNGKey(0))
    obs2, s2 = padded.reset(jax.random.PRNGKey(0))
    for t in range(6):
        key, action = jax.random.PRNGKey(t), t % 2 if t < 3 else 0
        o1, s1, r1, te1, tr1, i1 = plain.step(key, s1, action)
        o2, s2, r2, te2, tr2, i2 = padded.step(key, s2, action)
        np.testing.assert_array_equal(o2[:2], o1)
        assert float(o2[2:].sum()) == 0.0
        assert (float(r1), bool(te1), bool(tr1)) == (float(r2), bool(te2), bool(tr2))
    with pytest.raises(UsageError, match="pad_to=1 is below"):
        TabularEnv(coin_mdp(), pad_to=1)
