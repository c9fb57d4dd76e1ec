"""Hexner's one-sided-information differential game, solved by belief splitting (CAMS, Ghimire et al. 2025).

The game (discrete time, ``K`` steps of length ``dt``). Each player j in {1, 2} is a 2-D double integrator,
state s_j = (position x_j in R^2, velocity w_j in R^2), control a_j in R^2 (an acceleration)::

    x_j' = x_j + dt w_j + dt^2/2 a_j,        w_j' = w_j + dt a_j.

Nature draws the goal z_theta among ``goals`` (theta = 1 with prior ``prior``); only player 1 (informed)
sees it. Both see each other's states, so player 1's controls reveal theta gradually. Player 1 minimises,
player 2 maximises (zero-sum)::

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
b_k = dt^2 (K - k - 1/2). Write y along the goal axis e = (z_1 - z_2) / |z_1 - z_2| (centre c, goals at
+-d), and m(p) = d (2 p - 1) for the posterior mean of the goal. By induction
V_k(y1, y2, p) = U_k(y1, p) - alpha_k (y2 - m(p))^2 (+ the orthogonal axis, plain LQR for both players):
player 2's best reply separates from player 1's split because sum_i lambda_i (y - m_i)^2 =
(y - m)^2 + sum_i lambda_i m_i^2 - m^2. With alpha_K = q2, alpha_k = alpha_{k+1} r2 / (r2 + b_k^2 alpha_{k+1})::

    U_K(y, p) = q1 (y - m)^2 + (q1 - q2) (d^2 - m^2)
    U_k(y, p) = alpha_{k+1} m(p)^2 + Vex_p[ p' -> min_u (r1 u^2 + U_{k+1}(y + b_k u, p')) - alpha_{k+1} m(p')^2 ].

The solver runs this backward on a grid of y (the continuous action optimised as a move to any grid
point, i.e. exactly the grid-restricted optimum) and of beliefs p; Vex is the lower convex hull over the
belief grid, whose two vertices around p are the split (p_1, p_2) and whose two minimisers u are the two
action prototypes. Player 2's equilibrium control is pure (certainty equivalence), v_k = argmin_v
r2 v^2 + alpha_{k+1} (y2 + b_k v - m(p_k))^2: one prototype, within the paper's bound of I + 1.
"""

from __future__ import annotations

import dataclasses
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
    goals: tuple = ((0.0, 1.0), (0.0, -1.0))
    prior: float = 0.5  # P(theta = goal 0)
    start1: tuple = (0.0, 0.0, 0.0, 0.0)
    start2: tuple = (0.0, 0.0, 0.0, 0.0)

    def __post_init__(self):
        if self.steps < 1:
            raise UsageError(f"steps must be >= 1 (got {self.steps}); pass a positive number of game steps.")
        if min(self.dt, self.r1, self.r2, self.q1, self.q2) <= 0:
            raise UsageError("dt, r1, r2, q1 and q2 must all be > 0; pass positive time steps and cost weights.")
        if not 0.0 <= self.prior <= 1.0:
            raise UsageError(f"prior must lie in [0, 1] (got {self.prior}); pass the probability of the first goal.")
        if len(self.goals) != 2 or np.allclose(self.goals[0], self.goals[1]):
            raise UsageError("goals must be two distinct 2-D points; pass goals=((x1, y1), (x2, y2)).")
        if len(self.start1) != 4 or len(self.start2) != 4:
            raise UsageError("start1 and start2 must be (x, y, w_x, w_y); pass four numbers per player.")

    # -- geometry of the reduction ---------------------------------------------------------------------
    @property
    def axis(self) -> tuple[np.ndarray, np.ndarray, float]:
        """(e, c, d): unit goal axis, centre and half-distance of the two goals."""
        z1, z2 = np.asarray(self.goals, np.float64)
        return (z1 - z2) / np.linalg.norm(z1 - z2), (z1 + z2) / 2, float(np.linalg.norm(z1 - z2) / 2)

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
        """m(p) = d (2 p - 1), the posterior mean goal along e."""
        return self.axis[2] * (2 * np.asarray(p) - 1)


