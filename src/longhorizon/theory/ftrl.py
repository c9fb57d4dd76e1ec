"""Policy optimisation in adversarial linear-Q MDPs: log-barrier FTRL vs Hedge (Dai, Luo, Wei, Zimmert 2023).

Each episode k = 1..K (simulator setting: the learner may compute its own occupancy exactly):

1. pi_k(.|s) = argmin_{p in Delta_A} <p, Qcum_{k-1}(s, .)> + R(p) / eta_k in every state, with
   * log-barrier FTRL: R(p) = sum_a log(1/p_a), so p_a = 1 / (eta_k (Qcum_a + lambda)) with the normaliser
     lambda > -min_a Qcum_a solving sum_a p_a = 1 (Newton's method, :func:`log_barrier_policy`);
   * Hedge: R(p) = sum_a p_a log p_a, so p_a proportional to exp(-eta_k Qcum_a).
2. The adversary fixes theta_k (it may look at pi_k); the learner plays one trajectory and sees
   the losses l_{k,h}(s_h, a_h) along it (bandit feedback).
3. The unbiased linear-Q estimator with the exact covariance of pi_k's occupancy q_{k,h}:
       Sigma_{k,h} = sum_{s,a} q_{k,h}(s, a) phi_h(s, a) phi_h(s, a)^T                     [d, d]
       Qhat_{k,h}(s, a) = phi_h(s, a)^T Sigma_{k,h}^{-1} phi_h(s_h, a_h) L_{k,h},   L_{k,h} = sum_{h' >= h} l_{k,h'}
   E[phi(s_h, a_h) L_h] = E[phi phi^T] theta^pi_h = Sigma_h theta^pi_h, so E[Qhat] = Q^{pi_k}_k exactly;
   Qhat can be arbitrarily negative (off-diagonal terms of Sigma^{-1}), which the log-barrier tolerates
   and Hedge's analysis (eta Qhat >= -1) does not.
4. Qcum_k = Qcum_{k-1} + Qhat_k.

Step size eta_k = eta0 / sqrt(k) (FTRL with a decreasing rate, so one run gives the regret at every K).
Regret_K = sum_{k<=K} V^{pi_k}(theta_k) - min_pi sum_{k<=K} V^pi(theta_k), exact (pseudo-)values in float64.
One jitted program: an outer scan over chunks (recording the running sums and the regret at each chunk
end), an inner scan over episodes, vmapped over (learner, adversary, seed) rows.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from longhorizon.errors import UsageError
from longhorizon.theory import adversarial_mdp as amdp

NEWTON_STEPS = 16  # monotone, quadratic near the root: 8 reach float64 precision for A = 4 (16 leave room for larger A)


def log_barrier_policy(cum_q: jax.Array, eta: jax.Array) -> jax.Array:
    """argmin_p <p, C> + (1/eta) sum_a log(1/p_a) over the simplex, per row of C = cum_q [..., A].

    Stationarity gives p_a = 1 / (eta (C_a + lambda)). In x = eta (lambda + min_a C_a) the condition is
    f(x) = sum_a 1 / z_a - 1 = 0 with z_a = eta (C_a - min C) + x; f is convex and decreasing on x > 0,
    f(1) >= 0 and f(A) <= 0, so Newton's steps x <- x + f(x) / sum_a z_a^-2 from x = 1 rise monotonically to
    the root without overshooting (never leaving the domain, whatever the sign or size of C).
    """
    gaps = jnp.asarray(eta)[..., None] * (cum_q - jnp.min(cum_q, axis=-1, keepdims=True))

    x = jnp.ones(cum_q.shape[:-1], cum_q.dtype)
    for _ in range(NEWTON_STEPS):
        z = gaps + x[..., None]
        x = x + (jnp.sum(1 / z, -1) - 1) / jnp.sum(1 / z**2, -1)
    p = 1 / (gaps + x[..., None])
    return p / jnp.sum(p, -1, keepdims=True)  # removes the last ulp of Newton's residual


def hedge_policy(cum_q: jax.Array, eta: jax.Array) -> jax.Array:
    """p_a proportional to exp(-eta C_a) per row of C = cum_q [..., A] (a stable softmax)."""
    return jax.nn.softmax(-jnp.asarray(eta)[..., None] * cum_q, axis=-1)


POLICIES = {"log_barrier": log_barrier_policy, "hedge": hedge_policy}


def covariance(mdp: amdp.LinearMDP, occupancy: jax.Array) -> jax.Array:
    """Sigma_h = sum_{s,a} q_h(s, a) phi_h(s, a) phi_h(s, a)^T; occupancy [H, S, A] -> [H, d, d]."""
    return jnp.einsum("hsa,hsai,hsaj->hij", occupancy, mdp.phi, mdp.phi)


def linear_q_estimate(mdp: amdp.LinearMDP, sigma: jax.Array, states: jax.Array, actions: jax.Array,
                      step_losses: jax.Array) -> jax.Array:
    """Qhat_h(s, a) = phi_h(s, a)^T Sigma_h^{-1} phi_h(s_h, a_h) L_h, L_h = sum_{h'>=h} l_{h'} (module docstring).

    sigma [H, d, d], states/actions/step_losses [H] along one trajectory -> Qhat [H, S, A].
    """
    H = mdp.phi.shape[0]
    loss_to_go = jnp.cumsum(step_losses[::-1])[::-1]
    played = mdp.phi[jnp.arange(H), states, actions]  # [H, d]
    weights = jnp.linalg.solve(sigma, played[..., None])[..., 0] * loss_to_go[:, None]  # [H, d]
    return jnp.einsum("hsai,hi->hsa", mdp.phi, weights)


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    algorithm: str = "log_barrier"  # "log_barrier" | "hedge"
    eta0: float = 5.0  # eta_k = eta0 / sqrt(k)

    def __post_init__(self):
        if self.algorithm not in POLICIES:
            raise UsageError(f"LearnerConfig.algorithm={self.algorithm!r} is unknown; use one of {sorted(POLICIES)}.")
        if not self.eta0 > 0:
            raise UsageError(f"LearnerConfig.eta0 must be > 0, got {self.eta0}; pass e.g. 5.0.")


class Arm(NamedTuple):
    """One (learner, adversary) pair as arrays, so that every pair runs in one vmapped program."""

    hedge: jax.Array  # bool: Hedge instead of log-barrier FTRL
    eta0: jax.Array
    adaptive: jax.Array  # bool: the adaptive adversary instead of the switching one
    period: jax.Array  # int
    amplitude: jax.Array


def make_arm(learner: LearnerConfig, adversary: amdp.AdversaryConfig) -> Arm:
    return Arm(jnp.asarray(learner.algorithm == "hedge"), jnp.asarray(float(learner.eta0)),
               jnp.asarray(adversary.kind == "adaptive"), jnp.asarray(adversary.period), jnp.asarray(float(adversary.amplitude)))


def stack_arms(arms) -> Arm:
    """Arms stacked along a leading axis (the axis :func:`make_run` vmaps over)."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *arms)


