r"""ChunkTrust's training-free horizon selector (AHS) and receding-horizon execution of a chunk policy.

At every replan the chunk policy returns a chunk :math:`A \in [-1,1]^{K \times d}` and its sampling trace,
the Euler velocities :math:`v_n[k] \in \mathbb R^d` for denoising steps :math:`n = 0 \dots N-1` and chunk
positions :math:`k = 0 \dots K-1`. For each candidate horizon :math:`h \in \mathcal H` (execute
:math:`a_0 \dots a_{h-1}`, then replan):

**Intra-chunk spectral stability.** With :math:`V_j[k] = \sum_n v_n[k] e^{-2\pi i jn/N}` the DFT of the
velocity trace along the denoising axis and :math:`w_j = \min(j, N - j) / (N/2)` a weight rising from 0
(constant velocity: a straight, settled path) to 1 (alternation at the Nyquist rate),

.. math:: u_k = \frac{\sum_j w_j \lVert V_j[k] \rVert^2}{\sum_j \lVert V_j[k] \rVert^2}, \qquad
          \sigma_k = e^{-u_k / s_u}, \qquad S(h) = \min_{k < h} \sigma_k .

**Inter-chunk continuity.** The mean of the last :math:`m` executed actions against the mean of the new
chunk's first :math:`m` (actions are velocities, so this is speed uniformity across the boundary):

.. math:: \kappa = \exp\!\Big(-\tfrac{1}{2 s_c^2} \big\lVert \bar a^{new}_{0:m} - \bar a^{exec}_{-m:} \big\rVert^2\Big)
          \quad (\kappa = 1 \text{ before anything was executed}).

**Evidence** :math:`e(h) = S(h)\, \kappa^{h/K} \in [0, 1]`: a jump at the boundary counts more against
committing longer.

**Beta posterior with kernel forgetting.** Per horizon, pseudo-counts decay towards the prior with an
exponential kernel in the environment steps :math:`\Delta` since the last replan, then take the evidence
as a fractional success:

.. math:: \lambda = e^{-\Delta/\tau_f}, \quad \alpha_h \leftarrow \alpha_0 + \lambda(\alpha_h - \alpha_0) + e(h),
          \quad \beta_h \leftarrow \beta_0 + \lambda(\beta_h - \beta_0) + 1 - e(h).

**Choice**: the longest horizon whose posterior mean :math:`\alpha_h / (\alpha_h + \beta_h)` reaches the
trust threshold :math:`\rho`, else the shortest.

Deviations from the paper (its project page describes the signals, not their formulas): the exact
spectral weighting, the min over the prefix, the product with :math:`\kappa^{h/K}`, the exponential
forgetting kernel and the threshold rule are this module's choices; the learned prior (QHA) is not built.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from longhorizon.control import chunk_policy, push_place
from longhorizon.errors import UsageError


@dataclasses.dataclass(frozen=True)
class ChunkTrustConfig:
    """The candidate horizons and the selector's scales (module docstring)."""

    horizons: tuple[int, ...] = (1, 2, 4, 8, 12)
    spectral_scale: float = 0.1  # s_u
    continuity_scale: float = 0.5  # s_c, in action units
    continuity_window: int = 2  # m
    forgetting: float = 8.0  # tau_f, environment steps
    prior: tuple[float, float] = (1.0, 1.0)  # (alpha_0, beta_0)
    threshold: float = 0.5  # rho

    def __post_init__(self):
        object.__setattr__(self, "horizons", tuple(int(h) for h in self.horizons))
        object.__setattr__(self, "prior", tuple(float(p) for p in self.prior))
        if not self.horizons or min(self.horizons) < 1 or list(self.horizons) != sorted(set(self.horizons)):
            raise UsageError(f"ChunkTrust horizons must be increasing positive integers, got {self.horizons}; "
                             "e.g. horizons=(1, 2, 4, 8, 12).")
        for name in ("spectral_scale", "continuity_scale", "forgetting"):
            if not getattr(self, name) > 0:
                raise UsageError(f"ChunkTrustConfig.{name} must be positive, got {getattr(self, name)!r}.")
        if not (isinstance(self.continuity_window, int) and self.continuity_window >= 1):
            raise UsageError(f"ChunkTrustConfig.continuity_window must be a positive integer, "
                             f"got {self.continuity_window!r}.")
        if len(self.prior) != 2 or min(self.prior) <= 0:
            raise UsageError(f"ChunkTrust prior must be two positive Beta pseudo-counts, got {self.prior}.")
        if not 0.0 < self.threshold < 1.0:
            raise UsageError(f"ChunkTrust threshold must lie in (0, 1), got {self.threshold!r}; e.g. 0.5.")

    def check_chunk(self, chunk: int) -> None:
        if max(self.horizons) > chunk or self.continuity_window > chunk:
            raise UsageError(f"ChunkTrust horizons {self.horizons} and continuity_window {self.continuity_window} "
                             f"must not exceed the chunk length {chunk}; drop the longer horizons.")


