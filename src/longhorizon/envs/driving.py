"""A JAX route-following driving environment (gymnax 1.0 API) with two selectable rewards (CaRL, Jaeger et al. 2025).

The ego car follows a reference route, a polyline of ``R`` waypoints (a gentle S-curve, 150 m), on a road of
half-width ``road_half_width`` with a lane of half-width ``lane_half_width`` around the route. A parked car
stands on the route at a random arc length (it must be passed on the free side) and a traffic light stands at
``light_s``, red while ``(t + phase) mod light_period < light_red_steps``.

Dynamics, a kinematic bicycle (rear axle) with action ``u = (u_steer, u_accel) in [-1, 1]^2``::

    delta = max_steer * u_steer,  a = max_accel * u_accel
    x' = x + v cos(theta) dt,  y' = y + v sin(theta) dt,  theta' = theta + v / wheelbase * tan(delta) dt
    v' = clip(v + a dt, 0, max_speed)

Projection on the route gives the arc length ``s``, the signed lateral offset ``d`` and the heading error
``psi`` (:func:`project`). Infractions: hard ones (collision with the parked car, crossing the light's line
while red, ``|d| > road_half_width``) terminate the episode; soft ones are off-lane (``|d| > lane_half_width``)
and speeding (``v > speed_limit``). Reaching the route's end terminates the episode successfully.

Rewards (``reward="shaped"`` or ``"carl"``), with route completion ``RC = s / L``:

* shaped (a summed reward in the style of Roach / CaRL's baseline)::

      r = w_progress * (s' - s) - w_lateral * |d'| - w_heading * |psi'|
          - w_speeding * speeding - w_off_lane * off_lane - w_hard * hard

* carl (CaRL's simple reward: route-completion gain times soft-infraction factors in (0, 1))::

      r = (RC' - RC) * off_lane_factor^off_lane * speeding_factor^speeding     (hard infractions end the episode)

Observation (``D = 10``): ``[d / road_half_width, sin psi, cos psi, v / speed_limit, RC, clip((s_obs - s) / 50),
(d_obs - d) / road_half_width, red, clip((light_s - s) / 50), time-to-green / period]``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from longhorizon.envs.api import Environment

REWARDS = ("shaped", "carl")


def s_curve(length: float = 150.0, amplitude: float = 6.0, points: int = 61) -> np.ndarray:
    """Waypoints ``(R, 2)`` of ``y = amplitude sin(2 pi x / length)``, x in [0, length]."""
    x = np.linspace(0.0, length, points)
    return np.stack([x, amplitude * np.sin(2 * np.pi * x / length)], -1)


@dataclasses.dataclass(frozen=True)
class DrivingParams:
    """Static settings (hashable, closed over by jit); validated on construction."""

    reward: str = "carl"
    dt: float = 0.2
    wheelbase: float = 2.7
    max_steer: float = 0.5
    max_accel: float = 3.0
    max_speed: float = 15.0
    speed_limit: float = 10.0
    lane_half_width: float = 2.0
    road_half_width: float = 4.0
    obstacle_offset: float = 1.0  # lateral position of the parked car
    obstacle_s_range: tuple[float, float] = (40.0, 90.0)
    collision_radius: float = 1.8
    light_s: float = 110.0
    light_period: int = 60
    light_red_steps: int = 20
    max_steps_in_episode: int = 200
    # shaped reward weights
    w_progress: float = 0.1
    w_lateral: float = 0.05
    w_heading: float = 0.05
    w_speeding: float = 0.1
    w_off_lane: float = 0.1
    w_hard: float = 5.0
    # CaRL soft-infraction factors
    off_lane_factor: float = 0.5
    speeding_factor: float = 0.7

    def __post_init__(self):
        from longhorizon.errors import UsageError

        if self.reward not in REWARDS:
            raise UsageError(f"reward '{self.reward}' is not one of {', '.join(REWARDS)}; pass reward=shaped or reward=carl.")
        for name in ("off_lane_factor", "speeding_factor"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise UsageError(f"{name} must lie in (0, 1) (got {getattr(self, name)}); pass e.g. 0.5.")
        if not 0.0 < self.lane_half_width < self.road_half_width:
            raise UsageError("lane_half_width must be positive and below road_half_width; pass e.g. 2.0 and 4.0.")
        if self.dt <= 0 or self.max_steps_in_episode < 1:
            raise UsageError("dt must be positive and max_steps_in_episode at least 1; pass e.g. dt=0.2, 200 steps.")


@struct.dataclass
class DrivingState:
    x: jax.Array
    y: jax.Array
    theta: jax.Array
    v: jax.Array
    s: jax.Array  # arc length on the route
    obstacle_s: jax.Array
    phase: jax.Array  # int32 light phase offset
    time: jax.Array  # int32 steps in this episode


def project(route: jax.Array, x: jax.Array, y: jax.Array, theta: jax.Array):
    """``(s, d, psi)`` of point ``(x, y)`` with heading ``theta`` on polyline ``route (R, 2)``: the nearest
    segment ``a -> b``, ``t = clip(<p - a, b - a> / |b - a|^2, 0, 1)``, ``s = S_i + t |b - a|``,
    ``d = cross(b - a, p - a) / |b - a|`` (left positive), ``psi = wrap(theta - angle(b - a))``."""
    a, b = route[:-1], route[1:]
    seg = b - a
    seg_len = jnp.linalg.norm(seg, axis=-1)
    p = jnp.stack([x, y])
    t = jnp.clip(jnp.sum((p - a) * seg, -1) / seg_len**2, 0.0, 1.0)
    nearest = a + t[:, None] * seg
    i = jnp.argmin(jnp.sum((p - nearest) ** 2, -1))
    starts = jnp.concatenate([jnp.zeros(1), jnp.cumsum(seg_len)[:-1]])
    s = starts[i] + t[i] * seg_len[i]
    rel = p - a[i]
    d = (seg[i, 0] * rel[1] - seg[i, 1] * rel[0]) / seg_len[i]
    psi = jnp.angle(jnp.exp(1j * (theta - jnp.arctan2(seg[i, 1], seg[i, 0]))))
    return s, d, psi


def point_at(route: jax.Array, s: jax.Array, d: jax.Array):
    """The point at arc length ``s`` and lateral offset ``d`` (left positive) on the route."""
    seg = route[1:] - route[:-1]
    seg_len = jnp.linalg.norm(seg, axis=-1)
    ends = jnp.cumsum(seg_len)
    i = jnp.minimum(jnp.searchsorted(ends, s), seg.shape[0] - 1)
    t = (s - (ends[i] - seg_len[i])) / seg_len[i]
    unit = seg[i] / seg_len[i]
    return route[i] + t * seg[i] + d * jnp.stack([-unit[1], unit[0]])


def bicycle_step(p: DrivingParams, x, y, theta, v, action):
    """One kinematic-bicycle step (module docstring) under the clipped action."""
    u = jnp.clip(action, -1.0, 1.0)
    delta, accel = p.max_steer * u[0], p.max_accel * u[1]
    return (x + v * jnp.cos(theta) * p.dt, y + v * jnp.sin(theta) * p.dt,
            theta + v / p.wheelbase * jnp.tan(delta) * p.dt, jnp.clip(v + accel * p.dt, 0.0, p.max_speed))


def is_red(p: DrivingParams, time, phase):
    return (time + phase) % p.light_period < p.light_red_steps


def infractions(p: DrivingParams, route, s_old, s_new, d, v, x, y, obstacle_s, red) -> dict[str, jax.Array]:
    """Boolean flags of the step's soft (off_lane, speeding) and hard (collision, red_light, off_road) infractions."""
    obstacle = point_at(route, obstacle_s, jnp.asarray(p.obstacle_offset, jnp.float32))
    collision = jnp.hypot(x - obstacle[0], y - obstacle[1]) < p.collision_radius
    red_light = red & (s_old < p.light_s) & (s_new >= p.light_s)
    return {"off_lane": jnp.abs(d) > p.lane_half_width, "speeding": v > p.speed_limit,
            "collision": collision, "red_light": red_light, "off_road": jnp.abs(d) > p.road_half_width}


