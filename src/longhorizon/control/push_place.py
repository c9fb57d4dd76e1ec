r"""A 2-D reach-push-place task with contact and phase changes, its scripted demonstrator and success test.

The workspace is the unit square. A point end-effector :math:`p` (radius :math:`r_e`) moves by a velocity
command :math:`a \in [-1, 1]^2`; a disc block :math:`b` (radius :math:`r_b`) moves only when pushed:

.. math::
    p' = \mathrm{clip}(p + v_{max}\, \mathrm{clip}(a, -1, 1), 0, 1), \qquad
    b' = \begin{cases} p' + R\, \frac{b - p'}{\lVert b - p' \rVert} & \lVert b - p' \rVert < R \\ b & \text{else}\end{cases}

with :math:`R = r_e + r_b` (quasi-static pushing: the block is moved out of penetration along the contact
normal). The episode succeeds when the block rests in the target disc, :math:`\lVert b - g \rVert < r_g`,
and then ends (the state freezes). The observation is :math:`(p, (b - p)/0.1, g - b) \in \mathbb R^6`.

Phases. The effector starts *between* the block and the target, so it must go around the block (left or
right: the demonstrator picks a side per episode at random, so the data is bimodal at the start, where
committing to one side matters) to get behind it, then push it to the target. At a random step
:math:`t_n` the block is nudged sideways by :math:`d_n` (perpendicular to the block-target line, random
sign), so the effector must re-approach (where reacting quickly matters). The phase label of a step is
0 reach, 1 push (touched), 2 re-reach (after the nudge), 3 re-push (touched after the nudge).

Not auto-resetting (unlike :mod:`longhorizon.envs.api`): held-out episodes are scored to their end.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from longhorizon.errors import UsageError

PHASES = ("reach", "push", "re-reach", "re-push")


@dataclasses.dataclass(frozen=True)
class PushPlaceConfig:
    """Geometry, speeds, episode length and the perturbation."""

    effector_radius: float = 0.02
    block_radius: float = 0.05
    target_radius: float = 0.05
    max_speed: float = 0.03  # workspace units per step at |a| = 1
    max_steps: int = 60
    nudge_step_range: tuple[int, int] = (16, 22)  # t_n ~ U{lo..hi}
    nudge_distance: float = 0.1  # d_n; 0 disables the nudge
    start_noise: float = 0.02  # uniform jitter of the start positions
    demo_noise: float = 0.3  # std of the demonstrator's Gaussian action noise
    detour: float = 0.06  # clearance of the demonstrator's side waypoint beyond contact distance

    def __post_init__(self):
        object.__setattr__(self, "nudge_step_range", tuple(int(s) for s in self.nudge_step_range))
        for name in ("effector_radius", "block_radius", "target_radius", "max_speed", "max_steps", "detour"):
            if not getattr(self, name) > 0:
                raise UsageError(f"PushPlaceConfig.{name} must be positive, got {getattr(self, name)!r}; "
                                 "choose a positive value.")
        for name in ("nudge_distance", "start_noise", "demo_noise"):
            if getattr(self, name) < 0:
                raise UsageError(f"PushPlaceConfig.{name} must be non-negative, got {getattr(self, name)!r}; "
                                 "use 0 to disable it.")
        lo, hi = self.nudge_step_range
        if not 0 <= lo <= hi < self.max_steps:
            raise UsageError(f"nudge_step_range {self.nudge_step_range} must satisfy 0 <= lo <= hi < max_steps "
                             f"({self.max_steps}); choose steps inside the episode.")

    @property
    def contact_distance(self) -> float:
        return self.effector_radius + self.block_radius


class State(NamedTuple):
    effector: jax.Array  # [2]
    block: jax.Array  # [2]
    target: jax.Array  # [2]
    step: jax.Array  # int
    nudge_step: jax.Array  # int t_n
    nudge: jax.Array  # [2] the displacement applied at t_n
    side: jax.Array  # +-1, the demonstrator's detour side (hidden from the policy)
    touched: jax.Array  # bool: contact since the start or since the nudge
    nudged: jax.Array  # bool
    success: jax.Array  # bool (absorbing)


def reset(key: jax.Array, config: PushPlaceConfig) -> tuple[jax.Array, State]:
    """A new episode: block near (0.5, 0.4), target near (0.5, 0.85), effector near (0.5, 0.62)."""
    k_pos, k_nudge, k_sign, k_side = jax.random.split(key, 4)
    jitter = config.start_noise * jax.random.uniform(k_pos, (3, 2), minval=-1.0, maxval=1.0)
    block = jnp.array([0.5, 0.4]) + jitter[0]
    target = jnp.array([0.5, 0.85]) + jitter[1]
    effector = jnp.array([0.5, 0.62]) + jitter[2]
    lo, hi = config.nudge_step_range
    along = _unit(target - block)
    sign = jnp.where(jax.random.bernoulli(k_sign), 1.0, -1.0)
    state = State(effector, block, target, jnp.int32(0), jax.random.randint(k_nudge, (), lo, hi + 1),
                  sign * config.nudge_distance * _perp(along),
                  jnp.where(jax.random.bernoulli(k_side), 1.0, -1.0), jnp.bool_(False), jnp.bool_(False),
                  jnp.bool_(False))
    return observe(state), state


def observe(state: State) -> jax.Array:
    """The policy's observation ``[6]``: the effector, the block relative to it (in units of 0.1, the contact
    scale, so the network sees contact geometry at unit scale) and the target relative to the block."""
    return jnp.concatenate([state.effector, (state.block - state.effector) / 0.1, state.target - state.block])


def step(state: State, action: jax.Array, config: PushPlaceConfig):
    """One step of the module docstring's dynamics -> ``(obs, state, success, phase)``; a finished episode
    (success) is frozen. ``phase`` is the label of the step just taken (:data:`PHASES`)."""
    phase = phase_of(state)
    effector = jnp.clip(state.effector + config.max_speed * jnp.clip(action, -1.0, 1.0), 0.0, 1.0)
    block, contact = push(effector, state.block, config.contact_distance)
    nudge_now = (state.step + 1 == state.nudge_step) & ~state.nudged
    block = jnp.where(nudge_now, jnp.clip(block + state.nudge, 0.0, 1.0), block)
    touched = jnp.where(nudge_now, False, state.touched | contact)
    moved = State(effector, block, state.target, state.step + 1, state.nudge_step, state.nudge, state.side,
                  touched, state.nudged | nudge_now, is_success(block, state.target, config))
    new = jax.tree.map(lambda old, nxt: jnp.where(state.success, old, nxt), state, moved)
    return observe(new), new, new.success, phase


def push(effector: jax.Array, block: jax.Array, contact_distance: float) -> tuple[jax.Array, jax.Array]:
    """Resolve penetration: ``(block', in_contact)``, the block moved along the contact normal to distance R."""
    offset = block - effector
    dist = jnp.linalg.norm(offset)
    contact = dist < contact_distance
    return jnp.where(contact, effector + contact_distance * offset / jnp.maximum(dist, 1e-9), block), contact


def is_success(block: jax.Array, target: jax.Array, config: PushPlaceConfig) -> jax.Array:
    return jnp.linalg.norm(block - target) < config.target_radius


def phase_of(state: State) -> jax.Array:
    """0 reach, 1 push, 2 re-reach, 3 re-push (:data:`PHASES`)."""
    return 2 * state.nudged.astype(jnp.int32) + state.touched.astype(jnp.int32)


# ----------------------------------------------------------------------------- demonstrator
def demonstrator(key: jax.Array, state: State, config: PushPlaceConfig) -> jax.Array:
    """The scripted expert's noisy action ``[2]``: (1) if the block is in the way, go to a point beside and
    behind it on the episode's side (the side it is already on once it is clearly off the block-target
    line); (2) slide across to behind it; (3) push through a point just inside its far edge, which steers the block onto the line to the
    target. Zero once the episode succeeded."""
    R = config.contact_distance
    along = _unit(state.target - state.block)
    across_dir = _perp(along)
    rel = state.effector - state.block
    ahead, beside = rel @ along, rel @ across_dir
    side = jnp.where(jnp.abs(beside) > 0.5 * R, jnp.sign(beside), state.side)
    blocked = (ahead > -0.5 * R) & (jnp.abs(beside) < R + 0.5 * config.detour)
    behind = ahead < -R + 0.02
    behind_point = state.block - (R + 0.02) * along
    aside_point = behind_point + side * (R + config.detour) * across_dir
    push_point = state.block - (R - 0.03) * along
    aligned = behind & (jnp.abs(beside) < 0.025)
    goal = jnp.where(blocked, aside_point, jnp.where(aligned, push_point, behind_point))
    delta = goal - state.effector
    action = _unit(delta) * jnp.minimum(1.0, jnp.linalg.norm(delta) / config.max_speed)
    action = action + config.demo_noise * jax.random.normal(key, (2,))
    return jnp.where(state.success, 0.0, jnp.clip(action, -1.0, 1.0))


def demonstrations(key: jax.Array, config: PushPlaceConfig, episodes: int, chunk: int) -> dict:
    """Scripted episodes -> behaviour-cloning pairs: ``observations [N, 6]`` and the next ``chunk`` executed
    actions flattened, ``actions [N, chunk * 2]`` (time-major), for every step before success; and the
    demonstrator's ``success [episodes]``. Episodes are rolled ``chunk - 1`` steps past ``max_steps`` so
    every chunk is complete (zeros after success)."""

    def episode(key):
        k_reset, k_roll = jax.random.split(key)
        _, state = reset(k_reset, config)

        def roll(state, key):
            action = demonstrator(key, state, config)
            _, new, success, _ = step(state, action, config)
            return new, (observe(state), action, state.success, success)

        _, (observations, actions, done, success) = jax.lax.scan(
            roll, state, jax.random.split(k_roll, config.max_steps + chunk - 1))
        T = config.max_steps
        windows = jnp.stack([actions[i:i + T] for i in range(chunk)], axis=1)  # [T, chunk, 2]
        return observations[:T], windows.reshape(T, -1), done[:T], success[T - 1]

    obs, acts, done, success = jax.jit(jax.vmap(episode))(jax.random.split(key, episodes))
    keep = ~done.reshape(-1)
    return {"observations": obs.reshape(-1, obs.shape[-1])[keep], "actions": acts.reshape(-1, acts.shape[-1])[keep],
            "success": success}


def _unit(v: jax.Array) -> jax.Array:
    return v / jnp.maximum(jnp.linalg.norm(v), 1e-9)


def _perp(v: jax.Array) -> jax.Array:
    return jnp.array([-v[1], v[0]])
