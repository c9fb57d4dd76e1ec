"""Reward-free exploration in linear mixture MDPs: HF-UCRL-RFE++ (Zhang, Zhang, Gu 2023) and UCRL-RFE (Zhang, Zhou, Gu 2021).

Both explore for K episodes without a reward, then plan for any reward given afterwards. Rewards are
normalised so an episode's total is at most 1 (``r_h in [0, 1/H]``), as the horizon-free paper assumes.

Exploration, episode k (both algorithms):

1. ``theta_m = Sigma_m^{-1} b_m`` (ridge estimates, one regression stack per moment m).
2. Plan the exploration MDP whose reward is the uncertainty itself, backwards from ``V_{H+1} = 0``:
   ``u(s,a) = min(1, beta max_{V in {0,1}^S} ||psi_V(s,a)||_{Sigma_0^{-1}})``,
   ``Q_h = clip(u + <theta_0, psi_{V_{h+1}}>, 0, 1)``, ``V_h = max_a Q_h``, ``pi_h = argmax_a Q_h``.
   Documented choice: the uncertainty is that of the worst value function in [0, 1]^S (the norm is convex in
   V, so the maximum is at one of the 2^S vertices, enumerated), because the uncertainty of the exploration
   value itself, ``||psi_{V_{h+1}}||``, is zero at V = 0 and leaves V = 0 a fixed point of the recursion.
3. Run ``pi`` in the true MDP; each step (s_h, a_h, s_{h+1}) adds value-targeted regression samples
   ``x_m = psi_{V^(2^m)_{h+1}}(s_h, a_h)``, ``y_m = V_{h+1}(s_{h+1})^(2^m)`` with weight ``1 / sigma_m^2``:
   ``Sigma_m += x_m x_m^T / sigma_m^2``, ``b_m += x_m y_m / sigma_m^2`` (Sherman-Morrison on Sigma_m^{-1}).

UCRL-RFE (Hoeffding): unit weights, ``sigma = 1`` (the range of V), and only the m = 0 stack is used.
HF-UCRL-RFE++ (variance-aware): stacks m = 0..M (the high-order moment estimator); for m < M

    sigma_m^2 = max(alpha^2, Var_m + E_m, gamma^2 ||x_m||_{Sigma_m^{-1}}),
    Var_m = clip(<theta_{m+1}, x_{m+1}>, 0, 1) - clip(<theta_m, x_m>, 0, 1)^2     (the variance of V^(2^m)),
    E_m = min(1, 2 beta ||x_m||_{Sigma_m^{-1}}) + min(1, beta ||x_{m+1}||_{Sigma_{m+1}^{-1}})   (its epistemic error),

and ``Var_M + E_M = 1``. The total variance of a normalised episode is O(1), so the weighted ellipsoid shrinks
like 1/sqrt(K) whatever H is; the Hoeffding one does not.

Confidence radius (the self-normalised bound, Abbasi-Yadkori et al. 2011, noise scale 1 after weighting):
``beta_k = beta_scale (sqrt(2 log(1/delta) + d log(1 + k H / (d lambda sigma_min^2))) + sqrt(lambda d))`` with
``sigma_min = alpha`` (HF) or 1 (Hoeffding).

Planning (any reward r, after K episodes): ``Q_h = clip(r_h + <theta_0, psi_{V_{h+1}}> + beta ||psi_{V_{h+1}}||_{Sigma_0^{-1}}, 0, 1)``,
greedy. Documented approximation: the paper plans optimistically over the intersection of the confidence sets
of every episode and moment (an optimisation oracle); we use the last episode's m = 0 ellipsoid, whose maximum
over theta is the closed form above. The exploration loop is jitted (``lax.scan`` over episodes, ``fori_loop``
over the steps of a traced horizon, ``vmap`` over seeds and algorithms) in float64 under ``jax.enable_x64``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.theory.linear_mixture import LinearMixtureMDP, plan

ALGORITHMS = ("hf-ucrl-rfe++", "ucrl-rfe")


@dataclasses.dataclass(frozen=True)
class Config:
    algorithm: str = "hf-ucrl-rfe++"
    episodes: int = 1000
    moments: int = 2  # M: HF-UCRL-RFE++ regresses V^(2^m) for m = 0..M
    ridge: float = 1.0  # lambda
    confidence: float = 0.1  # delta
    beta_scale: float = 1.0
    variance_floor: float | None = None  # alpha; None -> 1/H (below the O(1/H) per-step variance of a normalised episode)
    uncertainty_gamma: float | None = None  # gamma; None -> d^(-1/4)

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise UsageError(f"unknown reward-free algorithm '{self.algorithm}'; choose one of: {', '.join(ALGORITHMS)}.")
        if self.episodes < 1 or self.moments < 0:
            raise UsageError(f"episodes must be >= 1 and moments >= 0 (got {self.episodes}, {self.moments}); pass valid counts.")
        if self.ridge <= 0 or not 0 < self.confidence < 1 or self.beta_scale <= 0:
            raise UsageError("ridge and beta_scale must be positive and confidence in (0, 1); pass values in those ranges.")
        if (self.variance_floor is not None and self.variance_floor <= 0) or (
                self.uncertainty_gamma is not None and self.uncertainty_gamma <= 0):
            raise UsageError("variance_floor and uncertainty_gamma must be positive (or None for the defaults); pass positive values.")

    @property
    def weighted(self) -> bool:
        return self.algorithm == "hf-ucrl-rfe++"

    def alpha(self, horizon: int) -> float:
        return (self.variance_floor or 1.0 / horizon) if self.weighted else 1.0

    def gamma(self, dim: int) -> float:
        return self.uncertainty_gamma or dim ** -0.25


def confidence_radius(config: Config, dim: int, horizon: int, episode) -> np.ndarray:
    """beta_k of the module docstring for episode(s) k (float or array)."""
    alpha = config.alpha(horizon)
    log_det = dim * np.log1p(np.asarray(episode) * horizon / (dim * config.ridge * alpha ** 2))
    return config.beta_scale * (np.sqrt(2 * np.log(1 / config.confidence) + log_det) + np.sqrt(config.ridge * dim))


def ridge_regression(features: np.ndarray, targets: np.ndarray, weights: np.ndarray, ridge: float):
    """Weighted ridge regression in closed form: Sigma = lambda I + sum_i w_i x_i x_i^T, theta = Sigma^{-1} sum_i w_i x_i y_i.

    features [n, d], targets [n], weights [n]; returns (theta [d], Sigma^{-1} [d, d]).
    """
    sigma = ridge * np.eye(features.shape[1]) + (features * weights[:, None]).T @ features
    inverse = np.linalg.inv(sigma)
    return inverse @ (features.T @ (weights * targets)), inverse


def ellipsoid_norm(x, inverse):
    """||x||_{Sigma^{-1}} = sqrt(x^T Sigma^{-1} x) for x [..., d], Sigma^{-1} [d, d] (numpy or jax)."""
    return (x * (x @ inverse)).sum(-1).clip(0) ** 0.5


def sherman_morrison(inverse: jnp.ndarray, x: jnp.ndarray) -> jnp.ndarray:
    """(Sigma + x x^T)^{-1} = Sigma^{-1} - Sigma^{-1} x x^T Sigma^{-1} / (1 + x^T Sigma^{-1} x)."""
    u = inverse @ x
    return inverse - jnp.outer(u, u) / (1.0 + x @ u)


def _exploration_plan(phi, vertex_psi, theta0, inverse0, beta, horizon, max_horizon: int):
    """Step 2: the uncertainty-reward DP for a traced horizon H <= max_horizon. Returns V [max_horizon+1, S]
    (rows 0..H hold V_1..V_{H+1} = 0) and pi [max_horizon, S] (rows 0..H-1)."""
    # the uncertainty of the worst value function: max over V in {0,1}^S of ||psi_V||, at a vertex (convex in V)
    uncertainty = ellipsoid_norm(vertex_psi, inverse0).max(-1)  # [S, A]
    reward = jnp.minimum(1.0, beta * uncertainty)

    def backward(i, carry):
        values, policy = carry
        h = horizon - 1 - i
        q = jnp.clip(reward + jnp.einsum("xasd,s->xad", phi, values[h + 1]) @ theta0, 0.0, 1.0)
        return values.at[h].set(q.max(-1)), policy.at[h].set(q.argmax(-1).astype(jnp.int32))

    states = phi.shape[0]
    start = (jnp.zeros((max_horizon + 1, states)), jnp.zeros((max_horizon, states), jnp.int32))
    return jax.lax.fori_loop(0, horizon, backward, start)


def _weights(x, theta, inverses, beta, alpha, gamma, weighted):
    """sigma_m^2 [M+1] of the module docstring for one step's features x [M+1, d]; ones where not ``weighted``."""
    norms = jax.vmap(ellipsoid_norm)(x, inverses)
    pred = jnp.clip((x * theta).sum(-1), 0.0, 1.0)
    variance = jnp.clip(pred[1:] - pred[:-1] ** 2, 0.0, 1.0)
    epistemic = jnp.minimum(1.0, 2 * beta * norms[:-1]) + jnp.minimum(1.0, beta * norms[1:])
    total = jnp.concatenate([variance + epistemic, jnp.ones(1)])  # the top moment: its range, 1
    return jnp.where(weighted, jnp.maximum(jnp.maximum(alpha ** 2, total), gamma ** 2 * norms), 1.0)