@dataclasses.dataclass(frozen=True)
class GridConfig:
    """Belief and position grids of the structured solver."""

    beliefs: int = 101  # points of p in [0, 1]
    positions: int = 401  # points of y (predicted terminal position along the goal axis)
    span: float = 2.5  # y in [-span * d, span * d]
    controls: int = 201  # candidate controls in [-u_max, u_max] before the parabolic refinement
    u_max: float = 8.0

    def __post_init__(self):
        if min(self.beliefs, self.positions, self.controls) < 3:
            raise UsageError("beliefs, positions and controls must be >= 3 grid points; pass finer grids.")
        if self.u_max <= 0:
            raise UsageError(f"u_max must be > 0 (got {self.u_max}); pass the largest control to search.")
        if self.span <= 1.0:
            raise UsageError(f"span must be > 1 (got {self.span}) so the grid covers both goals; pass e.g. 2.5.")


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


def split_stage(game: HexnerGame, grid: GridConfig, k: int, y: np.ndarray, y_grid: np.ndarray, p: np.ndarray,
                U_next: np.ndarray, alpha_next: float) -> dict[str, np.ndarray]:
    """One backward step at positions y [n]: U_k(y, p) [n, P] with the split vertices and prototype controls."""
    m = game.mean(p)
    stage, control = best_control(game, grid, k, y, y_grid, U_next)
    stage = stage - alpha_next * m[None] ** 2
    value, left, right = np.empty_like(stage), np.empty(stage.shape, np.int64), np.empty(stage.shape, np.int64)
    for i in range(len(y)):
        vex, left[i], right[i] = lower_convex_hull(p, stage[i])
        value[i] = alpha_next * m ** 2 + vex
    return {"value": value, "left": left, "right": right, "control": control}


def solve(game: HexnerGame, grid: GridConfig = GridConfig()) -> dict[str, Any]:
    """Backward induction of U_k on the (y, p) grid (module docstring).

    Returns ``value`` (V_0 at the start states and prior, orthogonal LQR terms included), the grids,
    the tables ``U`` [K+1, Ny, Np] and ``alpha`` [K+1].
    """
    _, _, d = game.axis
    y = np.linspace(-grid.span * d, grid.span * d, grid.positions)
    p = np.linspace(0.0, 1.0, grid.beliefs)
    m = game.mean(p)
    alpha = game.tracking_weights(game.r2, game.q2)
    K = game.steps
    U = np.empty((K + 1, len(y), len(p)))
    U[K] = game.q1 * (y[:, None] - m[None]) ** 2 + (game.q1 - game.q2) * (d ** 2 - m[None] ** 2)
    for k in range(K - 1, -1, -1):
        U[k] = split_stage(game, grid, k, y, y, p, U[k + 1], alpha[k + 1])["value"]
    y1, w1 = game.predicted(game.start1)
    y2, w2 = game.predicted(game.start2)
    belief = int(np.abs(p - game.prior).argmin())
    root = split_stage(game, grid, 0, np.array([y1]), y, p, U[1], alpha[1])["value"][0, belief] if K else 0.0
    orthogonal = game.tracking_weights(game.r1, game.q1)[0] * w1 ** 2 - alpha[0] * w2 ** 2
    value = float(root - alpha[0] * (y2 - game.mean(p[belief])) ** 2 + orthogonal)
    return {"value": value, "y": y, "p": p, "U": U, "alpha": alpha, "grid": grid,
            "start": (y1, belief, y2), "prior_on_grid": float(p[belief])}


def equilibrium_tree(game: HexnerGame, solution: dict[str, Any]) -> list[list[dict]]:
    """The informed player's equilibrium from the start, re-solving each public node's stage at its own y1:
    per step, the nodes (belief p, probability, y1, y2) and their splits into at most I = 2 children (the
    prototypes); player 2 plays its certainty-equivalent control v. Returns ``levels[k]`` = list of
    ``{"p", "prob", "y1", "y2", "children": [(lambda, p_i, u_i)], "v"}``; the children of level k are the
    nodes of level k + 1 in order."""
    y, p, b, alpha = solution["y"], solution["p"], game.gains(), solution["alpha"]
    y1, belief, y2 = solution["start"]
    level = [{"y1": y1, "j": belief, "prob": 1.0, "y2": y2}]
    levels = []
    for k in range(game.steps):
        nodes, nxt = [], []
        for node in level:
            j = node["j"]
            stage = split_stage(game, solution["grid"], k, np.array([node["y1"]]), y, p, solution["U"][k + 1], alpha[k + 1])
            m = float(game.mean(p[j]))
            v = -alpha[k + 1] * b[k] * (node["y2"] - m) / (game.r2 + alpha[k + 1] * b[k] ** 2)
            lo, hi = int(stage["left"][0, j]), int(stage["right"][0, j])
            weights = [(lo, 1.0)] if lo == hi else [(lo, (p[hi] - p[j]) / (p[hi] - p[lo])), (hi, (p[j] - p[lo]) / (p[hi] - p[lo]))]
            children = []
            for jj, lam in weights:
                u = float(stage["control"][0, jj])
                children.append((float(lam), float(p[jj]), u))
                nxt.append({"y1": node["y1"] + b[k] * u, "j": jj, "prob": node["prob"] * lam, "y2": node["y2"] + b[k] * v})
            nodes.append({"p": float(p[j]), "prob": node["prob"], "y1": float(node["y1"]), "y2": float(node["y2"]),
                          "children": children, "v": float(v)})
        levels.append(nodes)
        level = nxt
    return levels


