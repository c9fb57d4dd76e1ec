r"""Baird's counterexample (Baird, 1995; Sutton & Barto, 2018, Example 11.1) as exact arrays, and
semi-gradient TD on it: expected updates (exact, no sampling) and a seeded sampled version.

Seven states, two actions, reward 0 everywhere. *dashed* moves to one of states 1..6 uniformly, *solid*
moves to state 7. The behaviour policy takes dashed with probability 6/7 and solid with 1/7, so from any
state the next state is uniform over all seven and its state distribution :math:`d_\mu` is uniform. The
target policy :math:`\pi` always takes solid: :math:`P_\pi(s, 7) = 1`. Eight features:

.. math:: x(i) = 2 e_i + e_8 \ (i = 1..6), \qquad x(7) = e_7 + 2 e_8,

and Sutton & Barto's start :math:`w_0 = (1,1,1,1,1,1,10,1)`, :math:`\gamma = 0.99`, :math:`\alpha = 0.01`.
Every true value is 0; the features can represent it (:math:`w = 0`).

**Expected updates.** A sampled off-policy update with importance ratio
:math:`\rho = \pi(a|s)/\mu(a|s)` (7 for solid, 0 for dashed) has, over :math:`s \sim d_\mu`,
:math:`a \sim \mu`, :math:`s' \sim p(\cdot|s,a)`, the mean

.. math:: \Delta\theta = \alpha \sum_s d_\mu(s)\,\big(G(s) - v_\theta(s)\big)\,\nabla_\theta v_\theta(s)
          - \alpha\,\eta\, \partial_\theta \tfrac12 \lVert w \rVert^2,

with the target held fixed (semi-gradient) and :math:`G = T^\lambda_\pi v_\theta`:

.. math:: T^\lambda_\pi v = (I - \gamma\lambda P_\pi)^{-1}\big(r_\pi + \gamma (1-\lambda) P_\pi v\big),

which is the expectation of the per-decision importance-sampled lambda-return
:math:`G_t = \rho_t\big(r_t + \gamma[(1-\lambda) v(s_{t+1}) + \lambda G_{t+1}]\big) + (1-\rho_t) v(s_t)`
(Sutton & Barto, Section 12.9): PQN's recursion, with the importance ratio in place of its max.
:math:`\lambda = 0` is TD(0): :math:`G = r_\pi + \gamma P_\pi v`. For linear values :math:`v = Xw` this is
:math:`w \leftarrow w - \alpha (A + \eta I) w` with :math:`A = X^\top D_\mu (I - \gamma\lambda P_\pi)^{-1}(I - \gamma P_\pi) X`;
it diverges when an eigenvalue of :math:`A + \eta I` has a negative real part (:func:`td_matrix`).

**LayerNorm critic** (Gallici et al., 2024, the network of their stability analysis):
:math:`v(s) = w^\top \mathrm{ReLU}(\mathrm{LN}(M x(s)))` with
:math:`\mathrm{LN}(z) = \frac{1}{\sqrt k}\,\frac{z - \bar z}{\sqrt{\mathrm{var}(z) + \epsilon}}` (no affine
parameters), so every hidden vector has norm at most 1 and :math:`|v(s)| \le \lVert w \rVert`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

GAMMA = 0.99
ALPHA = 0.01
W0 = (1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 10.0, 1.0)  # Sutton & Barto's start
STATES, FEATURES = 7, 8
SOLID_PROB = 1.0 / 7.0  # behaviour's probability of solid; dashed 6/7
LN_EPS = 1e-5


class Baird(NamedTuple):
    """The counterexample as arrays (float64 numpy)."""

    features: np.ndarray  # X [7, 8]
    p_target: np.ndarray  # P_pi [7, 7]: solid always
    p_behaviour: np.ndarray  # P_mu [7, 7]: uniform next state
    d_behaviour: np.ndarray  # d_mu [7]: uniform (stationary for P_mu)
    rewards: np.ndarray  # r_pi [7]: 0
    gamma: float = GAMMA


def baird(gamma: float = GAMMA) -> Baird:
    x = np.zeros((STATES, FEATURES))
    x[np.arange(6), np.arange(6)] = 2.0
    x[:6, 7] = 1.0
    x[6, 6], x[6, 7] = 1.0, 2.0
    p_target = np.zeros((STATES, STATES))
    p_target[:, 6] = 1.0
    dashed = np.zeros((STATES, STATES))
    dashed[:, :6] = 1.0 / 6.0
    p_behaviour = (1 - SOLID_PROB) * dashed + SOLID_PROB * p_target
    return Baird(x, p_target, p_behaviour, np.full(STATES, 1.0 / STATES), np.zeros(STATES), gamma)


def lambda_target(mdp: Baird, values: jax.Array, lam: float) -> jax.Array:
    """``T^lambda_pi v = (I - gamma lambda P_pi)^{-1} (r_pi + gamma (1 - lambda) P_pi v)`` (lambda = 0: TD(0))."""
    p = jnp.asarray(mdp.p_target, values.dtype)
    rhs = jnp.asarray(mdp.rewards, values.dtype) + mdp.gamma * (1 - lam) * p @ values
    return jnp.linalg.solve(jnp.eye(STATES, dtype=values.dtype) - mdp.gamma * lam * p, rhs)


def td_matrix(mdp: Baird, lam: float = 0.0, features: np.ndarray | None = None) -> np.ndarray:
    """``A = X^T D_mu (I - gamma lambda P_pi)^{-1} (I - gamma P_pi) X``: expected linear TD(lambda) is
    ``w <- w - alpha (A + eta I) w``; stable for small alpha iff every eigenvalue of ``A + eta I`` has a
    positive real part (a zero eigenvalue is a direction the features cannot see, which does not move)."""
    x = mdp.features if features is None else features
    eye = np.eye(STATES)
    core = np.linalg.solve(eye - mdp.gamma * lam * mdp.p_target, eye - mdp.gamma * mdp.p_target)
    return x.T @ np.diag(mdp.d_behaviour) @ core @ x


# ----------------------------------------------------------------------------- value functions
def linear_values(mdp: Baird) -> Callable:
    x = jnp.asarray(mdp.features)
    return lambda params: x.astype(params["w"].dtype) @ params["w"]


def layer_norm_features(params: dict, features: jax.Array) -> jax.Array:
    """``ReLU(LN(M x))`` for each row ``x`` of ``features``; LN scaled by ``1/sqrt(k)`` (norm <= 1)."""
    z = features @ params["M"].T
    k = z.shape[-1]
    z = (z - z.mean(-1, keepdims=True)) / jnp.sqrt(z.var(-1, keepdims=True) + LN_EPS) / jnp.sqrt(k)
    return jax.nn.relu(z)


def layer_norm_values(mdp: Baird) -> Callable:
    x = jnp.asarray(mdp.features)
    return lambda params: layer_norm_features(params, x.astype(params["w"].dtype)) @ params["w"]


def init_layer_norm(key: jax.Array, width: int, dtype=jnp.float64) -> dict:
    """``M [k, 8]`` and ``w [k]`` with standard normal entries (LN makes M's scale irrelevant)."""
    m_key, w_key = jax.random.split(key)
    return {"M": jax.random.normal(m_key, (width, FEATURES), dtype), "w": jax.random.normal(w_key, (width,), dtype)}


# ----------------------------------------------------------------------------- updates
def expected_step(mdp: Baird, values: Callable, params: dict, alpha: float, lam: float = 0.0, eta: float = 0.0) -> dict:
    """One expected semi-gradient update (module docstring), exact: no sampling."""
    def loss(p):
        v = values(p)
        target = jax.lax.stop_gradient(lambda_target(mdp, v, lam))
        d = jnp.asarray(mdp.d_behaviour, v.dtype)
        return 0.5 * jnp.sum(d * (target - v) ** 2) + 0.5 * eta * jnp.sum(p["w"] ** 2)

    return jax.tree.map(lambda p, g: p - alpha * g, params, jax.grad(loss)(params))


def sampled_step(mdp: Baird, values: Callable, params: dict, state: jax.Array, key: jax.Array, alpha: float,
                 eta: float = 0.0) -> tuple[dict, jax.Array]:
    """One sampled off-policy semi-gradient TD(0) update on the behaviour's trajectory: ``a ~ mu``,
    ``s' ~ p(.|s, a)``, ``theta += alpha rho (r + gamma v(s') - v(s)) grad v(s) - alpha eta w``, ``rho = 7``
    for solid and 0 for dashed. Returns the new parameters and ``s'``."""
    a_key, s_key = jax.random.split(key)
    solid = jax.random.uniform(a_key) < SOLID_PROB
    next_state = jnp.where(solid, STATES - 1, jax.random.randint(s_key, (), 0, STATES - 1))
    rho = jnp.where(solid, 1.0 / SOLID_PROB, 0.0)

    def loss(p):
        v = values(p)
        target = jax.lax.stop_gradient(jnp.asarray(mdp.rewards, v.dtype)[state] + mdp.gamma * v[next_state])
        return 0.5 * rho * (target - v[state]) ** 2 + 0.5 * eta * jnp.sum(p["w"] ** 2)

    params = jax.tree.map(lambda p, g: p - alpha * g, params, jax.grad(loss)(params))
    return params, next_state


class Trace(NamedTuple):
    w_norm: jax.Array  # ||w_t|| (the head's weights; all weights of the linear critic), t = 0..T
    max_value: jax.Array  # max_s |v_t(s)|


def _trace(values, params) -> Trace:
    return Trace(jnp.linalg.norm(params["w"]), jnp.max(jnp.abs(values(params))))


def run_expected(mdp: Baird, values: Callable, params: dict, steps: int, alpha: float = ALPHA, lam: float = 0.0,
                 eta: float = 0.0) -> Trace:
    """``steps`` expected updates in one ``lax.scan``; the trace has ``steps + 1`` points (the start first).
    ``vmap`` it over initial parameters for several network initialisations."""
    def body(p, _):
        p = expected_step(mdp, values, p, alpha, lam, eta)
        return p, _trace(values, p)

    _, trace = jax.lax.scan(body, params, None, steps)
    return jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]), _trace(values, params), trace)


