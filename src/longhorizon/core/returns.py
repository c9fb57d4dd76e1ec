"""Return estimators, written once from their equations.

Conventions shared by every function here (time-major, shape ``[T, ...]``):

* ``rewards[t]``: reward received for the transition taken at step ``t``.
* ``bootstrap[t]``: value of the *true* next state ``s'_t`` of that transition (the final
  observation when the episode ended at ``t``, otherwise ``s_{t+1}``). For state values this is
  ``V(s'_t)``; for Q-learning it is ``max_a Q(s'_t, a)``.
* ``terminated[t]``: the episode ended in a terminal state at ``t``; nothing is bootstrapped.
* ``done[t] = terminated[t] or truncated[t]``: the episode ended at ``t`` (for any reason), so the
  trace is cut: step ``t + 1`` belongs to the next episode. A *truncated* step still bootstraps
  from ``bootstrap[t]``, which is what makes time limits correct.

The last step of a rollout bootstraps from ``bootstrap[T-1]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _as_float(x: jax.Array) -> jax.Array:
    return jnp.asarray(x, dtype=jnp.float32)


def lambda_returns(
    rewards: jax.Array,
    bootstrap: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: float,
    lam: float,
) -> jax.Array:
    r"""TD(lambda) / Q(lambda) returns, computed backwards over the rollout.

    .. math::
        G_t = r_t + \gamma (1 - \text{term}_t)\,\big[(1 - \lambda_t) b_t + \lambda_t G_{t+1}\big],
        \qquad \lambda_t = \lambda (1 - \text{done}_t),\quad \lambda_{T-1} = 0,

    where :math:`b_t` is ``bootstrap[t]``. With :math:`b_t = \max_a Q(s'_t, a)` this is the
    Peng's Q(lambda) target used by PQN; with :math:`b_t = V(s'_t)` it is the lambda-return
    whose difference to :math:`V(s_t)` is GAE. ``lam = 0`` gives one-step TD targets and
    ``lam = 1`` gives Monte-Carlo returns cut at episode ends and bootstrapped at the rollout end.
    """
    rewards, bootstrap = _as_float(rewards), _as_float(bootstrap)
    not_term = 1.0 - _as_float(terminated)
    trace = lam * (1.0 - _as_float(done))
    trace = trace.at[-1].set(0.0)  # the last step has no G_{t+1}: bootstrap fully

    def backward(next_return, xs):
        r, b, nt, tr = xs
        g = r + gamma * nt * ((1.0 - tr) * b + tr * next_return)
        return g, g

    _, returns = jax.lax.scan(
        backward, jnp.zeros_like(rewards[-1]), (rewards, bootstrap, not_term, trace), reverse=True
    )
    return returns


def gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: float,
    lam: float,
) -> tuple[jax.Array, jax.Array]:
    r"""Generalised advantage estimation (Schulman et al., 2016).

    .. math::
        \delta_t = r_t + \gamma (1 - \text{term}_t) V(s'_t) - V(s_t), \qquad
        A_t = \delta_t + \gamma \lambda (1 - \text{done}_t) A_{t+1},\quad A_T = 0.

    ``values[t] = V(s_t)`` and ``next_values[t] = V(s'_t)`` (the true next state, see the module
    docstring). Returns ``(advantages, value_targets)`` with ``value_targets = advantages + values``.
    """
    rewards, values, next_values = _as_float(rewards), _as_float(values), _as_float(next_values)
    not_term = 1.0 - _as_float(terminated)
    not_done = 1.0 - _as_float(done)
    deltas = rewards + gamma * not_term * next_values - values

    def backward(next_advantage, xs):
        delta, nd = xs
        a = delta + gamma * lam * nd * next_advantage
        return a, a

    _, advantages = jax.lax.scan(
        backward, jnp.zeros_like(deltas[-1]), (deltas, not_done), reverse=True
    )
    return advantages, advantages + values


def n_step_returns(
    rewards: jax.Array,
    bootstrap: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: float,
    n: int,
) -> jax.Array:
    r"""n-step returns, cut at episode ends and at the end of the rollout.

    .. math::
        G^{(n)}_t = \sum_{i=0}^{m-1} \gamma^i r_{t+i} + \gamma^{m} (1 - \text{term}_{t+m-1})\, b_{t+m-1},

    where :math:`m \le n` is the number of steps until the first of: ``n`` steps, the end of the
    episode (``done``) or the end of the rollout. ``n = 1`` is the one-step TD target.
    """
    rewards, bootstrap = _as_float(rewards), _as_float(bootstrap)
    not_term = 1.0 - _as_float(terminated)
    done = _as_float(done)
    # Recursion over the look-ahead depth, from the deepest: G^(1)_t = r_t + g (1-term_t) b_t and
    # G^(k)_t = r_t + g (1-term_t) [ stop_t b_t + (1 - stop_t) G^(k-1)_{t+1} ], stop_t = done_t or t=T-1.
    stop = done.at[-1].set(1.0)
    returns = rewards + gamma * not_term * bootstrap
    for _ in range(n - 1):
        shifted = jnp.concatenate([returns[1:], jnp.zeros_like(returns[:1])], axis=0)
        returns = rewards + gamma * not_term * (stop * bootstrap + (1.0 - stop) * shifted)
    return returns


def vtrace(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    log_rhos: jax.Array,
    gamma: float,
    lam: float = 1.0,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
    r"""V-trace targets and policy-gradient advantages (Espeholt et al., 2018).

    With :math:`\rho_t = \min(\bar\rho, \pi(a_t|s_t)/\mu(a_t|s_t))`,
    :math:`c_t = \lambda \min(\bar c, \pi/\mu)` and
    :math:`\delta_t = \rho_t (r_t + \gamma (1-\text{term}_t) V(s'_t) - V(s_t))`:

    .. math::
        v_t - V(s_t) = \delta_t + \gamma (1 - \text{done}_t)\, c_t\, (v_{t+1} - V(s_{t+1})),

    and the advantage for the policy gradient is
    :math:`\rho_t (r_t + \gamma (1-\text{term}_t) \hat v'_t - V(s_t))` where :math:`\hat v'_t` is
    :math:`v_{t+1}` inside the episode and :math:`V(s'_t)` at its end or at the rollout end.
    ``log_rhos = log pi(a|s) - log mu(a|s)``. Returns ``(vs, pg_advantages)``.
    """
    rewards, values, next_values = _as_float(rewards), _as_float(values), _as_float(next_values)
    not_term = 1.0 - _as_float(terminated)
    not_done = 1.0 - _as_float(done)
    ratios = jnp.exp(_as_float(log_rhos))
    rhos = jnp.minimum(rho_clip, ratios)
    cs = lam * jnp.minimum(c_clip, ratios)
    deltas = rhos * (rewards + gamma * not_term * next_values - values)

    def backward(next_diff, xs):
        delta, c, nd = xs
        diff = delta + gamma * nd * c * next_diff
        return diff, diff

    _, diffs = jax.lax.scan(backward, jnp.zeros_like(deltas[-1]), (deltas, cs, not_done), reverse=True)
    vs = diffs + values
    # The target for the next state: v_{t+1} inside the episode, V(s'_t) at its (or the rollout's) end.
    vs_next = jnp.concatenate([vs[1:], next_values[-1:]], axis=0)
    vs_next = jnp.where(not_done > 0, vs_next, next_values)
    pg_advantages = rhos * (rewards + gamma * not_term * vs_next - values)
    return vs, pg_advantages
