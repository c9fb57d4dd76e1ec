"""A user's own environment: a gymnax-style object, or an import path, is as good as a registry id
(same checks, same errors); a gymnax 0.0.x-style one is refused with a sentence naming the fix."""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments.classic_control import CartPole

from longhorizon.envs import GymnaxEnv, make, vectorize
from longhorizon.errors import UsageError

MODULE = '''
from gymnax.environments.classic_control import CartPole


def make_env(pole_length=0.5):
    """(env, params) like gymnax.make, with a constructor argument of its own."""
    env = CartPole()
    return env, env.default_params.replace(length=pole_length)


def make_plain():
    return CartPole()


class OldStyle:
    """A gymnax 0.0.x-style environment: step returns 5 values."""
    def __init__(self):
        self.inner = CartPole()
    @property
    def default_params(self):
        return self.inner.default_params
    def reset(self, key, params):
        return self.inner.reset_env(key, params)
    def step(self, key, state, action, params):
        return self.inner.step_env(key, state, action, params)
    def observation_space(self, params):
        return self.inner.observation_space(params)
    def action_space(self, params):
        return self.inner.action_space(params)


not_an_env = 3


import gymnasium
import numpy as np


class CountEnv(gymnasium.Env):
    """A gymnasium environment of the user's: the observation counts steps, reward = action."""
    observation_space = gymnasium.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), float(action), self.t >= 5, False, {}


gymnasium.register("CountRegistered-v0", entry_point=CountEnv, max_episode_steps=2)
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_user_envs.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_user_envs"


def test_object_env_matches_the_registry_env():
    env, params = CartPole(), CartPole().default_params.replace(max_steps_in_episode=50)
    mine = make(env, env_params=params)
    ref = make("CartPole-v1", max_steps_in_episode=50)
    assert isinstance(mine, GymnaxEnv) and mine.max_episode_steps == 50
    assert mine.act_info == ref.act_info and mine.obs_info.shape == ref.obs_info.shape
    key = jax.random.PRNGKey(0)
    a, b = vectorize(mine, 2), vectorize(ref, 2)
    (oa, sa), (ob, sb) = a.reset(key), b.reset(key)
    for _ in range(60):  # crosses the 50-step time limit
        oa, sa, ra, ta, ua, _ = a.step(key, sa, jnp.ones(2, jnp.int32))
        ob, sb, rb, tb, ub, _ = b.step(key, sb, jnp.ones(2, jnp.int32))
    np.testing.assert_allclose(oa, ob)
    # Overrides name fields of the params, as for registry ids; an unknown one is refused.
    assert make(env, max_steps_in_episode=20).max_episode_steps == 20
    with pytest.raises(UsageError, match="'max_steps' is not a setting of environment"):
        make(env, max_steps=20)


def test_import_path_to_a_factory_object_or_pair(user_module):
    pair = make(f"{user_module}:make_env", pole_length=0.75)  # a constructor argument goes to the factory
    assert float(pair.default_params.length) == 0.75 and pair.id == f"{user_module}:make_env"
    plain = make(f"{user_module}:make_plain", max_steps_in_episode=30)  # a params field overrides the params
    assert plain.max_episode_steps == 30


def test_bad_import_paths_and_objects_fail_with_one_sentence(user_module):
    with pytest.raises(UsageError, match="cannot import module 'no_such_module_xyz'"):
        make("no_such_module_xyz:make_env")
    with pytest.raises(UsageError, match="has no attribute 'missing'"):
        make(f"{user_module}:missing")
    with pytest.raises(UsageError, match="is not a gymnax-style environment"):
        make(f"{user_module}:not_an_env")
    with pytest.raises(UsageError, match="returns 5 values from step, not gymnax 1.0's 6"):
        make(f"{user_module}:OldStyle")
    with pytest.raises(UsageError, match="unknown environment 'CartPol-v1'"):
        make("CartPol-v1")
    with pytest.raises(UsageError, match="pass it as 'gymnasium:ID'"):
        import gymnasium

        make(gymnasium.make("CartPole-v1"))


@pytest.mark.slow
def test_cli_refuses_a_bad_import_path_with_exit_code_2(user_module, tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "longhorizon.cli", "train", "ppo", "--env", f"{user_module}:missing",
                           "--dry-run"], capture_output=True, text=True, env={**__import__("os").environ,
                                                                              "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 2
    assert "has no attribute 'missing'" in proc.stderr and "Traceback" not in proc.stderr


def test_a_users_gymnasium_class_by_import_path(user_module):
    """gymnasium:pkg.module:Class builds the class through gymnasium.make (time limit by setting); an
    id the module registers on import is found too. Hand-computed: obs counts steps, reward = action,
    terminated at t = 5, truncated at the time limit."""
    from longhorizon.envs.gymnasium import GymnasiumEnv

    env = make(f"gymnasium:{user_module}:CountEnv", max_episode_steps=3)
    assert isinstance(env, GymnasiumEnv) and env.max_episode_steps == 3 and env.act_info.n == 3
    venv = vectorize(env, 2)
    obs, state = venv.reset(jax.random.PRNGKey(0))
    for t in range(1, 4):
        obs, state, reward, terminated, truncated, info = venv.step(jax.random.PRNGKey(0), state, jnp.asarray([1, 2]))
    np.testing.assert_allclose(reward, [1.0, 2.0])
    np.testing.assert_array_equal(truncated, [True, True])  # the 3-step limit comes before termination at 5
    np.testing.assert_allclose(info["final_obs"], [[3.0], [3.0]])
    np.testing.assert_allclose(obs, [[0.0], [0.0]])
    registered = make(f"gymnasium:{user_module}:CountRegistered-v0")
    assert registered.max_episode_steps == 2