def _explore_seeds(keys, phi, transition, initial, betas, horizon, weighted, ridge, alpha, gamma, *, max_horizon, stacks):
    """Exploration for every seed key [n]; returns theta_0 [n, K, d] and Sigma_0^{-1} [n, K, d, d] after each episode."""
    dim = phi.shape[-1]
    powers = 2.0 ** jnp.arange(stacks)
    vertices = (jnp.arange(2 ** phi.shape[0])[:, None] >> jnp.arange(phi.shape[0])) & 1  # [2^S, S]
    vertex_psi = jnp.einsum("xasd,vs->xavd", phi, vertices.astype(phi.dtype))  # [S, A, 2^S, d]

    def episode(carry, beta):
        inverses, targets_sum, key = carry
        theta = jnp.einsum("mij,mj->mi", inverses, targets_sum)
        values, policy = _exploration_plan(phi, vertex_psi, theta[0], inverses[0], beta, horizon, max_horizon)

        def step(h, carry):
            inverses, targets_sum, state, key = carry
            key, sub = jax.random.split(key)
            action = policy[h, state]
            next_state = jax.random.choice(sub, transition.shape[-1], p=transition[state, action])
            v_powers = values[h + 1][None, :] ** powers[:, None]  # [M+1, S]
            x = v_powers @ phi[state, action]  # [M+1, d]
            y = v_powers[:, next_state]
            w = _weights(x, theta, inverses, beta, alpha, gamma, weighted)
            inverses = jax.vmap(sherman_morrison)(inverses, x / jnp.sqrt(w)[:, None])
            return inverses, targets_sum + x * (y / w)[:, None], next_state, key

        inverses, targets_sum, _, key = jax.lax.fori_loop(0, horizon, step, (inverses, targets_sum, initial, key))
        return (inverses, targets_sum, key), (inverses[0] @ targets_sum[0], inverses[0])

    def one_seed(key):
        start = (jnp.broadcast_to(jnp.eye(dim) / ridge, (stacks, dim, dim)), jnp.zeros((stacks, dim)), key)
        return jax.lax.scan(episode, start, betas)[1]

    return jax.vmap(one_seed)(keys)


