"""Bounded-rationality curricula (QARL, Reddi et al. 2023): the exact side.

The game. A two-player zero-sum Markov game on an adversarial-wind corridor (:class:`WindCorridor`):
the protagonist walks a grid from the start to the goal (``+1``) past a cliff (``-1``, terminal),
paying ``step_cost`` per step; after each move the adversary picks a wind (calm or one of the four
directions; south is toward the cliff) that pushes the protagonist one cell with probability ``gust``.
The protagonist maximises the discounted return, the adversary minimises it.

Entropy regularisation. With protagonist temperature ``alpha_p`` and adversary temperature
``alpha_a`` the stage game at state ``s`` with ``Q(s, a, b) = r(s, a, b) + gamma sum_s' P(s'|s, a, b) V(s')``
is::

    val(Q) = max_x min_y  x^T Q y + alpha_p H(x) - alpha_a H(y)          x in Delta(A), y in Delta(B)

strictly concave in x and strictly convex in y, so it has one saddle point, the logit quantal response
equilibrium (QRE) ``x = softmax(Q y / alpha_p)``, ``y = softmax(-Q^T x / alpha_a)``. ``val`` is
1-Lipschitz in ``Q`` (sup norm), so soft Shapley iteration ``V <- val(r + gamma P V)`` contracts with
modulus ``gamma`` to the game's unique regularised value.

Also here: the exact worst case of a protagonist policy (its value against a best-responding, fully
rational adversary, by policy iteration) and the self-paced Gamma temperature teacher. The learners
that use them are in :mod:`longhorizon.games.qarl_learners`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import optimize, special

from longhorizon.errors import UsageError

MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]])  # protagonist: north, east, south, west (row, col)
WINDS = np.array([[0, 0], [-1, 0], [0, 1], [1, 0], [0, -1]])  # adversary: calm, north, east, south (toward the cliff), west


@dataclasses.dataclass(frozen=True)
class WindCorridor:
    """A ``height x width`` grid; start bottom-left, goal bottom-right, cliff the bottom row between them."""

    width: int = 8
    height: int = 3
    gust: float = 0.2  # probability that the adversary's wind moves the protagonist
    step_cost: float = 0.05
    goal_reward: float = 1.0
    cliff_reward: float = -1.0
    discount: float = 0.97

    def __post_init__(self) -> None:
        if self.width < 3 or self.height < 2:
            raise UsageError(f"WindCorridor needs width >= 3 and height >= 2, got {self.width}x{self.height}; enlarge the grid.")
        if not 0.0 <= self.gust <= 1.0:
            raise UsageError(f"WindCorridor gust must be a probability in [0, 1], got {self.gust}; pass a value in that range.")
        if not 0.0 < self.discount < 1.0:
            raise UsageError(f"WindCorridor discount must be in (0, 1), got {self.discount}; pass e.g. 0.95.")

    @property
    def num_states(self) -> int:
        return self.width * self.height

    @property
    def start(self) -> int:
        return (self.height - 1) * self.width

    def arrays(self) -> dict[str, np.ndarray]:
        """``P [S, A, B, S]`` transition probabilities, ``reward [S]`` of entering a cell, ``terminal [S]``,
        ``r [S, A, B]`` expected reward. A terminal cell's row is a self-loop; its value is held at 0."""
        h, w = self.height, self.width
        cells = np.array([(i // w, i % w) for i in range(self.num_states)])
        terminal = np.zeros(self.num_states, bool)
        terminal[(h - 1) * w + 1:] = True  # cliff cells and the goal (the last cell)
        reward = np.full(self.num_states, -self.step_cost)
        reward[(h - 1) * w + 1:-1] = self.cliff_reward
        reward[-1] = self.goal_reward

        def move(cell, delta):
            r, c = np.clip(cells[cell] + delta, 0, [h - 1, w - 1])
            return r * w + c

        P = np.zeros((self.num_states, len(MOVES), len(WINDS), self.num_states))
        for s in range(self.num_states):
            for a, step in enumerate(MOVES):
                for b, wind in enumerate(WINDS):
                    if terminal[s]:
                        P[s, a, b, s] = 1.0
                        continue
                    walked = move(s, step)
                    if terminal[walked]:  # reaching the goal or the cliff ends the step before the wind acts
                        P[s, a, b, walked] = 1.0
                        continue
                    P[s, a, b, move(walked, wind)] += self.gust
                    P[s, a, b, walked] += 1.0 - self.gust
        r = np.where(terminal[:, None, None], 0.0, P @ reward)
        return {"P": P, "reward": reward, "terminal": terminal, "r": r}


def stage_matrices(arrays: dict, discount: float, values: np.ndarray) -> np.ndarray:
    """``Q [S, A, B] = r + gamma sum_s' P(s'|s, a, b) (1 - terminal(s')) V(s')``."""
    return arrays["r"] + discount * arrays["P"] @ np.where(arrays["terminal"], 0.0, values)


def _softmax(logits: np.ndarray) -> np.ndarray:
    return special.softmax(logits, axis=-1)


def _entropy(logits: np.ndarray) -> np.ndarray:
    log_p = special.log_softmax(logits, axis=-1)
    return -np.sum(np.exp(log_p) * log_p, axis=-1)


@dataclasses.dataclass(frozen=True)
class StageQRE:
    """The regularised equilibria of ``N`` stage games: ``x [N, A]``, ``y [N, B]``, ``value [N]``,
    ``residual [N]`` (the fixed-point residual in probabilities) and the logits for a warm start."""

    x: np.ndarray
    y: np.ndarray
    value: np.ndarray
    residual: np.ndarray
    logits: tuple[np.ndarray, np.ndarray]
    newton_steps: int


def qre_residual(M: np.ndarray, x: np.ndarray, y: np.ndarray, alpha_p: float, alpha_a: float) -> np.ndarray:
    """``max(|x - softmax(M y / alpha_p)|_inf, |y - softmax(-M^T x / alpha_a)|_inf)`` per game, ``M [N, A, B]``."""
    rx = np.abs(x - _softmax(np.einsum("nab,nb->na", M, y) / alpha_p)).max(-1)
    ry = np.abs(y - _softmax(-np.einsum("nab,na->nb", M, x) / alpha_a)).max(-1)
    return np.maximum(rx, ry)


def stage_qre(M: np.ndarray, alpha_p: float, alpha_a: float, init: tuple | None = None,
              tol: float = 1e-13, max_steps: int = 200) -> StageQRE:
    """The logit QRE of each stage game ``M [N, A, B]`` (float64) by damped Newton on its logits.

    Unknowns: logits ``p [N, A]``, ``q [N, B]`` with ``x = softmax(p)``, ``y = softmax(q)``; equations
    ``F(p, q) = (p - M y / alpha_p, q + M^T x / alpha_a) = 0``. The Jacobian ``[[I, -M J_y / alpha_p],
    [M^T J_x / alpha_a, I]]`` (``J = diag(x) - x x^T``) is ``I`` plus a block whose eigenvalues are
    imaginary, so it is never singular; Newton steps with Armijo backtracking on ``|F|^2`` converge from
    any start (``|F|`` grows without bound, so its level sets are compact) and quadratically near the root.
    Without ``init`` the solve follows the QRE path down from temperatures ``~max|M|`` (where the
    equilibrium is near uniform) by halving, warm-starting each solve: far below the payoff scale the
    softmaxes saturate and Newton from a cold start crawls.
    """
    M = np.asarray(M, np.float64)
    n, na, nb = M.shape
    if alpha_p <= 0 or alpha_a <= 0:
        raise UsageError(f"QRE temperatures must be > 0, got {alpha_p} and {alpha_a}; use the best response for temperature 0.")
    if init is None:
        p, q = np.zeros((n, na)), np.zeros((n, nb))
        high = max(1.0, np.abs(M).max() / min(alpha_p, alpha_a))
        factors = np.geomspace(high, 1.0, int(np.ceil(np.log2(high))) + 1)
        for factor, following in zip(factors[:-1], factors[1:]):
            p, q = stage_qre(M, alpha_p * factor, alpha_a * factor, (p, q), tol, max_steps=50).logits
            p, q = p * factor / following, q * factor / following  # logits scale as 1 / temperature
    else:
        p, q = init[0].copy(), init[1].copy()

    def equations(p, q):
        x, y = _softmax(p), _softmax(q)
        return np.concatenate([p - np.einsum("nab,nb->na", M, y) / alpha_p,
                               q + np.einsum("nab,na->nb", M, x) / alpha_a], -1), x, y

    eye = np.eye(na + nb)
    steps = 0
    for steps in range(max_steps):
        F, x, y = equations(p, q)
        if qre_residual(M, x, y, alpha_p, alpha_a).max() < tol:
            break
        jx = np.einsum("na,ab->nab", x, np.eye(na)) - x[:, :, None] * x[:, None, :]
        jy = np.einsum("nb,bc->nbc", y, np.eye(nb)) - y[:, :, None] * y[:, None, :]
        J = np.broadcast_to(eye, (n, na + nb, na + nb)).copy()
        J[:, :na, na:] = -M @ jy / alpha_p
        J[:, na:, :na] = np.swapaxes(M, 1, 2) @ jx / alpha_a
        d = -np.linalg.solve(J, F[..., None])[..., 0]
        merit = (F ** 2).sum(-1)
        t = np.ones(n)
        accepted = np.zeros(n, bool)
        for _ in range(60):  # halve each game's step until |F|^2 falls by the Armijo factor
            trial, _, _ = equations(p + t[:, None] * d[:, :na], q + t[:, None] * d[:, na:])
            accepted |= (trial ** 2).sum(-1) <= (1 - 1e-4 * t) * merit
            if accepted.all():
                break
            t = np.where(accepted, t, t / 2)
        p, q = p + t[:, None] * d[:, :na], q + t[:, None] * d[:, na:]
    x, y = _softmax(p), _softmax(q)
    value = np.einsum("na,nab,nb->n", x, M, y) + alpha_p * _entropy(p) - alpha_a * _entropy(q)
    return StageQRE(x, y, value, qre_residual(M, x, y, alpha_p, alpha_a), (p, q), steps)


@dataclasses.dataclass(frozen=True)
class GameQRE:
    """The game's regularised equilibrium: ``values [S]``, ``protagonist [S, A]``, ``adversary [S, B]``,
    the largest stage residual, the sup-norm change of V per sweep (``sweeps``) and the bound
    ``gamma / (1 - gamma) * last change`` on the distance to the fixed point."""

    values: np.ndarray
    protagonist: np.ndarray
    adversary: np.ndarray
    residual: float
    sweeps: np.ndarray
    error_bound: float


def soft_shapley(game: WindCorridor, alpha_p: float, alpha_a: float, tol: float = 1e-12,
                 max_sweeps: int = 20_000) -> GameQRE:
    """Soft Shapley iteration ``V <- val_{alpha_p, alpha_a}(r + gamma P V)`` (module docstring) to a change
    below ``tol``; each sweep's stage games are warm-started from the previous sweep's equilibria."""
    arrays = game.arrays()
    live = ~arrays["terminal"]
    values = np.zeros(game.num_states)
    init, changes = None, []
    for _ in range(max_sweeps):
        stage = stage_qre(stage_matrices(arrays, game.discount, values)[live], alpha_p, alpha_a, init)
        init = stage.logits
        new = np.zeros_like(values)
        new[live] = stage.value
        changes.append(np.abs(new - values).max())
        values = new
        if changes[-1] < tol:
            break
    stage = stage_qre(stage_matrices(arrays, game.discount, values)[live], alpha_p, alpha_a, init)
    x = np.full((game.num_states, len(MOVES)), 1 / len(MOVES))
    y = np.full((game.num_states, len(WINDS)), 1 / len(WINDS))
    x[live], y[live] = stage.x, stage.y
    return GameQRE(values, x, y, float(stage.residual.max()), np.array(changes),
                   float(game.discount / (1 - game.discount) * changes[-1]))


def worst_case_value(game: WindCorridor, policy: np.ndarray, arrays: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The protagonist policy ``policy [S, A]``'s values ``[S]`` against a best-responding adversary,
    and that adversary ``[S]`` (deterministic), by policy iteration on the adversary's MDP::

        V(s) = min_b sum_a pi(a|s) (r(s, a, b) + gamma sum_s' P(s'|s, a, b) V(s'))

    Each evaluation is one linear solve, so the values are exact to rounding."""
    arrays = arrays or game.arrays()
    live = (~arrays["terminal"]).astype(float)
    r = np.einsum("sa,sab->sb", policy, arrays["r"])  # [S, B]
    P = np.einsum("sa,sabt->sbt", policy, arrays["P"]) * live[None, None, :]  # terminal successors are worth 0
    states = np.arange(game.num_states)
    choice = np.zeros(game.num_states, int)
    for _ in range(10 * game.num_states * len(WINDS)):
        values = np.linalg.solve(np.eye(game.num_states) - game.discount * P[states, choice], r[states, choice])
        q = r + game.discount * P @ values
        best = q.argmin(-1)
        improve = q[states, best] < q[states, choice] - 1e-12  # switch only on a strict improvement (no cycling on ties)
        if not improve.any():
            return values, choice
        choice = np.where(improve, best, choice)
    raise RuntimeError("best-response policy iteration did not converge")


def random_wind_value(game: WindCorridor, tol: float = 1e-12) -> np.ndarray:
    """The protagonist's optimal values ``[S]`` when the wind is uniformly random (no adversary), by value
    iteration ``V(s) = max_a mean_b (r(s, a, b) + gamma sum_s' P(s'|s, a, b) V(s'))``."""
    arrays = game.arrays()
    values = np.zeros(game.num_states)
    while True:
        new = stage_matrices(arrays, game.discount, values).mean(-1).max(-1)
        new[arrays["terminal"]] = 0.0
        if np.abs(new - values).max() < tol:
            return new
        values = new


# ----------------------------------------------------------------------------- the Gamma teacher
@dataclasses.dataclass(frozen=True)
class GammaTeacher:
    """Self-paced temperature distribution ``Gamma(shape, scale)`` moved toward a target near 0.

    Each update (only when the protagonist's performance reaches ``threshold``)::

        nu' = argmin_nu KL(Gamma_nu || Gamma_target)   s.t.   KL(Gamma_nu || Gamma_nu_old) <= max_kl
    """

    init_shape: float = 2.0
    init_scale: float = 0.5
    target_shape: float = 2.0
    target_scale: float = 0.005
    max_kl: float = 0.5
    threshold: float = 0.3

    def __post_init__(self) -> None:
        for name in ("init_shape", "init_scale", "target_shape", "target_scale", "max_kl"):
            if not getattr(self, name) > 0:
                raise UsageError(f"GammaTeacher.{name} must be > 0, got {getattr(self, name)}; pass a positive number.")


def gamma_kl(shape_p, scale_p, shape_q, scale_q):
    """``KL(Gamma(k_p, th_p) || Gamma(k_q, th_q)) = (k_p - k_q) psi(k_p) - ln G(k_p) + ln G(k_q)
    + k_q ln(th_q / th_p) + k_p (th_p - th_q) / th_q`` (shape-scale parametrisation)."""
    return ((shape_p - shape_q) * special.digamma(shape_p) - special.gammaln(shape_p) + special.gammaln(shape_q)
            + shape_q * np.log(scale_q / scale_p) + shape_p * (scale_p - scale_q) / scale_q)


def _along_segment(start: tuple, end: tuple, t: float) -> tuple[float, float]:
    """The Gamma a share ``t`` of the way from ``start`` to ``end`` in natural parameters ``(k - 1, -1/theta)``."""
    return (1 - t) * start[0] + t * end[0], 1.0 / ((1 - t) / start[1] + t / end[1])


def teacher_step(teacher: GammaTeacher, shape: float, scale: float, performance: float) -> tuple[float, float, dict]:
    """One gated, KL-constrained update of the temperature distribution (:class:`GammaTeacher`).

    Below the threshold nothing moves. Otherwise: the target if it is within ``max_kl``; else the
    point on the natural-parameter segment toward the target where ``KL(new || old) = max_kl`` (the KL
    grows monotonically along it: its derivative is ``t d^T Hess(A) d``), refined by SLSQP when that
    finds a feasible point nearer the target."""
    old, target = (shape, scale), (teacher.target_shape, teacher.target_scale)
    if performance < teacher.threshold:
        return shape, scale, {"gated": True, "kl_step": 0.0}
    if gamma_kl(*target, *old) <= teacher.max_kl:
        new = target
    else:
        t = optimize.brentq(lambda t: gamma_kl(*_along_segment(old, target, t), *old) - teacher.max_kl, 0.0, 1.0, xtol=1e-14)
        new = _along_segment(old, target, t)
        result = optimize.minimize(
            lambda z: gamma_kl(*np.exp(z), *target), np.log(new), method="SLSQP",
            constraints=[{"type": "ineq", "fun": lambda z: teacher.max_kl - gamma_kl(*np.exp(z), *old)}],
            options={"ftol": 1e-12, "maxiter": 200})
        refined = tuple(np.exp(result.x))
        if (gamma_kl(*refined, *old) <= teacher.max_kl * (1 + 1e-9)
                and gamma_kl(*refined, *target) < gamma_kl(*new, *target)):
            new = refined
    return float(new[0]), float(new[1]), {"gated": False, "kl_step": float(gamma_kl(*new, *old))}
