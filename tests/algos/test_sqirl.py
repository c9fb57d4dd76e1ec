"""SQIRL: Monte-Carlo and fitted-Q targets by hand, the time-indexed learned prefix, config errors,
and learning on tabular MDPs used as environments (a combination lock it must open)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.algos import sqirl
from longhorizon.envs.tabular import TabularEnv
from longhorizon.errors import UsageError
from longhorizon.runner.run import RunSpec, train
from longhorizon.tabular.mdp import TabularMDP, save_npz


def lock_mdp(depth: int = 3, num_actions: int = 3) -> TabularMDP:
    """State i (i < depth): the right action ``i % num_actions`` moves to i + 1, any other action ends
    the episode; the right action in the last state pays 1. Random success rate: num_actions ** -depth."""
    transitions = np.full((depth, num_actions), -1)
    rewards = np.zeros((depth, num_actions))
    for i in range(depth - 1):
        transitions[i, i % num_actions] = i + 1
    rewards[depth - 1, (depth - 1) % num_actions] = 1.0
    return TabularMDP.deterministic(transitions, rewards, horizon=depth, name="lock")


def test_monte_carlo_returns_by_hand():
    reward = jnp.array([[1.0, 2.0], [3.0, 0.0], [5.0, 1.0]])
    ended = jnp.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    # env 0: G2 = 5; G1 = 3 (ends) ; G0 = 1 + 0.5 * 3 = 2.5.  env 1: G2 = 1; G1 = 0 + 0.5 * 1 = 0.5; G0 = 2 (ends)
    returns = sqirl.monte_carlo_returns(reward, ended, 0.5)
    np.testing.assert_allclose(returns, [[2.5, 2.0], [3.0, 0.5], [5.0, 1.0]])


def test_fitted_q_targets_by_hand():
    mc = jnp.array([4.0, 1.0])
    reward = jnp.array([1.0, 2.0])
    ended = jnp.array([0.0, 1.0])
    next_q = jnp.array([[[1.0, 3.0], [10.0, 0.0], [7.0, 7.0]],
                        [[9.0, 9.0], [9.0, 9.0], [9.0, 9.0]]])  # [B=2, k=3, A=2]
    targets = sqirl.fitted_q_targets(mc, reward, ended, next_q, 0.9)
    # row 0: head1 = 4; head2 = 1 + 0.9 * max(1, 3) = 3.7; head3 = 1 + 0.9 * max(10, 0) = 10. row 1 ended: 1, 2, 2
    np.testing.assert_allclose(targets, [[4.0, 3.7, 10.0], [1.0, 2.0, 2.0]], rtol=1e-6)


def _tiny(**changes):
    config = sqirl.Config(num_envs=64, num_minibatches=2, update_epochs=30, learning_rate=3e-3,
                          hidden=(32,), stride=1, total_steps=10_000)
    return sqirl.resolve_config(TabularEnv(lock_mdp()), sqirl.Config(**{**config.__dict__, **changes}))


@pytest.mark.slow
def test_prefix_follows_the_frozen_policy_then_acts_at_random():
    # The lock with every action of state 0 moving on: all episodes reach time step 1 whatever block 0 learned.
    mdp = lock_mdp()
    transitions = np.where(np.arange(3)[:, None] == 0, 1, mdp.next_states[..., 0])
    env = TabularEnv(TabularMDP.deterministic(transitions, mdp.next_rewards[..., 0], horizon=3, name="open-lock"))
    config = _tiny()
    assert (config.horizon, config.stride, sqirl.num_blocks(config)) == (3, 1, 3)
    state = sqirl.init(jax.random.PRNGKey(0), env, config)
    collect, learn = jax.jit(sqirl.collect), jax.jit(sqirl.learn)
    state, batch = collect(state)
    assert int(batch.prefix[0]) == 0 and int(state.agent.learned) == 0
    state, _ = learn(state, batch)
    assert int(state.agent.learned) == 1 and int(state.block) == 1
    state, batch = collect(state)
    # Block 1: time step 0 follows the frozen block-0 policy, the same action in every episode.
    frozen0 = jax.tree.map(lambda w: w[0], state.agent.frozen)
    q0 = sqirl._q_heads(state.agent.network, frozen0, batch.obs[0], 1)[:, -1]
    np.testing.assert_array_equal(batch.action[0], jnp.argmax(q0, -1))
    assert len(set(np.asarray(batch.action[0]).tolist())) == 1
    # ... and time step 1 is uniformly random: 64 draws of 3 actions, each about 21 times (std 3.8).
    assert np.asarray(batch.alive[1]).all()
    counts = np.bincount(np.asarray(batch.action[1]), minlength=3)
    assert counts.sum() == 64 and counts.min() >= 8
    # Only the right action at state 1 (action 1) keeps an episode going to time step 2.
    np.testing.assert_array_equal(batch.alive[2], np.asarray(batch.action[1]) == 1)


@pytest.mark.slow
def test_sqirl_opens_a_combination_lock():
    """Each time step of the lock is 1-QVI-solvable (the right action has the larger random-policy Q),
    so SQIRL with k = 1 must find the optimal open-loop policy in one sweep of 3 blocks."""
    env = TabularEnv(lock_mdp())
    config = _tiny()
    state = sqirl.init(jax.random.PRNGKey(1), env, config)
    update = jax.jit(lambda s: sqirl.learn(*sqirl.collect(s)))
    for _ in range(3):
        state, metrics = update(state)
    assert int(state.agent.learned) == 3
    obs, env_state = env.reset(jax.random.PRNGKey(0))
    wrapped = sqirl.wrap_env(env, config)
    obs, env_state = wrapped.reset(jax.random.PRNGKey(0))
    total = 0.0
    for t in range(3):
        action = sqirl.act(state.agent, obs[None], jax.random.PRNGKey(t), greedy=True)[0]
        assert int(action) == t % 3
        obs, env_state, reward, terminated, truncated, _ = wrapped.step(jax.random.PRNGKey(t), env_state, action)
        total += float(reward)
    assert total == 1.0


def test_config_errors_are_usage_errors():
    with pytest.raises(UsageError, match="num-minibatches"):
        sqirl.Config(num_envs=6, num_minibatches=4)
    with pytest.raises(UsageError, match="planning-depth"):
        sqirl.Config(planning_depth=0)
    with pytest.raises(UsageError, match="time limit"):
        sqirl.resolve_config(TabularEnv(lock_mdp()), sqirl.Config(horizon=7))
    with pytest.raises(UsageError, match="discrete action"):
        from longhorizon.envs import make

        sqirl.check_env(make("Pendulum-v1"), sqirl.Config())


@pytest.mark.slow
def test_train_sqirl_on_an_npz_through_the_runner(tmp_path):
    path = tmp_path / "lock.npz"
    save_npz(lock_mdp().with_horizon(None), path)
    with pytest.raises(UsageError, match="horizon"):
        train(RunSpec(algo="sqirl", env=str(path), out=str(tmp_path / "no-horizon"), quiet=True))
    spec = RunSpec(algo="sqirl", env=str(path), env_overrides={"horizon": 3}, seeds=2, num_chunks=3, eval_every=1,
                   eval_episodes=4, out=str(tmp_path / "run"), quiet=True,
                   config_overrides={"num_envs": "64", "num_minibatches": "2", "update_epochs": "30",
                                     "learning_rate": "3e-3", "hidden": "32", "stride": "1", "total_steps": str(3 * 64 * 3)})
    summary = train(spec)
    assert summary["status"] == "completed"
    assert summary["final_eval_return"] == [1.0, 1.0]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["config"]["horizon"] == 3 and config["config"]["stride"] == 1