def hard(flags: dict[str, jax.Array]) -> jax.Array:
    return flags["collision"] | flags["red_light"] | flags["off_road"]


def shaped_reward(p: DrivingParams, s_old, s_new, d, psi, flags) -> jax.Array:
    """The summed shaped reward (module docstring)."""
    return (p.w_progress * (s_new - s_old) - p.w_lateral * jnp.abs(d) - p.w_heading * jnp.abs(psi)
            - p.w_speeding * flags["speeding"] - p.w_off_lane * flags["off_lane"] - p.w_hard * hard(flags))


def carl_reward(p: DrivingParams, s_old, s_new, route_length, flags) -> jax.Array:
    """CaRL's reward: route-completion gain times the soft-infraction factors (hard ones terminate instead)."""
    factor = (jnp.where(flags["off_lane"], p.off_lane_factor, 1.0) * jnp.where(flags["speeding"], p.speeding_factor, 1.0))
    return (s_new - s_old) / route_length * factor


class DrivingEnv(Environment):
    """Route following with a parked car and a traffic light; see the module docstring."""

    def __init__(self, params: DrivingParams | None = None, route: np.ndarray | None = None):
        self._params = params or DrivingParams()
        self.route_np = np.asarray(s_curve() if route is None else route, np.float32)
        self.route_length = float(np.sum(np.linalg.norm(np.diff(self.route_np, axis=0), axis=-1)))
        self.id = f"Driving-{self._params.reward}"
        _ = self.obs_info, self.act_info

    @property
    def default_params(self) -> DrivingParams:
        return self._params

    @property
    def max_episode_steps(self) -> int:
        return self._params.max_steps_in_episode

    def observation(self, p: DrivingParams, state: DrivingState) -> jax.Array:
        route = jnp.asarray(self.route_np)
        s, d, psi = project(route, state.x, state.y, state.theta)
        red = is_red(p, state.time, state.phase)
        to_green = jnp.where(red, p.light_red_steps - (state.time + state.phase) % p.light_period, 0)
        return jnp.stack([d / p.road_half_width, jnp.sin(psi), jnp.cos(psi), state.v / p.speed_limit,
                          s / self.route_length, jnp.clip((state.obstacle_s - s) / 50.0, -1.0, 1.0),
                          (p.obstacle_offset - d) / p.road_half_width, red.astype(jnp.float32),
                          jnp.clip((p.light_s - s) / 50.0, -1.0, 1.0), to_green / p.light_period]).astype(jnp.float32)

    def initial_state(self, key, p: DrivingParams) -> DrivingState:
        k_d, k_psi, k_v, k_obs, k_phase = jax.random.split(key, 5)
        route = jnp.asarray(self.route_np)
        d0 = jax.random.uniform(k_d, (), minval=-0.5, maxval=0.5)
        start = point_at(route, jnp.float32(0.0), d0)
        seg = route[1] - route[0]
        theta = jnp.arctan2(seg[1], seg[0]) + jax.random.uniform(k_psi, (), minval=-0.1, maxval=0.1)
        return DrivingState(x=start[0], y=start[1], theta=theta, v=jax.random.uniform(k_v, (), minval=0.0, maxval=3.0),
                            s=jnp.float32(0.0),
                            obstacle_s=jax.random.uniform(k_obs, (), minval=p.obstacle_s_range[0],
                                                          maxval=p.obstacle_s_range[1]),
                            phase=jax.random.randint(k_phase, (), 0, p.light_period), time=jnp.int32(0))

    def reset(self, key, params=None):
        p = params or self._params
        state = self.initial_state(key, p)
        return self.observation(p, state), state

    def transition(self, state: DrivingState, action, p: DrivingParams):
        """The step without auto-reset: ``(state', reward, terminated, truncated, flags)``."""
        route = jnp.asarray(self.route_np)
        x, y, theta, v = bicycle_step(p, state.x, state.y, state.theta, state.v, jnp.asarray(action, jnp.float32))
        s_new, d, psi = project(route, x, y, theta)
        flags = infractions(p, route, state.s, s_new, d, v, x, y, state.obstacle_s, is_red(p, state.time, state.phase))
        if p.reward == "shaped":
            reward = shaped_reward(p, state.s, s_new, d, psi, flags)
        else:
            reward = carl_reward(p, state.s, s_new, self.route_length, flags)
        time = state.time + 1
        finished = s_new >= self.route_length - 0.5
        terminated = hard(flags) | finished
        truncated = (time >= p.max_steps_in_episode) & ~terminated
        new_state = state.replace(x=x, y=y, theta=theta, v=v, s=s_new, time=time)
        return new_state, reward.astype(jnp.float32), terminated, truncated, flags

    def step(self, key, state: DrivingState, action, params=None):
        p = params or self._params
        new_state, reward, terminated, truncated, flags = self.transition(state, action, p)
        done = terminated | truncated
        final_obs = self.observation(p, new_state)
        fresh = self.initial_state(key, p)
        next_state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, new_state)
        info = {"final_obs": final_obs, "route_completion": new_state.s / self.route_length,
                **{k: f for k, f in flags.items()}}
        return self.observation(p, next_state), next_state, reward, terminated, truncated, info

    def observation_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Box(-2.0, 2.0, (10,), jnp.float32)

    def action_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)