# ----------------------------------------------------------------------------- evidence
def spectral_instability(velocities: jax.Array) -> jax.Array:
    """:math:`u_k`: ``velocities [N, ..., K, d]`` (denoising axis first) -> ``[..., K]`` in [0, 1]."""
    n = velocities.shape[0]
    spectrum = jnp.sum(jnp.abs(jnp.fft.fft(velocities, axis=0)) ** 2, axis=-1)  # [N, ..., K]
    j = jnp.arange(n)
    weight = (jnp.minimum(j, n - j) / (n / 2)).reshape((n,) + (1,) * (spectrum.ndim - 1))
    return jnp.sum(weight * spectrum, axis=0) / jnp.maximum(jnp.sum(spectrum, axis=0), 1e-12)


def spectral_stability(velocities: jax.Array, config: ChunkTrustConfig) -> jax.Array:
    """:math:`\\sigma_k = e^{-u_k / s_u}`: ``[N, ..., K, d] -> [..., K]``."""
    return jnp.exp(-spectral_instability(velocities) / config.spectral_scale)


def prefix_stability(stability: jax.Array, horizons: tuple[int, ...]) -> jax.Array:
    """:math:`S(h) = \\min_{k<h} \\sigma_k`: ``[..., K] -> [..., H]``."""
    running_min = jax.lax.cummin(stability, axis=stability.ndim - 1)
    return running_min[..., jnp.array(horizons) - 1]


def continuity(executed: jax.Array, chunk: jax.Array, config: ChunkTrustConfig) -> jax.Array:
    """:math:`\\kappa`: ``executed [..., m', d]`` (oldest first, m' >= m) and ``chunk [..., K, d]`` -> ``[...]``."""
    m = config.continuity_window
    gap = jnp.mean(chunk[..., :m, :], axis=-2) - jnp.mean(executed[..., -m:, :], axis=-2)
    return jnp.exp(-jnp.sum(gap ** 2, axis=-1) / (2 * config.continuity_scale ** 2))


def evidence(stability: jax.Array, kappa: jax.Array, config: ChunkTrustConfig) -> jax.Array:
    """:math:`e(h) = S(h)\\, \\kappa^{h/K}`: ``stability [..., K]``, ``kappa [...]`` -> ``[..., H]``."""
    chunk = stability.shape[-1]
    exponent = jnp.array(config.horizons) / chunk
    return prefix_stability(stability, config.horizons) * kappa[..., None] ** exponent


# ----------------------------------------------------------------------------- posterior
class BetaPosterior(NamedTuple):
    alpha: jax.Array  # [H]
    beta: jax.Array  # [H]


def prior(config: ChunkTrustConfig) -> BetaPosterior:
    h = len(config.horizons)
    return BetaPosterior(jnp.full((h,), config.prior[0]), jnp.full((h,), config.prior[1]))


def update(posterior: BetaPosterior, evidence_h: jax.Array, elapsed: jax.Array,
           config: ChunkTrustConfig) -> BetaPosterior:
    """Forget with :math:`\\lambda = e^{-\\Delta/\\tau_f}` towards the prior, then add ``evidence_h [H]``."""
    keep = jnp.exp(-elapsed / config.forgetting)
    a0, b0 = config.prior
    return BetaPosterior(a0 + keep * (posterior.alpha - a0) + evidence_h,
                         b0 + keep * (posterior.beta - b0) + 1.0 - evidence_h)


def choose(posterior: BetaPosterior, config: ChunkTrustConfig) -> jax.Array:
    """The longest horizon whose posterior mean reaches the threshold, else the shortest (an int)."""
    mean = posterior.alpha / (posterior.alpha + posterior.beta)
    trusted = mean >= config.threshold
    index = jnp.where(trusted.any(), len(config.horizons) - 1 - jnp.argmax(trusted[::-1]), 0)
    return jnp.array(config.horizons)[index]


