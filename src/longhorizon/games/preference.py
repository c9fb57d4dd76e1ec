"""Tabular regularised preference games and their closed-form learning dynamics (float64).

The game (Munos et al., "Nash Learning from Human Feedback"; Tiapkin et al., Nash-MP): ``n`` responses,
a preference matrix ``P`` (n, n) with ``P[i, j] = Prob(y_i > y_j)`` and ``P + P^T = 1`` (so the diagonal
is 1/2 and ``P = 1/2 + A`` with ``A`` skew-symmetric), a reference policy ``pi_ref`` (n,) and

    J(pi, pi') = pi^T P pi' - beta KL(pi || pi_ref) + beta KL(pi' || pi_ref),     max over pi, min over pi'.

It is symmetric, so its unique Nash equilibrium is (pi*, pi*) with the fixed point

    pi*(y) = pi_ref(y) exp((P pi*)(y) / beta) / Z.

Every update here is an entropic proximal step, the maximiser over the simplex of

    <pi, g> - c_ref KL(pi || pi_ref) - c_anchor KL(pi || anchor)
        =>  log pi = (g + c_ref log pi_ref + c_anchor log anchor) / (c_ref + c_anchor) - log Z,

so each algorithm is named by its (g, c_ref, c_anchor): see ``entropic_prox`` and the ``*_step``
functions. All arrays are float64 (computed under ``jax.enable_x64``); the public functions take and
return numpy arrays; ``trajectory`` runs many steps of one update as a single jitted scan.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import linprog
from scipy.special import logsumexp

from longhorizon.errors import UsageError

# Mirror prox needs eta <= 1/L, L the Lipschitz constant of pi -> P pi from l1 to l-infinity. On the
# simplex's tangent space P v = A v with |A_ij| <= 1/2, so L = 1/2 and the largest step is eta = 2,
# which gives KL(pi* || pi_k) <= KL_0 (1 + 2 beta)^(-k): the (1 + 2 beta)^(-N/2) rate with N = 2k queries.
NASH_MP_ETA = 2.0
QUERIES_PER_STEP = {"nash-mp": 2, "extragradient": 2, "nash-md": 1, "omd": 1, "mwu": 1}
_TINY = 1e-300  # log(0) guard: a probability that underflowed stays representable in log space


# --------------------------------------------------------------------------------------------- the game
def random_skew_game(n: int, key) -> np.ndarray:
    """A random preference game ``P = 1/2 + A`` (n, n), ``A = U - U^T`` with ``U_ij ~ Uniform(0, 1/2)``
    above the diagonal, so ``|A| <= 1/2`` and ``P + P^T = 1``. ``key``: a JAX PRNG key or an int seed."""
    if int(n) < 2:
        raise UsageError(f"a preference game needs at least 2 responses, got n={n}; pass n >= 2.")
    key = jax.random.key(key) if isinstance(key, (int, np.integer)) else key
    with jax.enable_x64(True):
        u = np.asarray(jax.random.uniform(key, (n, n), jnp.float64, 0.0, 0.5))
    upper = np.triu(u, 1)
    return 0.5 + upper - upper.T


def intransitive_3x3() -> np.ndarray:
    """A rock-paper-scissors-like game with unequal strengths: y0 beats y1 (0.9), y1 beats y2 (0.7),
    y2 beats y0 (0.8), so no response is best and the Nash policy is interior and not uniform."""
    return np.array([[0.5, 0.9, 0.2],
                     [0.1, 0.5, 0.7],
                     [0.8, 0.3, 0.5]])


def check_game(P, beta: float, pi_ref) -> tuple[np.ndarray, np.ndarray]:
    """``(P, pi_ref)`` as float64 arrays, or a UsageError naming what is wrong with the game."""
    P = np.asarray(P, np.float64)
    pi_ref = np.asarray(pi_ref, np.float64)
    if P.ndim != 2 or P.shape[0] != P.shape[1]:
        raise UsageError(f"the preference matrix must be square (n, n), got shape {P.shape}; pass P[i, j] = Prob(y_i > y_j).")
    if P.min() < 0 or P.max() > 1 or not np.allclose(P + P.T, 1.0, atol=1e-9):
        raise UsageError("the preference matrix must have entries in [0, 1] and P + P^T = 1; build it as 1/2 + A with A skew-symmetric, |A| <= 1/2.")
    if pi_ref.shape != (P.shape[0],) or pi_ref.min() <= 0 or abs(pi_ref.sum() - 1) > 1e-9:
        raise UsageError(f"pi_ref must be a positive distribution over the {P.shape[0]} responses; pass a vector that sums to 1.")
    if not beta > 0:
        raise UsageError(f"beta must be > 0 for the regularised game, got {beta}; use mwu_step for the unregularised one.")
    return P, pi_ref


def kl(p, q):
    """``KL(p || q) = sum_y p log(p / q)`` for distributions (..., n), written as the sum of the
    non-negative terms ``p log(p/q) - p + q`` (equal for normalised p, q; no cancellation to below 0)."""
    return jnp.sum(jax.scipy.special.kl_div(p, q), axis=-1)


def best_response_log(pi, P, beta: float, pi_ref):
    """``log BR(pi)``, the best response ``argmax_u u^T P pi - beta KL(u || pi_ref) ∝ pi_ref exp(P pi / beta)``."""
    return jax.nn.log_softmax(jnp.log(pi_ref) + P @ pi / beta)


@jax.jit
def _diagnostics(pi, P, beta, pi_ref):
    residual = jnp.max(jnp.abs(jnp.log(jnp.maximum(pi, _TINY)) - best_response_log(pi, P, beta, pi_ref)))
    log_partition = jax.scipy.special.logsumexp(jnp.log(pi_ref) + P @ pi / beta)
    return residual, 2.0 * (beta * log_partition + beta * kl(pi, pi_ref) - 0.5)


def _diagnose(pi, P, beta, pi_ref):
    with jax.enable_x64(True):
        return tuple(float(x) for x in _diagnostics(*(jnp.asarray(x, jnp.float64) for x in (pi, P, beta, pi_ref))))


def fixed_point_residual(pi, P, beta: float, pi_ref) -> float:
    """``max_y |log pi(y) - log BR(pi)(y)|``: zero exactly at pi*_beta."""
    return _diagnose(pi, P, beta, pi_ref)[0]


def duality_gap(pi, P, beta: float, pi_ref) -> float:
    """``max_u J(u, pi) - min_v J(pi, v) = 2 [beta log E_ref exp(P pi / beta) + beta KL(pi || pi_ref) - 1/2]``
    (the two best responses in closed form, using ``P^T pi = 1 - P pi``); >= 0, zero only at pi*_beta."""
    return _diagnose(pi, P, beta, pi_ref)[1]


# ------------------------------------------------------------------------------------ the updates
def entropic_prox(g, c_ref, log_ref, c_anchor, log_anchor):
    """``argmax_pi <pi, g> - c_ref KL(pi || pi_ref) - c_anchor KL(pi || anchor)`` over the simplex:
    ``softmax((g + c_ref log pi_ref + c_anchor log anchor) / (c_ref + c_anchor))``; arrays (n,)."""
    return jax.nn.softmax((g + c_ref * log_ref + c_anchor * log_anchor) / (c_ref + c_anchor))


def _log(pi):
    return jnp.log(jnp.maximum(pi, _TINY))


def _nash_mp(pi, P, beta, eta, pi_ref):
    # Both steps are anchored at pi_k, with the regulariser kept exact (not linearised):
    # pi_{k+1/2} = argmax eta [pi^T P pi_k - beta KL(pi||ref)] - KL(pi||pi_k), then the same with P pi_{k+1/2}.
    half = entropic_prox(eta * (P @ pi), eta * beta, _log(pi_ref), 1.0, _log(pi))
    return entropic_prox(eta * (P @ half), eta * beta, _log(pi_ref), 1.0, _log(pi))


def _nash_md(pi, P, beta, eta, pi_ref):
    # pi^mu ∝ pi_k^(1 - eta beta) pi_ref^(eta beta) (the geometric mixture), then one mirror step against it:
    # pi_{k+1} = argmax eta pi^T P pi^mu - KL(pi || pi^mu).
    mixture = jax.nn.softmax((1.0 - eta * beta) * _log(pi) + eta * beta * _log(pi_ref))
    return entropic_prox(eta * (P @ mixture), 0.0, _log(pi_ref), 1.0, _log(mixture))


def _omd(pi, P, beta, eta, pi_ref):
    # INPO: argmax eta <pi, P pi_t - beta log(pi_t / ref)> - KL(pi || pi_t)
    #     = pi_t^(1 - eta beta) pi_ref^(eta beta) exp(eta P pi_t) / Z.
    return entropic_prox(eta * (P @ pi), eta * beta, _log(pi_ref), 1.0 - eta * beta, _log(pi))


def _regularised_gradient(pi, P, beta, pi_ref):
    return P @ pi - beta * (_log(pi) - _log(pi_ref))


def _extragradient(pi, P, beta, eta, pi_ref):
    # Entropic extragradient on the linearised objective g(pi) = P pi - beta log(pi / ref):
    # pi_{k+1/2} ∝ pi_k exp(eta g(pi_k)), pi_{k+1} ∝ pi_k exp(eta g(pi_{k+1/2})).
    half = entropic_prox(eta * _regularised_gradient(pi, P, beta, pi_ref), 0.0, _log(pi_ref), 1.0, _log(pi))
    return entropic_prox(eta * _regularised_gradient(half, P, beta, pi_ref), 0.0, _log(pi_ref), 1.0, _log(pi))


def _mwu(pi, P, beta, eta, pi_ref):
    # Unregularised (beta ignored): pi_{t+1} ∝ pi_t exp(eta P pi_t).
    return entropic_prox(eta * (P @ pi), 0.0, _log(pi_ref), 1.0, _log(pi))


UPDATES = {"nash-mp": _nash_mp, "nash-md": _nash_md, "omd": _omd, "extragradient": _extragradient, "mwu": _mwu}


def _switch(method_index, pi, P, beta, eta, pi_ref):
    # The method is a traced index, so one compiled program per shape serves every method.
    branches = [lambda pi, eta, update=update: update(pi, P, beta, eta, pi_ref) for update in UPDATES.values()]
    return jax.lax.switch(method_index, branches, pi, eta)


@jax.jit
def _jitted_step(method_index, pi, P, beta, eta, pi_ref):
    return _switch(method_index, pi, P, beta, eta, pi_ref)


def _step(method, pi, P, beta, eta, pi_ref):
    with jax.enable_x64(True):
        args = (jnp.asarray(x, jnp.float64) for x in (pi, P, beta, eta, pi_ref))
        return np.asarray(_jitted_step(list(UPDATES).index(method), *args))


def nash_mp_step(pi, P, beta: float, eta: float, pi_ref) -> np.ndarray:
    """Nash-MP (mirror prox), 2 preference queries (P pi_k, P pi_{k+1/2}); pi, pi_ref (n,), P (n, n):

        pi_{k+1/2} ∝ [pi_k pi_ref^(eta beta) exp(eta P pi_k)]^(1 / (1 + eta beta)),
        pi_{k+1}   ∝ [pi_k pi_ref^(eta beta) exp(eta P pi_{k+1/2})]^(1 / (1 + eta beta)).

    Each is argmax_pi eta [P(pi > pi_other) - beta KL(pi || pi_ref)] - KL(pi || pi_k). With eta <= 2
    (``NASH_MP_ETA``), KL(pi* || pi_{k+1}) <= KL(pi* || pi_k) / (1 + eta beta)."""
    return _step("nash-mp", pi, P, beta, eta, pi_ref)


def nash_md_step(pi, P, beta: float, eta: float, pi_ref) -> np.ndarray:
    """Nash-MD (Munos et al.), 1 query: ``pi^mu ∝ pi_k^(1 - eta beta) pi_ref^(eta beta)``,
    ``pi_{k+1} ∝ pi^mu exp(eta P pi^mu)``; needs eta beta <= 1."""
    return _step("nash-md", pi, P, beta, eta, pi_ref)


def omd_update(pi, P, beta: float, eta: float, pi_ref) -> np.ndarray:
    """INPO's online mirror descent iterate, 1 query:
    ``pi_{t+1} ∝ pi_t^(1 - eta beta) pi_ref^(eta beta) exp(eta P pi_t)`` (needs eta beta <= 1)."""
    return _step("omd", pi, P, beta, eta, pi_ref)


def extragradient_step(pi, P, beta: float, eta: float, pi_ref) -> np.ndarray:
    """Entropic (multiplicative) extragradient on ``g(pi) = P pi - beta log(pi / pi_ref)``, 2 queries:
    ``pi_{k+1/2} ∝ pi_k exp(eta g(pi_k))``, ``pi_{k+1} ∝ pi_k exp(eta g(pi_{k+1/2}))``. Unlike Nash-MP
    the regulariser is linearised at the current point instead of kept inside the proximal step."""
    return _step("extragradient", pi, P, beta, eta, pi_ref)


def mwu_step(pi, P, eta: float) -> np.ndarray:
    """Multiplicative weights on the unregularised game (beta = 0), 1 query: ``pi_{t+1} ∝ pi_t exp(eta P pi_t)``."""
    pi = np.asarray(pi, np.float64)
    return _step("mwu", pi, P, 0.0, eta, np.full_like(pi, 1.0 / pi.size))


# ------------------------------------------------------------------------------ the reference solver
@jax.jit
def _contract(P, beta, pi_ref, max_steps):
    """Nash-MP steps at eta = 2 from pi_ref until the fixed-point residual is below 1e-4."""
    def far(carry):
        pi, k = carry
        return (k < max_steps) & (jnp.max(jnp.abs(_log(pi) - best_response_log(pi, P, beta, pi_ref))) > 1e-4)

    def step(carry):
        pi, k = carry
        return _nash_mp(pi, P, beta, NASH_MP_ETA, pi_ref), k + 1

    return jax.lax.while_loop(far, step, (pi_ref, 0))[0]


def regularised_nash(P, beta: float, pi_ref, tol: float = 1e-12) -> np.ndarray:
    """pi*_beta (n,), float64, with ``fixed_point_residual < tol`` (checked; RuntimeError otherwise).

    Phase 1, Nash-MP at eta = 2 (a contraction in KL) until the residual is below 1e-4; phase 2, Newton
    on the KKT system in z = log pi with the normaliser c:

        F(z, c) = [z - log pi_ref - P e^z / beta + c 1,  sum e^z - 1] = 0,
        dF = [[I - P diag(e^z) / beta, 1], [e^z^T, 0]],

    whose Jacobian is invertible (I minus a matrix similar to a skew one, up to the rank-one part)."""
    P, pi_ref = check_game(P, beta, pi_ref)
    max_phase1 = int(np.ceil(np.log(1e8) / np.log1p(2 * beta))) + 10
    with jax.enable_x64(True):
        pi = np.asarray(_contract(jnp.asarray(P), jnp.float64(beta), jnp.asarray(pi_ref), max_phase1))
    n = pi.size
    z, log_ref = np.log(pi), np.log(pi_ref)
    c = logsumexp(log_ref + P @ pi / beta)  # log Z at the phase-1 point
    best, best_size = z, np.inf
    for _ in range(30):
        e = np.exp(z)
        residual = np.concatenate([z - log_ref - P @ e / beta + c, [e.sum() - 1.0]])
        size = np.max(np.abs(residual))
        if size >= best_size:  # at the rounding floor: keep the best point
            break
        best, best_size = z, size
        if size < 1e-14:
            break
        jacobian = np.block([[np.eye(n) - P * e[None, :] / beta, np.ones((n, 1))], [e[None, :], np.zeros((1, 1))]])
        delta = np.linalg.solve(jacobian, -residual)
        z, c = z + delta[:n], c + delta[n]
    pi = np.exp(best)
    pi /= pi.sum()
    if (res := fixed_point_residual(pi, P, beta, pi_ref)) >= tol:
        raise RuntimeError(f"the reference solver reached a residual {res:.2e} >= {tol:.0e} (n={n}, beta={beta}).")
    return pi


def unregularised_nash(P) -> np.ndarray:
    """A Nash policy of the beta = 0 game (n,): pi with max_i (P pi)_i <= 1/2 (= pi^T P pi), found by the LP
    ``min t  s.t.  P pi <= t 1, sum pi = 1, pi >= 0`` (HiGHS; its optimum is t = 1/2)."""
    P = np.asarray(P, np.float64)
    n = P.shape[0]
    cost = np.r_[np.zeros(n), 1.0]  # variables (pi, t)
    solution = linprog(cost, A_ub=np.c_[P, -np.ones(n)], b_ub=np.zeros(n), A_eq=np.r_[np.ones(n), 0.0][None],
                       b_eq=[1.0], bounds=[(0, None)] * n + [(None, None)], method="highs")
    return np.maximum(solution.x[:n], 0.0) / np.maximum(solution.x[:n], 0.0).sum()


# ------------------------------------------------------------------------------------- trajectories
def nash_md_schedule(beta: float, num_steps: int) -> np.ndarray:
    """The decaying Nash-MD step ``eta_k = 2 / (beta (k + 2))`` (eta_0 beta = 1, then O(1/k)) (num_steps,)."""
    return 2.0 / (beta * (np.arange(num_steps) + 2.0))


@jax.jit
def _scan(method_index, pi0, P, beta, etas, pi_ref, target):
    def step(carry, eta):
        pi, pi_sum, k = carry
        pi = _switch(method_index, pi, P, beta, eta, pi_ref)
        pi_sum = pi_sum + pi
        return (pi, pi_sum, k + 1), (kl(target, pi), kl(target, pi_sum / (k + 1)))

    _, (kl_last, kl_average) = jax.lax.scan(step, (pi0, jnp.zeros_like(pi0), 0), etas)
    return kl_last, kl_average


def trajectory(method: str, P, beta: float, pi_ref, eta, num_steps: int, target, pi0=None) -> dict:
    """``num_steps`` updates of ``method`` from ``pi0`` (default pi_ref), as one jitted scan.

    ``eta``: a float or a per-step schedule (num_steps,). Returns numpy arrays of length num_steps + 1
    (index 0 is the start): ``queries`` (N = queries per step x k), ``kl_last`` = KL(target || pi_k) and
    ``kl_average`` = KL(target || mean(pi_1..pi_k)) (the start for k = 0)."""
    if method not in UPDATES:
        raise UsageError(f"unknown preference-game method {method!r}; choose one of {', '.join(UPDATES)}.")
    pi0 = np.asarray(pi_ref if pi0 is None else pi0, np.float64)
    etas = np.broadcast_to(np.asarray(eta, np.float64), (num_steps,))
    padded = np.r_[etas, np.zeros(2 ** int(np.ceil(np.log2(max(num_steps, 1)))) - num_steps)]  # few compiled lengths
    if method in ("nash-md", "omd") and np.max(etas) * beta > 1 + 1e-12:
        raise UsageError(f"{method} needs eta * beta <= 1 (got {np.max(etas) * beta:g}); lower eta.")
    with jax.enable_x64(True):
        args = (jnp.asarray(x, jnp.float64) for x in (pi0, P, beta, padded, pi_ref, target))
        kl_last, kl_average = (np.asarray(x)[:num_steps] for x in _scan(list(UPDATES).index(method), *args))
    start = float(np.sum(np.where(target > 0, target * np.log(np.maximum(target, _TINY) / pi0), 0.0)))
    return {"queries": QUERIES_PER_STEP[method] * np.arange(num_steps + 1),
            "kl_last": np.concatenate([[start], kl_last]), "kl_average": np.concatenate([[start], kl_average])}
