"""Policy and value losses shared by the policy-gradient algorithms, and the value function's explained variance."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def clipped_surrogate_loss(log_prob: jax.Array, old_log_prob: jax.Array, advantage: jax.Array,
                           clip_eps: float, clip_eps_high: float | None = None) -> tuple[jax.Array, jax.Array]:
    r"""PPO's clipped surrogate, as a loss to minimise, and the fraction of clipped ratios (CleanRL's
    ``clipfrac``, :math:`\mathbb E[\mathbb 1(|\rho - 1| > \epsilon)]`).

    .. math::
        L = -\mathbb E\big[\min(\rho A,\ \mathrm{clip}(\rho, 1-\epsilon, 1+\epsilon_{high}) A)\big],
        \qquad \rho = \exp(\log\pi - \log\pi_{old}).
    """
    high = clip_eps if clip_eps_high is None else clip_eps_high
    ratio = jnp.exp(log_prob - old_log_prob)
    unclipped = ratio * advantage
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + high) * advantage
    clipfrac = jnp.mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32))
    return -jnp.mean(jnp.minimum(unclipped, clipped)), clipfrac


def clipped_value_loss(value: jax.Array, old_value: jax.Array, target: jax.Array,
                       clip_eps: float | None = None) -> jax.Array:
    r"""Half squared error to the value target, optionally with PPO's value clipping:

    .. math::
        L_V = \tfrac12 \mathbb E\big[\max\big((V - G)^2,\ (V_{old} + \mathrm{clip}(V - V_{old}, -\epsilon, \epsilon) - G)^2\big)\big].
    """
    squared = (value - target) ** 2
    if clip_eps is None:
        return 0.5 * jnp.mean(squared)
    clipped_value = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    return 0.5 * jnp.mean(jnp.maximum(squared, (clipped_value - target) ** 2))


def explained_variance(values: jax.Array, returns: jax.Array) -> jax.Array:
    r"""How much of the returns' variance the value predictions explain, over all elements:

    .. math:: \mathrm{EV} = 1 - \frac{\mathrm{Var}[G - V]}{\mathrm{Var}[G]}

    (population variances). 1: perfect predictions; 0: no better than the returns' mean; negative:
    worse. Where the returns do not vary (:math:`\mathrm{Var}[G] = 0`) it is 0, not CleanRL's NaN,
    which a training loop would read as divergence.
    """
    var_returns = jnp.var(returns)
    safe = jnp.where(var_returns > 0, var_returns, 1.0)
    return jnp.where(var_returns > 0, 1.0 - jnp.var(returns - values) / safe, 0.0)


def huber(x: jax.Array, delta: float = 1.0) -> jax.Array:
    r""":math:`\tfrac12 x^2` for :math:`|x| \le \delta`, else :math:`\delta(|x| - \tfrac12\delta)`."""
    abs_x = jnp.abs(x)
    return jnp.where(abs_x <= delta, 0.5 * x**2, delta * (abs_x - 0.5 * delta))


def expectile_loss(diff: jax.Array, expectile: float, sign: jax.Array | None = None) -> jax.Array:
    r"""The asymmetric squared loss of expectile regression (IQL, HIQL), elementwise:

    .. math:: L_\tau(u) = |\tau - \mathbb 1(s < 0)|\, u^2,

    with :math:`u` = ``diff`` (target minus prediction) and :math:`s` = ``sign`` (default :math:`u`;
    HIQL weighs by the sign of an advantage from the target network instead). ``expectile`` = 0.5 is
    half the squared error's weight on both sides; above 0.5 it approaches the maximum of the target.
    """
    sign = diff if sign is None else sign
    weight = jnp.where(sign >= 0, expectile, 1.0 - expectile)
    return weight * diff**2


def awr_weights(advantage: jax.Array, temperature: float, max_weight: float = 100.0) -> jax.Array:
    r"""Advantage-weighted regression weights :math:`w = \min(\exp(\alpha A), w_{max})`, elementwise.

    ``temperature`` is :math:`\alpha` (the inverse of AWR's :math:`\beta`); the clip keeps one large
    advantage from dominating a batch (100, as in IQL and OGBench's agents).
    """
    return jnp.minimum(jnp.exp(advantage * temperature), max_weight)
