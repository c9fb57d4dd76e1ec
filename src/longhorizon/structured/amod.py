r"""Electric autonomous mobility-on-demand (E-AMoD) on a space-charge graph, with its linear programs.

A city has ``R`` regions joined by an undirected road graph and ``C`` charge levels; vehicles are counts
``x[i, c]`` on the space-charge nodes ``(region i, charge c)``. Every trip and every move takes one step; a
passenger trip ``i -> j`` uses ``e_ij = max(1, hops_ij)`` charge levels, a rebalancing move ``hops_ij``
levels, and a vehicle idling in a region with a charging station may gain one level per step. Each step
``t`` (the control loop of graph RL for AMoD, Gammelli et al.; its electric form, "Electric Autonomous
Mobility-on-Demand via Graph RL"):

1. requests ``d_t[i, j] ~ Poisson(lambda_t[i, j])`` arrive (a daily pattern, generated from a seed);
2. the **matching LP** assigns vehicles with enough charge to requests, maximising profit::

       max  sum_{i,c,j: c >= e_ij} (p_ij - k e_ij) m[i,c,j]
       s.t. sum_j m[i,c,j] <= x[i,c],   sum_c m[i,c,j] <= d[i,j],   m >= 0

   (a bipartite transportation LP: its constraint matrix is totally unimodular, so the vertex HiGHS
   returns is integral);
3. a policy proposes a desired distribution ``w`` over the nodes; ``target = round(w * idle vehicles)``;
4. the **rebalancing LP** (min-cost flow on the space-charge graph, moves and charging edges) sends the
   idle vehicles ``u = x - sum_j m`` as close to the target as it can::

       min  sum_e cost_e f_e + P sum_n (s+_n + s-_n)
       s.t. sum_{e out of n} f_e = u_n,   sum_{e into n} f_e - s+_n + s-_n = target_n,   f, s >= 0

   with ``cost = k hops`` for a move and the electricity price for a charge, and ``P`` above every edge
   cost (the target dominates). An infeasible or failed solve falls back to no rebalancing (every idle
   vehicle stays), with a :class:`RebalanceWarning`;
5. vehicles arrive: ``x_{t+1}[j, c - e] += m``, ``x_{t+1}[n'] += f``; the step's profit is the matched
   trips' profit minus the flows' cost.

:func:`full_information_optimum` is the time-expanded LP of the whole episode with the realised demand
known in advance (matching and rebalancing jointly, fractional flows allowed): every policy's integral
trajectory is feasible for it with the same profit, so it is an upper bound. All LPs are float64
numpy/scipy, solved by HiGHS (``highspy``) on the host.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections import deque

import numpy as np
import scipy.sparse as sp

from longhorizon.errors import UsageError


class RebalanceWarning(UserWarning):
    """The rebalancing LP failed; no rebalancing was applied this step."""


@dataclasses.dataclass(frozen=True)
class City:
    """A synthetic city. ``edges``: undirected road links ``(i, j)``; ``stations``: regions that charge."""

    regions: int = 5
    charge_levels: int = 4
    edges: tuple = ((0, 1), (1, 2), (2, 3), (3, 4), (4, 0))
    stations: tuple = (0, 2)
    fleet: int = 40
    steps: int = 12  # one "day"
    demand_scale: float = 2.0  # mean requests per OD pair and step at the pattern's average
    amplitude: float = 0.8  # daily swing of each origin's rate, in (0, 1)
    base_fare: float = 2.0
    fare_per_level: float = 1.0
    move_cost: float = 0.3  # per level of distance, trips and moves alike
    charge_price: float = 0.4  # per level charged
    seed: int = 0  # demand pattern and fares

    def __post_init__(self):
        if self.regions < 2 or self.charge_levels < 2:
            raise UsageError(f"a city needs at least 2 regions and 2 charge levels (got {self.regions}, "
                             f"{self.charge_levels}); raise regions or charge_levels.")
        if self.fleet < 1 or self.steps < 1 or self.demand_scale <= 0:
            raise UsageError("fleet, steps and demand_scale must be positive; pass positive values.")
        if not 0 <= self.amplitude < 1:
            raise UsageError(f"amplitude must lie in [0, 1) (got {self.amplitude}); pass a value in that range.")
        for i, j in self.edges:
            if not (0 <= i < self.regions and 0 <= j < self.regions) or i == j:
                raise UsageError(f"edge ({i}, {j}) does not join two different regions of 0..{self.regions - 1}; fix edges.")
        if not self.stations or any(not 0 <= s < self.regions for s in self.stations):
            raise UsageError(f"stations {self.stations} must be a non-empty set of regions 0..{self.regions - 1}; fix stations.")
        hops = hop_distances(self.regions, self.edges)
        unreachable = np.flatnonzero(hops[0] < 0)
        if len(unreachable):
            raise UsageError(f"region {int(unreachable[0])} is unreachable from region 0 (no path in edges); "
                             "add an edge that connects it.")
        if hops.max() >= self.charge_levels:
            raise UsageError(f"the graph's diameter {hops.max()} needs at least {hops.max() + 1} charge levels "
                             f"(got {self.charge_levels}); raise charge_levels.")


def hop_distances(regions: int, edges) -> np.ndarray:
    """Breadth-first hop counts [R, R] over the undirected edges; -1 where there is no path."""
    neighbours = [[] for _ in range(regions)]
    for i, j in edges:
        neighbours[i].append(j)
        neighbours[j].append(i)
    hops = -np.ones((regions, regions), int)
    for source in range(regions):
        hops[source, source], queue = 0, deque([source])
        while queue:
            i = queue.popleft()
            for j in neighbours[i]:
                if hops[source, j] < 0:
                    hops[source, j] = hops[source, i] + 1
                    queue.append(j)
    return hops


class HighsLP:
    """``min cost @ x  s.t.  row_lower <= A x <= row_upper,  x >= 0`` with a fixed ``A``: the model is handed
    to HiGHS once and each solve only changes the row bounds (scipy's ``linprog`` re-validates and re-builds
    the model per call, which costs more than these small solves). Every solve starts cold, so its result
    does not depend on earlier solves."""

    def __init__(self, cost: np.ndarray, matrix: sp.spmatrix):
        import highspy

        self._highspy = highspy
        self.highs = highspy.Highs()
        self.highs.setOptionValue("output_flag", False)
        self.highs.setOptionValue("threads", 1)
        A = sp.csc_matrix(matrix)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
        lp.col_cost_ = np.asarray(cost, np.float64)
        lp.col_lower_, lp.col_upper_ = np.zeros(A.shape[1]), np.full(A.shape[1], np.inf)
        lp.row_lower_, lp.row_upper_ = np.zeros(A.shape[0]), np.zeros(A.shape[0])
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data.astype(np.float64)
        self.highs.passModel(lp)
        self.rows = np.arange(A.shape[0], dtype=np.int32)
        self.status = "not solved"

    def solve(self, row_lower: np.ndarray, row_upper: np.ndarray) -> np.ndarray | None:
        """The optimal x, or None (with ``self.status`` saying why) if HiGHS finds no optimum."""
        self.highs.clearSolver()
        self.highs.changeRowsBounds(len(self.rows), self.rows, np.asarray(row_lower, np.float64),
                                    np.asarray(row_upper, np.float64))
        self.highs.run()
        status = self.highs.getModelStatus()
        self.status = self.highs.modelStatusToString(status)
        if status != self._highspy.HighsModelStatus.kOptimal:
            return None
        return np.asarray(self.highs.getSolution().col_value)


class Network:
    """The city's fixed arrays: hops, trip energy and profit, demand rates, and the LPs' index sets."""

    def __init__(self, city: City):
        self.city = city
        R, C = city.regions, city.charge_levels
        rng = np.random.default_rng(city.seed)
        self.R, self.C, self.nodes = R, C, R * C
        self.hops = hop_distances(R, city.edges)
        self.adjacency = np.zeros((R, R))
        for i, j in city.edges:
            self.adjacency[i, j] = self.adjacency[j, i] = 1.0
        self.station = np.isin(np.arange(R), city.stations)
        self.energy = np.maximum(1, self.hops)  # [R, R] charge levels a trip uses
        fares = city.base_fare + city.fare_per_level * self.energy * rng.uniform(0.8, 1.2, (R, R))
        self.trip_profit = fares - city.move_cost * self.energy  # [R, R]
        # demand: OD weights and a per-origin phase, so regions send most at different hours (imbalance)
        weights = rng.gamma(2.0, 0.5, (R, R)) * (1 - 0.7 * np.eye(R))
        weights *= R * R / weights.sum()
        phase = rng.uniform(0, 2 * np.pi, R)
        hours = 2 * np.pi * np.arange(city.steps + 1) / city.steps
        swing = 1 + city.amplitude * np.sin(hours[:, None] + phase[None, :])  # [T+1, R]
        self.rates = city.demand_scale * weights[None] * swing[:, :, None]  # [T+1, R, R]
        # matching variables (i, c, j) with c >= e_ij
        self.trips = np.array([(i, c, j) for i in range(R) for c in range(C) for j in range(R) if c >= self.energy[i, j]])
        # rebalancing edges (i, c) -> (j, c') with cost: moves (c' = c - hops) and charging (c' = c + 1)
        edges = [(i, c, j, c - self.hops[i, j], city.move_cost * self.hops[i, j])
                 for i in range(R) for c in range(C) for j in range(R) if c >= self.hops[i, j]]
        edges += [(i, c, i, c + 1, city.charge_price) for i in city.stations for c in range(C - 1)]
        self.moves = np.array([e[:4] for e in edges], int)
        self.move_cost = np.array([e[4] for e in edges])
        self.penalty = 10.0 * (1.0 + self.move_cost.max())
        # the LPs' constraint matrices do not change between steps (only their right-hand sides do)
        n, N, E = len(self.trips), self.nodes, len(self.moves)
        i, c, j = self.trips.T
        supply = sp.csr_matrix((np.ones(n), (self.node(i, c), np.arange(n))), shape=(N, n))
        requests = sp.csr_matrix((np.ones(n), (i * R + j, np.arange(n))), shape=(R * R, n))
        self.matching_matrix = sp.vstack([supply, requests]).tocsr()  # rows: nodes, then OD pairs
        out_of = sp.csr_matrix((np.ones(E), (self.node(*self.moves[:, :2].T), np.arange(E))), shape=(N, E))
        into = sp.csr_matrix((np.ones(E), (self.node(*self.moves[:, 2:].T), np.arange(E))), shape=(N, E))
        eye = sp.identity(N, format="csr")
        self.rebalancing_matrix = sp.vstack([sp.hstack([out_of, sp.csr_matrix((N, 2 * N))]),
                                             sp.hstack([into, -eye, eye])]).tocsr()  # rows: leave n, then reach n
        self.matching_lp = HighsLP(-self.trip_profit[i, j], self.matching_matrix)
        self.rebalancing_lp = HighsLP(np.concatenate([self.move_cost, np.full(2 * N, self.penalty)]),
                                      self.rebalancing_matrix)

    def node(self, region, charge):
        return np.asarray(region) * self.C + np.asarray(charge)

    def demand(self, episode_seed: int) -> np.ndarray:
        """Realised requests [T, R, R] of one episode (deterministic in the seed)."""
        return np.random.default_rng([self.city.seed, episode_seed]).poisson(self.rates[:-1]).astype(float)

    def initial_vehicles(self) -> np.ndarray:
        """[R, C]: the fleet spread evenly over regions at full charge."""
        x = np.zeros((self.R, self.C))
        x[:, -1] = np.bincount(np.arange(self.city.fleet) % self.R, minlength=self.R)
        return x


# ---------------------------------------------------------------------------------------------- the LPs


def match(net: Network, vehicles: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """The matching LP (module docstring): flows m[i, c, j] [R, C, R], integral."""
    i, c, j = net.trips.T
    upper = np.concatenate([vehicles.ravel(), demand.ravel()])
    x = net.matching_lp.solve(np.full(len(upper), -np.inf), upper)
    flows = np.zeros((net.R, net.C, net.R))
    if x is not None:  # always feasible (m = 0); a solver failure matches nobody
        flows[i, c, j] = np.rint(x)
    return flows


def rebalance(net: Network, idle: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The rebalancing LP (module docstring): flows per edge of ``net.moves`` [E], integral for integral
    inputs; no rebalancing (every vehicle stays) with a :class:`RebalanceWarning` if the LP fails."""
    rhs = np.concatenate([idle.ravel(), target.ravel()])
    x = net.rebalancing_lp.solve(rhs, rhs)
    if x is not None:
        return np.rint(x[: len(net.moves)])
    warnings.warn(f"the rebalancing LP failed ({net.rebalancing_lp.status}); no rebalancing this step.",
                  RebalanceWarning, stacklevel=2)
    return stay_flows(net, idle)


