"""GORP, "Greedy Over Random Policy" (Laidlaw, Russell, Dragan, NeurIPS 2023), on a tabular MDP.

GORP with lookahead ``k`` and ``m`` rollouts learns an open-loop action sequence one timestep at a time:

    for i = 0 .. T-1:
        for every action sequence sigma in A^k:
            run m episodes: actions a_0 .. a_{i-1} chosen so far, then sigma, then uniformly random
            Q_hat(sigma) = mean episode return
        a_i = first action of argmax_sigma Q_hat(sigma)      (ties broken uniformly at random)

Every environment step of every episode is counted, so one run costs at most ``T^2 A^k m`` steps.
Its *empirical sample complexity* (as in BRIDGE) is the number of steps used by the smallest ``m`` for
which the median over independent runs returns an optimal policy. All runs and rollouts of one
iteration are simulated together as numpy arrays.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from longhorizon.tabular import dp
from longhorizon.tabular.mdp import TabularMDP

OPTIMAL_TOLERANCE = 1e-4


@dataclasses.dataclass(frozen=True)
class GorpRuns:
    """Outcome of ``runs`` independent GORP runs with the same ``k`` and ``m``."""

    k: int
    m: int
    actions: np.ndarray  # int [runs, T]
    final_returns: np.ndarray  # float [runs]
    env_steps: np.ndarray  # int [runs]
    optimal: np.ndarray  # bool [runs]

    @property
    def sample_complexities(self) -> np.ndarray:
        """Steps used by each run, ``inf`` for runs that did not find an optimal policy."""
        return np.where(self.optimal, self.env_steps.astype(np.float64), np.inf)

    @property
    def median_sample_complexity(self) -> float:
        return float(np.median(self.sample_complexities))

    @property
    def success_rate(self) -> float:
        return float(self.optimal.mean())


def _step(mdp: TabularMDP, states: np.ndarray, actions: np.ndarray, rng: np.random.Generator):
    """Sample one transition for every episode; returns (next_states, rewards)."""
    if mdp.num_outcomes == 1:
        return mdp.next_states[states, actions, 0], mdp.next_rewards[states, actions, 0]
    probs = mdp.next_probs[states, actions]  # [E, K]
    u = rng.random(states.shape[0])[:, None]
    j = np.minimum((np.cumsum(probs, axis=1) < u).sum(axis=1), probs.shape[1] - 1)
    return mdp.next_states[states, actions, j], mdp.next_rewards[states, actions, j]


def run_gorp(
    mdp: TabularMDP,
    horizon: int | None = None,
    *,
    k: int = 1,
    m: int = 1,
    runs: int = 1,
    seed: int = 0,
    optimal_return: float | None = None,
) -> GorpRuns:
    """Run GORP ``runs`` times in parallel (independent random streams derived from ``seed``)."""
    T = mdp.resolve_horizon(horizon)
    if k < 1 or m < 1 or runs < 1:
        raise ValueError(f"k, m and runs must be >= 1, got k={k}, m={m}, runs={runs}")
    rng = np.random.default_rng(seed)
    A = mdp.num_actions
    n_seq = A**k
    seqs = np.array(np.unravel_index(np.arange(n_seq), (A,) * k)).T  # [n_seq, k]
    per_run = n_seq * m
    E = runs * per_run
    run_of = np.repeat(np.arange(runs), per_run)
    seq_of = np.tile(np.repeat(np.arange(n_seq), m), runs)
    chosen = np.zeros((runs, T), dtype=np.int64)
    steps = np.zeros(runs, dtype=np.int64)
    for i in range(T):
        state = np.zeros(E, dtype=np.int64)
        alive = np.ones(E, dtype=bool)
        ret = np.zeros(E)
        for t in range(T):
            if not alive.any():
                break
            if t < i:
                act = chosen[run_of, t]
            elif t < i + k:
                act = seqs[seq_of, t - i]
            else:
                act = rng.integers(0, A, size=E)
            idx = np.flatnonzero(alive)
            nxt, rew = _step(mdp, state[idx], act[idx], rng)
            ret[idx] += rew
            np.add.at(steps, run_of[idx], 1)
            state[idx] = np.maximum(nxt, 0)
            alive[idx] = nxt >= 0
        q_hat = ret.reshape(runs, n_seq, m).mean(axis=2)
        best = q_hat >= q_hat.max(axis=1, keepdims=True) - 1e-12 * np.abs(q_hat).max(axis=1, keepdims=True)
        pick = np.array([rng.choice(np.flatnonzero(row)) for row in best])
        chosen[:, i] = seqs[pick, 0]
    finals = np.array([dp.open_loop_return(mdp, chosen[r]) for r in range(runs)])
    if optimal_return is None:
        optimal_return = dp.evaluate(mdp, T).optimal_return
    optimal = finals >= optimal_return - OPTIMAL_TOLERANCE
    return GorpRuns(k=k, m=m, actions=chosen, final_returns=finals, env_steps=steps, optimal=optimal)


@dataclasses.dataclass(frozen=True)
class GorpSampleComplexity:
    k: int
    horizon: int
    num_actions: int
    m: int | None  # smallest m (found by bisection) whose median run is optimal; None if none fits
    median_sample_complexity: float  # env steps at that m (inf when none fits the budget)
    success_rate: float
    tried: dict[int, float]  # m -> median sample complexity

    @property
    def empirical_horizon(self) -> float | None:
        """``log_A(N / T^2)`` for the measured sample complexity ``N`` (GORP needs ``N <= T^2 A^H``)."""
        if not math.isfinite(self.median_sample_complexity) or self.num_actions < 2:
            return None
        return math.log(self.median_sample_complexity / self.horizon**2) / math.log(self.num_actions)


def gorp_sample_complexity(
    mdp: TabularMDP,
    horizon: int | None = None,
    *,
    k: int = 1,
    runs: int = 25,
    max_steps: int = 5_000_000,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> GorpSampleComplexity:
    """Empirical sample complexity of GORP: bisect ``m`` for the smallest value whose median run
    (over ``runs`` runs) finds an optimal policy, within ``max_steps`` steps per run.
    """
    T = mdp.resolve_horizon(horizon)
    A = mdp.num_actions
    optimal_return = dp.evaluate(mdp, T).optimal_return
    tried: dict[int, float] = {}
    results: dict[int, GorpRuns] = {}

    def attempt(m: int) -> float:
        if m not in results:
            if progress:
                progress(f"GORP k={k}: m={m}")
            results[m] = run_gorp(mdp, T, k=k, m=m, runs=runs, seed=seed + 7919 * m, optimal_return=optimal_return)
            tried[m] = results[m].median_sample_complexity
        return tried[m]

    lo, hi = 1, max(1, max_steps // (T * T * A**k))
    if math.isfinite(attempt(lo)):
        best = lo
    elif not math.isfinite(attempt(hi)):
        return GorpSampleComplexity(k=k, horizon=T, num_actions=A, m=None, median_sample_complexity=math.inf, success_rate=results[hi].success_rate, tried=tried)
    else:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if math.isfinite(attempt(mid)):
                hi = mid
            else:
                lo = mid
        best = hi
    return GorpSampleComplexity(
        k=k, horizon=T, num_actions=A, m=best, median_sample_complexity=tried[best], success_rate=results[best].success_rate, tried=tried,
    )
