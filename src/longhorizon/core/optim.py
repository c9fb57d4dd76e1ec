r"""The optimiser every algorithm builds (:func:`make_optimizer`), and a single-pass Rectified Adam.

:func:`make_optimizer` clips the gradient to a global norm :math:`c`,
:math:`g \leftarrow g \min(1, c / \lVert g \rVert_2)`, then applies Adam or RAdam with a constant
learning rate :math:`\alpha` or one annealed linearly to 0, :math:`\alpha_t = \alpha \max(0, 1 - t/N)`
over :math:`N` optimiser steps.

RAdam (Liu et al., 2020, "On the Variance of the Adaptive Learning Rate and Beyond"), with
:math:`\rho_\infty = 2/(1-\beta_2) - 1` and at step :math:`t`
:math:`\rho_t = \rho_\infty - 2t\beta_2^t/(1-\beta_2^t)`:

.. math:: m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2,
          \quad \hat m_t = m_t / (1-\beta_1^t), \quad \hat v_t = v_t / (1-\beta_2^t)

.. math:: u_t = -\alpha_t \hat m_t \cdot
          \begin{cases} r_t / (\sqrt{\hat v_t} + \epsilon) & \rho_t \ge 5 \\ 1 & \text{otherwise} \end{cases},
          \quad r_t = \sqrt{\frac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}}

PPO and PQN step the *flat* vector of all weights (:func:`init_flat`, :func:`flat_step`):
the update is the same, but on a CPU every leaf of a weight tree costs its own small kernels per step
(global norm, moments, update), a visible share of a small network's minibatch step
(``benchmarks/ppo_cartpole.py``).

RAdam: same update as ``optax.radam``; everything that depends only on :math:`t` is folded into scalars first
so that each parameter is read and written in one elementwise pass (the PQN learner spends a visible
share of its time in the optimiser on CPU; see ``benchmarks/pqn_throughput.py``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree


OPTIMIZERS = ("adam", "radam")


def make_optimizer(learning_rate: float, max_grad_norm: float, kind: str = "adam", anneal_steps: int | None = None,
                   eps: float = 1e-8) -> optax.GradientTransformation:
    """Global-norm clipping, then Adam or RAdam; the learning rate decays linearly to 0 over
    ``anneal_steps`` optimiser steps if given (and stays 0 after), else is constant."""
    if kind not in OPTIMIZERS:
        raise ValueError(f"optimizer kind must be one of {OPTIMIZERS}, got {kind!r}")
    lr = optax.linear_schedule(learning_rate, 0.0, anneal_steps) if anneal_steps else learning_rate
    update = optax.adam(lr, eps=eps) if kind == "adam" else radam(lr, eps=eps)
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), update)


def learning_rate_at(learning_rate, step, anneal_steps: int | None = None) -> jax.Array:
    r"""The learning rate :func:`make_optimizer` applies at optimiser step ``step`` (counted from 0):
    :math:`\alpha_t = \alpha \max(0, 1 - t/N)` with :math:`N` = ``anneal_steps``, or :math:`\alpha` without."""
    learning_rate = jnp.asarray(learning_rate, jnp.float32)
    if not anneal_steps:
        return learning_rate
    return learning_rate * jnp.maximum(0.0, 1.0 - jnp.asarray(step, jnp.float32) / anneal_steps)


def init_flat(optimizer: optax.GradientTransformation, params) -> optax.OptState:
    """``optimizer``'s state for the flat vector of ``params`` (what :func:`flat_step` updates)."""
    return optimizer.init(ravel_pytree(params)[0])


def flat_step(optimizer: optax.GradientTransformation, loss_fn: Callable, unravel: Callable) -> Callable:
    """``step(flat, opt_state, *args) -> (flat, opt_state, aux)``: one gradient step of
    ``loss_fn(params, *args) -> (loss, aux)`` on the flat weight vector (``params = unravel(flat)``,
    ``flat, unravel = jax.flatten_util.ravel_pytree(params)``)."""

    def step(flat, opt_state, *args):
        grads, aux = jax.grad(lambda f: loss_fn(unravel(f), *args), has_aux=True)(flat)
        updates, opt_state = optimizer.update(grads, opt_state, flat)
        return flat + updates, opt_state, aux

    return step


class RAdamState(NamedTuple):
    count: jax.Array
    mu: optax.Updates
    nu: optax.Updates


def radam(learning_rate: float | Callable[[jax.Array], jax.Array], b1: float = 0.9, b2: float = 0.999,
          eps: float = 1e-8, threshold: float = 5.0) -> optax.GradientTransformation:
    """Rectified Adam as one ``optax.GradientTransformation`` (learning rate and sign included)."""
    rho_inf = 2.0 / (1.0 - b2) - 1.0

    def init_fn(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return RAdamState(jnp.zeros([], jnp.int32), zeros, zeros)

    def update_fn(grads, state, params=None):
        del params
        t = state.count + 1
        tf = t.astype(jnp.float32)
        b1t, b2t = b1 ** tf, b2 ** tf
        rho = rho_inf - 2.0 * tf * b2t / (1.0 - b2t)
        rectified = rho >= threshold
        r = jnp.sqrt(jnp.maximum((rho - 4.0) * (rho - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho), 0.0))
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
        step = -lr / (1.0 - b1t)  # scales m_t into -lr * m_hat
        sqrt_bias = jnp.sqrt(1.0 - b2t)  # sqrt(v_hat) = sqrt(v_t) / sqrt(1 - b2^t)
        # where the variance is intractable (rho < threshold) the update is plain momentum SGD
        num_scale = jnp.where(rectified, r * sqrt_bias, 1.0)
        den_mix = jnp.where(rectified, 1.0, 0.0)

        def one(g, m, v):
            m = b1 * m + (1.0 - b1) * g
            v = b2 * v + (1.0 - b2) * g * g
            # rectified: r * m_hat / (sqrt(v_hat) + eps) = r*sqrt(1-b2^t) * m_hat / (sqrt(v_t) + eps*sqrt(1-b2^t))
            denominator = den_mix * (jnp.sqrt(v) + eps * sqrt_bias) + (1.0 - den_mix)
            return step * num_scale * m / denominator, m, v

        out = jax.tree.map(one, grads, state.mu, state.nu)
        treedef = jax.tree.structure(grads)
        updates, mu, nu = (jax.tree.unflatten(treedef, [leaf[i] for leaf in treedef.flatten_up_to(out)])
                           for i in range(3))
        return updates, RAdamState(t, mu, nu)

    return optax.GradientTransformation(init_fn, update_fn)