class Carry(NamedTuple):
    cum_q: jax.Array  # [H, S, A] sum of the estimates so far
    learner_loss: jax.Array  # sum_k V^{pi_k}(theta_k)
    cum_theta: jax.Array  # [H, d] sum_k theta_k (the hindsight comparator's losses)
    min_q_hat: jax.Array  # smallest estimate seen
    min_prob: jax.Array  # smallest probability any policy gave any action
    skipped: jax.Array  # updates dropped because Sigma was singular (the estimate was not finite)
    episode: jax.Array  # episodes played


def init_carry(mdp: amdp.LinearMDP) -> Carry:
    H, S, A, d = mdp.phi.shape
    zero = jnp.zeros((), mdp.phi.dtype)
    return Carry(jnp.zeros((H, S, A), mdp.phi.dtype), zero, jnp.zeros((H, d), mdp.phi.dtype), zero + jnp.inf,
                 zero + 1.0, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def episode_step(mdp: amdp.LinearMDP, tables: jax.Array, arm: Arm, carry: Carry, key: jax.Array) -> Carry:
    """Steps 1-4 of the module docstring for one episode."""
    eta = arm.eta0 / jnp.sqrt(carry.episode + 1.0)
    policy = jnp.where(arm.hedge, hedge_policy(carry.cum_q, eta), log_barrier_policy(carry.cum_q, eta))
    q = amdp.occupancy(mdp, policy)
    theta = jnp.where(arm.adaptive, amdp.adaptive_theta(mdp, q, arm.amplitude),
                      amdp.switching_theta(tables, carry.episode, arm.period))
    _, _, value = amdp.evaluate_policy(mdp, policy, theta)
    states, actions, step_losses = amdp.sample_trajectory(key, mdp, policy, theta)
    q_hat = linear_q_estimate(mdp, covariance(mdp, q), states, actions, step_losses)
    finite = jnp.all(jnp.isfinite(q_hat))
    q_hat = jnp.where(finite, q_hat, 0.0)
    return Carry(carry.cum_q + q_hat, carry.learner_loss + value, carry.cum_theta + theta,
                 jnp.minimum(carry.min_q_hat, jnp.where(finite, jnp.min(q_hat), jnp.inf)),
                 jnp.minimum(carry.min_prob, jnp.min(policy)), carry.skipped + (1 - finite.astype(jnp.int32)),
                 carry.episode + 1)


def make_run(mdp: amdp.LinearMDP, tables: jax.Array, chunks: int, chunk: int):
    """A jitted ``run(arms, keys) -> (history, regret)``: arms stacked [n] (:func:`stack_arms`), keys [n, 2] (one
    per (arm, seed) row). ``history`` is the :class:`Carry` at every chunk end (episodes chunk, 2 chunk, ...),
    arrays [n, chunks, ...]; ``regret`` [n, chunks] = learner_loss - min_pi V^pi(cum_theta) there.

    Call it (and build ``mdp``) under ``jax.enable_x64(True)`` for float64.
    """

    def one_row(arm, key):
        def run_chunk(carry, chunk_key):
            carry, _ = jax.lax.scan(lambda c, k: (episode_step(mdp, tables, arm, c, k), None),
                                    carry, jax.random.split(chunk_key, chunk))
            return carry, (carry, carry.learner_loss - amdp.optimal_value(mdp, carry.cum_theta)[0])

        _, (history, regret) = jax.lax.scan(run_chunk, init_carry(mdp), jax.random.split(key, chunks))
        return history, regret

    return jax.jit(jax.vmap(one_row))
