"""The reduced pair system of MAD-PINN as a gymnax-style JAX environment, for the independent-PPO baseline.

One learning agent (single integrator, ``|u| <= speed``) goes to its goal while one neighbour crosses the
scene. Both start on a circle of radius ``circle`` and head for the antipodes (the deployment's circle-swap
geometry, with the pair's two angles drawn at random); the neighbour follows a scripted rule: straight to
its goal at ``neighbour_speed``, not avoiding. Per step, with action ``a in [-1, 1]^2``::

    u = speed * a / max(1, |a|) * min(1, |g - p| / (speed dt))      (speed disk; never overshoot the goal)
    p' = p + dt u,   q' = q + dt u_neighbour
    r = -w_cost |p' - g| dt - w_collision [|p' - q'| < radius]          (minus the running cost, a collision penalty)

The episode terminates on a collision (``|p' - q'| < radius``) or on arrival (``|p' - g| <= goal_tolerance``)
and is truncated after ``max_steps_in_episode`` steps. The observation is the pair feature the PINN's
pair value sees, ``o = (e_agent, e_neighbour, q - p)`` [6] with goal errors longer than ``local_goal``
shortened to it (:func:`longhorizon.control.mad_pinn.pair_observations`).

:func:`policy_controller` deploys a policy decentralised exactly as MAD-PINN's value is: every agent acts
on its own observation with its most safety-critical neighbour (the same reachability filter and ranking),
heads straight to its goal when no neighbour is a candidate, and acts every step (receding horizon).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct

from longhorizon.control import mad_pinn as mp
from longhorizon.control.epigraph import safe_norm
from longhorizon.envs.api import Environment
from longhorizon.errors import UsageError


@dataclasses.dataclass(frozen=True)
class PairNavigationParams:
    speed: float = 1.0
    neighbour_speed: float = 1.0
    radius: float = 0.3  # the pair value's safety distance
    circle: float = 2.0
    dt: float = 0.05
    goal_tolerance: float = 0.05
    local_goal: float = 1.5
    w_cost: float = 1.0
    w_collision: float = 10.0
    max_steps_in_episode: int = 160  # twice the straight crossing (4 / (speed dt) = 80 steps)

    def __post_init__(self):
        if min(self.speed, self.neighbour_speed, self.radius, self.circle, self.dt, self.goal_tolerance) <= 0:
            raise UsageError("PairNavigationParams speeds, radius, circle, dt and goal_tolerance must be positive; pass values > 0.")
        if self.w_cost < 0 or self.w_collision < 0 or self.max_steps_in_episode < 1:
            raise UsageError("PairNavigationParams needs w_cost >= 0, w_collision >= 0 and max_steps_in_episode >= 1; fix the weights.")


@struct.dataclass
class PairState:
    position: jax.Array  # [2] the learning agent
    goal: jax.Array  # [2]
    neighbour: jax.Array  # [2]
    neighbour_goal: jax.Array  # [2]
    time: jax.Array  # int32 steps in this episode


def velocity(action, position, goal, speed: float, dt: float):
    """u = speed * a / max(1, |a|) * min(1, |g - p| / (speed dt)); action, position, goal [..., 2] -> [..., 2]."""
    u = speed * action / jnp.maximum(1.0, safe_norm(action))[..., None]
    return u * jnp.minimum(1.0, safe_norm(goal - position) / (speed * dt))[..., None]


class PairNavigation(Environment):
    """See the module docstring."""

    id = "PairNavigation"

    def __init__(self, params: PairNavigationParams | None = None):
        self._params = params or PairNavigationParams()
        _ = self.obs_info, self.act_info

    @property
    def default_params(self) -> PairNavigationParams:
        return self._params

    @property
    def max_episode_steps(self) -> int:
        return self._params.max_steps_in_episode

    def observation(self, p: PairNavigationParams, state: PairState) -> jax.Array:
        positions, goals = jnp.stack([state.position, state.neighbour]), jnp.stack([state.goal, state.neighbour_goal])
        return mp.pair_observations(positions, goals, p.local_goal)[0, 1]

    def initial_state(self, key, p: PairNavigationParams) -> PairState:
        angles = jax.random.uniform(key, (2,), maxval=2 * jnp.pi)
        ring = p.circle * jnp.stack([jnp.cos(angles), jnp.sin(angles)], -1)
        return PairState(ring[0], -ring[0], ring[1], -ring[1], jnp.int32(0))

    def reset(self, key, params=None):
        p = params or self._params
        state = self.initial_state(key, p)
        return self.observation(p, state), state

    def transition(self, state: PairState, action, p: PairNavigationParams):
        """The step without auto-reset: (state', reward, terminated, truncated, collided, arrived)."""
        position = state.position + p.dt * velocity(jnp.asarray(action, jnp.float32), state.position, state.goal, p.speed, p.dt)
        neighbour = state.neighbour + p.dt * mp.head_to_goal(state.neighbour[None], state.neighbour_goal[None],
                                                               p.neighbour_speed, p.dt)[0]
        collided = safe_norm(position - neighbour) < p.radius
        arrived = safe_norm(position - state.goal) <= p.goal_tolerance
        reward = -p.w_cost * safe_norm(position - state.goal) * p.dt - p.w_collision * collided
        time = state.time + 1
        terminated = collided | arrived
        truncated = (time >= p.max_steps_in_episode) & ~terminated
        new_state = state.replace(position=position, neighbour=neighbour, time=time)
        return new_state, reward.astype(jnp.float32), terminated, truncated, collided, arrived

    def step(self, key, state: PairState, action, params=None):
        p = params or self._params
        new_state, reward, terminated, truncated, collided, arrived = self.transition(state, action, p)
        done = terminated | truncated
        fresh = self.initial_state(key, p)
        next_state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, new_state)
        info = {"final_obs": self.observation(p, new_state), "collision": collided, "arrival": arrived}
        return self.observation(p, next_state), next_state, reward, terminated, truncated, info

    def observation_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Box(-5.0, 5.0, (6,), jnp.float32)

    def action_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)