def make_driving(reward: str = "carl", **settings: Any) -> DrivingEnv:
    """A :class:`DrivingEnv` (also an import path for ``--env longhorizon.envs.driving:make_driving``)."""
    from longhorizon.errors import UsageError

    known = {f.name for f in dataclasses.fields(DrivingParams)}
    bad = [k for k in settings if k not in known]
    if bad:
        raise UsageError(f"'{bad[0]}' is not a setting of the driving environment; see DrivingParams for its settings.")
    return DrivingEnv(DrivingParams(reward=reward, **settings))


def episode_scores(env: DrivingEnv, act, episodes: int):
    """CaRL's driving scores of a policy, as one jitted ``(params [S, ...], keys [S]) -> (route completion, hard
    infraction, soft-infraction rate)``, each ``[S, episodes]``: ``episodes`` parallel episodes per seed ``S``, each
    scored on its first episode (those that end early are not restarted). ``act(params, obs, key)`` is the policy;
    route completion is taken at the episode's end (at the step limit: where the car stands), the soft rate is the
    share of the episode's steps off-lane or speeding."""

    def one_seed(params, key):
        obs, state = jax.vmap(env.reset)(jax.random.split(key, episodes))

        def step(carry, _):
            obs, state, key, done, completion, hard_hit, soft, steps = carry
            key, k_act, k_step = jax.random.split(key, 3)
            obs, state, _, term, trunc, info = jax.vmap(env.step)(jax.random.split(k_step, episodes), state,
                                                                   act(params, obs, k_act))
            live, ended = ~done, term | trunc
            completion = jnp.where(live & ended, info["route_completion"], completion)
            hard_hit = jnp.where(live & ended, hard(info), hard_hit)
            soft = soft + jnp.where(live, (info["off_lane"] | info["speeding"]).astype(jnp.float32), 0.0)
            return (obs, state, key, done | ended, completion, hard_hit, soft, steps + live), None

        zeros = jnp.zeros(episodes)
        init = (obs, state, key, jnp.zeros(episodes, bool), zeros, jnp.zeros(episodes, bool), zeros, zeros)
        (_, state, _, done, completion, hard_hit, soft, steps), _ = jax.lax.scan(step, init, None, env.max_episode_steps)
        return jnp.where(done, completion, state.s / env.route_length), hard_hit, soft / jnp.maximum(steps, 1)

    return jax.jit(jax.vmap(one_seed))