def stay_flows(net: Network, idle: np.ndarray) -> np.ndarray:
    """Every idle vehicle stays on its node (the move edge with hops 0), clipped at 0."""
    flows = np.zeros(len(net.moves))
    stay = np.flatnonzero((net.moves[:, 0] == net.moves[:, 2]) & (net.moves[:, 1] == net.moves[:, 3]))
    flows[stay] = np.maximum(idle.ravel()[net.node(net.moves[stay, 0], net.moves[stay, 1])], 0)
    return flows


def integer_target(weights: np.ndarray, total: float) -> np.ndarray:
    """``round(w * total)`` by largest remainder, so the counts sum to ``total`` exactly; shapes [R, C]."""
    share = np.asarray(weights, float).ravel() / np.sum(weights) * total
    counts = np.floor(share)
    counts[np.argsort(counts - share)[: int(round(total - counts.sum()))]] += 1
    return counts.reshape(weights.shape)


# ---------------------------------------------------------------------------------------------- the dynamics


@dataclasses.dataclass
class Step:
    """One step's outcome: the next vehicles [R, C], the idle vehicles before rebalancing, the profit."""

    vehicles: np.ndarray
    idle: np.ndarray
    profit: float
    matched: float
    seconds_match: float
    seconds_rebalance: float


def advance(net: Network, matched: np.ndarray, moves: np.ndarray) -> tuple[np.ndarray, float]:
    """Arrivals ``x_{t+1}`` [R, C] of trip flows m [R, C, R] and move flows [E], and their profit."""
    x = np.zeros((net.R, net.C))
    i, c, j = net.trips.T
    np.add.at(x, (j, c - net.energy[i, j]), matched[i, c, j])
    np.add.at(x, (net.moves[:, 2], net.moves[:, 3]), moves)
    profit = float(np.sum(net.trip_profit[i, j] * matched[i, c, j]) - net.move_cost @ moves)
    return x, profit


