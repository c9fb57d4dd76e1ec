"""The driving environment (longhorizon.envs.driving): dynamics, projection, both rewards and the
hard-infraction terminations, each against values computed by hand."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.envs import driving
from longhorizon.envs.driving import DrivingEnv, DrivingParams, DrivingState
from longhorizon.errors import UsageError

STRAIGHT = np.array([[0.0, 0.0], [100.0, 0.0], [200.0, 0.0]], np.float32)


def state(x, y, theta=0.0, v=5.0, obstacle_s=50.0, phase=30, time=0):
    s = float(np.clip(x, 0, 200))
    return DrivingState(*(jnp.float32(a) for a in (x, y, theta, v, s, obstacle_s)), jnp.int32(phase), jnp.int32(time))


def test_bicycle_step_by_hand():
    p = DrivingParams()
    x, y, theta, v = driving.bicycle_step(p, 0.0, 0.0, 0.0, 5.0, jnp.array([0.5, 0.5]))
    assert float(x) == pytest.approx(5.0 * 0.2)
    assert float(y) == pytest.approx(0.0)
    assert float(theta) == pytest.approx(5.0 / 2.7 * math.tan(0.25) * 0.2, rel=1e-5)
    assert float(v) == pytest.approx(5.0 + 1.5 * 0.2)
    # actions are clipped to [-1, 1] and the speed to [0, max_speed]
    *_, v = driving.bicycle_step(p, 0.0, 0.0, 0.0, 0.1, jnp.array([0.0, -5.0]))
    assert float(v) == 0.0


def test_projection_on_a_straight_route():
    route = jnp.asarray(STRAIGHT)
    s, d, psi = driving.project(route, jnp.float32(112.0), jnp.float32(1.5), jnp.float32(0.1))
    assert (float(s), float(d), float(psi)) == pytest.approx((112.0, 1.5, 0.1), abs=1e-5)
    s, d, psi = driving.project(route, jnp.float32(5.0), jnp.float32(-2.5), jnp.float32(2 * math.pi - 0.2))
    assert (float(s), float(d), float(psi)) == pytest.approx((5.0, -2.5, -0.2), abs=1e-5)
    assert np.asarray(driving.point_at(route, jnp.float32(150.0), jnp.float32(1.0))) == pytest.approx([150.0, 1.0])


def flags(**on):
    names = ("off_lane", "speeding", "collision", "red_light", "off_road")
    return {k: jnp.asarray(on.get(k, False)) for k in names}


def test_shaped_reward_terms_by_hand():
    p = DrivingParams(reward="shaped")
    r = driving.shaped_reward(p, 10.0, 11.0, 2.5, 0.2, flags(off_lane=True))
    assert float(r) == pytest.approx(0.1 * 1.0 - 0.05 * 2.5 - 0.05 * 0.2 - 0.1)
    r = driving.shaped_reward(p, 10.0, 11.0, 0.0, 0.0, flags(speeding=True, collision=True))
    assert float(r) == pytest.approx(0.1 - 0.1 - 5.0)


def test_carl_reward_is_completion_gain_times_soft_factors():
    p = DrivingParams(reward="carl")
    assert float(driving.carl_reward(p, 10.0, 11.0, 20.0, flags())) == pytest.approx(1 / 20)
    assert float(driving.carl_reward(p, 10.0, 11.0, 20.0, flags(off_lane=True))) == pytest.approx(0.5 / 20)
    assert float(driving.carl_reward(p, 10.0, 11.0, 20.0, flags(off_lane=True, speeding=True))) == pytest.approx(0.35 / 20)
    # hard infractions do not enter the reward (they terminate)
    assert float(driving.carl_reward(p, 10.0, 11.0, 20.0, flags(collision=True))) == pytest.approx(1 / 20)


@pytest.mark.parametrize("reward", ["carl", "shaped"])
@pytest.mark.parametrize("case, start, flag", [
    ("collision", dict(x=49.0, y=1.0), "collision"),  # parked car at s=50, d=1: reached this step
    ("red light", dict(x=109.5, y=0.0, phase=0), "red_light"),  # red at t=0, crosses s=110
    ("off road", dict(x=20.0, y=4.5), "off_road"),
])
def test_hard_infractions_terminate(reward, case, start, flag):
    env = DrivingEnv(DrivingParams(reward=reward), route=STRAIGHT)
    new, r, terminated, truncated, f = env.transition(state(**start), jnp.zeros(2), env.default_params)
    assert bool(f[flag]) and bool(terminated) and not bool(truncated)
    if reward == "carl":  # the reward is the completion gain alone: 1 m of 200 m
        assert float(r) == pytest.approx(1.0 / 200.0 * (0.5 if case == "off road" else 1.0), rel=1e-4)


def test_green_light_and_clear_lane_do_not_terminate_and_step_auto_resets():
    env = DrivingEnv(DrivingParams(), route=STRAIGHT)
    _, _, terminated, _, f = env.transition(state(x=109.5, y=0.0, phase=30), jnp.zeros(2), env.default_params)
    assert not bool(terminated) and not any(bool(v) for v in f.values())
    obs, next_state, _, terminated, _, info = env.step(jax.random.PRNGKey(0), state(x=49.0, y=1.0), jnp.zeros(2))
    assert bool(terminated) and int(next_state.time) == 0 and float(next_state.s) == 0.0
    assert float(info["route_completion"]) == pytest.approx(50.0 / 200.0)
    assert obs.shape == (10,) and info["final_obs"].shape == (10,)


def test_bad_settings_are_refused():
    with pytest.raises(UsageError, match="reward"):
        DrivingParams(reward="dense")
    with pytest.raises(UsageError, match="off_lane_factor"):
        DrivingParams(off_lane_factor=1.0)
    with pytest.raises(UsageError, match="lane_half_width"):
        DrivingParams(lane_half_width=5.0)
    with pytest.raises(UsageError, match="not a setting"):
        driving.make_driving(colour="red")


@pytest.mark.slow
def test_episode_scores_of_a_braking_and_a_swerving_policy():
    env = DrivingEnv(DrivingParams(max_steps_in_episode=20), route=STRAIGHT)
    brake = lambda params, obs, key: jnp.tile(jnp.array([0.0, -1.0]), (obs.shape[0], 1))  # noqa: E731
    swerve = lambda params, obs, key: jnp.tile(jnp.array([1.0, 1.0]), (obs.shape[0], 1))  # noqa: E731
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    params = jnp.zeros(2)  # two seeds; the policies ignore their parameters
    completion, hard, soft = map(np.asarray, driving.episode_scores(env, brake, 4)(params, keys))
    assert completion.shape == hard.shape == soft.shape == (2, 4)
    # from at most 3 m/s, full braking (3 m/s^2 from the second step) stops after (3 + 2.4 + 1.8 + 1.2 + 0.6) * 0.2
    # = 1.8 m at most, of the 200 m route, inside the lane
    assert not hard.any() and np.all(soft == 0) and np.all((completion >= 0) & (completion <= 1.8 / 200))
    completion, hard, soft = map(np.asarray, driving.episode_scores(env, swerve, 4)(params, keys))
    assert hard.all() and np.all(completion < 20 * 0.2 * 15 / 200)  # off the road before the step limit
    assert np.all(soft > 0)  # off the lane before it left the road
