r"""A TD-MPC2-style latent world model (Hansen et al. 2024): encoder, latent dynamics, reward and value heads.

Components (all MLPs with LayerNorm; latents ``z`` of size ``Z``, actions ``a`` of size ``A``):

.. math:: z = h_\theta(s), \quad z' = d_\theta(z, a), \quad \hat r = R_\theta(z, a), \quad V_\theta(z).

**Training** on replay windows of ``U`` consecutive transitions :math:`(s_t, a_t, r_t, s'_t, \mathrm{done}_t)`:
unroll the dynamics from the encoded first state, :math:`z_0 = h_\theta(s_0)`,
:math:`z_{t+1} = d_\theta(z_t, a_t)`, and with the target network (EMA) :math:`\bar\theta` minimise

.. math:: L(\theta) = \sum_{t=0}^{U-1} \rho^t m_t \Big[ c_z \tfrac1Z \lVert z_{t+1} - \mathrm{sg}(h_{\bar\theta}(s'_t)) \rVert^2
          + c_r (R_\theta(z_t, a_t) - r_t)^2 + c_v (V_\theta(z_t) - y_t)^2 \Big]

with the TD target :math:`y_t = r_t + \gamma (1 - \mathrm{term}_t)\, V_{\bar\theta}(h_{\bar\theta}(s'_t))` and the
mask :math:`m_t = \prod_{k<t} (1 - \mathrm{done}_k)` (a window never learns across an episode boundary).
The target follows :math:`\bar\theta \leftarrow (1-\tau)\bar\theta + \tau\theta` after each update.

**Imagined return** of an action sequence :math:`a_{0:H}` from a latent :math:`z_0` (the planners' objective):

.. math:: J(z_0, a_{0:H}) = \sum_{h=0}^{H-1} \gamma^h R_\theta(z_h, a_h) + \gamma^H V_\theta(z_H), \quad z_{h+1} = d_\theta(z_h, a_h).

Deviations from TD-MPC2: reward and value are regressed with a squared error on scaled rewards (TD-MPC2 uses a
two-hot discrete regression in symlog space), the value is a state value :math:`V(z)` trained on replay (TD-MPC2
learns an ensemble of :math:`Q(z, a)` with a policy prior), and there is no SimNorm on the latent.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from longhorizon.core.nets import MLPTorso, orthogonal
from longhorizon.errors import UsageError


@dataclasses.dataclass(frozen=True)
class WorldModelConfig:
    latent_dim: int = 32
    hidden: tuple[int, ...] = (128, 128)
    unroll: int = 3  # U: TD-MPC2's training horizon
    gamma: float = 0.95
    rho: float = 0.5  # temporal weight of later unroll steps (TD-MPC2's rho)
    consistency_coef: float = 20.0
    reward_coef: float = 0.5
    value_coef: float = 0.1
    target_tau: float = 0.01
    learning_rate: float = 1e-3
    max_grad_norm: float = 10.0

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        for name in ("latent_dim", "unroll", "learning_rate", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise UsageError(f"WorldModelConfig.{name} must be positive, got {getattr(self, name)!r}; choose a positive value.")
        for name in ("gamma", "rho", "target_tau"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise UsageError(f"WorldModelConfig.{name} must lie in (0, 1], got {getattr(self, name)!r}; e.g. {name}=0.5.")
        if not self.hidden or min(self.hidden) < 1:
            raise UsageError(f"world-model hidden must list positive widths, got {self.hidden}; e.g. hidden=(128, 128).")


def _head(out: int, hidden, name: str):
    return nn.Sequential([MLPTorso(hidden, "silu", layer_norm=True), nn.Dense(out, kernel_init=orthogonal(1.0))], name=name)


class WorldModel(nn.Module):
    """The four networks; call a method with ``apply(params, ..., method=WorldModel.<name>)`` or use :class:`Bound`."""

    latent_dim: int
    hidden: tuple[int, ...] = (128, 128)

    def setup(self):
        self.encoder = _head(self.latent_dim, self.hidden, "encoder")
        self.dynamics_net = _head(self.latent_dim, self.hidden, "dynamics")
        self.reward_net = _head(1, self.hidden, "reward")
        self.value_net = _head(1, self.hidden, "value")

    def encode(self, obs):  # [..., o] -> [..., Z]
        return self.encoder(obs)

    def dynamics(self, z, a):  # [..., Z], [..., A] -> [..., Z]
        return self.dynamics_net(jnp.concatenate([z, a], -1))

    def reward(self, z, a):  # -> [...]
        return self.reward_net(jnp.concatenate([z, a], -1))[..., 0]

    def value(self, z):  # -> [...]
        return self.value_net(z)[..., 0]

    def __call__(self, obs, a):
        z = self.encode(obs)
        return self.dynamics(z, a), self.reward(z, a), self.value(z)


class Bound(NamedTuple):
    """The world model's functions with one parameter set bound (what losses and planners take)."""

    encode: Callable  # obs [..., o] -> z [..., Z]
    dynamics: Callable  # (z [..., Z], a [..., A]) -> z' [..., Z]
    reward: Callable  # (z, a) -> [...]
    value: Callable  # z -> [...]