def run_expected_settings(mdp: Baird, values: Callable, starts: dict, steps: int, lams, etas,
                          alpha: float = ALPHA) -> Trace:
    """:func:`run_expected` for every setting ``(lams[i], etas[i])`` from every start (the leading axis of
    ``starts``), as one compiled program: the trace's arrays are ``[settings, starts, steps + 1]``."""
    one = lambda p, lam, eta: run_expected(mdp, values, p, steps, alpha, lam, eta)  # noqa: E731
    program = jax.jit(jax.vmap(jax.vmap(one, in_axes=(0, None, None)), in_axes=(None, 0, 0)))
    return program(starts, jnp.asarray(lams), jnp.asarray(etas))


def run_sampled(mdp: Baird, values: Callable, params: dict, key: jax.Array, steps: int, alpha: float = ALPHA,
                eta: float = 0.0) -> Trace:
    """``steps`` sampled updates along one behaviour trajectory from a uniform start state (one seed = one key)."""
    start_key, key = jax.random.split(key)

    def body(carry, step_key):
        p, s = carry
        p, s = sampled_step(mdp, values, p, s, step_key, alpha, eta)
        return (p, s), _trace(values, p)

    start = jax.random.randint(start_key, (), 0, STATES)
    _, trace = jax.lax.scan(body, (params, start), jax.random.split(key, steps))
    return jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]), _trace(values, params), trace)