@functools.partial(jax.jit, static_argnames=("max_horizon", "stacks"))
def _explore(keys, phi, transition, initial, betas, horizon, weighted, ridge, alpha, gamma, *, max_horizon, stacks):
    """:func:`_explore_seeds` vmapped over algorithms (betas [C, K], weighted [C], alpha [C]).

    The horizon and the algorithm are traced, so one compiled program serves every H <= max_horizon and both
    algorithms side by side (one loop, twice the batch); UCRL-RFE runs the same stacks with unit weights and
    uses only m = 0.
    """
    run = functools.partial(_explore_seeds, max_horizon=max_horizon, stacks=stacks)
    axes = (None, None, None, None, 0, None, 0, None, 0, None)
    return jax.vmap(run, in_axes=axes)(keys, phi, transition, initial, betas, horizon, weighted, ridge, alpha, gamma)


@dataclasses.dataclass(frozen=True)
class Exploration:
    """What the planning phase needs after each episode: theta_0 [n_seeds, K, d], Sigma_0^{-1} [n_seeds, K, d, d],
    beta [K] (the radius for the next episode) and the seconds the jitted run took (compile included)."""

    theta: np.ndarray
    inverse: np.ndarray
    beta: np.ndarray
    seconds: float


def explore(mdp: LinearMixtureMDP, horizon: int, config: Config, seeds, max_horizon: int | None = None) -> Exploration:
    """Run the exploration phase of ``config.algorithm`` for ``config.episodes`` episodes, once per seed.
    ``max_horizon`` (>= horizon) pads the arrays, so runs at several H share one compiled program."""
    return explore_all(mdp, horizon, [config], seeds, max_horizon)[0]