def bind(model: WorldModel, params) -> Bound:
    def method(fn):
        return lambda *args: model.apply(params, *args, method=fn)

    return Bound(method(WorldModel.encode), method(WorldModel.dynamics), method(WorldModel.reward), method(WorldModel.value))


# ----------------------------------------------------------------------------- pure pieces
def unroll(dynamics, z0: jax.Array, actions: jax.Array) -> jax.Array:
    """Latents ``[B, U+1, Z]``: ``z0 [B, Z]`` then :math:`z_{t+1} = d(z_t, a_t)` for ``actions [B, U, A]``."""

    def step(z, a):
        z = dynamics(z, a)
        return z, z

    _, zs = jax.lax.scan(step, z0, jnp.swapaxes(actions, 0, 1))
    return jnp.concatenate([z0[:, None], jnp.swapaxes(zs, 0, 1)], axis=1)


def td_targets(rewards: jax.Array, terminated: jax.Array, next_values: jax.Array, gamma: float) -> jax.Array:
    r""":math:`y_t = r_t + \gamma (1 - \mathrm{term}_t) \bar V(s'_t)`; all arrays ``[B, U]``."""
    return rewards + gamma * (1.0 - terminated.astype(rewards.dtype)) * next_values


def window_mask(done: jax.Array) -> jax.Array:
    r""":math:`m_t = \prod_{k<t} (1 - \mathrm{done}_k)`: ``done [B, U]`` -> ``[B, U]`` (1 up to and including the first end)."""
    alive = jnp.cumprod(1.0 - done.astype(jnp.float32), axis=1)
    return jnp.concatenate([jnp.ones_like(alive[:, :1]), alive[:, :-1]], axis=1)


def step_weights(unroll_length: int, rho: float) -> jax.Array:
    """:math:`\\rho^t` for ``t = 0..U-1``."""
    return rho ** jnp.arange(unroll_length, dtype=jnp.float32)


def consistency_loss(predicted: jax.Array, targets: jax.Array, mask: jax.Array, rho: float) -> jax.Array:
    r""":math:`\frac1B \sum_{b,t} \rho^t m_{bt} \frac1Z \lVert \hat z_{b,t+1} - z^*_{b,t} \rVert^2`.

    ``predicted [B, U, Z]`` (the unrolled :math:`z_1..z_U`), ``targets [B, U, Z]`` (:math:`h_{\bar\theta}(s'_t)`), ``mask [B, U]``."""
    per_step = jnp.mean((predicted - targets) ** 2, axis=-1)
    return jnp.mean(jnp.sum(step_weights(predicted.shape[1], rho) * mask * per_step, axis=1))


def weighted_squared_error(predicted: jax.Array, targets: jax.Array, mask: jax.Array, rho: float) -> jax.Array:
    r""":math:`\frac1B \sum_{b,t} \rho^t m_{bt} (\hat x_{bt} - x_{bt})^2` for ``[B, U]`` arrays (reward and value terms)."""
    return jnp.mean(jnp.sum(step_weights(predicted.shape[1], rho) * mask * (predicted - targets) ** 2, axis=1))


class Window(NamedTuple):
    """``U`` consecutive transitions per row: ``obs/next_obs [B, U, o]``, ``actions [B, U, A]``, the rest ``[B, U]``."""

    obs: jax.Array
    actions: jax.Array
    rewards: jax.Array
    next_obs: jax.Array
    terminated: jax.Array
    done: jax.Array


def world_model_loss(online: Bound, target: Bound, window: Window, config: WorldModelConfig):
    """The loss of the module docstring -> ``(loss, metrics)``; gradients flow only into ``online``."""
    next_latents = jax.lax.stop_gradient(target.encode(window.next_obs))  # [B, U, Z]
    y = jax.lax.stop_gradient(td_targets(window.rewards, window.terminated, target.value(next_latents), config.gamma))
    zs = unroll(online.dynamics, online.encode(window.obs[:, 0]), window.actions)  # [B, U+1, Z]
    mask = window_mask(window.done)
    consistency = consistency_loss(zs[:, 1:], next_latents, mask, config.rho)
    reward = weighted_squared_error(online.reward(zs[:, :-1], window.actions), window.rewards, mask, config.rho)
    value = weighted_squared_error(online.value(zs[:, :-1]), y, mask, config.rho)
    loss = config.consistency_coef * consistency + config.reward_coef * reward + config.value_coef * value
    return loss, {"consistency_loss": consistency, "reward_loss": reward, "value_loss": value}


def imagined_return(model: Bound, z0: jax.Array, actions: jax.Array, gamma: float) -> jax.Array:
    r""":math:`J(z_0, a_{0:H})` of the module docstring: ``z0 [..., Z]``, ``actions [..., H, A]`` -> ``[...]``."""

    def step(carry, a):
        z, discount, total = carry
        total = total + discount * model.reward(z, a)
        return (model.dynamics(z, a), discount * gamma, total), None

    init = (z0, jnp.ones(z0.shape[:-1]), jnp.zeros(z0.shape[:-1]))
    (z, discount, total), _ = jax.lax.scan(step, init, jnp.moveaxis(actions, -2, 0))
    return total + discount * model.value(z)


def ema(target_params, online_params, tau: float):
    r""":math:`\bar\theta \leftarrow (1-\tau)\bar\theta + \tau\theta`."""
    return optax.incremental_update(online_params, target_params, tau)
