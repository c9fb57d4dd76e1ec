"""Layered linear MDPs with adversarial losses: every policy's Q is linear in known features (Dai et al. 2023).

The instance is a *linear MDP* on H layers of S states and A actions, with simplex features
phi_h(s, a) in Delta^d (Dirichlet draws):

    P_h(s' | s, a) = sum_i phi_h(s, a)_i mu_{h,i}(s'),      mu_{h,i} in Delta(S)   (next layer's states)
    l_{k,h}(s, a)  = phi_h(s, a)^T theta_{k,h},             theta_{k,h} in [0, 1]^d

so for any policy pi, Q^pi_{k,h}(s, a) = l_{k,h}(s, a) + sum_s' P_h(s'|s, a) V^pi_{k,h+1}(s')
= phi_h(s, a)^T (theta_{k,h} + sum_s' mu_h(s') V^pi_{k,h+1}(s')): linear in phi, as the paper assumes.
The episode starts at s_0 ~ rho and ends after layer H - 1 (V_H = 0); losses lie in [0, 1] per step.

Adversaries (a frozen :class:`AdversaryConfig`) choose theta_k before episode k:

* ``switching``: theta_k alternates between two fixed random loss tables every ``period`` episodes;
* ``adaptive``: theta_{k,h} = clip(1/2 + amplitude d (f_{k,h} - 1/d), 0, 1) with f_{k,h} = E_{pi_k}[phi_h]
  the learner's expected features: the features the current policy uses most cost most.

Exact policy evaluation (backward recursion), occupancy measures (forward recursion), the best fixed
policy in hindsight (a min-DP on the summed losses: V^pi is linear in the loss for fixed transitions)
and trajectory sampling are jnp functions; call them under ``jax.enable_x64(True)`` for float64.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError


@dataclasses.dataclass(frozen=True)
class LinearMDPConfig:
    layers: int = 3  # H
    states: int = 3  # S per layer
    actions: int = 4  # A
    dim: int = 4  # d
    concentration: float = 0.5  # Dirichlet concentration of the features: small -> near-collinear features
    seed: int = 0

    def __post_init__(self):
        for name in ("layers", "states", "actions", "dim"):
            if getattr(self, name) < 1:
                raise UsageError(f"LinearMDPConfig.{name} must be >= 1, got {getattr(self, name)}; pass a positive integer.")
        if self.dim > self.states * self.actions:
            raise UsageError(f"LinearMDPConfig.dim={self.dim} exceeds states*actions={self.states * self.actions}, so the "
                             "covariance cannot be invertible; use dim <= states*actions.")
        if not self.concentration > 0:
            raise UsageError(f"LinearMDPConfig.concentration must be > 0, got {self.concentration}; pass e.g. 0.5.")


class LinearMDP(NamedTuple):
    phi: jax.Array  # [H, S, A, d] simplex features
    mu: jax.Array  # [H, d, S] next-layer state distribution per feature (mu[H-1] unused)
    rho: jax.Array  # [S] initial state distribution

    @property
    def transitions(self) -> jax.Array:
        """P[h, s, a, s'] = phi_h(s, a)^T mu_h(s'), shape [H, S, A, S]."""
        return jnp.einsum("hsai,hit->hsat", self.phi, self.mu)


def make_linear_mdp(config: LinearMDPConfig) -> LinearMDP:
    """A random linear MDP (module docstring), float64 numpy draws from ``config.seed``."""
    rng = np.random.default_rng(config.seed)
    H, S, A, d = config.layers, config.states, config.actions, config.dim
    phi = rng.dirichlet(np.full(d, config.concentration), size=(H, S, A))
    mu = rng.dirichlet(np.ones(S), size=(H, d))
    rho = rng.dirichlet(np.ones(S))
    return LinearMDP(jnp.asarray(phi), jnp.asarray(mu), jnp.asarray(rho))


def losses(mdp: LinearMDP, theta: jax.Array) -> jax.Array:
    """l_h(s, a) = phi_h(s, a)^T theta_h; theta [H, d] -> [H, S, A]."""
    return jnp.einsum("hsai,hi->hsa", mdp.phi, theta)


def evaluate_policy(mdp: LinearMDP, policy: jax.Array, theta: jax.Array):
    """Backward recursion Q_h = l_h + P_h V_{h+1}, V_h(s) = sum_a pi_h(a|s) Q_h(s, a), V_H = 0.

    policy [H, S, A] (rows on the simplex), theta [H, d]. Returns (Q [H, S, A], V [H, S], rho^T V_0).
    """
    loss, P = losses(mdp, theta), mdp.transitions
    Q, V = [None] * len(loss), [None] * len(loss)
    v_next = jnp.zeros(mdp.rho.shape, mdp.phi.dtype)
    for h in reversed(range(len(loss))):  # H is small: a Python loop runs eagerly without compiling a scan
        Q[h] = loss[h] + P[h] @ v_next
        V[h] = v_next = jnp.sum(policy[h] * Q[h], axis=-1)
    return jnp.stack(Q), jnp.stack(V), mdp.rho @ V[0]


def optimal_value(mdp: LinearMDP, theta: jax.Array):
    """min over policies of rho^T V^pi_0 for losses theta [H, d]: V*_h(s) = min_a (l_h + P_h V*_{h+1})(s, a).

    Returns (value, greedy deterministic policy [H, S, A]). Applied to sum_k theta_k it is the best fixed
    policy in hindsight, since V^pi(sum_k theta_k) = sum_k V^pi(theta_k) for fixed transitions.
    """
    loss, P = losses(mdp, theta), mdp.transitions
    policy = [None] * len(loss)
    v = jnp.zeros(mdp.rho.shape, mdp.phi.dtype)
    for h in reversed(range(len(loss))):
        q = loss[h] + P[h] @ v
        v = jnp.min(q, axis=-1)
        policy[h] = jax.nn.one_hot(jnp.argmin(q, axis=-1), q.shape[-1], dtype=q.dtype)
    return mdp.rho @ v, jnp.stack(policy)


def occupancy(mdp: LinearMDP, policy: jax.Array) -> jax.Array:
    """q_h(s, a) = Pr_pi[s_h = s, a_h = a]: d_0 = rho, q_h = d_h pi_h, d_{h+1}(s') = sum q_h(s, a) P_h(s'|s, a).

    policy [H, S, A] -> [H, S, A].
    """
    P = mdp.transitions
    d, q = mdp.rho, []
    for h in range(len(P)):
        q.append(d[:, None] * policy[h])
        d = jnp.einsum("sa,sat->t", q[h], P[h])
    return jnp.stack(q)


def sample_trajectory(key: jax.Array, mdp: LinearMDP, policy: jax.Array, theta: jax.Array):
    """One episode s_0 ~ rho, a_h ~ pi_h(.|s_h), s_{h+1} ~ P_h(.|s_h, a_h).

    Returns (states [H] int, actions [H] int, losses [H]) with losses l_h(s_h, a_h).
    """
    loss, P = losses(mdp, theta), mdp.transitions
    H = mdp.phi.shape[0]
    keys = jax.random.split(key, 2 * H + 1)
    s = jax.random.choice(keys[0], mdp.rho.shape[0], p=mdp.rho)
    states, actions = [], []
    for h in range(H):
        a = jax.random.choice(keys[2 * h + 1], policy.shape[-1], p=policy[h, s])
        states.append(s)
        actions.append(a)
        s = jax.random.choice(keys[2 * h + 2], mdp.rho.shape[0], p=P[h, s, a])
    states, actions = jnp.stack(states), jnp.stack(actions)
    return states, actions, loss[jnp.arange(H), states, actions]


@dataclasses.dataclass(frozen=True)
class AdversaryConfig:
    kind: str = "switching"  # "switching" | "adaptive"
    period: int = 100  # switching: episodes between switches
    amplitude: float = 0.5  # adaptive: how hard the loss follows the learner's expected features
    seed: int = 1  # switching: the two loss tables

    def __post_init__(self):
        if self.kind not in ("switching", "adaptive"):
            raise UsageError(f"AdversaryConfig.kind={self.kind!r} is unknown; use 'switching' or 'adaptive'.")
        if self.period < 1:
            raise UsageError(f"AdversaryConfig.period must be >= 1, got {self.period}; pass a positive integer.")
        if not 0 <= self.amplitude <= 1:
            raise UsageError(f"AdversaryConfig.amplitude must lie in [0, 1], got {self.amplitude}; pass e.g. 0.5.")


def switching_tables(config: AdversaryConfig, layers: int, dim: int) -> jax.Array:
    """The switching adversary's two loss tables, [2, H, d], uniform in [0, 1] from ``config.seed``."""
    return jnp.asarray(np.random.default_rng(config.seed).uniform(size=(2, layers, dim)))


def switching_theta(tables: jax.Array, episode: jax.Array, period: jax.Array) -> jax.Array:
    """theta_k = tables[(k // period) mod 2], [H, d], for episode k (0-based)."""
    return tables[(episode // period) % 2]


def adaptive_theta(mdp: LinearMDP, learner_occupancy: jax.Array, amplitude: jax.Array) -> jax.Array:
    """theta_{k,h} = clip(1/2 + amplitude d (f_{k,h} - 1/d), 0, 1), f_{k,h} = sum_{s,a} q_{k,h}(s, a) phi_h(s, a).

    learner_occupancy q_k [H, S, A] -> [H, d]: the features the learner's policy uses most cost most.
    """
    dim = mdp.phi.shape[-1]
    features = jnp.einsum("hsa,hsai->hi", learner_occupancy, mdp.phi)
    return jnp.clip(0.5 + amplitude * dim * (features - 1.0 / dim), 0.0, 1.0)