def explore_all(mdp: LinearMixtureMDP, horizon: int, configs, seeds, max_horizon: int | None = None) -> list[Exploration]:
    """:func:`explore` for several configs (algorithms) in one jitted call; they must share episodes, moments,
    ridge and gamma. ``seconds`` is the call's time, shared."""
    import time

    max_horizon = max_horizon or horizon
    if not 1 <= horizon <= max_horizon or len(seeds) < 1:
        raise UsageError(f"need 1 <= horizon <= max_horizon and at least one seed (got {horizon}, {max_horizon}, "
                         f"{len(seeds)} seeds); pass valid values.")
    if mdp.num_states > 12:
        raise UsageError(f"the exploration reward enumerates 2^S value vertices and S = {mdp.num_states} is too many; "
                         "use at most 12 states.")
    first = configs[0]
    if any((c.episodes, c.moments, c.ridge, c.gamma(mdp.dim)) != (first.episodes, first.moments, first.ridge,
                                                                   first.gamma(mdp.dim)) for c in configs):
        raise UsageError("configs explored together must share episodes, moments, ridge and uncertainty_gamma; "
                         "explore them separately.")
    betas = np.stack([confidence_radius(c, mdp.dim, horizon, np.arange(c.episodes)) for c in configs])
    start = time.perf_counter()
    with jax.enable_x64(True):
        keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
        theta, inverse = _explore(keys, jnp.asarray(mdp.phi), jnp.asarray(mdp.transition()), jnp.asarray(mdp.initial),
                                  jnp.asarray(betas), jnp.asarray(horizon), jnp.asarray([c.weighted for c in configs]),
                                  jnp.asarray(first.ridge), jnp.asarray([c.alpha(horizon) for c in configs]),
                                  jnp.asarray(first.gamma(mdp.dim)), max_horizon=max_horizon, stacks=first.moments + 1)
        theta, inverse = np.asarray(theta), np.asarray(inverse)
    seconds = time.perf_counter() - start
    return [Exploration(theta[i], inverse[i], confidence_radius(c, mdp.dim, horizon, np.arange(1, c.episodes + 1)), seconds)
            for i, c in enumerate(configs)]


def plan_optimistic(mdp: LinearMixtureMDP, reward: np.ndarray, theta: np.ndarray, inverse: np.ndarray,
                    beta: np.ndarray, horizon: int) -> np.ndarray:
    """The planning phase for a batch of models: theta [B, d], Sigma^{-1} [B, d, d], beta [B]; reward [S, A] in
    [0, 1/H]. Q_h = clip(r + <theta, psi_V> + beta ||psi_V||_{Sigma^{-1}}, 0, 1); returns greedy policies [B, H, S]."""
    values = np.zeros((len(theta), mdp.num_states))
    policy = np.zeros((len(theta), horizon, mdp.num_states), np.int64)
    for h in range(horizon - 1, -1, -1):
        psi = np.einsum("xasd,bs->bxad", mdp.phi, values)
        norm = np.sqrt(np.einsum("bxad,bde,bxae->bxa", psi, inverse, psi).clip(0))
        q = np.clip(reward + np.einsum("bxad,bd->bxa", psi, theta) + beta[:, None, None] * norm, 0.0, 1.0)
        policy[:, h], values = q.argmax(-1), q.max(-1)
    return policy


def suboptimality(mdp: LinearMixtureMDP, rewards: np.ndarray, policies: np.ndarray) -> np.ndarray:
    """V*_1(s_1; r) - V^pi_1(s_1; r), exact by DP in the true MDP, for rewards [R, S, A] and policies [R, B, H, S]
    -> [R, B] (the policies' values by the backward recursion of :func:`evaluate`, batched over B)."""
    transition = mdp.transition()
    horizon, states = policies.shape[-2:]
    gaps = np.zeros(policies.shape[:2])
    rows = np.arange(states)
    for i, reward in enumerate(rewards):
        best = plan(transition, reward, horizon)[0][0, mdp.initial]
        values = np.zeros((policies.shape[1], states))
        for h in range(horizon - 1, -1, -1):
            acts = policies[i, :, h]  # [B, S]
            values = reward[rows, acts] + np.einsum("bxs,bs->bx", transition[rows, acts], values)
        gaps[i] = best - values[:, mdp.initial]
    return gaps


def episodes_to_eps(gaps: np.ndarray, checkpoints: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The episodes an explorer needs to be eps-optimal for good, per seed: from suboptimality gaps ``[seeds, C]``
    measured after ``checkpoints [C]`` episodes (:func:`suboptimality`), the first checkpoint from which every
    later gap is <= eps. Returns ``(K [seeds], censored [seeds])``; a seed whose last gap is above eps is
    censored at the last checkpoint (its K is a lower bound)."""
    stays = np.flip(np.cumprod(np.flip(gaps <= eps, -1), -1), -1).astype(bool)
    first = np.where(stays.any(-1), stays.argmax(-1), len(checkpoints) - 1)
    return checkpoints[first].astype(float), ~stays[:, -1]