def make_pair_navigation(**settings: Any) -> PairNavigation:
    """A :class:`PairNavigation` (also an import path: ``--env longhorizon.control.pair_navigation:make_pair_navigation``)."""
    known = {f.name for f in dataclasses.fields(PairNavigationParams)}
    bad = [k for k in settings if k not in known]
    if bad:
        raise UsageError(f"'{bad[0]}' is not a setting of the pair-navigation environment; see PairNavigationParams.")
    return PairNavigation(PairNavigationParams(**settings))


def episode_outcomes(env: PairNavigation, policy: Callable, key, episodes: int):
    """Fresh episodes under ``policy(o [6]) -> a [2]``, stepped to their first end (no auto-reset):
    (collided [episodes], arrived [episodes]) booleans."""
    p = env.default_params
    _, state = jax.vmap(lambda k: env.reset(k, p))(jax.random.split(key, episodes))

    def step(carry, _):
        state, done, collided, arrived = carry
        action = jax.vmap(policy)(jax.vmap(lambda s: env.observation(p, s))(state))
        state, _, terminated, truncated, hit, reached = jax.vmap(lambda s, a: env.transition(s, a, p))(state, action)
        live = ~done
        return (state, done | terminated | truncated, collided | (live & hit), arrived | (live & reached)), None

    no = jnp.zeros(episodes, bool)
    (_, _, collided, arrived), _ = jax.lax.scan(step, (state, no, no, no), None, length=p.max_steps_in_episode)
    return collided, arrived


def policy_controller(policy: Callable, safety_score: Callable, env: PairNavigation, config: mp.DeployConfig):
    """Controls [N, 2] for every agent from a pair policy ``policy(o [6]) -> a [2]`` (module docstring):
    the neighbour rule of :func:`mad_pinn.decentralised_controller` with ``safety_score``, the env's action map."""
    p = env.default_params
    return mp.decentralised_controller(lambda o: velocity(policy(o), jnp.zeros(2), -o[:2], p.speed, config.dt),
                                       safety_score, p.speed, p.radius, config)
