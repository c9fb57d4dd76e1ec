"""Hexner's one-sided-information differential game, solved by belief splitting (CAMS, Ghimire et al. 2025).

The game (discrete time, ``K`` steps of length ``dt``). Each player j in {1, 2} is a 2-D double integrator,
state s_j = (position x_j in R^2, velocity w_j in R^2), control a_j in R^2 (an acceleration)::

    x_j' = x_j + dt w_j + dt^2/2 a_j,        w_j' = w_j + dt a_j.

Nature draws the goal z_theta among I collinear ``goals`` with probabilities ``prior``; only player 1
(informed) sees it (Hexner's game has I = 2). Both see each other's states, so player 1's controls reveal
theta gradually. Player 1 minimises, player 2 maximises (zero-sum)::

    J = sum_{k<K} (r1 |u_k|^2 - r2 |v_k|^2) + q1 |x_1(K) - z_theta|^2 - q2 |x_2(K) - z_theta|^2,

so player 1 wants to reach the goal cheaply and keep player 2 away from it, player 2 wants to be near it:
player 1 must trade reaching its goal against hiding it.

Structure (the paper's result): with I types, the informed player's equilibrium uses at most I action
prototypes per public belief p (belief splitting p = sum_i lambda_i p_i, prototype i played with
probability lambda_i p_i(theta) / p(theta) by type theta), and the value is the convexification (Vex, the
informed player minimises) of the stage problem over the beliefs. The primal recursion is::

    V_k(s, p) = min_{lambda_i, p_i, u_i : sum_i lambda_i p_i = p}  max_v  sum_i lambda_i [r1|u_i|^2 - r2|v|^2
                                                                        + V_{k+1}(f(s, u_i, v), p_i)].

Reduction used here (exact for this game, linear dynamics and quadratic costs). Only the predicted
terminal position y = x + (K - k) dt w matters, and a control at step k moves it by b_k a with
b_k = dt^2 (K - k - 1/2). Write y along the goal axis e (goals at t_theta from its centre c), and
m(p) = sum_theta p_theta t_theta, s(p) = sum_theta p_theta t_theta^2 for the posterior moments. By
induction V_k(y1, y2, p) = U_k(y1, p) - alpha_k (y2 - m(p))^2 (+ the orthogonal axis, plain LQR for both players):
player 2's best reply separates from player 1's split because sum_i lambda_i (y - m_i)^2 =
(y - m)^2 + sum_i lambda_i m_i^2 - m^2. With alpha_K = q2 and
alpha_k = alpha_{k+1} r2 / (r2 + b_k^2 alpha_{k+1})::

    U_K(y, p) = q1 (y - m)^2 + (q1 - q2) (s - m^2)
    U_k(y, p) = alpha_{k+1} m(p)^2 + Vex_p[ p' -> min_u (r1 u^2 + U_{k+1}(y + b_k u, p')) - alpha_{k+1} m(p')^2 ].

The solver runs this backward on a grid of y (U_{k+1} interpolated linearly; the continuous control
searched on a fine grid and refined by a parabola) and on a lattice of beliefs p in the simplex. Vex is
the lower convex hull over the lattice: its (at most I) vertices around p are the split p_i, and their
minimising controls u_i are the action prototypes. Player 2's equilibrium control is pure (certainty
equivalence), v_k = argmin_v r2 v^2 + alpha_{k+1} (y2 + b_k v - m(p_k))^2: one prototype, within the
paper's bound of I + 1.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import numpy as np

from longhorizon.errors import UsageError


@dataclasses.dataclass(frozen=True)
class HexnerGame:
    """Hexner's game (module docstring). States are (x, y, w_x, w_y) per player."""

    steps: int = 4  # K
    dt: float = 0.25
    r1: float = 0.05
    r2: float = 0.05
    q1: float = 1.0
    q2: float = 1.0
    goals: tuple = ((0.0, 1.0), (0.0, -1.0))  # I collinear points
    prior: tuple = (0.5, 0.5)  # P(theta) per goal
    start1: tuple = (0.0, 0.0, 0.0, 0.0)
    start2: tuple = (0.0, 0.0, 0.0, 0.0)

    def __post_init__(self):
        if self.steps < 1:
            raise UsageError(f"steps must be >= 1 (got {self.steps}); pass a positive number of game steps.")
        if min(self.dt, self.r1, self.r2, self.q1, self.q2) <= 0:
            raise UsageError("dt, r1, r2, q1 and q2 must all be > 0; pass positive time steps and cost weights.")
        goals = np.asarray(self.goals, np.float64)
        if goals.ndim != 2 or goals.shape[1] != 2 or len(goals) < 2 or np.ptp(goals, axis=0).max() == 0:
            raise UsageError("goals must be at least two distinct 2-D points; pass goals=((x1, y1), (x2, y2), ...).")
        if len(self.prior) != len(goals) or min(self.prior) < 0 or abs(sum(self.prior) - 1) > 1e-9:
            raise UsageError(f"prior must be {len(goals)} probabilities summing to 1 (got {self.prior}); pass one per goal.")
        e, c, _ = self.axis
        if np.abs((goals - c) @ np.array([-e[1], e[0]])).max() > 1e-9:
            raise UsageError("goals must lie on one line (the reduction needs a goal axis); pass collinear goals.")
        if len(self.start1) != 4 or len(self.start2) != 4:
            raise UsageError("start1 and start2 must be (x, y, w_x, w_y); pass four numbers per player.")

    @property
    def types(self) -> int:
        return len(self.goals)

    # -- geometry of the reduction ---------------------------------------------------------------------
    @property
    def axis(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(e, c, t): unit goal axis through the two farthest goals, their midpoint, and each goal's
        coordinate t_theta along e from c [I]."""
        goals = np.asarray(self.goals, np.float64)
        dist = np.linalg.norm(goals[:, None] - goals[None], axis=-1)
        i, j = np.unravel_index(dist.argmax(), dist.shape)
        e, c = (goals[i] - goals[j]) / dist[i, j], (goals[i] + goals[j]) / 2
        return e, c, (goals - c) @ e

    def gains(self) -> np.ndarray:
        """b_k = dt^2 (K - k - 1/2): how far a unit control at step k moves the terminal position, [K]."""
        return self.dt ** 2 * (self.steps - np.arange(self.steps) - 0.5)

    def predicted(self, start: tuple) -> tuple[float, float]:
        """(along, across): the terminal position with no further control, along e minus the centre and
        orthogonal to e minus the centre."""
        e, c, _ = self.axis
        s = np.asarray(start, np.float64)
        y = s[:2] + self.steps * self.dt * s[2:] - c
        return float(y @ e), float(y @ np.array([-e[1], e[0]]))

    def tracking_weights(self, r: float, q: float) -> np.ndarray:
        """alpha_k of the scalar tracking problem min sum r v^2 + q (y_K - target)^2, [K + 1]."""
        alpha, b = np.empty(self.steps + 1), self.gains()
        alpha[-1] = q
        for k in range(self.steps - 1, -1, -1):
            alpha[k] = alpha[k + 1] * r / (r + b[k] ** 2 * alpha[k + 1])
        return alpha

    def mean(self, p: np.ndarray) -> np.ndarray:
        """m(p) = sum_theta p_theta t_theta, the posterior mean goal along e; p [..., I] -> [...]."""
        return np.asarray(p) @ self.axis[2]

    def second_moment(self, p: np.ndarray) -> np.ndarray:
        """s(p) = sum_theta p_theta t_theta^2; p [..., I] -> [...]."""
        return np.asarray(p) @ self.axis[2] ** 2


@dataclasses.dataclass(frozen=True)
class GridConfig:
    """Belief and position grids of the structured solver."""

    beliefs: int = 101  # lattice points per edge of the belief simplex (points of p in [0, 1] for I = 2)
    positions: int = 401  # points of y (predicted terminal position along the goal axis)
    span: float = 2.5  # y in [-span * max|t|, span * max|t|]
    controls: int = 201  # candidate controls in [-u_max, u_max] before the parabolic refinement
    u_max: float = 8.0

    def __post_init__(self):
        if min(self.beliefs, self.positions, self.controls) < 3:
            raise UsageError("beliefs, positions and controls must be >= 3 grid points; pass finer grids.")
        if self.u_max <= 0:
            raise UsageError(f"u_max must be > 0 (got {self.u_max}); pass the largest control to search.")
        if self.span <= 1.0:
            raise UsageError(f"span must be > 1 (got {self.span}) so the grid covers the goals; pass e.g. 2.5.")


def belief_lattice(types: int, points: int) -> np.ndarray:
    """All p in the simplex with coordinates in {0, 1/n, ..., 1}, n = points - 1: [P, types] with
    P = C(n + I - 1, I - 1). Rows are sorted by p_0, then p_1, ...; for two types they are (j/n, 1 - j/n), j = 0, ..., n."""
    n = points - 1
    rows = [c for c in itertools.product(range(n + 1), repeat=types - 1) if sum(c) <= n]
    lattice = np.array([(*c, n - sum(c)) for c in rows], np.float64) / n
    return lattice[np.lexsort(lattice.T[::-1])]


def lower_convex_hull(p: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vex f on a sorted grid p, [N] -> (vex [N], left [N], right [N]): left[j] <= j <= right[j] are the hull
    vertices around p_j (equal where f is its own hull), vex_j = lambda f_left + (1 - lambda) f_right with
    lambda p_left + (1 - lambda) p_right = p_j (Andrew's monotone chain)."""
    hull: list[int] = []
    for j in range(len(p)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # drop b if it lies on or above the chord from a to j
            if (f[b] - f[a]) * (p[j] - p[a]) >= (f[j] - f[a]) * (p[b] - p[a]):
                hull.pop()
            else:
                break
        hull.append(j)
    vertices = np.asarray(hull)
    points = np.arange(len(p))
    after = np.searchsorted(vertices, points)  # first vertex >= j (the first and last points are vertices)
    right = vertices[after]
    left = np.where(right == points, points, vertices[np.maximum(after - 1, 0)])
    span = p[right] - p[left]
    weight_left = np.where(span > 0, (p[right] - p) / np.where(span > 0, span, 1.0), 1.0)
    return weight_left * f[left] + (1 - weight_left) * f[right], left, right


def best_control(game: HexnerGame, grid: GridConfig, k: int, y: np.ndarray, y_grid: np.ndarray,
                 U_next: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """min_u r1 u^2 + U_{k+1}(y + b_k u, p') for each y [n] and grid belief p' -> (minimum [n, P], u* [n, P]).

    U_{k+1} [Ny, P] is interpolated linearly in y; u is searched on ``grid.controls`` points of
    [-u_max, u_max] and refined by the parabola through the best point and its two neighbours.
    """
    b = game.gains()[k]
    u = np.linspace(-grid.u_max, grid.u_max, grid.controls)
    target = np.clip(y[:, None] + b * u[None, :], y_grid[0], y_grid[-1])  # [n, Nu]
    index = np.clip(np.searchsorted(y_grid, target) - 1, 0, len(y_grid) - 2)
    weight = (target - y_grid[index]) / (y_grid[index + 1] - y_grid[index])
    n, beliefs = len(y), U_next.shape[1]
    minimum, best = np.empty((n, beliefs)), np.empty((n, beliefs))
    chunk = max(1, int(2e7 // (n * len(u))))
    for lo in range(0, beliefs, chunk):
        cols = U_next[:, lo:lo + chunk]
        total = (1 - weight)[..., None] * cols[index] + weight[..., None] * cols[index + 1] + game.r1 * u[None, :, None] ** 2
        j = np.clip(total.argmin(axis=1), 1, len(u) - 2)  # [n, chunk]
        f0, f1, f2 = (np.take_along_axis(total, (j + s)[:, None], axis=1)[:, 0] for s in (-1, 0, 1))
        curvature = f0 - 2 * f1 + f2
        shift = np.where(curvature > 0, 0.5 * (f0 - f2) / np.where(curvature > 0, curvature, 1.0), 0.0)
        shift = np.clip(shift, -1.0, 1.0)
        best[:, lo:lo + chunk] = u[j] + shift * (u[1] - u[0])
        minimum[:, lo:lo + chunk] = np.minimum(f1 - 0.25 * (f0 - f2) * shift, f1)
    return minimum, best


def simplex_vex(lattice: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vex f over a belief lattice [P, I] (I >= 2), f [P] -> (vex [P], vertices [P, I], weights [P, I]):
    vex_j = sum_i weights[j, i] f[vertices[j, i]] with sum_i weights[j, i] lattice[vertices[j, i]] = lattice[j],
    the vertices of the lower hull facet above p_j (monotone chain for I = 2, qhull for I > 2)."""
    P, I = lattice.shape
    if I == 2:
        vex, left, right = lower_convex_hull(lattice[:, 0], f)
        span = lattice[right, 0] - lattice[left, 0]
        w = np.where(span > 0, (lattice[right, 0] - lattice[:, 0]) / np.where(span > 0, span, 1.0), 1.0)
        return vex, np.stack([left, right], 1), np.stack([w, 1 - w], 1)
    from scipy.spatial import ConvexHull, QhullError

    x = lattice[:, :-1]
    try:
        hull = ConvexHull(np.column_stack([x, f]))
    except QhullError:  # all points on one hyperplane: f is affine, its own Vex
        return f.copy(), np.tile(np.arange(P)[:, None], (1, I)), np.eye(1, I).repeat(P, 0)
    lower = hull.simplices[hull.equations[:, -2] < -1e-12]  # facets whose outward normal points down [F, I]
    corners = x[lower]  # [F, I, I-1]
    # barycentric coordinates of every p in every lower facet: solve corners^T w = p, sum w = 1
    system = np.concatenate([np.swapaxes(corners, 1, 2), np.ones((len(lower), 1, I))], axis=1)  # [F, I, I]
    rhs = np.concatenate([x, np.ones((P, 1))], axis=1)  # [P, I]
    weights = np.einsum("fij,pj->fpi", np.linalg.pinv(system), rhs)  # [F, P, I]
    inside = (weights >= -1e-9).all(-1)
    heights = np.einsum("fpi,fi->fp", weights, f[lower])
    facet = np.where(inside, heights, np.inf).argmin(0)  # [P]
    w = np.clip(weights[facet, np.arange(P)], 0.0, None)
    w = w / w.sum(-1, keepdims=True)
    vertices = lower[facet]
    return (w * f[vertices]).sum(-1), vertices, w


def split_stage(game: HexnerGame, grid: GridConfig, k: int, y: np.ndarray, y_grid: np.ndarray, lattice: np.ndarray,
                U_next: np.ndarray, alpha_next: float) -> dict[str, np.ndarray]:
    """One backward step at positions y [n]: U_k(y, p) [n, P], the split (vertices [n, P, I] and weights
    [n, P, I]) and the prototype control of every lattice belief [n, P]."""
    m = game.mean(lattice)
    stage, control = best_control(game, grid, k, y, y_grid, U_next)
    stage = stage - alpha_next * m[None] ** 2
    value = np.empty_like(stage)
    vertices = np.empty(stage.shape + (game.types,), np.int64)
    weights = np.empty(stage.shape + (game.types,))
    for i in range(len(y)):
        vex, vertices[i], weights[i] = simplex_vex(lattice, stage[i])
        # a belief on the hull is its own prototype: no split where splitting gains nothing
        own = stage[i] <= vex + 1e-12 * (1 + np.abs(vex))
        vertices[i, own], weights[i, own] = np.arange(len(lattice))[own, None], np.eye(1, game.types)
        value[i] = alpha_next * m ** 2 + np.minimum(vex, stage[i])
    return {"value": value, "vertices": vertices, "weights": weights, "control": control}


def solve(game: HexnerGame, grid: GridConfig = GridConfig()) -> dict[str, Any]:
    """Backward induction of U_k on the (y, p) grid (module docstring).

    Returns ``value`` (V_0 at the start states and prior, orthogonal LQR terms included), the grids
    ``y`` [Ny] and ``lattice`` [P, I], the table ``U`` [K+1, Ny, P] and ``alpha`` [K+1].
    """
    t = game.axis[2]
    y = np.linspace(-grid.span * np.abs(t).max(), grid.span * np.abs(t).max(), grid.positions)
    lattice = belief_lattice(game.types, grid.beliefs)
    m, second = game.mean(lattice), game.second_moment(lattice)
    alpha = game.tracking_weights(game.r2, game.q2)
    K = game.steps
    U = np.full((K + 1, len(y), len(lattice)), np.nan)
    U[K] = game.q1 * (y[:, None] - m[None]) ** 2 + (game.q1 - game.q2) * (second - m ** 2)[None]
    for k in range(K - 1, 0, -1):
        U[k] = split_stage(game, grid, k, y, y, lattice, U[k + 1], alpha[k + 1])["value"]
    y1, w1 = game.predicted(game.start1)
    y2, w2 = game.predicted(game.start2)
    belief = int(np.abs(lattice - np.asarray(game.prior)).sum(-1).argmin())
    if np.abs(lattice[belief] - np.asarray(game.prior)).max() > 1e-9:
        raise UsageError(f"the prior {game.prior} is not a point of the belief lattice with {grid.beliefs} points per edge; "
                         "pass beliefs = 1 + a multiple of the prior's common denominator.")
    # the first step only at the start position (U_0 elsewhere is never needed)
    root = split_stage(game, grid, 0, np.array([y1]), y, lattice, U[1], alpha[1])["value"][0, belief]
    orthogonal = game.tracking_weights(game.r1, game.q1)[0] * w1 ** 2 - alpha[0] * w2 ** 2
    value = float(root - alpha[0] * (y2 - game.mean(lattice[belief])) ** 2 + orthogonal)
    return {"value": value, "y": y, "lattice": lattice, "U": U, "alpha": alpha, "grid": grid, "start": (y1, belief, y2)}


def equilibrium_tree(game: HexnerGame, solution: dict[str, Any]) -> list[list[dict]]:
    """The informed player's equilibrium from the start, re-solving each public node's stage at its own y1:
    per step, the nodes (belief p, probability, y1, y2) and their splits into at most I children (the
    prototypes); player 2 plays its certainty-equivalent control v. Returns ``levels[k]`` = list of
    ``{"p", "prob", "y1", "y2", "children": [(lambda, p_i, u_i)], "v"}``; the children of level k are the
    nodes of level k + 1 in order."""
    y, lattice, b, alpha = solution["y"], solution["lattice"], game.gains(), solution["alpha"]
    y1, belief, y2 = solution["start"]
    level = [{"y1": y1, "j": belief, "prob": 1.0, "y2": y2}]
    levels = []
    for k in range(game.steps):
        nodes, nxt = [], []
        for node in level:
            j = node["j"]
            stage = split_stage(game, solution["grid"], k, np.array([node["y1"]]), y, lattice, solution["U"][k + 1],
                                alpha[k + 1])
            m = float(game.mean(lattice[j]))
            v = -alpha[k + 1] * b[k] * (node["y2"] - m) / (game.r2 + alpha[k + 1] * b[k] ** 2)
            split: dict[int, float] = {}
            for jj, lam in zip(stage["vertices"][0, j], stage["weights"][0, j]):
                if lam > 0:
                    split[int(jj)] = split.get(int(jj), 0.0) + float(lam)
            children = []
            for jj, lam in split.items():
                u = float(stage["control"][0, jj])
                children.append((lam, lattice[jj].tolist(), u))
                nxt.append({"y1": node["y1"] + b[k] * u, "j": jj, "prob": node["prob"] * lam, "y2": node["y2"] + b[k] * v})
            nodes.append({"p": lattice[j].tolist(), "prob": node["prob"], "y1": float(node["y1"]), "y2": float(node["y2"]),
                          "children": children, "v": float(v)})
        levels.append(nodes)
        level = nxt
    return levels


def tree_value(game: HexnerGame, levels: list[list[dict]]) -> float:
    """J of the equilibrium tree on the goal axis, computed forward by type (a check of the backward value):
    E_theta E[sum r1 u^2 - r2 v^2 + q1 (y1_K - z)^2 - q2 (y2_K - z)^2], type theta reaching child i with
    probability lambda_i p_i(theta) / p(theta)."""
    b, total = game.gains(), 0.0
    for theta, (z, prior) in enumerate(zip(game.axis[2], game.prior)):
        paths = [(prior, 0, 0, 0.0)]  # (probability, step, node index, running cost)
        while paths:
            prob, k, index, cost = paths.pop()
            node = levels[k][index]
            first_child = sum(len(n["children"]) for n in levels[k][:index])
            for c, (lam, pc, u) in enumerate(node["children"]):
                reach = lam * pc[theta] / node["p"][theta] if node["p"][theta] > 0 else 0.0
                if reach == 0.0:
                    continue
                step = cost + game.r1 * u ** 2 - game.r2 * node["v"] ** 2
                if k + 1 == game.steps:
                    y1, y2 = node["y1"] + b[k] * u, node["y2"] + b[k] * node["v"]
                    total += prob * reach * (step + game.q1 * (y1 - z) ** 2 - game.q2 * (y2 - z) ** 2)
                else:
                    paths.append((prob * reach, k + 1, first_child + c, step))
    return total


def revelation(levels: list[list[dict]]) -> list[float]:
    """E TV(p_{k+1}, p_k) per step (total variation; |p_{k+1} - p_k| for two goals): how much of the goal
    player 1 reveals at each step."""
    return [float(sum(n["prob"] * lam * 0.5 * np.abs(np.subtract(pc, n["p"])).sum() for n in nodes
                      for lam, pc, _ in n["children"])) for nodes in levels]


def one_step_closed_form(game: HexnerGame) -> float:
    """K = 1 value in closed form: player 2 moves before seeing anything, so player 1 reveals fully;
    V = sum_theta p_theta q1 r1 (y1 - t_theta)^2 / (r1 + q1 b^2) - alpha_0 (y2 - m)^2 - q2 (s - m^2)
    (+ the orthogonal LQR terms)."""
    if game.steps != 1:
        raise UsageError(f"one_step_closed_form needs steps=1 (got {game.steps}); use solve() for longer games.")
    t, prior = game.axis[2], np.asarray(game.prior)
    (b,), alpha = game.gains(), game.tracking_weights(game.r2, game.q2)
    y1, w1 = game.predicted(game.start1)
    y2, w2 = game.predicted(game.start2)
    m, second = float(game.mean(prior)), float(game.second_moment(prior))
    reach = float(prior @ (game.q1 * game.r1 * (y1 - t) ** 2 / (game.r1 + game.q1 * b ** 2)))
    orthogonal = game.tracking_weights(game.r1, game.q1)[0] * w1 ** 2 - alpha[0] * w2 ** 2
    return float(reach - alpha[0] * (y2 - m) ** 2 - game.q2 * (second - m ** 2) + orthogonal)


def discretised_payoffs(game: HexnerGame, actions: np.ndarray) -> np.ndarray:
    """J(theta, history) of the game with each player's control restricted to ``actions`` [U] accelerations
    along the goal axis (the start states must be on the axis at rest across it, so the orthogonal
    control is 0 in any equilibrium). History order (a_0, b_0, a_1, b_1, ...) flattened row-major:
    returns [I, U^(2K)]."""
    if abs(game.predicted(game.start1)[1]) > 1e-12 or abs(game.predicted(game.start2)[1]) > 1e-12:
        raise UsageError("the discretised game needs both start states on the goal axis; move start1/start2 onto it.")
    K, U, b = game.steps, len(actions), game.gains()
    y1 = np.full((1,) * (2 * K), game.predicted(game.start1)[0])
    y2 = np.full((1,) * (2 * K), game.predicted(game.start2)[0])
    running = np.zeros((1,) * (2 * K))
    for k in range(K):
        shape_u, shape_v = [1] * (2 * K), [1] * (2 * K)
        shape_u[2 * k], shape_v[2 * k + 1] = U, U
        u, v = actions.reshape(shape_u), actions.reshape(shape_v)
        y1, y2 = y1 + b[k] * u, y2 + b[k] * v
        running = running + game.r1 * u ** 2 - game.r2 * v ** 2
    out = [running + game.q1 * (y1 - z) ** 2 - game.q2 * (y2 - z) ** 2 for z in game.axis[2]]
    return np.stack([np.broadcast_to(o, (U,) * (2 * K)).reshape(-1) for o in out])
