"""A ReLU Q-network embedded in a mixed-integer program (SEQUOIA, Xu et al. 2025).

The action is a binary vector ``a in {0,1}^n`` (one bit per arm, or per arm and intervention) chosen from a set
given by linear domain constraints on ``a`` and auxiliary variables ``y``::

    lb <= C [a; y] <= ub,     y_lower <= y <= y_upper,     some y integer.

For a fixed state ``s`` the network ``Q(s, a) = w^T h_L + c`` with ``h_l = relu(W_l h_{l-1} + b_l)`` and
``h_0 = [s; a]`` is written exactly as a MILP (big-M form): for each hidden unit with pre-activation
``p = W h + b`` bounded by ``L <= p <= U`` (interval arithmetic from the box of ``a``, layer by layer),

    U <= 0:  h = 0;          L >= 0:  h = p;
    else:    h >= p,  h >= 0,  h <= p - L (1 - z),  h <= U z,  z in {0,1}.

``max_a Q(s, a)`` over the feasible set is then one MILP, solved by HiGHS (``highspy`` directly, because it
takes a starting incumbent: the myopic action, see :func:`solve_linear`). :class:`MilpArgmax` memoises the
solves by (parameter version, state) so that the DQN target's max over next actions reuses them.
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import flax.linen as nn
import jax
import numpy as np
import scipy.sparse as sp

from longhorizon.core.nets import MLPTorso
from longhorizon.errors import UsageError


class TimeLimitWarning(UserWarning):
    """A MILP stopped at its time limit; the best feasible action found was used."""


# ---------------------------------------------------------------------------------------------- the network


class QNet(nn.Module):
    """``Q(s, a)``: a ReLU MLP over the concatenation ``[s; a]``, one scalar out. Input (..., d_s + n)."""

    hidden: tuple = (32,)

    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(MLPTorso(self.hidden, activation="relu")(x))[..., 0]


def layers(params, hidden: tuple) -> list[tuple[np.ndarray, np.ndarray]]:
    """The network as float64 ``[(W_1, b_1), ..., (w_out, c)]``, ``W_l`` of shape (in, out)."""
    p = jax.device_get(params["params"])
    dense = [p["MLPTorso_0"][f"Dense_{i}"] for i in range(len(hidden))] + [p["Dense_0"]]
    return [(np.asarray(d["kernel"], np.float64), np.asarray(d["bias"], np.float64)) for d in dense]


def forward(net: list, state: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """float64 ``Q(s, a)`` for actions (B, n) and the pre-activations of every hidden layer [(B, width)]."""
    x = np.concatenate([np.broadcast_to(state, (len(actions), len(state))), actions], axis=1)
    pre = []
    for w, b in net[:-1]:
        pre.append(x @ w + b)
        x = np.maximum(pre[-1], 0.0)
    return (x @ net[-1][0] + net[-1][1])[:, 0], pre


def interval_bounds(net: list, state: np.ndarray, a_lower: np.ndarray, a_upper: np.ndarray) -> list[tuple]:
    """Pre-activation bounds ``(L_l, U_l)`` of every hidden layer for ``a`` in the box [a_lower, a_upper].

    Interval arithmetic: with ``W = W+ + W-`` split by sign, ``L = W+^T lo + W-^T hi + b`` and
    ``U = W+^T hi + W-^T lo + b``; the next layer's box is ``[relu(L), relu(U)]``.
    """
    lo = np.concatenate([state, a_lower]).astype(np.float64)
    hi = np.concatenate([state, a_upper]).astype(np.float64)
    bounds = []
    for w, b in net[:-1]:
        wp, wn = np.maximum(w, 0.0), np.minimum(w, 0.0)
        low, high = lo @ wp + hi @ wn + b, hi @ wp + lo @ wn + b
        bounds.append((low, high))
        lo, hi = np.maximum(low, 0.0), np.maximum(high, 0.0)
    return bounds


# ------------------------------------------------------------------------------------- the domain constraints


@dataclasses.dataclass(frozen=True, eq=False)
class LinearConstraints:
    """``lb <= matrix @ [a; y] <= ub`` with ``a`` binary (n_actions) and auxiliary ``y`` (n_aux).

    ``a_upper`` fixes bits to 0 where an arm cannot be acted on now (e.g. a schedule's cool-down).
    """

    name: str
    n_actions: int
    matrix: np.ndarray  # (m, n_actions + n_aux)
    lb: np.ndarray  # (m,)
    ub: np.ndarray  # (m,)
    aux_lower: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    aux_upper: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    aux_integer: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, bool))
    a_upper: np.ndarray | None = None

    def __post_init__(self):
        n_aux = len(self.aux_lower)
        if self.matrix.ndim != 2 or self.matrix.shape[1] != self.n_actions + n_aux:
            raise UsageError(f"constraint set '{self.name}' has a matrix of shape {self.matrix.shape}; it needs "
                             f"{self.n_actions} + {n_aux} columns (actions + auxiliary variables).")
        if not (len(self.lb) == len(self.ub) == self.matrix.shape[0] and len(self.aux_upper) == len(self.aux_integer) == n_aux):
            raise UsageError(f"constraint set '{self.name}' has bounds whose lengths do not match its matrix; "
                             "give one lb and ub per row and one bound and integrality flag per auxiliary variable.")
        if self.a_upper is not None and len(self.a_upper) != self.n_actions:
            raise UsageError(f"constraint set '{self.name}' has a_upper of length {len(self.a_upper)}; give one per action bit.")

    @property
    def n_aux(self) -> int:
        return len(self.aux_lower)

    def action_upper(self) -> np.ndarray:
        return np.ones(self.n_actions) if self.a_upper is None else np.asarray(self.a_upper, np.float64)

    def feasible(self, action: np.ndarray) -> bool:
        """Whether some auxiliary ``y`` completes ``action`` (a MILP with ``a`` fixed)."""
        a = np.asarray(action, np.float64)
        if np.any(a > self.action_upper() + 1e-9):
            return False
        fixed = dataclasses.replace(self, a_upper=None)
        model = _Model.domain(fixed, np.zeros(self.n_actions), a_lower=a, a_upper=a)
        return model.solve(time_limit=10.0).status == "optimal"


@dataclasses.dataclass
class Solution:
    action: np.ndarray  # (n_actions,) 0/1
    value: float  # the objective at ``action`` (Q(s, a) for the network MILP)
    status: str  # "optimal" | "time_limit" (best feasible found) | "fallback" (the warm start) | "infeasible" | "none"
    seconds: float
    aux: np.ndarray | None = None


class _Model:
    """A MILP ``max c^T x + const`` s.t. row bounds on ``A x`` and column bounds, solved by HiGHS."""

    def __init__(self, name, n_actions, cost, const, rows, row_lb, row_ub, col_lb, col_ub, integer):
        self.name, self.n_actions, self.cost, self.const = name, n_actions, cost, const
        self.rows, self.row_lb, self.row_ub = sp.csc_matrix(rows), np.asarray(row_lb, float), np.asarray(row_ub, float)
        self.col_lb, self.col_ub, self.integer = np.asarray(col_lb, float), np.asarray(col_ub, float), np.asarray(integer, bool)

    @classmethod
    def domain(cls, cons: LinearConstraints, gain: np.ndarray, a_lower=None, a_upper=None) -> "_Model":
        """``max gain^T a`` over the constraint set (the myopic MILP)."""
        n = cons.n_actions
        a_lower = np.zeros(n) if a_lower is None else a_lower
        a_upper = cons.action_upper() if a_upper is None else a_upper
        return cls(cons.name, n, np.concatenate([gain, np.zeros(cons.n_aux)]), 0.0, cons.matrix, cons.lb, cons.ub,
                   np.concatenate([a_lower, cons.aux_lower]), np.concatenate([a_upper, cons.aux_upper]),
                   np.concatenate([np.ones(n, bool), cons.aux_integer]))

    def solve(self, time_limit: float, start: np.ndarray | None = None) -> Solution:
        import highspy

        t0 = time.perf_counter()
        highs = highspy.Highs()
        highs.setOptionValue("output_flag", False)
        highs.setOptionValue("threads", 1)  # many small solves: threads only contend on a shared CPU
        highs.setOptionValue("time_limit", float(time_limit))
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = len(self.cost), self.rows.shape[0]
        lp.col_cost_ = -self.cost  # HiGHS minimises
        lp.col_lower_, lp.col_upper_ = self.col_lb, self.col_ub
        lp.row_lower_, lp.row_upper_ = self.row_lb, self.row_ub
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = self.rows.indptr, self.rows.indices, self.rows.data
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in self.integer]
        highs.passModel(lp)
        if start is not None:
            incumbent = highspy.HighsSolution()
            incumbent.col_value = list(start)
            incumbent.value_valid = True
            highs.setSolution(incumbent)
        highs.run()
        status = highs.getModelStatus()
        seconds = time.perf_counter() - t0
        if status in (highspy.HighsModelStatus.kInfeasible, highspy.HighsModelStatus.kUnboundedOrInfeasible):
            return Solution(np.zeros(0), -np.inf, "infeasible", seconds)
        has_solution = highs.getInfo().primal_solution_status == 2
        if status == highspy.HighsModelStatus.kOptimal:
            label = "optimal"
        elif has_solution:
            label = "time_limit"
        else:
            return Solution(np.zeros(0), -np.inf, "none", seconds)
        x = np.asarray(highs.getSolution().col_value)
        action = np.abs(np.round(x[: self.n_actions]))
        return Solution(action, float(self.cost @ x + self.const), label, seconds, x[self.n_actions:])


def _check_feasible(solution: Solution, cons: LinearConstraints) -> Solution:
    if solution.status == "infeasible":
        raise UsageError(f"constraint set '{cons.name}' admits no action (HiGHS: infeasible); relax its bounds, "
                         "budget or capacities so that at least one action is feasible.")
    return solution


def solve_linear(cons: LinearConstraints, gain: np.ndarray, time_limit: float = 10.0) -> Solution:
    """``argmax_a gain^T a`` over the constraint set (the myopic MILP; ``gain`` of shape (n_actions,))."""
    solution = _check_feasible(_Model.domain(cons, np.asarray(gain, np.float64)).solve(time_limit), cons)
    if solution.status == "none":
        raise UsageError(f"the myopic MILP over '{cons.name}' found no feasible action within {time_limit:g} s; "
                         "raise the time limit.")
    return solution


# ----------------------------------------------------------------------------------------- the network MILP


def encode(net: list, state: np.ndarray, cons: LinearConstraints) -> tuple[_Model, list]:
    """The MILP of ``max_a Q(s, a)`` (module docstring). Columns: ``[a, y, (h_l, z_l) for each layer]``.

    Returns the model and the interval bounds [(L_l, U_l)] it used.
    """
    n, n_aux, d_s = cons.n_actions, cons.n_aux, len(state)
    bounds = interval_bounds(net, state, np.zeros(n), cons.action_upper())
    blocks_lb, blocks_ub = [np.zeros(n), cons.aux_lower], [cons.action_upper(), cons.aux_upper]
    integer = [np.ones(n, bool), cons.aux_integer]
    n_cols = n + n_aux + 2 * sum(w.shape[1] for w, _ in net[:-1])
    rows = [sp.hstack([sp.csr_matrix(cons.matrix), sp.csr_matrix((cons.matrix.shape[0], n_cols - n - n_aux))])]
    row_lb, row_ub = [cons.lb], [cons.ub]
    prev, offset = None, n + n_aux  # prev: (column offset, width) of the previous h, or None for the input a
    for (w, b), (low, high) in zip(net[:-1], bounds):
        width = w.shape[1]
        h_cols, z_cols = offset + np.arange(width), offset + width + np.arange(width)
        if prev is None:  # p = W_a^T a + (W_s^T s + b)
            w_in, const, in_cols = w[d_s:], state @ w[:d_s] + b, np.arange(n)
        else:
            w_in, const, in_cols = w, b, prev[0] + np.arange(prev[1])
        dead, alive = high <= 0, low >= 0
        unstable = ~dead & ~alive
        pre = sp.csr_matrix((w_in.T.ravel(), (np.repeat(np.arange(width), len(in_cols)), np.tile(in_cols, width))),
                            shape=(width, n_cols))
        h_mat = sp.csr_matrix((np.ones(width), (np.arange(width), h_cols)), shape=(width, n_cols))
        z_mat = sp.csr_matrix((np.ones(width), (np.arange(width), z_cols)), shape=(width, n_cols))
        # h - p >= b  (always; equality for units that are always active)
        rows.append(h_mat - pre)
        row_lb.append(const)
        row_ub.append(np.where(alive, const, np.inf))
        # h - p - L z <= b - L  and  h - U z <= 0  (unstable units only; the others are fixed by bounds)
        idx = np.flatnonzero(unstable)
        if len(idx):
            rows.append((h_mat - pre - sp.diags(low) @ z_mat)[idx])
            row_lb.append(np.full(len(idx), -np.inf))
            row_ub.append(const[idx] - low[idx])
            rows.append((h_mat - sp.diags(high) @ z_mat)[idx])
            row_lb.append(np.full(len(idx), -np.inf))
            row_ub.append(np.zeros(len(idx)))
        blocks_lb += [np.zeros(width), alive.astype(float)]
        blocks_ub += [np.where(dead, 0.0, np.maximum(high, 0.0)), np.where(dead, 0.0, 1.0)]
        integer += [np.zeros(width, bool), np.ones(width, bool)]
        prev, offset = (offset, width), offset + 2 * width
    w_out, c_out = net[-1]
    cost = np.zeros(n_cols)
    cost[prev[0]: prev[0] + prev[1]] = w_out[:, 0]
    model = _Model(cons.name, n, cost, float(c_out[0]), sp.vstack(rows), np.concatenate(row_lb), np.concatenate(row_ub),
                   np.concatenate(blocks_lb), np.concatenate(blocks_ub), np.concatenate(integer))
    return model, bounds


def full_start(net: list, state: np.ndarray, action: np.ndarray, aux: np.ndarray) -> np.ndarray:
    """The MILP columns ``[a, y, (h_l, z_l)...]`` of a known feasible action (the warm start's incumbent)."""
    _, pre = forward(net, state, action[None].astype(np.float64))
    cols = [action.astype(np.float64), np.asarray(aux, np.float64)]
    for p in pre:
        cols += [np.maximum(p[0], 0.0), (p[0] > 0).astype(np.float64)]
    return np.concatenate(cols)


def solve_q(net: list, state: np.ndarray, cons: LinearConstraints, time_limit: float = 10.0,
            warm: Solution | None = None) -> Solution:
    """``argmax_a Q(s, a)`` over the constraint set; ``warm`` (e.g. the myopic action) is HiGHS's first incumbent.

    At the time limit the best feasible action found is returned with a :class:`TimeLimitWarning`
    (with a warm start that is never worse than the warm start itself).
    """
    model, _ = encode(net, np.asarray(state, np.float64), cons)
    start = None
    if warm is not None:
        start = full_start(net, state, warm.action, warm.aux if warm.aux is not None else np.zeros(cons.n_aux))
    solution = _check_feasible(model.solve(time_limit, start), cons)
    if solution.status == "optimal":
        return solution
    if solution.status == "time_limit":
        warnings.warn(f"the Q-network MILP over '{cons.name}' hit its {time_limit:g} s time limit; using the best "
                      "feasible action found.", TimeLimitWarning, stacklevel=2)
        return solution
    if warm is None:
        raise UsageError(f"the Q-network MILP over '{cons.name}' found no feasible action within {time_limit:g} s "
                         "and has no warm start; raise the time limit or pass a warm start.")
    warnings.warn(f"the Q-network MILP over '{cons.name}' hit its {time_limit:g} s time limit before any "
                  "feasible action; using the warm start.", TimeLimitWarning, stacklevel=2)
    value = float(forward(net, state, warm.action[None].astype(np.float64))[0][0])
    return Solution(warm.action, value, "fallback", solution.seconds, warm.aux)


class MilpArgmax:
    """Memoised ``argmax_a Q(s, a)``: solves keyed by (parameter version, state bytes, constraint key).

    ``warm_gain(state) -> gain`` gives the myopic objective whose MILP solution starts each network MILP.
    """

    def __init__(self, time_limit: float = 10.0, max_entries: int = 100_000):
        self.time_limit, self.max_entries = time_limit, max_entries
        self.cache: dict = {}
        self.hits = self.solves = 0
        self.solve_seconds = 0.0

    def __call__(self, net: list, version, state: np.ndarray, cons: LinearConstraints, gain: np.ndarray) -> Solution:
        key = (version, np.asarray(state, np.float32).tobytes(), cons.action_upper().tobytes())
        if key in self.cache:
            self.hits += 1
            return self.cache[key]
        if len(self.cache) >= self.max_entries:
            self.cache.clear()
        warm = solve_linear(cons, gain, self.time_limit)
        solution = solve_q(net, state, cons, self.time_limit, warm)
        self.solves += 1
        self.solve_seconds += warm.seconds + solution.seconds
        self.cache[key] = solution
        return solution