def idle_after_matching(net: Network, vehicles: np.ndarray, demand: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(trip flows [R, C, R], idle vehicles [R, C], seconds) of step 2."""
    start = time.perf_counter()
    matched = match(net, vehicles, demand)
    return matched, vehicles - matched.sum(-1), time.perf_counter() - start


def step(net: Network, vehicles: np.ndarray, demand: np.ndarray, desired) -> Step:
    """Steps 2-5 with ``desired(idle) -> weights [R, C]`` (the policy, called between the two LPs)."""
    matched, idle, t_match = idle_after_matching(net, vehicles, demand)
    return finish_step(net, matched, idle, desired(idle), t_match)


def finish_step(net: Network, matched, idle, weights, t_match: float) -> Step:
    start = time.perf_counter()
    moves = rebalance(net, idle, integer_target(weights, idle.sum()))
    t_rebalance = time.perf_counter() - start
    x, profit = advance(net, matched, moves)
    return Step(x, idle, profit, float(matched.sum()), t_match, t_rebalance)


# ---------------------------------------------------------------------------------------------- baselines


def no_rebalancing(net: Network):
    """Idle vehicles stay in their region; at a station they charge one level."""
    def desired(t, idle):
        target = idle.copy()
        at_station = net.station[:, None] & (np.arange(net.C)[None] < net.C - 1)
        target[at_station] = 0
        target[:, 1:] += (idle * at_station)[:, :-1]
        return target + 1e-9
    return desired


def equal_distribution(net: Network):
    """The same number of idle vehicles on every node (so in every region and at every charge level)."""
    return lambda t, idle: np.ones((net.R, net.C))


def run_episode(net: Network, demand: np.ndarray, desired) -> dict:
    """One episode [T steps] under ``desired(t, idle) -> weights [R, C]``; profits per step and LP seconds."""
    x, profits, t_match, t_reb = net.initial_vehicles(), [], [], []
    for t in range(len(demand)):
        out = step(net, x, demand[t], lambda idle: desired(t, idle))
        x = out.vehicles
        profits.append(out.profit)
        t_match.append(out.seconds_match)
        t_reb.append(out.seconds_rebalance)
    return {"profit": float(np.sum(profits)), "profits": profits, "seconds_match": float(np.mean(t_match)),
            "seconds_rebalance": float(np.mean(t_reb))}


# ---------------------------------------------------------------------------------------------- the upper bound


def full_information_optimum(net: Network, demand: np.ndarray, vehicles: np.ndarray | None = None) -> dict:
    """The time-expanded LP over the episode with the realised ``demand`` [T, R, R] known (an upper bound).

    Variables per step t: trip flows m_t (as :func:`match`) and move flows f_t (as :func:`rebalance`).
    Constraints: everything leaving node n at t equals what is there, ``out_t(n) = x_0(n)`` at t = 0 and
    ``out_t(n) = in_{t-1}(n)`` after; ``sum_c m_t[i, c, j] <= d_t[i, j]``. Objective: total profit.
    Returns ``{"profit", "seconds", "variables"}``.
    """
    T = len(demand)
    x0 = net.initial_vehicles() if vehicles is None else vehicles
    i, c, j = net.trips.T
    M, E, N = len(net.trips), len(net.moves), net.nodes
    V = M + E  # variables per step
    trip_src, trip_dst = net.node(i, c), net.node(j, c - net.energy[i, j])
    move_src = net.node(net.moves[:, 0], net.moves[:, 1])
    move_dst = net.node(net.moves[:, 2], net.moves[:, 3])
    out_block = sp.csr_matrix((np.ones(V), (np.concatenate([trip_src, move_src]), np.arange(V))), shape=(N, V))
    in_block = sp.csr_matrix((np.ones(V), (np.concatenate([trip_dst, move_dst]), np.arange(V))), shape=(N, V))
    req_block = sp.csr_matrix((np.ones(M), (i * net.R + j, np.arange(M))), shape=(net.R * net.R, V))
    A_eq = sp.kron(sp.identity(T), out_block) - sp.kron(sp.eye(T, k=-1), in_block)
    A_ub = sp.kron(sp.identity(T), req_block)
    b_eq = np.concatenate([x0.ravel(), np.zeros((T - 1) * N)])
    cost = np.tile(np.concatenate([-net.trip_profit[i, j], net.move_cost]), T)
    lp = HighsLP(cost, sp.vstack([A_eq, A_ub]))
    start = time.perf_counter()  # the solve alone, as for the per-step LPs
    x = lp.solve(np.concatenate([b_eq, np.full(A_ub.shape[0], -np.inf)]), np.concatenate([b_eq, demand.ravel()]))
    seconds = time.perf_counter() - start
    if x is None:
        raise RuntimeError(f"the full-information LP failed: {lp.status}")
    return {"profit": float(-cost @ x), "seconds": seconds, "variables": T * V}


def score_days(net: Network, days: int, desired_by_name: dict) -> dict:
    """Per method (``desired_by_name[name]()`` makes its ``desired`` for :func:`run_episode`): the profits of the days
    0..days-1 (``net.demand(d)``) and the median LP seconds of its rebalancing; and the full-information optimum of
    each day (:func:`full_information_optimum`) with its solve seconds and size."""
    demand = [net.demand(d) for d in range(days)]
    optimum = [full_information_optimum(net, dm) for dm in demand]
    out = {"optimum": [o["profit"] for o in optimum], "optimum_seconds": [o["seconds"] for o in optimum],
           "optimum_variables": optimum[0]["variables"]}
    for name, make in desired_by_name.items():
        runs = [run_episode(net, dm, make()) for dm in demand]
        out[name] = [r["profit"] for r in runs]
        out[f"{name}_seconds_rebalance"] = float(np.median([r["seconds_rebalance"] for r in runs]))
    return out


# The two cities of `longhorizon repro eamod` (and `city=A` / `city=B` of the gymnasium environment): a ring of
# five regions, and a ring of six with a chord, another demand pattern and a smaller daily swing.
CITY_A = City(regions=5, charge_levels=4, edges=((0, 1), (1, 2), (2, 3), (3, 4), (4, 0)), stations=(0, 2), fleet=40,
              steps=12, seed=0)
CITY_B = City(regions=6, charge_levels=4, edges=((0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0), (0, 3)),
              stations=(1, 4), fleet=48, steps=12, amplitude=0.6, seed=7)