def tree_value(game: HexnerGame, levels: list[list[dict]]) -> float:
    """J of the equilibrium tree on the goal axis, computed forward by type (a check of the backward value):
    E_theta E[sum r1 u^2 - r2 v^2 + q1 (y1_K - z)^2 - q2 (y2_K - z)^2], type theta reaching child i with
    probability lambda_i p_i(theta) / p(theta)."""
    _, _, d = game.axis
    b, total = game.gains(), 0.0
    for theta, z, prior in ((0, d, game.prior), (1, -d, 1 - game.prior)):
        paths = [(prior, 0, 0, 0.0)]  # (probability, step, node index, running cost)
        while paths:
            prob, k, index, cost = paths.pop()
            node = levels[k][index]
            first_child = sum(len(n["children"]) for n in levels[k][:index])
            for c, (lam, pc, u) in enumerate(node["children"]):
                own, like = (node["p"], pc) if theta == 0 else (1 - node["p"], 1 - pc)
                reach = lam * like / own if own > 0 else 0.0
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
    """E|p_{k+1} - p_k| per step: how much of the goal player 1 reveals at each step."""
    return [float(sum(n["prob"] * lam * abs(pc - n["p"]) for n in nodes for lam, pc, _ in n["children"])) for nodes in levels]


def one_step_closed_form(game: HexnerGame) -> float:
    """K = 1 value in closed form: player 2 moves before seeing anything, so player 1 reveals fully;
    V = sum_theta p_theta q1 r1 (y1 - z_theta)^2 / (r1 + q1 b^2) - alpha_0 (y2 - m)^2 - q2 (d^2 - m^2)."""
    if game.steps != 1:
        raise UsageError(f"one_step_closed_form needs steps=1 (got {game.steps}); use solve() for longer games.")
    _, _, d = game.axis
    (b,), alpha = game.gains(), game.tracking_weights(game.r2, game.q2)
    y1, w1 = game.predicted(game.start1)
    y2, w2 = game.predicted(game.start2)
    m = float(game.mean(game.prior))
    reach = sum(pr * game.q1 * game.r1 * (y1 - z) ** 2 / (game.r1 + game.q1 * b ** 2)
                for pr, z in ((game.prior, d), (1 - game.prior, -d)))
    orthogonal = game.tracking_weights(game.r1, game.q1)[0] * w1 ** 2 - alpha[0] * w2 ** 2
    return float(reach - alpha[0] * (y2 - m) ** 2 - game.q2 * (d ** 2 - m ** 2) + orthogonal)


def discretised_payoffs(game: HexnerGame, actions: np.ndarray) -> np.ndarray:
    """J(theta, history) of the game with each player's control restricted to ``actions`` [U] accelerations
    along the goal axis (the start states must be on the axis at rest across it, so the orthogonal
    control is 0 in any equilibrium). History order (a_0, b_0, a_1, b_1, ...) flattened row-major:
    returns [2, U^(2K)]."""
    if abs(game.predicted(game.start1)[1]) > 1e-12 or abs(game.predicted(game.start2)[1]) > 1e-12:
        raise UsageError("the discretised game needs both start states on the goal axis; move start1/start2 onto it.")
    _, _, d = game.axis
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
    out = [running + game.q1 * (y1 - z) ** 2 - game.q2 * (y2 - z) ** 2 for z in (d, -d)]
    return np.stack([np.broadcast_to(o, (U,) * (2 * K)).reshape(-1) for o in out])
