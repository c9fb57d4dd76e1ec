"""The gymnasium adapter steps real gymnasium environments: same observations, rewards and flags as
stepping them directly; truncation keeps the true final observation; one env group per seed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from longhorizon.envs import make, vectorize  # noqa: E402
from longhorizon.envs.gymnasium import GROUPS, seed_of  # noqa: E402
from longhorizon.errors import UsageError  # noqa: E402


def _direct(env_id, num_envs, seed, **kwargs):
    venv = gym.vector.SyncVectorEnv([lambda: gym.make(env_id, **kwargs)] * num_envs,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs, _ = venv.reset(seed=seed)
    return venv, obs


def _actions(env_id, num_envs, steps):
    rng = np.random.default_rng(7)
    if env_id == "Pendulum-v1":
        return rng.uniform(-2, 2, (steps, num_envs, 1)).astype(np.float32)
    return rng.integers(0, 2, (steps, num_envs)).astype(np.int32)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_adapter_matches_direct_gymnasium_stepping(env_id):
    num_envs, steps = 3, 230  # CartPole episodes end (terminate) and Pendulum's end (truncate at 200) inside
    venv = vectorize(make(f"gymnasium:{env_id}"), num_envs)
    obs, state = jax.jit(venv.reset)(jax.random.PRNGKey(3))
    group = int(state.env_state.group)
    direct, direct_obs = _direct(env_id, num_envs, seed_of(group, 0))
    np.testing.assert_allclose(obs, direct_obs, rtol=1e-6)
    step = jax.jit(venv.step)
    ended = 0
    for action in _actions(env_id, num_envs, steps):
        obs, state, reward, terminated, truncated, info = step(jax.random.PRNGKey(0), state, jnp.asarray(action))
        d_obs, d_reward, d_term, d_trunc, d_info = direct.step(action.astype(np.int64) if action.ndim == 1 else action)
        np.testing.assert_allclose(obs, d_obs, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(reward, d_reward, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(terminated, d_term)
        np.testing.assert_array_equal(truncated, d_trunc)
        for i in np.flatnonzero(d_term | d_trunc):
            np.testing.assert_allclose(info["final_obs"][i], d_info["final_obs"][i], rtol=1e-5, atol=1e-6)
            ended += 1
    assert ended >= num_envs  # the comparison did cross episode boundaries
    assert int(state.env_state.steps) == steps


def test_truncation_keeps_the_true_final_observation_and_episode_statistics():
    venv = vectorize(make("gymnasium:CartPole-v1", max_episode_steps=5), 2)
    obs, state = venv.reset(jax.random.PRNGKey(1))
    group = int(state.env_state.group)
    # The same two copies stepped one by one without auto-reset: copy i is seeded seed + i.
    singles = [gym.make("CartPole-v1", max_episode_steps=5) for _ in range(2)]
    for i, env in enumerate(singles):
        first, _ = env.reset(seed=seed_of(group, 0) + i)
        np.testing.assert_allclose(obs[i], first, rtol=1e-6)
    for t in range(5):
        action = np.array([t % 2, (t + 1) % 2])  # alternate: the pole stays up for 5 steps
        obs, state, reward, terminated, truncated, info = venv.step(jax.random.PRNGKey(0), state, jnp.asarray(action))
        last = [env.step(int(a))[0] for env, a in zip(singles, action)]
    np.testing.assert_array_equal(truncated, [True, True])
    np.testing.assert_array_equal(terminated, [False, False])
    np.testing.assert_allclose(info["final_obs"], np.stack(last), rtol=1e-5, atol=1e-6)
    assert not np.allclose(obs, info["final_obs"])  # obs already starts the next episode
    # Reward 1 per step for 5 steps: the finished episodes' return is 5 and their length 5.
    np.testing.assert_array_equal(info["episode_done"], [True, True])
    np.testing.assert_allclose(info["episode_return"], [5.0, 5.0])
    np.testing.assert_array_equal(info["episode_length"], [5, 5])


def test_seeds_are_separate_env_groups_stepped_in_one_batched_call():
    venv = vectorize(make("gymnasium:CartPole-v1"), 2)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    obs, state = jax.jit(jax.vmap(venv.reset))(keys)
    groups = [int(g) for g in state.env_state.group]
    assert len(set(groups)) == 3 and obs.shape == (3, 2, 4)
    for s, g in enumerate(groups):  # each seed's copies are the gymnasium envs seeded from its own group
        np.testing.assert_allclose(obs[s], _direct("CartPole-v1", 2, seed_of(g, 0))[1], rtol=1e-6)
    action = jnp.zeros((3, 2), jnp.int32)
    obs2, state2, *_ = jax.jit(jax.vmap(venv.step))(jax.random.split(jax.random.PRNGKey(1), 3), state, action)
    for s, g in enumerate(groups):
        direct, _ = _direct("CartPole-v1", 2, seed_of(g, 0))
        np.testing.assert_allclose(obs2[s], direct.step(np.zeros(2, np.int64))[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state2.env_state.steps, [1, 1, 1])


def test_a_state_from_elsewhere_restarts_its_group_with_fresh_episodes():
    """A restored state (resume) whose step count the host has not seen resets its env group with
    seed_of(group, steps) before stepping, instead of stepping environments in another state."""
    venv = vectorize(make("gymnasium:CartPole-v1"), 2)
    obs, state = venv.reset(jax.random.PRNGKey(5))
    step = jax.jit(venv.step)
    saved = state
    for _ in range(3):
        obs, state, *_ = step(jax.random.PRNGKey(0), state, jnp.ones(2, jnp.int32))
    saved = jax.tree.map(lambda x: x, saved).replace(env_state=saved.env_state.replace(steps=jnp.int32(17)))
    obs_r, state_r, *_ = step(jax.random.PRNGKey(0), saved, jnp.ones(2, jnp.int32))
    direct, _ = _direct("CartPole-v1", 2, seed_of(int(state.env_state.group), 17))
    np.testing.assert_allclose(obs_r, direct.step(np.ones(2, np.int64))[0], rtol=1e-5, atol=1e-6)
    assert int(state_r.env_state.steps) == 18


def test_spaces_and_time_limit_are_read_from_gymnasium():
    cart, pendulum = make("gymnasium:CartPole-v1"), make("gymnasium:Pendulum-v1")
    assert cart.act_info.discrete and cart.act_info.n == 2 and cart.obs_info.shape == (4,)
    assert cart.max_episode_steps == 500
    assert not pendulum.act_info.discrete and pendulum.act_info.shape == (1,)
    np.testing.assert_allclose(pendulum.act_info.low, [-2.0])
    assert pendulum.max_episode_steps == 200
    frozen = make("gymnasium:FrozenLake-v1")  # Discrete observations arrive one-hot
    assert frozen.obs_info.shape == (16,)
    obs, _ = vectorize(frozen, 1).reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(obs, np.eye(16, dtype=np.float32)[[0]])


def test_async_vector_mode_matches_sync():
    keys = jax.random.PRNGKey(2)
    results = []
    for mode in ("sync", "async"):
        env = make("gymnasium:CartPole-v1", vector=mode)
        venv = vectorize(env, 2)
        obs, state = venv.reset(keys)
        for _ in range(20):
            obs, state, reward, *_ = venv.step(keys, state, jnp.ones(2, jnp.int32))
        results.append(np.asarray(obs))
        GROUPS.close(env)  # stops the async workers
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_clear_errors_for_unknown_ids_and_settings():
    with pytest.raises(UsageError, match="did you mean gymnasium:CartPole-v1"):
        make("gymnasium:CartPol-v1")
    with pytest.raises(UsageError, match="vector mode"):
        make("gymnasium:CartPole-v1", vector="threads")
    with pytest.raises(UsageError, match="rejected its settings"):
        make("gymnasium:CartPole-v1", not_a_setting=3)
    with pytest.raises(UsageError, match="cannot import module 'no_such_pkg"):
        make("gymnasium:no_such_pkg.envs:MyEnv")


def test_wrappers_of_a_gymnasium_env_wrap_its_env_group():
    """SQIRL's TimeFeature around a gymnasium env: vectorize rebuilds it around the env group, and
    the time column counts t / horizon per copy, reaching 4/4 in the final obs of a truncated episode."""
    from longhorizon.envs import TimeFeature

    venv = vectorize(TimeFeature(make("gymnasium:CartPole-v1", max_episode_steps=4)), 2)
    obs, state = venv.reset(jax.random.PRNGKey(0))
    assert obs.shape == (2, 5)
    np.testing.assert_allclose(obs[:, -1], [0.0, 0.0])
    for t in range(1, 5):
        obs, state, _, terminated, truncated, info = venv.step(jax.random.PRNGKey(0), state, jnp.asarray([t % 2, (t + 1) % 2]))
        if t < 4:
            np.testing.assert_allclose(obs[:, -1], [t / 4, t / 4])
    np.testing.assert_array_equal(truncated, [True, True])
    np.testing.assert_allclose(info["final_obs"][:, -1], [1.0, 1.0])
    np.testing.assert_allclose(obs[:, -1], [0.0, 0.0])  # the next episode starts at time 0


def test_env_groups_per_process_are_bounded_and_recycled(monkeypatch):
    """Past GROUPS_PER_SIZE groups, a new group takes over the least recently used one's vector env
    (no new environments are built), reset with the new group's seed."""
    import longhorizon.envs.gymnasium as gym_adapter

    monkeypatch.setattr(gym_adapter, "GROUPS_PER_SIZE", 2)
    env = make("gymnasium:CartPole-v1", max_episode_steps=321)  # a pool of its own
    venv = vectorize(env, 2)
    states = [venv.reset(jax.random.PRNGKey(k))[1] for k in range(2)]
    pool = GROUPS._pools[(env.spec_key, 2)]
    first = pool[int(states[0].env_state.group)][0]
    obs, third = venv.reset(jax.random.PRNGKey(2))
    assert len(pool) == 2 and int(states[0].env_state.group) not in pool
    assert pool[int(third.env_state.group)][0] is first  # recycled, not rebuilt
    np.testing.assert_allclose(obs, _direct("CartPole-v1", 2, seed_of(int(third.env_state.group), 0))[1], rtol=1e-6)
    GROUPS.close(env)
