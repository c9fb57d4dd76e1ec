r"""A flow-matching policy over action chunks, trained by behaviour cloning, sampled with its full trace.

A chunk :math:`A_t = (a_t, \dots, a_{t+K-1}) \in [-1, 1]^{K \times d}` is one flat vector of length
:math:`Kd` (time-major), so flow BC is :mod:`longhorizon.offline.flows` unchanged: the linear path
:math:`x_\tau = (1 - \tau) x_0 + \tau A_t`, the loss
:math:`\mathbb E \tfrac{1}{Kd}\lVert v_\theta(s_t, x_\tau, \tau) - (A_t - x_0) \rVert^2` and :math:`N` Euler
steps :math:`x_{n+1} = x_n + v_\theta(s_t, x_n, \tau_n) / N`, :math:`\tau_n = n / N`.

:func:`sample_trace` keeps what the horizon selector (:mod:`longhorizon.control.chunktrust`) reads: the
iterates :math:`x_0 \dots x_N` and the velocities :math:`v_0 \dots v_{N-1}` of the sampling trace, per
chunk position.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from longhorizon.errors import UsageError
from longhorizon.offline import flows


@dataclasses.dataclass(frozen=True)
class ChunkPolicyConfig:
    """The chunk length ``chunk`` (K), the action size and the flow BC settings."""

    chunk: int = 12
    action_dim: int = 2
    flow: flows.FlowConfig = flows.FlowConfig(hidden=(256, 256), num_steps=10, batch_size=256, num_updates=3000,
                                              learning_rate=1e-3)

    def __post_init__(self):
        if not (isinstance(self.chunk, int) and self.chunk >= 1):
            raise UsageError(f"ChunkPolicyConfig.chunk must be a positive integer, got {self.chunk!r}; e.g. chunk=12.")
        if not (isinstance(self.action_dim, int) and self.action_dim >= 1):
            raise UsageError(f"ChunkPolicyConfig.action_dim must be a positive integer, got {self.action_dim!r}.")

    @property
    def flat_dim(self) -> int:
        return self.chunk * self.action_dim


class Trace(NamedTuple):
    """One sampling trace: ``chunk [B, K, d]`` (clipped final iterate), ``iterates [N + 1, B, K, d]``
    and ``velocities [N, B, K, d]`` (unclipped)."""

    chunk: jax.Array
    iterates: jax.Array
    velocities: jax.Array


def make_train(config: ChunkPolicyConfig, obs_dim: int):
    """``(init, train)`` of :func:`longhorizon.offline.flows.make_train` on flat chunks of length K d."""
    return flows.make_train(config.flow, obs_dim, config.flat_dim)


def velocity(config: ChunkPolicyConfig, params) -> flows.Velocity:
    """The trained velocity field with its parameters bound: ``(obs [B, o], x [B, Kd], t [B]) -> [B, Kd]``."""
    return flows.velocity_fn(flows.velocity_network(config.flow, config.flat_dim), params)


def sample_trace(config: ChunkPolicyConfig, params, obs: jax.Array, noise: jax.Array) -> Trace:
    """Euler-integrate the flow from ``noise [B, Kd]`` at ``obs [B, o]`` keeping every iterate (the same
    steps as :func:`longhorizon.offline.flows.euler_sample`, whose output equals ``chunk``)."""
    v_fn = velocity(config, params)
    steps = config.flow.num_steps
    dt = 1.0 / steps

    def euler(x, n):
        v = v_fn(obs, x, jnp.full(x.shape[:1], n * dt))
        return x + dt * v, (x, v)

    last, (xs, vs) = jax.lax.scan(euler, noise, jnp.arange(steps))
    shape = (obs.shape[0], config.chunk, config.action_dim)
    iterates = jnp.concatenate([xs, last[None]]).reshape((steps + 1,) + shape)
    chunk = jnp.clip(last, config.flow.action_low, config.flow.action_high).reshape(shape)
    return Trace(chunk, iterates, vs.reshape((steps,) + shape))