# ----------------------------------------------------------------------------- exact stability analysis
def min_real_eigenvalue(mdp: Baird, lam: float = 0.0, eta: float = 0.0) -> float:
    """The smallest real part of an eigenvalue of ``A + eta I`` (:func:`td_matrix`): negative means
    expected linear TD(lambda) with l2 strength ``eta`` diverges for every small step size."""
    return float(np.linalg.eigvals(td_matrix(mdp, lam) + eta * np.eye(FEATURES)).real.min())


def expected_log_growth(mdp: Baird, lam: float = 0.0, eta: float = 0.0, alpha: float = ALPHA) -> float:
    """``log max_i |1 - alpha mu_i|`` over the eigenvalues ``mu`` of ``A + eta I``: the asymptotic growth of
    ``log ||w||`` per update of expected linear TD(lambda) with step ``alpha`` (positive: it diverges)."""
    mu = np.linalg.eigvals(td_matrix(mdp, lam) + eta * np.eye(FEATURES))
    return float(np.log(np.abs(1 - alpha * mu).max()))


def _bisect(stable, lo: float, hi: float, iterations: int = 60) -> float:
    """The boundary in ``[lo, hi]`` of a monotone predicate with ``stable(lo) != stable(hi)``."""
    flip = stable(lo)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if stable(mid) == flip else (lo, mid)
    return 0.5 * (lo + hi)


