"""INPO's pairwise squared loss on a finite response set (Zhang et al. 2024, "Iterative Nash Policy Optimization").

The game: responses ``y in {0..n-1}``, a preference matrix ``P [n, n]`` with ``P[y, y'] = P(y > y')`` and
``P + P^T = 1``, the regularised objective ``max_pi min_pi' P(pi > pi') - tau KL(pi||pi_ref) + tau KL(pi'||pi_ref)``
(``tau`` is the issue's ``beta``). INPO runs online mirror descent on the win rate ``P(y > pi_t) = (P pi_t)[y]``::

    pi_{t+1}(y)  ∝  pi_t(y)^(1 - eta tau) pi_ref(y)^(eta tau) exp(eta P(y > pi_t))                  (OMD)

whose fixed point ``pi ∝ pi_ref exp(P pi / tau)`` is the regularised Nash policy pi*_tau. Writing

    h_t(pi, y, y') = log pi(y)/pi(y') - eta tau log pi_ref(y)/pi_ref(y') - (1 - eta tau) log pi_t(y)/pi_t(y')

the OMD iterate is the only pi with ``h_t(pi, y, y') = eta (P(y > pi_t) - P(y' > pi_t))`` for all pairs, so it
minimises the regression loss (y, y' independent draws of pi_t)::

    L_target(pi) = E_{y,y'~pi_t} [ (h_t(pi, y, y') - eta (P(y > pi_t) - P(y' > pi_t)))^2 ]

INPO's observation: the unknown win rates can be replaced by one Bernoulli preference ``I ~ Ber(P(y > y'))``
per pair. Because ``E_{y~pi_t} P(y > pi_t) = 1/2``, for every pi

    L(pi) = E_{y,y'~pi_t} E_I [ (h_t(pi, y, y') - eta (I - 1/2))^2 ] = L_target(pi) + const,

and writing the pair as (winner y_w, loser y_l) this is INPO's loss ``E[(h_t(pi, y_w, y_l) - eta/2)^2]``.
Both have the OMD iterate as minimiser; the sampled version replaces the expectation by minibatches of pairs.
Everything here is float64 numpy (the exact claims are checked to 1e-5 in log space).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import special

from longhorizon.errors import UsageError
from longhorizon.games import preference


@dataclasses.dataclass(frozen=True)
class INPOConfig:
    tau: float = 0.1  # KL regularisation toward pi_ref (the game's beta)
    eta: float = 1.0  # mirror-descent step size; eta * tau must lie in [0, 1]
    pairs: int = 256  # sampled pairs per iteration (sampled version)
    sgd_steps: int = 20  # SGD steps on the logits per iteration (sampled version)
    learning_rate: float = 0.5

    def __post_init__(self):
        if self.tau <= 0 or self.eta <= 0:
            raise UsageError(f"tau={self.tau} and eta={self.eta} must be positive; pass e.g. tau=0.1 eta=1.")
        if self.eta * self.tau > 1:
            raise UsageError(f"eta * tau = {self.eta * self.tau:g} exceeds 1, so pi_t would get a negative exponent; "
                             "lower eta or tau.")
        if self.pairs < 1 or self.sgd_steps < 1 or self.learning_rate <= 0:
            raise UsageError("pairs, sgd_steps and learning_rate must be positive; fix the non-positive one.")


def pair_offsets(log_pi_t, log_ref, P, pi_t, cfg: INPOConfig) -> np.ndarray:
    """``c[y, y']`` with ``h_t(pi, y, y') - eta (P(y>pi_t) - P(y'>pi_t)) = log pi(y)/pi(y') - c[y, y']``."""
    win = P @ pi_t
    lt = cfg.eta * cfg.tau * log_ref + (1 - cfg.eta * cfg.tau) * log_pi_t + cfg.eta * win
    return lt[:, None] - lt[None, :]


def target_loss(log_pi, log_pi_t, log_ref, P, cfg: INPOConfig) -> float:
    """``L_target(pi)`` (module docstring) for log-policies ``[n]``, exact expectation over ``pi_t x pi_t``."""
    pi_t = np.exp(log_pi_t)
    c = pair_offsets(log_pi_t, log_ref, P, pi_t, cfg)
    h = log_pi[:, None] - log_pi[None, :] - c
    return float(pi_t @ (h**2) @ pi_t)


def h_t(log_pi, log_pi_t, log_ref, y, y2, cfg: INPOConfig) -> np.ndarray:
    """``h_t(pi, y, y')`` for index arrays ``y, y2 [m]`` (module docstring)."""
    def diff(log_p):
        return log_p[y] - log_p[y2]

    return diff(log_pi) - cfg.eta * cfg.tau * diff(log_ref) - (1 - cfg.eta * cfg.tau) * diff(log_pi_t)


def pairwise_loss(log_pi, log_pi_t, log_ref, P, cfg: INPOConfig) -> float:
    """INPO's loss ``L(pi) = E_{y,y'~pi_t} E_{I~Ber(P(y>y'))} (h_t - eta (I - 1/2))^2``, exact expectation."""
    n = len(log_pi)
    pi_t = np.exp(log_pi_t)
    y, y2 = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    h = h_t(log_pi, log_pi_t, log_ref, y.ravel(), y2.ravel(), cfg).reshape(n, n)
    per_pair = P * (h - cfg.eta / 2) ** 2 + (1 - P) * (h + cfg.eta / 2) ** 2
    return float(pi_t @ per_pair @ pi_t)


def pairwise_loss_grad(theta, log_pi_t, log_ref, P, cfg: INPOConfig) -> np.ndarray:
    """Gradient of :func:`pairwise_loss` in the logits ``theta`` (``log pi = theta - logsumexp theta``; the
    normaliser cancels in every ``h``): ``dL/dtheta_k = 4 sum_j pi_t(k) pi_t(j) (h(k, j) - eta (P[k, j] - 1/2))``."""
    n = len(theta)
    pi_t = np.exp(log_pi_t)
    y, y2 = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    h = h_t(theta, log_pi_t, log_ref, y.ravel(), y2.ravel(), cfg).reshape(n, n)
    residual = h - cfg.eta * (P - 0.5)  # E_I of (h - eta (I - 1/2))
    return 4 * pi_t * (residual @ pi_t)


def pairwise_loss_hessian(log_pi_t) -> np.ndarray:
    """Hessian of :func:`pairwise_loss` in the logits: ``4 (diag(pi_t) - pi_t pi_t^T)`` (a constant: L is quadratic)."""
    pi_t = np.exp(log_pi_t)
    return 4 * (np.diag(pi_t) - np.outer(pi_t, pi_t))


def minimise_pairwise_loss(pi_t, pi_ref, P, cfg: INPOConfig, *, iterations: int = 20, tol: float = 1e-14) -> np.ndarray:
    """``argmin_pi L(pi)`` by Newton's method on the logits (started at log pi_t); the Hessian is singular along
    the all-ones direction (logits are defined up to a constant), so each step is its least-squares solution.
    Returns the minimiser as a probability vector ``[n]`` (float64)."""
    P, pi_ref = preference.check_game(P, cfg.tau, pi_ref)
    log_pi_t, log_ref = np.log(np.asarray(pi_t, np.float64)), np.log(pi_ref)
    theta, hess = log_pi_t.copy(), pairwise_loss_hessian(log_pi_t)
    for _ in range(iterations):
        step = np.linalg.lstsq(hess, pairwise_loss_grad(theta, log_pi_t, log_ref, P, cfg), rcond=None)[0]
        theta -= step
        if np.abs(step).max() < tol:
            break
    return softmax(theta)


def softmax(theta) -> np.ndarray:
    z = np.exp(theta - theta.max())
    return z / z.sum()


def kl(p, q) -> float:
    """``KL(p || q)`` in float64 numpy, the sum of ``p log(p/q) - p + q`` as :func:`longhorizon.games.preference.kl`
    (which is JAX; this one is called once per iteration on the host)."""
    return float(np.sum(special.kl_div(np.asarray(p, np.float64), np.asarray(q, np.float64))))


def sampled_pairs_iteration(pi_t, pi_ref, P, cfg: INPOConfig, rng: np.random.Generator) -> np.ndarray:
    """One INPO iteration from samples: ``cfg.pairs`` pairs ``y, y' ~ pi_t``, a Bernoulli preference each, then
    ``cfg.sgd_steps`` gradient steps on the minibatch loss ``mean (h_t(pi, y_w, y_l) - eta/2)^2`` over the logits
    (started at log pi_t). Returns pi_{t+1} ``[n]``."""
    n = len(pi_t)
    log_pi_t, log_ref = np.log(pi_t), np.log(pi_ref)
    y, y2 = rng.choice(n, cfg.pairs, p=pi_t), rng.choice(n, cfg.pairs, p=pi_t)
    first_wins = rng.random(cfg.pairs) < P[y, y2]
    winner, loser = np.where(first_wins, y, y2), np.where(first_wins, y2, y)
    theta = log_pi_t.copy()
    for _ in range(cfg.sgd_steps):
        residual = h_t(theta, log_pi_t, log_ref, winner, loser, cfg) - cfg.eta / 2
        # d/dtheta of mean residual^2: +2 residual at the winner's logit, -2 residual at the loser's
        grad = (np.bincount(winner, 2 * residual, n) - np.bincount(loser, 2 * residual, n)) / cfg.pairs
        theta -= cfg.learning_rate * grad
    return softmax(theta)


def sampled_inpo(P, pi_ref, pi_star, cfg: INPOConfig, iterations: int, seed: int = 0) -> np.ndarray:
    """KL(pi* || pi_t) for t = 0..iterations of sampled-pairs INPO started at pi_ref: ``[iterations + 1]``."""
    P, pi_ref = preference.check_game(P, cfg.tau, pi_ref)
    rng = np.random.default_rng(seed)
    pi = pi_ref
    kls = [kl(pi_star, pi)]
    for _ in range(iterations):
        pi = sampled_pairs_iteration(pi, pi_ref, P, cfg, rng)
        kls.append(kl(pi_star, pi))
    return np.asarray(kls)
