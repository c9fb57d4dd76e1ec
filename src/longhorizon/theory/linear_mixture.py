"""Linear mixture MDPs (Ayoub et al. 2020; Zhou, Gu, Szepesvari 2021) and exact finite-horizon planning.

A linear mixture MDP has known features ``phi(s'|s,a) in R^d`` and an unknown ``theta* in R^d`` with

    P(s'|s,a) = <phi(s'|s,a), theta*>.

For a value function ``V: S -> R`` the expected next value is linear in ``theta*``:

    [P V](s,a) = <psi_V(s,a), theta*>,    psi_V(s,a) = sum_{s'} phi(s'|s,a) V(s')   (value-targeted features).

Transitions are time-homogeneous (one ``theta*`` for every step), as in the horizon-free papers. Rewards
follow the horizon-free normalisation: every episode's rewards sum to at most 1, here ``r_h(s,a) in [0, 1/H]``,
so every value lies in [0, 1] whatever H is.

Instances: :func:`hard_instance`, two states in the style of the lower-bound construction (Zhou, Gu,
Szepesvari 2021, also used by Zhang, Zhang, Gu 2023): from ``x0`` the action ``a in {-1, 1}^{d-1}`` reaches
the absorbing rewarding state ``x1`` with probability ``delta + <mu, a>``, so finding the best action means
estimating the sign of every ``mu_i``; :func:`random_mixture`, ``d`` random base transition models mixed by a
random ``theta*`` in the simplex. Planning is exact dynamic programming in float64 numpy.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from longhorizon.errors import UsageError


@dataclasses.dataclass(frozen=True)
class LinearMixtureMDP:
    """``phi`` [S, A, S, d] (``phi[s, a, s']``), ``theta`` [d] (theta*), ``initial`` the start state."""

    phi: np.ndarray
    theta: np.ndarray
    initial: int = 0
    name: str = "mixture"

    def __post_init__(self):
        if self.phi.ndim != 4 or self.theta.shape != (self.phi.shape[-1],):
            raise UsageError(f"features must be [S, A, S, d] and theta [d], got {self.phi.shape} and {self.theta.shape}; "
                             "build the MDP with hard_instance or random_mixture.")
        rows = self.transition()
        if np.any(rows < -1e-12) or not np.allclose(rows.sum(-1), 1.0):
            raise UsageError("<phi(.|s,a), theta*> is not a distribution for every (s, a); choose theta* so that it is.")
        if not 0 <= self.initial < self.num_states:
            raise UsageError(f"initial state {self.initial} is not one of the {self.num_states} states; pass 0..S-1.")

    @property
    def num_states(self) -> int:
        return self.phi.shape[0]

    @property
    def num_actions(self) -> int:
        return self.phi.shape[1]

    @property
    def dim(self) -> int:
        return self.phi.shape[-1]

    def transition(self, theta: np.ndarray | None = None) -> np.ndarray:
        """P [S, A, S] = <phi(s'|s,a), theta> (theta* by default)."""
        return np.einsum("xasd,d->xas", self.phi, self.theta if theta is None else theta)

    def psi(self, value: np.ndarray) -> np.ndarray:
        """Value-targeted features psi_V [S, A, d] = sum_s' phi(s'|s,a) V(s') for V [S]."""
        return np.einsum("xasd,s->xad", self.phi, value)


def hard_instance(dim: int = 4, horizon: int = 32, gap: float = 0.5, seed: int = 0) -> LinearMixtureMDP:
    """Two states, ``2^(d-1)`` actions; ``P(x1 | x0, a) = delta + <mu, a>`` with ``delta = 1/H`` (x1 is reached
    in about H steps, so its reward 1/H per step matters at every horizon) and ``mu_i = +-gap delta / (d-1)``.

    theta* = (1, mu); phi(x0|x0,a) = (1 - delta, -a), phi(x1|x0,a) = (delta, a), phi(x1|x1,a) = (1, 0).
    """
    if dim < 2 or not 0 < gap < 1 or horizon < 2:
        raise UsageError(f"hard_instance needs dim >= 2, 0 < gap < 1 and horizon >= 2 (got {dim}, {gap}, {horizon}); "
                         "pass values in those ranges.")
    delta = 1.0 / horizon
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], dim - 1)
    mu = signs * gap * delta / (dim - 1)
    actions = np.array(list(itertools.product([-1.0, 1.0], repeat=dim - 1)))  # [A, d-1]
    phi = np.zeros((2, len(actions), 2, dim))
    phi[0, :, 0, 0], phi[0, :, 0, 1:] = 1 - delta, -actions
    phi[0, :, 1, 0], phi[0, :, 1, 1:] = delta, actions
    phi[1, :, 1, 0] = 1.0
    return LinearMixtureMDP(phi, np.concatenate([[1.0], mu]), 0, f"hard(d={dim})")