def critical_gamma(tolerance: float = 1e-12) -> float:
    """The largest discount at which expected linear TD(0) on Baird's counterexample does not diverge."""
    return _bisect(lambda g: min_real_eigenvalue(baird(g)) >= -tolerance, 0.0, 1.0)


def critical_lambda(gamma: float = GAMMA, tolerance: float = 1e-12) -> float:
    """The smallest lambda at which expected linear TD(lambda) (per-decision importance sampling) on
    Baird's counterexample does not diverge. Here ``P_pi^2 = P_pi``, so TD(lambda) is TD(0) with the
    discount ``gamma (1 - lambda) / (1 - gamma lambda)``."""
    mdp = baird(gamma)
    return _bisect(lambda lam: min_real_eigenvalue(mdp, lam) >= -tolerance, 0.0, 1.0)


# ----------------------------------------------------------------------------- reading a trace
def trace_growth(w_norm: np.ndarray, max_value: np.ndarray) -> dict:
    """How far the weights and values of runs ``[runs, T + 1]`` (a :class:`Trace`'s arrays) moved from each
    run's start, per run: ``w0``; ``final_ratio`` ``||w_T|| / ||w_0||``; ``half_to_end_ratio``
    ``||w_T|| / ||w_{T/2}||``; ``max_w_ratio`` ``max_t ||w_t|| / ||w_0||``; ``max_value_ratio``
    ``max_t max_s |v_t(s)| / max_s |v_0(s)|``; ``final_max_value``; and ``log_norm_slope``, the least-squares
    slope of ``log ||w_t||`` over the second half (``t >= T/2``; positive: still growing)."""
    w, v = np.asarray(w_norm), np.asarray(max_value)
    steps = w.shape[1] - 1
    half = np.arange(steps // 2, steps + 1)
    with np.errstate(divide="ignore"):
        slopes = np.polyfit(half, np.log(np.maximum(w[:, half], 1e-300)).T, 1)[0]
    return {"w0": w[:, 0].tolist(), "final_ratio": (w[:, -1] / w[:, 0]).tolist(),
            "half_to_end_ratio": (w[:, -1] / w[:, steps // 2]).tolist(),
            "max_w_ratio": (w.max(1) / w[:, 0]).tolist(), "max_value_ratio": (v.max(1) / v[:, 0]).tolist(),
            "final_max_value": v[:, -1].tolist(), "log_norm_slope": slopes.tolist()}
