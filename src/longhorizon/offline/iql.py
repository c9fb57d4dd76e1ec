r"""The IQL critic (Kostrikov, Nair, Levine 2022, "Offline RL with Implicit Q-Learning"), trained once on a dataset.

Twin Q networks :math:`Q_{\theta_1}, Q_{\theta_2}`, their Polyak-averaged targets :math:`\hat\theta_i` and a
state value :math:`V_\psi`, learned from dataset transitions only (no action is ever sampled):

.. math::
    L_V(\psi) = \mathbb E_{(s, a)}\, L_2^\tau\big(\min_i Q_{\hat\theta_i}(s, a) - V_\psi(s)\big),
    \qquad L_2^\tau(u) = |\tau - \mathbb 1(u < 0)|\, u^2,

.. math::
    L_Q(\theta) = \mathbb E_{(s, a, r, m, s')} \sum_i \big(r + \gamma\, m\, V_\psi(s') - Q_{\theta_i}(s, a)\big)^2,

with :math:`m` the dataset's bootstrap mask (OGBench's ``masks``: 0 at a true terminal) and
:math:`\hat\theta \leftarrow (1 - \rho)\hat\theta + \rho\theta` after every update. The expectile
:math:`\tau > 0.5` makes :math:`V` an upper expectile of :math:`Q` over the behaviour's actions: an
in-support maximum (``core.losses.expectile_loss``). The critic a policy uses is :func:`q_value`, :math:`\min_i Q_{\theta_i}(s, a)`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from longhorizon.core.losses import expectile_loss
from longhorizon.core.nets import ACTIVATIONS, MLPTorso, orthogonal
from longhorizon.core.optim import make_optimizer
from longhorizon.errors import UsageError


@dataclasses.dataclass(frozen=True)
class IQLConfig:
    """The critic's networks and training (IQL's defaults, except the network size on CPU)."""

    hidden: tuple[int, ...] = (256, 256)
    activation: str = "gelu"
    layer_norm: bool = True
    expectile: float = 0.7  # tau (IQL: 0.7 on locomotion, 0.9 on AntMaze)
    discount: float = 0.99
    target_rate: float = 0.005  # rho, the Polyak rate of the target Q networks
    learning_rate: float = 3e-4
    max_grad_norm: float = 10.0
    batch_size: int = 256
    num_updates: int = 10_000

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        for name in ("learning_rate", "max_grad_norm", "batch_size", "num_updates"):
            if not getattr(self, name) > 0:
                raise UsageError(f"IQLConfig.{name} must be positive, got {getattr(self, name)!r}; choose a positive value.")
        if not self.hidden or min(self.hidden) < 1:
            raise UsageError(f"IQL hidden must list positive layer widths, got {self.hidden}; e.g. hidden=(256, 256).")
        if self.activation not in ACTIVATIONS:
            raise UsageError(f"unknown IQL activation '{self.activation}'; choose one of {', '.join(ACTIVATIONS)}.")
        if not 0 < self.expectile < 1:
            raise UsageError(f"IQL expectile must be in (0, 1), got {self.expectile}; IQL uses 0.7 or 0.9.")
        if not 0 <= self.discount <= 1:
            raise UsageError(f"IQL discount must be in [0, 1], got {self.discount}; e.g. 0.99.")
        if not 0 < self.target_rate <= 1:
            raise UsageError(f"IQL target_rate must be in (0, 1], got {self.target_rate}; IQL uses 0.005.")


# ----------------------------------------------------------------------------- networks
class TwinQ(nn.Module):
    """:math:`(Q_{\\theta_1}(s, a), Q_{\\theta_2}(s, a))`: two MLPs on ``[obs, a]`` -> ``[2, ...]``."""

    hidden: Sequence[int] = (256, 256)
    activation: str = "gelu"
    layer_norm: bool = True

    @nn.compact
    def __call__(self, obs, actions):
        x = jnp.concatenate([obs, actions], axis=-1)
        qs = []
        for _ in range(2):
            h = MLPTorso(tuple(self.hidden), self.activation, self.layer_norm)(x)
            qs.append(nn.Dense(1, kernel_init=orthogonal(1.0))(h)[..., 0])
        return jnp.stack(qs)


class Value(nn.Module):
    """:math:`V_\\psi(s)`: an MLP on ``obs`` -> ``[...]``."""

    hidden: Sequence[int] = (256, 256)
    activation: str = "gelu"
    layer_norm: bool = True

    @nn.compact
    def __call__(self, obs):
        h = MLPTorso(tuple(self.hidden), self.activation, self.layer_norm)(obs)
        return nn.Dense(1, kernel_init=orthogonal(1.0))(h)[..., 0]


def networks(config: IQLConfig) -> tuple[TwinQ, Value]:
    return (TwinQ(config.hidden, config.activation, config.layer_norm),
            Value(config.hidden, config.activation, config.layer_norm))


def q_apply(config: IQLConfig):
    """The critic a policy uses, :math:`\\min_i Q_{\\theta_i}(s, a)`: ``q(params, obs [B, o], a [B, d]) -> [B]``."""
    twin, _ = networks(config)
    return lambda params, obs, actions: jnp.min(twin.apply(params["q"], obs, actions), axis=0)


def q_value(config: IQLConfig, params):
    """:func:`q_apply` with its parameters bound: ``q(obs, a) -> [B]``."""
    return lambda obs, actions: q_apply(config)(params, obs, actions)


# ----------------------------------------------------------------------------- learn
def losses(config: IQLConfig, params, target_q, batch) -> tuple[jax.Array, dict[str, jax.Array]]:
    """:math:`L_V + L_Q` of the module docstring on one batch (``observations [B, o]``, ``actions [B, d]``,
    ``rewards [B]``, ``masks [B]``, ``next_observations [B, o]``); the targets carry no gradient."""
    twin, value = networks(config)
    q_target = jnp.min(twin.apply(target_q, batch["observations"], batch["actions"]), axis=0)
    v = value.apply(params["v"], batch["observations"])
    value_loss = jnp.mean(expectile_loss(jax.lax.stop_gradient(q_target) - v, config.expectile))
    next_v = jax.lax.stop_gradient(value.apply(params["v"], batch["next_observations"]))
    target = batch["rewards"] + config.discount * batch["masks"] * next_v
    qs = twin.apply(params["q"], batch["observations"], batch["actions"])  # [2, B]
    q_loss = jnp.mean(jnp.sum((target[None] - qs) ** 2, axis=0))
    return value_loss + q_loss, {"value_loss": value_loss, "q_loss": q_loss, "q_mean": jnp.mean(qs), "v_mean": jnp.mean(v)}


def make_train(config: IQLConfig, obs_dim: int, action_dim: int):
    """``(init, train)``: ``init(key) -> params`` and ``train(params, key, data) -> (params, metrics)``
    with ``params = {"q", "v", "target_q"}`` and each loss per update ``[num_updates]`` in ``metrics``.
    ``train`` is pure and jittable (``flows.train_seeds`` runs it over seeds)."""
    twin, value = networks(config)
    optimizer = make_optimizer(config.learning_rate, config.max_grad_norm)
    keys = ("observations", "actions", "rewards", "masks", "next_observations")

    def init(key):
        kq, kv = jax.random.split(key)
        q = twin.init(kq, jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim)))
        return {"q": q, "v": value.init(kv, jnp.zeros((1, obs_dim))), "target_q": q}

    def train(params, key, data):
        missing = [k for k in keys if k not in data]
        if missing:
            raise UsageError(f"the dataset has no {', '.join(missing)}; the IQL critic needs rewards and masks "
                             "(a single-task dataset, e.g. OGBench's singletask relabelling).")
        target_q, params = params["target_q"], {"q": params["q"], "v": params["v"]}
        n = data["actions"].shape[0]

        def update(carry, key):
            params, target_q, opt_state = carry
            idx = jax.random.randint(key, (config.batch_size,), 0, n)
            batch = {k: data[k][idx] for k in keys}
            (_, metrics), grads = jax.value_and_grad(lambda p: losses(config, p, target_q, batch), has_aux=True)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            target_q = optax.incremental_update(params["q"], target_q, config.target_rate)
            return (params, target_q, opt_state), metrics

        carry = (params, target_q, optimizer.init(params))
        (params, target_q, _), metrics = jax.lax.scan(update, carry, jax.random.split(key, config.num_updates))
        return {**params, "target_q": target_q}, metrics

    return init, train
