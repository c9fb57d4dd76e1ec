r"""Networks and losses shared by the goal-conditioned agents (GCIVL, HIQL, OTA; GCBC uses the actor).

* :class:`GoalValue`: an ensemble of value heads :math:`V_j(s, g)`, ``[heads, B]``; with ``rep_dim``
  the goal enters through HIQL's representation :math:`\phi([s, g]) \in \mathbb R^{d}`, rescaled to
  norm :math:`\sqrt d`, and :math:`V_j(s, g) = f_j([s, \phi([s, g])])`.
* :class:`GoalActor`: the mean :math:`\mu(s, z)` of a Gaussian with unit standard deviation
  (OGBench's ``const_std=True``), so :math:`\log\pi(a \mid s, z) = -\tfrac12\lVert a - \mu\rVert^2 - \tfrac d2 \log 2\pi`.
* :func:`expectile_value_loss`: IQL-style value learning on V only (GCIVL/HIQL, with a target network).
* :func:`awr_loss`: advantage-weighted regression.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from longhorizon.core.losses import awr_weights, expectile_loss
from longhorizon.core.nets import MLPTorso, orthogonal


class GoalValue(nn.Module):
    """``heads`` value MLPs on ``[s, g]`` (or ``[s, phi([s, g])]`` with ``rep_dim > 0``) -> ``[heads, B]``."""

    hidden: Sequence[int] = (256, 256)
    layer_norm: bool = True
    heads: int = 2
    rep_dim: int = 0

    def setup(self):
        self.torsos = [MLPTorso(tuple(self.hidden), "gelu", self.layer_norm) for _ in range(self.heads)]
        self.outs = [nn.Dense(1, kernel_init=orthogonal(1.0)) for _ in range(self.heads)]
        if self.rep_dim:
            self.rep_torso = MLPTorso(tuple(self.hidden), "gelu", self.layer_norm)
            self.rep_out = nn.Dense(self.rep_dim, kernel_init=orthogonal(1.0))

    def represent(self, obs, goals):
        r""":math:`\phi([s, g])` ``[B, d]`` with norm :math:`\sqrt d` (HIQL's goal and subgoal representation)."""
        return length_normalize(self.rep_out(self.rep_torso(jnp.concatenate([obs, goals], axis=-1))))

    def __call__(self, obs, goals):
        g = self.represent(obs, goals) if self.rep_dim else goals
        x = jnp.concatenate([obs, g], axis=-1)
        return jnp.stack([out(torso(x))[..., 0] for torso, out in zip(self.torsos, self.outs)])


def length_normalize(z: jax.Array) -> jax.Array:
    r""":math:`z \sqrt d / \lVert z \rVert` over the last axis. The norm is :math:`\sqrt{\lVert z\rVert^2 + 10^{-12}}`:
    a zero ``z`` (an all-zero input through zero biases, e.g. a maze start at the origin) gets gradient
    0, not the NaN of :math:`\nabla\lVert z\rVert` at 0."""
    norm = jnp.sqrt(jnp.sum(z**2, axis=-1, keepdims=True) + 1e-12)
    return z / norm * jnp.sqrt(z.shape[-1])


class GoalActor(nn.Module):
    """The mean ``[B, out_dim]`` of a unit-variance Gaussian policy on ``[s, z]`` (z: a goal or its representation)."""

    out_dim: int
    hidden: Sequence[int] = (256, 256)
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs, z):
        x = MLPTorso(tuple(self.hidden), "gelu", self.layer_norm)(jnp.concatenate([obs, z], axis=-1))
        return nn.Dense(self.out_dim, kernel_init=orthogonal(0.01))(x)


def unit_gaussian_log_prob(mean: jax.Array, x: jax.Array) -> jax.Array:
    r""":math:`\log \mathcal N(x; \mu, I)` ``[B]`` for ``mean``, ``x`` ``[B, d]``."""
    return -0.5 * jnp.sum((x - mean) ** 2, axis=-1) - 0.5 * x.shape[-1] * jnp.log(2.0 * jnp.pi)


