"""Exact horizon-indexed dynamic programming on a :class:`~longhorizon.tabular.mdp.TabularMDP`.

Timesteps are ``t = 0 .. T-1``; ``Q[t, s, a]`` is the expected return of taking ``a`` in ``s`` at
timestep ``t`` and then following the policy until the horizon ``T`` (or the episode's end):

    Q_t(s, a) = sum_j P_j(s, a) * (r_j(s, a) + V_{t+1}(s'_j)),    V_T = 0,  V(terminal) = 0,

with ``V_t(s) = mean_a Q_t(s, a)`` for the uniform random policy, ``max_a`` for the optimal value and
``min_a`` for the worst-case value. ``k`` steps of value iteration from the random policy's Q are

    Q^1 = Q^random,    Q^{i+1}_t(s, a) = R(s, a) + E[max_a' Q^i_{t+1}(s', a')]   (t < T-1),
    Q^{i+1}_{T-1} = Q^i_{T-1} = R,

so ``Q^T = Q*``. Each backup is one vectorised gather over all states; the padded value vector
(``V`` with a trailing 0) makes the terminal index ``-1`` read the value 0.

Backend: numpy. On the 2-core development machine the numpy backward pass is faster than the
equivalent ``jax.lax.scan`` once compilation is counted (see docs/horizon.md for the measurement);
:func:`evaluate_jax` is kept for that comparison and for accelerators.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from longhorizon.tabular.mdp import TabularMDP


@dataclasses.dataclass(frozen=True)
class Values:
    """Horizon-indexed Q and V arrays: ``q_*`` are float64 [T, S, A], ``v_*`` are float64 [T, S]."""

    horizon: int
    q_random: np.ndarray
    v_random: np.ndarray
    q_optimal: np.ndarray
    v_optimal: np.ndarray
    q_worst: np.ndarray
    v_worst: np.ndarray

    @property
    def random_return(self) -> float:
        return float(self.v_random[0, 0])

    @property
    def optimal_return(self) -> float:
        return float(self.v_optimal[0, 0])

    @property
    def worst_return(self) -> float:
        return float(self.v_worst[0, 0])


def expected_next(mdp: TabularMDP, v_next: np.ndarray) -> np.ndarray:
    """``E[V(s')]`` for every state-action pair: float64 [S, A] (terminal outcomes count as 0)."""
    padded = np.append(v_next, 0.0)
    return np.einsum("sak,sak->sa", mdp.next_probs, padded[mdp.next_states])


def _expected_next_fast(next_states, next_probs, v_next):
    padded = np.append(v_next, 0.0)
    if next_states.shape[-1] == 1:
        return padded[next_states[..., 0]]
    return np.einsum("sak,sak->sa", next_probs, padded[next_states])


def evaluate(mdp: TabularMDP, horizon: int | None = None) -> Values:
    """Q and V of the uniform random policy, of the optimal policy and of the worst policy."""
    T = mdp.resolve_horizon(horizon)
    S, A = mdp.num_states, mdp.num_actions
    R = mdp.rewards
    qs = {name: np.empty((T, S, A)) for name in ("random", "optimal", "worst")}
    vs = {name: np.empty((T, S)) for name in ("random", "optimal", "worst")}
    nxt, probs = mdp.next_states, mdp.next_probs
    v_next = {name: np.zeros(S) for name in qs}
    for t in range(T - 1, -1, -1):
        for name in qs:
            q = R + _expected_next_fast(nxt, probs, v_next[name])
            qs[name][t] = q
        v_opt = qs["optimal"][t].max(axis=1)
        v_worst = qs["worst"][t].min(axis=1)
        # Clip the random value into [worst, optimal]: it can leave that range only by rounding.
        v_rand = np.clip(qs["random"][t].mean(axis=1), v_worst, v_opt)
        vs["optimal"][t], vs["worst"][t], vs["random"][t] = v_opt, v_worst, v_rand
        v_next = {"random": v_rand, "optimal": v_opt, "worst": v_worst}
    return Values(
        horizon=T,
        q_random=qs["random"], v_random=vs["random"],
        q_optimal=qs["optimal"], v_optimal=vs["optimal"],
        q_worst=qs["worst"], v_worst=vs["worst"],
    )


def random_q(mdp: TabularMDP, horizon: int | None = None) -> np.ndarray:
    """Q of the uniform random policy, float64 [T, S, A]."""
    return evaluate(mdp, horizon).q_random


def optimal_q(mdp: TabularMDP, horizon: int | None = None) -> np.ndarray:
    """Q*, float64 [T, S, A]."""
    return evaluate(mdp, horizon).q_optimal


def worst_q(mdp: TabularMDP, horizon: int | None = None) -> np.ndarray:
    """Q of the worst (return-minimising) policy, float64 [T, S, A]."""
    return evaluate(mdp, horizon).q_worst


def max_backup(mdp: TabularMDP, x: np.ndarray) -> np.ndarray:
    """``x'_t(s, a) = E[max_a' x_{t+1}(s', a')]`` for ``t < T-1`` and ``x'_{T-1} = x_{T-1}`` (no reward).

    All timesteps in one vectorised gather; terminal outcomes (index -1) read the padding 0.
    """
    T, S, A = x.shape
    out = np.empty_like(x)
    out[-1] = x[-1]
    if T < 2:
        return out
    v = np.empty((T - 1, S + 1))
    v[:, S] = 0.0
    np.max(x[1:], axis=2, out=v[:, :S])
    if mdp.num_outcomes == 1:
        np.take(v, mdp.next_states[..., 0], axis=1, out=out[:-1])
    else:
        out[:-1] = np.einsum("sak,tsak->tsa", mdp.next_probs, v[:, mdp.next_states])
    return out


def bellman_backup(mdp: TabularMDP, q: np.ndarray) -> np.ndarray:
    """One step of value iteration on a horizon-indexed Q: ``Q'_t = R + E[max Q_{t+1}]``, ``Q'_{T-1} = Q_{T-1}``."""
    out = max_backup(mdp, q)
    if q.shape[0] > 1:
        out[:-1] += mdp.rewards
    return out


def value_iteration_from_random(mdp: TabularMDP, horizon: int | None, k: int, q_random: np.ndarray | None = None) -> np.ndarray:
    """``Q^k``: ``k - 1`` Bellman optimality backups applied to the random policy's Q (``k >= 1``)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    q = random_q(mdp, horizon) if q_random is None else q_random
    for _ in range(k - 1):
        q = bellman_backup(mdp, q)
    return q


def reward_lookahead_q(mdp: TabularMDP, horizon: int | None) -> np.ndarray:
    """``Q^0 = R`` at every timestep (the start of the effective-planning-window iteration)."""
    T = mdp.resolve_horizon(horizon)
    return np.broadcast_to(mdp.rewards, (T,) + mdp.rewards.shape).copy()


def policy_q(mdp: TabularMDP, horizon: int | None, policy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q and V of a (time-dependent, stochastic) policy ``policy[T, S, A]`` or ``policy[S, A]``."""
    T = mdp.resolve_horizon(horizon)
    policy = np.asarray(policy, dtype=np.float64)
    if policy.ndim == 2:
        policy = np.broadcast_to(policy, (T,) + policy.shape)
    R = mdp.rewards
    q = np.empty((T, mdp.num_states, mdp.num_actions))
    v = np.empty((T, mdp.num_states))
    v_next = np.zeros(mdp.num_states)
    for t in range(T - 1, -1, -1):
        q[t] = R + _expected_next_fast(mdp.next_states, mdp.next_probs, v_next)
        v[t] = (q[t] * policy[t]).sum(axis=1)
        v_next = v[t]
    return q, v


def open_loop_return(mdp: TabularMDP, actions: np.ndarray) -> float:
    """Expected return of playing the fixed action sequence ``actions[t]`` from the start state."""
    dist = np.zeros(mdp.num_states)
    dist[0] = 1.0
    total = 0.0
    R = mdp.rewards
    for a in np.asarray(actions, dtype=np.int64):
        if dist.sum() <= 0:
            break
        total += float(dist @ R[:, a])
        nxt = mdp.next_states[:, a]
        mass = dist[:, None] * mdp.next_probs[:, a]
        new = np.zeros(mdp.num_states)
        ok = nxt >= 0
        np.add.at(new, nxt[ok], mass[ok])
        dist = new
    return total


_JAX_KERNEL = None


def _jax_kernel():
    """The jitted backward pass (built once; ``horizon`` is static)."""
    global _JAX_KERNEL
    if _JAX_KERNEL is None:
        import functools

        import jax
        import jax.numpy as jnp

        @functools.partial(jax.jit, static_argnames="horizon")
        def run(nxt, probs, R, horizon):
            def q_of(v):
                padded = jnp.append(v, 0.0)
                return R + (probs * padded[nxt]).sum(-1)

            def step(carry, _):
                v_rand, v_opt, v_worst = carry
                q_r, q_o, q_w = q_of(v_rand), q_of(v_opt), q_of(v_worst)
                v_o, v_w = q_o.max(1), q_w.min(1)
                v_r = jnp.clip(q_r.mean(1), v_w, v_o)
                return (v_r, v_o, v_w), (q_r, q_o, q_w)

            zeros = jnp.zeros(R.shape[0], dtype=R.dtype)
            _, (q_r, q_o, q_w) = jax.lax.scan(step, (zeros, zeros, zeros), None, length=horizon)
            return q_r[::-1], q_o[::-1], q_w[::-1]

        _JAX_KERNEL = run
    return _JAX_KERNEL


def evaluate_jax(mdp: TabularMDP, horizon: int | None = None):
    """The same backward pass as :func:`evaluate` written as one ``jax.lax.scan`` (for comparison).

    Returns ``(q_random, q_optimal, q_worst)`` as float32 JAX arrays [T, S, A] (float64 when JAX x64
    is enabled).
    """
    import jax.numpy as jnp

    T = mdp.resolve_horizon(horizon)
    return _jax_kernel()(jnp.asarray(mdp.next_states), jnp.asarray(mdp.next_probs), jnp.asarray(mdp.rewards), horizon=T)


def benchmark_backends(mdp: TabularMDP, horizon: int | None = None, repeats: int = 3) -> dict[str, float]:
    """Seconds for :func:`evaluate` (numpy) and :func:`evaluate_jax`: first call and best of ``repeats``.

    The JAX numbers split the first call (tracing + XLA compilation + run) from later calls.
    """
    import time

    import jax

    T = mdp.resolve_horizon(horizon)
    out: dict[str, float] = {}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        evaluate(mdp, T)
        times.append(time.perf_counter() - start)
    out["numpy"] = min(times)
    start = time.perf_counter()
    jax.block_until_ready(evaluate_jax(mdp, T))
    out["jax_first_call"] = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(evaluate_jax(mdp, T))
        times.append(time.perf_counter() - start)
    out["jax_steady"] = min(times)
    return out