# ----------------------------------------------------------------------------- execution
class Rollouts(NamedTuple):
    """Held-out episodes: ``success [E]``, ``replans [E]`` (until success or the step limit) and per step
    ``horizon [E, T]`` (the horizon of the chunk being executed), ``replan [E, T]``, ``phase [E, T]``
    (:data:`longhorizon.control.push_place.PHASES`) and ``active [E, T]`` (before success)."""

    success: jax.Array
    replans: jax.Array
    horizon: jax.Array
    replan: jax.Array
    phase: jax.Array
    active: jax.Array


def make_rollout(policy: chunk_policy.ChunkPolicyConfig, env: push_place.PushPlaceConfig, config: ChunkTrustConfig):
    """``rollout(params, key, episodes, fixed_horizon, latency=0) -> Rollouts``, jitted once for every
    horizon rule and latency: ``fixed_horizon = h > 0`` executes h actions per chunk, ``0`` lets the selector
    choose. ``latency`` steps of inference delay follow every replan: the effector holds still while the
    chunk (computed from the observation at the replan) is made, then executes it, as on a robot that waits
    for its policy. The policy is queried every step and its chunk kept only at replans (one program for all
    rules; the cost is the same as replanning every step)."""
    config.check_chunk(policy.chunk)
    m = config.continuity_window

    class Carry(NamedTuple):
        state: push_place.State
        chunk: jax.Array  # [K, d]
        position: jax.Array  # next action's index in chunk
        left: jax.Array  # actions still to execute from chunk
        wait: jax.Array  # inference-latency steps still to wait before executing chunk
        horizon: jax.Array
        posterior: BetaPosterior
        executed: jax.Array  # [m, d] the last m executed actions, oldest first (waits not counted)

    def episode(params, key, fixed_horizon, latency):
        k_reset, k_steps = jax.random.split(key)
        _, state = push_place.reset(k_reset, env)
        zero = jnp.int32(0)
        carry = Carry(state, jnp.zeros((policy.chunk, policy.action_dim)), zero, zero, zero, zero, prior(config),
                      jnp.zeros((m, policy.action_dim)))

        def act(c: Carry, key):
            obs = push_place.observe(c.state)[None]
            trace = chunk_policy.sample_trace(policy, params, obs, jax.random.normal(key, (1, policy.flat_dim)))
            kappa = jnp.where(c.state.step > 0, continuity(c.executed, trace.chunk[0], config), 1.0)
            stability = spectral_stability(trace.velocities[:, 0], config)
            elapsed = (c.horizon + latency).astype(jnp.float32) * (c.state.step > 0)
            posterior = update(c.posterior, evidence(stability, kappa, config), elapsed, config)
            horizon = jnp.where(fixed_horizon > 0, fixed_horizon, choose(posterior, config))
            replan = (c.left == 0) & (c.wait == 0)
            pick = lambda new, old: jnp.where(replan, new, old)  # noqa: E731
            chunk, position, wait = pick(trace.chunk[0], c.chunk), pick(0, c.position), pick(latency, c.wait)
            left, horizon = pick(horizon, c.left), pick(horizon, c.horizon)
            posterior = jax.tree.map(pick, posterior, c.posterior)
            waiting = wait > 0
            action = jnp.where(waiting, 0.0, chunk[position])
            active = ~c.state.success
            _, state, _, phase = push_place.step(c.state, action, env)
            executed = jnp.where(waiting, c.executed, jnp.concatenate([c.executed[1:], action[None]]))
            moving = (~waiting).astype(jnp.int32)
            return (Carry(state, chunk, position + moving, left - moving, wait - (1 - moving), horizon, posterior,
                          executed),
                    (horizon, replan & active, phase, active))

        last, (horizon, replan, phase, active) = jax.lax.scan(act, carry, jax.random.split(k_steps, env.max_steps))
        return last.state.success, replan.sum(), horizon, replan, phase, active

    @jax.jit
    def rollout(params, key, episodes_key_count, fixed_horizon, latency):
        keys = jax.random.split(key, episodes_key_count.shape[0])
        return Rollouts(*jax.vmap(episode, in_axes=(None, 0, None, None))(params, keys, fixed_horizon, latency))

    def run(params, key, episodes: int, fixed_horizon: int = 0, latency: int = 0) -> Rollouts:
        if fixed_horizon < 0 or fixed_horizon > policy.chunk:
            raise UsageError(f"fixed horizon {fixed_horizon} must lie in 1..{policy.chunk} (the chunk length), "
                             "or be 0 for the adaptive selector.")
        if latency < 0:
            raise UsageError(f"replan latency must be a non-negative number of steps, got {latency}.")
        return rollout(params, key, jnp.zeros((episodes,)), jnp.int32(fixed_horizon), jnp.int32(latency))

    return run