def td_targets(next_values: jax.Array, rewards: jax.Array, masks: jax.Array, discount: float) -> jax.Array:
    r""":math:`y = r + \gamma m \bar V(s', g)`, ``next_values`` ``[heads, B]`` -> ``[heads, B]`` (one discount per
    transition; for OTA the transition is an option and :math:`s'` its end :math:`s_\tau`)."""
    return rewards + discount * masks * next_values


def expectile_value_loss(value_fn: Callable, params, target_params, obs, next_obs, goals, rewards, masks,
                         discount: float, expectile: float) -> tuple[jax.Array, dict[str, jax.Array]]:
    r"""GCIVL/HIQL's value loss with two heads and a target network :math:`\bar V` (HIQL eq. 5):

    .. math::
        y_j = r + \gamma m \bar V_j(s', g), \quad
        A = r + \gamma m \min_j \bar V_j(s', g) - \tfrac12 \textstyle\sum_j \bar V_j(s, g), \quad
        L = \mathbb E \textstyle\sum_j |\tau - \mathbb 1(A < 0)| (y_j - V_j(s, g))^2.

    ``value_fn(params, obs [B, D], goals [B, D]) -> [2, B]``; ``next_obs`` is :math:`s'` (OTA passes the
    option's end :math:`s_\tau`); ``rewards``, ``masks`` ``[B]``.
    """
    next_v = value_fn(target_params, next_obs, goals)  # [2, B]
    target = td_targets(next_v, rewards, masks, discount)
    advantage = rewards + discount * masks * jnp.min(next_v, axis=0) - jnp.mean(value_fn(target_params, obs, goals), axis=0)
    v = value_fn(params, obs, goals)
    loss = jnp.mean(jnp.sum(expectile_loss(jax.lax.stop_gradient(target) - v, expectile, advantage), axis=0))
    return loss, {"v_mean": jnp.mean(v), "v_max": jnp.max(v), "v_min": jnp.min(v)}


def awr_loss(log_prob: jax.Array, advantage: jax.Array, temperature: float) -> tuple[jax.Array, dict[str, jax.Array]]:
    r"""AWR: :math:`L = -\mathbb E[\min(e^{\alpha A}, 100) \log \pi(a \mid \cdot)]` (the weights carry no gradient)."""
    weight = jax.lax.stop_gradient(awr_weights(advantage, temperature))
    return -jnp.mean(weight * log_prob), {"adv_mean": jnp.mean(advantage), "awr_weight_mean": jnp.mean(weight)}


class TrainState(NamedTuple):
    """What an agent carries from update to update (``target`` is ``{}`` for agents without one)."""

    params: dict
    target: dict
    opt_state: optax.OptState
    key: jax.Array
    step: jax.Array


def init_state(key: jax.Array, params: dict, optimizer: optax.GradientTransformation, target_names=()) -> TrainState:
    target = {name: params[name] for name in target_names}
    return TrainState(params, target, optimizer.init(params), key, jnp.zeros([], jnp.int32))


def gradient_step(state: TrainState, loss_fn: Callable, optimizer: optax.GradientTransformation,
                  tau: float = 0.0) -> tuple[TrainState, dict[str, jax.Array]]:
    r"""One optimiser step on ``loss_fn(params) -> (loss, metrics)``; every target network moves
    :math:`\bar\theta \leftarrow (1 - \tau)\bar\theta + \tau\theta` (Polyak averaging)."""
    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    target = {name: optax.incremental_update(params[name], old, tau) for name, old in state.target.items()}
    metrics = {"loss": loss, **metrics, "grad_norm": optax.tree.norm(grads)}
    return state._replace(params=params, target=target, opt_state=opt_state, step=state.step + 1), metrics
