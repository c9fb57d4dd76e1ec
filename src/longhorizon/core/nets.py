"""Network building blocks shared by every algorithm (flax.linen, one way)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def orthogonal(scale: float = float(np.sqrt(2))):
    return nn.initializers.orthogonal(scale)


class MLPTorso(nn.Module):
    """Dense layers with an optional LayerNorm or BatchNorm after each hidden layer."""

    hidden: Sequence[int] = (64, 64)
    activation: str = "tanh"
    layer_norm: bool = False
    batch_norm: bool = False  # batch statistics when train=True, running averages otherwise

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = x.reshape(x.shape[: x.ndim - 1] + (-1,)) if x.ndim >= 1 else x
        for width in self.hidden:
            x = nn.Dense(width, kernel_init=orthogonal(), bias_init=nn.initializers.zeros)(x)
            x = _normalize(x, self.layer_norm, self.batch_norm, train)
            x = ACTIVATIONS[self.activation](x)
        return x


def _normalize(x, layer_norm: bool, batch_norm: bool, train: bool):
    if layer_norm:
        return nn.LayerNorm()(x)
    if batch_norm:
        return nn.BatchNorm(use_running_average=not train, momentum=0.99)(x)
    return x


class MinAtarTorso(nn.Module):
    """The MinAtar torso: one 3x3 convolution (16 channels) and one dense layer (128 units)."""

    channels: int = 16
    dense: int = 128
    activation: str = "relu"
    layer_norm: bool = False
    batch_norm: bool = False

    @nn.compact
    def __call__(self, x, train: bool = False):
        act = ACTIVATIONS[self.activation]
        x = nn.Conv(self.channels, (3, 3), padding="VALID", kernel_init=orthogonal())(x)
        x = act(_normalize(x, self.layer_norm, self.batch_norm, train))
        x = x.reshape(x.shape[:-3] + (-1,))
        x = nn.Dense(self.dense, kernel_init=orthogonal())(x)
        return act(_normalize(x, self.layer_norm, self.batch_norm, train))


def make_torso(obs_shape: tuple[int, ...], hidden: Sequence[int], activation: str, layer_norm: bool = False,
               index: int | None = None, batch_norm: bool = False) -> nn.Module:
    """An MLP for vector observations, the MinAtar CNN for image observations (H, W, C).

    ``index`` names the torso explicitly (``MLPTorso_<index>``), the name flax would give the
    ``index``-th torso of a compact module, so a module can build its submodules in any order.
    """
    if len(obs_shape) == 3:
        name = None if index is None else f"MinAtarTorso_{index}"
        return MinAtarTorso(channels=hidden[0] if hidden else 16, dense=hidden[-1] if hidden else 128,
                            activation=activation, layer_norm=layer_norm, batch_norm=batch_norm, name=name)
    name = None if index is None else f"MLPTorso_{index}"
    return MLPTorso(hidden=tuple(hidden), activation=activation, layer_norm=layer_norm, batch_norm=batch_norm, name=name)


class PolicyOutput(NamedTuple):
    """One forward pass of :class:`ActorCritic` on a batch of observations ``[..., D]``."""

    logits_or_mean: jax.Array  # [..., A]: categorical logits, or the Gaussian mean
    log_std: jax.Array | None  # [..., A]: the Gaussian's log standard deviation; None for a categorical policy
    value: jax.Array  # [...]: the critic's V(s)


class ActorCritic(nn.Module):
    """Separate actor and critic torsos; a categorical or diagonal-Gaussian policy head."""

    obs_shape: tuple[int, ...]
    action_dim: int
    continuous: bool
    hidden: Sequence[int] = (64, 64)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, obs, value_only: bool = False):
        """A :class:`PolicyOutput`; only the value ``[...]`` if ``value_only`` (the actor is then not
        evaluated: bootstrap values need no policy)."""
        critic = make_torso(self.obs_shape, self.hidden, self.activation, index=1)(obs)
        value = nn.Dense(1, kernel_init=orthogonal(1.0), name="Dense_1")(critic)[..., 0]
        if value_only:
            return value
        actor = make_torso(self.obs_shape, self.hidden, self.activation, index=0)(obs)
        policy_out = nn.Dense(self.action_dim, kernel_init=orthogonal(0.01), name="Dense_0")(actor)
        if self.continuous:
            log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
            return PolicyOutput(policy_out, jnp.broadcast_to(log_std, policy_out.shape), value)
        return PolicyOutput(policy_out, None, value)


class QNetwork(nn.Module):
    """Q-values for a discrete action set, with LayerNorm or BatchNorm after each hidden layer if asked.

    With BatchNorm the variables hold ``batch_stats`` next to ``params``; ``train=True`` normalises
    with the batch's statistics and must be applied with ``mutable=["batch_stats"]``."""

    obs_shape: tuple[int, ...]
    num_actions: int
    hidden: Sequence[int] = (256, 256)
    activation: str = "relu"
    layer_norm: bool = True
    batch_norm: bool = False

    @nn.compact
    def __call__(self, obs, train: bool = False):
        x = make_torso(self.obs_shape, self.hidden, self.activation, self.layer_norm, batch_norm=self.batch_norm)(obs, train)
        return nn.Dense(self.num_actions, kernel_init=orthogonal(1.0))(x)


def q_values(network: nn.Module, variables, obs) -> jax.Array:
    """Q-values of a batch of observations (BatchNorm, if any, with its running statistics)."""
    return network.apply(variables, jnp.asarray(obs, jnp.float32))


def tree_all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)
