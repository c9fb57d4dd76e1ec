"""Coupled restless bandits: N two-state arms whose joint action is constrained (SEQUOIA's four families).

Arm ``i`` is a Markov chain on {0 = bad, 1 = good}. Acting on it with intervention ``k`` (0 = passive) moves it
to the good state with probability ``P[i, k, s_i]``; the reward is the number of arms in the good state after the
step, ``r_t = sum_i s_{i,t+1}``, so the expected immediate reward is linear in the action bits::

    E[r_t | s, a] = sum_i P[i, 0, s_i] + sum_{i,k} a_{ik} (P[i, k, s_i] - P[i, 0, s_i]).

Two arm types make the myopic choice wrong in the long run: "fragile" arms respond strongly to an intervention
but fall back fast, "durable" arms respond less but stay good. Each family's joint-action set is a
:class:`~longhorizon.structured.milp_q.LinearConstraints` (on the action bits and auxiliary variables):

- ``budget`` (multiple interventions): K = 2 interventions of cost 1 and 2, at most one per arm, total cost <= B;
- ``path``: the acted arms are the nodes of a simple path of at most B edges from a depot in a graph
  (edge variables, flow conservation, Miller-Tucker-Zemlin orders against detached cycles);
- ``schedule``: at most B arms per step and each arm at most once in any window of W steps (a cool-down in the
  observation fixes its bit to 0);
- ``capacity``: M workers with capacities; each acted arm is assigned to one compatible worker, whose load
  (arm-dependent cost 1 or 2) may not exceed its capacity.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.structured.milp_q import LinearConstraints

FAMILIES = ("budget", "path", "schedule", "capacity")


@dataclasses.dataclass(frozen=True)
class RestlessConfig:
    family: str = "budget"
    n_arms: int = 6
    budget: int = 2  # B: cost budget (budget), path edges (path), arms per step (schedule)
    horizon: int = 20  # steps per episode
    window: int = 3  # schedule: an arm acted at t may be acted again at t + window
    n_workers: int = 2  # capacity
    capacity: int = 2  # capacity: each worker's load limit
    seed: int = 0  # draws the arms' parameters, the graph and the compatibilities

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise UsageError(f"unknown restless-bandit family '{self.family}'; choose one of: {', '.join(FAMILIES)}.")
        for name in ("n_arms", "budget", "horizon", "window", "n_workers", "capacity"):
            if getattr(self, name) < 1:
                raise UsageError(f"RestlessConfig.{name} must be >= 1, got {getattr(self, name)}; give a positive integer.")


class RestlessBandit:
    """A numpy environment: ``reset(rng) -> obs``, ``step(rng, action) -> (obs, reward, done)``.

    The observation is ``[s (N)]``, and for ``schedule`` also the cool-downs ``c / W`` (N); the action is a
    0/1 vector of length ``N * K`` (K = 2 for ``budget``, else 1), bit ``i * K + (k - 1)`` = intervention k on arm i.
    """

    def __init__(self, config: RestlessConfig):
        self.config = cfg = config
        rng = np.random.default_rng(1000 + cfg.seed)
        self.n_interventions = 2 if cfg.family == "budget" else 1
        self.n_actions = cfg.n_arms * self.n_interventions
        self.obs_dim = cfg.n_arms * (2 if cfg.family == "schedule" else 1)
        self.transition = arm_transitions(rng, cfg.n_arms, self.n_interventions)  # (N, K + 1, 2)
        if cfg.family == "path":
            self.edges = path_graph(rng, cfg.n_arms)
        if cfg.family == "capacity":
            self.compatible = rng.random((cfg.n_arms, cfg.n_workers)) < 0.7
            self.compatible[np.arange(cfg.n_arms), rng.integers(0, cfg.n_workers, cfg.n_arms)] = True
            self.load = rng.integers(1, 3, (cfg.n_arms, cfg.n_workers)).astype(np.float64)
        self._static = None if cfg.family == "schedule" else self._build_constraints(np.ones(self.n_actions))

    # ------------------------------------------------------------------------------------------- dynamics

    def reset(self, rng: np.random.Generator) -> np.ndarray:
        self.arms = (rng.random(self.config.n_arms) < 0.5).astype(np.int64)
        self.cooldown = np.zeros(self.config.n_arms, np.int64)
        self.t = 0
        return self.observation()

    def observation(self) -> np.ndarray:
        if self.config.family == "schedule":
            return np.concatenate([self.arms, self.cooldown / self.config.window]).astype(np.float64)
        return self.arms.astype(np.float64)

    def step(self, rng: np.random.Generator, action: np.ndarray):
        intervention = self.interventions(action)
        p_good = self.transition[np.arange(self.config.n_arms), intervention, self.arms]
        self.arms = (rng.random(self.config.n_arms) < p_good).astype(np.int64)
        self.cooldown = np.where(intervention > 0, self.config.window - 1, np.maximum(self.cooldown - 1, 0))
        self.t += 1
        return self.observation(), float(self.arms.sum()), self.t >= self.config.horizon

    def interventions(self, action: np.ndarray) -> np.ndarray:
        """Per arm: 0 (passive) or the intervention k >= 1 its bits select."""
        bits = np.asarray(action).reshape(self.config.n_arms, self.n_interventions)
        return np.where(bits.any(1), bits.argmax(1) + 1, 0)

    def expected_gain(self, obs: np.ndarray, lookahead: int = 1, gamma: float = 1.0) -> np.ndarray:
        """Per action bit: the expected extra good arms over the next ``lookahead`` steps from acting now
        (and passive afterwards), discounted by ``gamma``; ``lookahead = 1`` is the myopic objective above."""
        n, K = self.config.n_arms, self.n_interventions
        state = np.asarray(obs[:n]).astype(np.int64)
        passive = self.transition[:, 0, :]  # (N, 2): P(good | s) without action
        gains = np.zeros((n, K))
        for k in range(1, K + 1):
            acted = self.transition[np.arange(n), k, state]  # P(good after the step)
            quiet = passive[np.arange(n), state]
            total = np.zeros(n)
            for t in range(lookahead):
                total += gamma ** t * (acted - quiet)
                acted = acted * passive[:, 1] + (1 - acted) * passive[:, 0]
                quiet = quiet * passive[:, 1] + (1 - quiet) * passive[:, 0]
            gains[:, k - 1] = total
        return gains.reshape(-1)

    # ---------------------------------------------------------------------------------------- constraints

    def constraints(self, obs: np.ndarray) -> LinearConstraints:
        if self._static is not None:
            return self._static
        cooldown = np.asarray(obs[self.config.n_arms:]) > 0
        return self._build_constraints((~cooldown).astype(np.float64))

    def _build_constraints(self, a_upper: np.ndarray) -> LinearConstraints:
        cfg, n = self.config, self.config.n_arms
        if cfg.family == "budget":
            per_arm = np.kron(np.eye(n), np.ones((1, 2)))  # at most one intervention per arm
            cost = np.tile([1.0, 2.0], n)[None]
            return LinearConstraints("budget", 2 * n, np.vstack([per_arm, cost]), np.full(n + 1, -np.inf),
                                     np.concatenate([np.ones(n), [cfg.budget]]))
        if cfg.family == "schedule":
            return LinearConstraints("schedule", n, np.ones((1, n)), np.array([-np.inf]), np.array([float(cfg.budget)]),
                                     a_upper=a_upper)
        if cfg.family == "path":
            return self._path_constraints()
        return self._capacity_constraints()

    def _path_constraints(self) -> LinearConstraints:
        """Columns ``[a (N), x_e (E arcs), u (N orders)]``; node N is the depot (no action bit, order 0)."""
        n, arcs = self.config.n_arms, self.edges
        n_arcs, cols = len(arcs), n + len(arcs) + n
        x0, u0 = n, n + len(arcs)
        rows, lb, ub = [], [], []

        def row(entries, low, high):
            r = np.zeros(cols)
            for c, v in entries:
                r[c] += v
            rows.append(r), lb.append(low), ub.append(high)

        row([(x0 + e, 1.0) for e, (u, _) in enumerate(arcs) if u == n], -np.inf, 1.0)  # one path leaves the depot
        for v in range(n):
            into = [(x0 + e, 1.0) for e, (_, w) in enumerate(arcs) if w == v]
            out = [(x0 + e, 1.0) for e, (u, _) in enumerate(arcs) if u == v]
            row(into + [(v, -1.0)], 0.0, 0.0)  # an arm is acted iff the path enters it
            row(out + [(c, -1.0) for c, _ in into], -np.inf, 0.0)  # it leaves an arm only after entering it
        row([(x0 + e, 1.0) for e in range(n_arcs)], -np.inf, float(self.config.budget))  # at most B edges
        for e, (u, w) in enumerate(arcs):  # MTZ: x_uw = 1 => order_w >= order_u + 1 (no cycle avoids the depot)
            if u != n:
                row([(u0 + w, 1.0), (u0 + u, -1.0), (x0 + e, -float(n))], 1.0 - n, np.inf)
        return LinearConstraints("path", n, np.array(rows), np.array(lb), np.array(ub),
                                 aux_lower=np.concatenate([np.zeros(n_arcs), np.ones(n)]),
                                 aux_upper=np.concatenate([np.ones(n_arcs), np.full(n, float(n))]),
                                 aux_integer=np.concatenate([np.ones(n_arcs, bool), np.zeros(n, bool)]))

    def _capacity_constraints(self) -> LinearConstraints:
        """Columns ``[a (N), x_ij (N x M assignment)]``: ``a_i = sum_j x_ij``, ``sum_i load_ij x_ij <= cap``."""
        n, m = self.config.n_arms, self.config.n_workers
        assign = np.kron(np.eye(n), np.ones((1, m)))  # (N, N M)
        link = np.hstack([-np.eye(n), assign])
        loads = np.hstack([np.zeros((m, n)), np.kron(np.ones((1, n)), np.eye(m)) * self.load.reshape(-1)])
        return LinearConstraints("capacity", n, np.vstack([link, loads]), np.concatenate([np.zeros(n), np.full(m, -np.inf)]),
                                 np.concatenate([np.zeros(n), np.full(m, float(self.config.capacity))]),
                                 aux_lower=np.zeros(n * m), aux_upper=self.compatible.reshape(-1).astype(np.float64),
                                 aux_integer=np.ones(n * m, bool))

    # ----------------------------------------------------------------------------------- feasible sampling

    def sample_feasible(self, rng: np.random.Generator, obs: np.ndarray) -> np.ndarray:
        """A random feasible action, built constructively (each family's own sampler)."""
        cfg, n = self.config, self.config.n_arms
        action = np.zeros(self.n_actions)
        if cfg.family == "budget":
            left = cfg.budget
            for i in rng.permutation(n)[: rng.integers(0, n + 1)]:
                k = int(rng.integers(0, 2)) if left >= 2 else 0
                if left >= k + 1:
                    action[2 * i + k], left = 1.0, left - (k + 1)
        elif cfg.family == "schedule":
            free = np.flatnonzero(np.asarray(obs[n:]) == 0)
            action[rng.permutation(free)[: rng.integers(0, min(cfg.budget, len(free)) + 1)]] = 1.0
        elif cfg.family == "path":
            node, length = n, rng.integers(0, cfg.budget + 1)
            for _ in range(length):
                nexts = [w for u, w in self.edges if u == node and w != n and action[w] == 0]
                if not nexts:
                    break
                node = int(rng.choice(nexts))
                action[node] = 1.0
        else:
            left = np.full(cfg.n_workers, float(cfg.capacity))
            for i in rng.permutation(n)[: rng.integers(0, n + 1)]:
                ok = np.flatnonzero(self.compatible[i] & (self.load[i] <= left))
                if len(ok):
                    j = int(rng.choice(ok))
                    action[i], left[j] = 1.0, left[j] - self.load[i, j]
        return action


def arm_transitions(rng: np.random.Generator, n: int, n_interventions: int) -> np.ndarray:
    """``P[i, k, s]`` = P(good next | intervention k, state s), shape (N, K + 1, 2); half fragile, half durable.

    fragile: passive (0.05, 0.3), acted from bad up to ~0.9, from good ~0.5 (falls back fast);
    durable: passive (0.05, 0.9), acted from bad up to ~0.6, from good ~0.95 (stays good).
    The strong intervention (k = 2) adds to the weak one's effect.
    """
    P = np.zeros((n, n_interventions + 1, 2))
    fragile = rng.permutation(n) < n // 2
    jitter = rng.uniform(-0.05, 0.05, (n, 2))
    passive = np.where(fragile[:, None], [0.05, 0.3], [0.05, 0.9]) + jitter
    acted = np.where(fragile[:, None], [0.75, 0.5], [0.45, 0.95]) + jitter
    P[:, 0] = passive
    for k in range(1, n_interventions + 1):
        strength = 1.0 if n_interventions == 1 else (0.7, 1.0)[k - 1]
        P[:, k] = passive + strength * (acted - passive)
    return np.clip(P, 0.01, 0.99)


def path_graph(rng: np.random.Generator, n: int) -> list[tuple[int, int]]:
    """Directed arcs (both ways) of a ring over the arms with random chords; node ``n`` is the depot,
    with arcs out to three arms."""
    undirected = {(i, (i + 1) % n) for i in range(n)} | {tuple(sorted(rng.choice(n, 2, replace=False))) for _ in range(n // 2)}
    arcs = [(int(u), int(w)) for u, w in sorted(undirected) if u != w]
    arcs += [(w, u) for u, w in arcs]
    arcs += [(n, int(i)) for i in rng.choice(n, min(3, n), replace=False)]
    return sorted(set(arcs))