def random_mixture(states: int = 5, actions: int = 3, dim: int = 4, seed: int = 0) -> LinearMixtureMDP:
    """``phi(s'|s,a) = (P_1(s'|s,a), ..., P_d(s'|s,a))`` with Dirichlet(0.5) base models and theta* ~ Dirichlet(1)."""
    if min(states, actions, dim) < 1:
        raise UsageError(f"random_mixture needs at least one state, action and feature (got {states}, {actions}, {dim}).")
    rng = np.random.default_rng(seed)
    base = rng.dirichlet(np.full(states, 0.5), size=(states, actions, dim))  # [S, A, d, S']
    return LinearMixtureMDP(np.moveaxis(base, 2, 3), rng.dirichlet(np.ones(dim)), 0, f"random(S={states},A={actions},d={dim})")


def _per_step(reward: np.ndarray, horizon: int) -> np.ndarray:
    """Reward [H, S, A] from a stationary [S, A] or per-step [H, S, A] array."""
    reward = np.asarray(reward, np.float64)
    if reward.ndim == 2:
        return np.broadcast_to(reward, (horizon, *reward.shape))
    if reward.ndim != 3 or reward.shape[0] != horizon:
        raise UsageError(f"reward must be [S, A] or [H={horizon}, S, A], got shape {reward.shape}; reshape it.")
    return reward


def plan(transition: np.ndarray, reward: np.ndarray, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact finite-horizon DP: V_{H+1} = 0, Q_h = r_h + P V_{h+1}, V_h = max_a Q_h.

    transition [S, A, S], reward [S, A] or [H, S, A]; returns (V [H+1, S], greedy policy [H, S]).
    """
    reward = _per_step(reward, horizon)
    values = np.zeros((horizon + 1, transition.shape[0]))
    policy = np.zeros((horizon, transition.shape[0]), np.int64)
    for h in range(horizon - 1, -1, -1):
        q = reward[h] + transition @ values[h + 1]
        policy[h], values[h] = q.argmax(-1), q.max(-1)
    return values, policy


def evaluate(transition: np.ndarray, reward: np.ndarray, policy: np.ndarray) -> np.ndarray:
    """V^pi [H+1, S] of a deterministic policy [H, S]: V_h(s) = r_h(s, pi_h(s)) + P(.|s, pi_h(s)) V_{h+1}."""
    horizon, states = policy.shape
    reward = _per_step(reward, horizon)
    values = np.zeros((horizon + 1, states))
    rows = np.arange(states)
    for h in range(horizon - 1, -1, -1):
        values[h] = reward[h][rows, policy[h]] + transition[rows, policy[h]] @ values[h + 1]
    return values


def evaluation_rewards(mdp: LinearMixtureMDP, horizon: int, count: int, seed: int = 0) -> np.ndarray:
    """A fixed set of stationary test rewards [count, S, A] in [0, 1/H] (episode total <= 1): the first rewards
    one state (the instance's own task on the hard instance), the others are uniform at random."""
    if count < 1:
        raise UsageError(f"need at least one test reward, got {count}; pass a positive count.")
    rng = np.random.default_rng(seed + 7919)
    shape = (mdp.num_states, mdp.num_actions)
    first = np.zeros(shape)
    first[-1] = 1.0
    rewards = [first] + [rng.uniform(size=shape) for _ in range(count - 1)]
    return np.stack(rewards) / horizon
