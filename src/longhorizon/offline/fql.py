r"""Flow Q-Learning's one-step policy (Park, Li, Levine 2025, "Flow Q-Learning"), the training-time comparison to QGF.

A one-step policy :math:`\mu_\omega(s, z)` maps noise :math:`z \sim \mathcal N(0, I)` to an action in one
network evaluation. It is trained to maximise the critic while staying close to the BC flow's own
map from the same noise, :math:`\mu_\theta(s, z)` (the flow's :math:`K`-step Euler solution, fixed):

.. math:: L(\omega) = \mathbb E_{s, z}\Big[-\lambda\, Q\big(s, \mu_\omega(s, z)\big)
          + \alpha\, \tfrac1d \lVert \mu_\omega(s, z) - \mu_\theta(s, z) \rVert^2\Big],

with :math:`\lambda = 1 / \mathbb E|Q|` on the batch (no gradient; FQL's normalisation, so that
:math:`\alpha` does not depend on the reward scale) and the policy's actions clipped to the action box
before the critic sees them. Deviations from the paper: the critic is the shared IQL critic trained once
(``offline.iql``), not FQL's own critic trained with the one-step policy's next actions; the BC flow
is trained first and kept fixed, not jointly. On a one-step task both critics estimate the same
:math:`Q = r`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from longhorizon.core.nets import ACTIVATIONS, MLPTorso, orthogonal
from longhorizon.core.optim import make_optimizer
from longhorizon.errors import UsageError
from longhorizon.offline.flows import QFn, euler_sample


@dataclasses.dataclass(frozen=True)
class FQLConfig:
    """The one-step policy and its training."""

    alpha: float = 10.0  # the distillation weight (FQL tunes it per task: 3 to 1000 on OGBench)
    hidden: tuple[int, ...] = (256, 256)
    activation: str = "gelu"
    layer_norm: bool = True
    normalize_q: bool = True  # lambda = 1 / E|Q|
    learning_rate: float = 3e-4
    max_grad_norm: float = 10.0
    batch_size: int = 256
    num_updates: int = 5_000
    flow_steps: int = 10  # K of the distillation target mu_theta
    action_low: float = -1.0
    action_high: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if not self.alpha >= 0:
            raise UsageError(f"FQL alpha must be non-negative, got {self.alpha}; FQL uses 3 to 1000.")
        for name in ("learning_rate", "max_grad_norm", "batch_size", "num_updates", "flow_steps"):
            if not getattr(self, name) > 0:
                raise UsageError(f"FQLConfig.{name} must be positive, got {getattr(self, name)!r}; choose a positive value.")
        if not self.hidden or min(self.hidden) < 1:
            raise UsageError(f"FQL hidden must list positive layer widths, got {self.hidden}; e.g. hidden=(256, 256).")
        if self.activation not in ACTIVATIONS:
            raise UsageError(f"unknown FQL activation '{self.activation}'; choose one of {', '.join(ACTIVATIONS)}.")
        if not self.action_low < self.action_high:
            raise UsageError(f"FQL action_low ({self.action_low}) must be below action_high ({self.action_high}).")


class OneStepPolicy(nn.Module):
    """:math:`\\mu_\\omega(s, z)`: an MLP on ``[obs, z]`` -> ``[..., action_dim]``."""

    action_dim: int
    hidden: Sequence[int] = (256, 256)
    activation: str = "gelu"
    layer_norm: bool = True

    @nn.compact
    def __call__(self, obs, z):
        h = MLPTorso(tuple(self.hidden), self.activation, self.layer_norm)(jnp.concatenate([obs, z], axis=-1))
        return nn.Dense(self.action_dim, kernel_init=orthogonal(1.0))(h)


def policy_network(config: FQLConfig, action_dim: int) -> OneStepPolicy:
    return OneStepPolicy(action_dim, config.hidden, config.activation, config.layer_norm)


def loss(config: FQLConfig, policy, q: QFn, obs: jax.Array, z: jax.Array, flow_actions: jax.Array,
         alpha: float | jax.Array | None = None):
    """:math:`L(\\omega)` of the module docstring: ``policy(obs [B, o], z [B, d]) -> [B, d]``,
    ``flow_actions [B, d]`` = :math:`\\mu_\\theta(s, z)` -> (scalar, metrics); ``alpha`` overrides
    ``config.alpha`` (it may be traced, to vmap over a sweep)."""
    alpha = config.alpha if alpha is None else alpha
    actions = policy(obs, z)
    values = q(obs, jnp.clip(actions, config.action_low, config.action_high))
    scale = 1.0 / jax.lax.stop_gradient(jnp.mean(jnp.abs(values)) + 1e-8) if config.normalize_q else 1.0
    q_loss = -scale * jnp.mean(values)
    distill = jnp.mean((actions - flow_actions) ** 2)
    return q_loss + alpha * distill, {"q_loss": q_loss, "distill_loss": distill, "q": jnp.mean(values)}


def make_train(config: FQLConfig, obs_dim: int, action_dim: int, velocity_apply, q_apply):
    """``(init, train)``: ``init(key) -> params`` and ``train(params, key, data, flow_params, critic_params,
    alpha=None) -> (params, metrics)``, with the BC flow ``velocity_apply(flow_params, obs, x, t)`` and
    the critic ``q_apply(critic_params, obs, a) -> [B]`` fixed. Pure and jittable: vmap it over seeds
    (and over ``alpha``)."""
    network = policy_network(config, action_dim)
    optimizer = make_optimizer(config.learning_rate, config.max_grad_norm)

    def init(key):
        return network.init(key, jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim)))

    def train(params, key, data, flow_params, critic_params, alpha=None):
        velocity = lambda o, x, t: velocity_apply(flow_params, o, x, t)  # noqa: E731
        q = lambda o, a: q_apply(critic_params, o, a)  # noqa: E731
        n = data["observations"].shape[0]

        def update(carry, key):
            params, opt_state = carry
            k_idx, k_z = jax.random.split(key)
            obs = data["observations"][jax.random.randint(k_idx, (config.batch_size,), 0, n)]
            z = jax.random.normal(k_z, (config.batch_size, action_dim))
            flow_actions = jax.lax.stop_gradient(euler_sample(velocity, obs, z, config.flow_steps,
                                                              low=config.action_low, high=config.action_high))
            (_, metrics), grads = jax.value_and_grad(
                lambda p: loss(config, lambda o, x: network.apply(p, o, x), q, obs, z, flow_actions, alpha),
                has_aux=True)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), metrics

        (params, _), metrics = jax.lax.scan(update, (params, optimizer.init(params)),
                                            jax.random.split(key, config.num_updates))
        return params, metrics

    return init, train


def sample(config: FQLConfig, params, obs: jax.Array, key: jax.Array, action_dim: int) -> jax.Array:
    """One-step actions at ``obs [B, o]`` -> ``[B, d]``, clipped to the action box."""
    z = jax.random.normal(key, (obs.shape[0], action_dim))
    actions = policy_network(config, action_dim).apply(params, obs, z)
    return jnp.clip(actions, config.action_low, config.action_high)
