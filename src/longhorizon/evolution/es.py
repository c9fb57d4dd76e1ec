"""Antithetic evolution strategies (ES) over a parameter pytree, with noise regenerated from seeds.

For the step-t population of ``n`` antithetic pairs, member ``i`` has an integer seed ``s_i`` and
noise ``eps_i = N(0, I)`` drawn from ``s_i`` (the same draw every time it is asked for; it is
never stored). With fitness ``f`` (higher is better) and noise scale ``sigma_t``::

    f_i^+ = f(theta + sigma_t eps_i),   f_i^- = f(theta - sigma_t eps_i)
    g     = 1 / (2 n sigma_t) * sum_i (w_i^+ - w_i^-) eps_i          (estimate of grad E[f])

where ``w = f`` (``fitness_shaping="none"``) or the centred ranks of all ``2n`` fitnesses in
``[-1/2, 1/2]`` (``"centered_ranks"``, invariant to the reward's scale). The optimiser (optax)
descends ``-g``. ``sigma_t`` is cosine-decayed from ``sigma`` to ``sigma_final`` over ``steps``::

    sigma_t = sigma_final + (sigma - sigma_final) * (1 + cos(pi * min(t, T) / T)) / 2

The master copy ``theta`` is float32 whatever dtype the members are evaluated in: an update of
``1e-5`` on a weight of order 1 is below bfloat16's resolution (``2^-8``) and would vanish.
Only the leaves whose path contains one of ``ESConfig.subset`` move (all leaves when empty).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from longhorizon.errors import UsageError

SHAPINGS = ("none", "centered_ranks")
OPTIMIZERS = ("adam", "sgd")


@dataclasses.dataclass(frozen=True)
class ESConfig:
    pairs: int = 8  # n antithetic pairs: 2n fitness evaluations per step
    sigma: float = 1e-2
    sigma_final: float = 1e-3
    steps: int = 100  # T of the cosine schedule
    learning_rate: float = 1e-3
    optimizer: str = "adam"
    fitness_shaping: str = "centered_ranks"
    subset: tuple[str, ...] = ()  # path substrings of the leaves ES moves; () = all
    seed: int = 0

    def __post_init__(self):
        if self.pairs < 1 or self.steps < 1:
            raise UsageError(f"pairs={self.pairs} and steps={self.steps} must be positive integers.")
        if not 0 < self.sigma_final <= self.sigma:
            raise UsageError(f"need 0 < sigma_final ({self.sigma_final}) <= sigma ({self.sigma}); fix the noise scales.")
        if self.learning_rate <= 0:
            raise UsageError(f"learning_rate={self.learning_rate} must be positive.")
        if self.optimizer not in OPTIMIZERS:
            raise UsageError(f"optimizer={self.optimizer!r} is unknown; use one of {OPTIMIZERS}.")
        if self.fitness_shaping not in SHAPINGS:
            raise UsageError(f"fitness_shaping={self.fitness_shaping!r} is unknown; use one of {SHAPINGS}.")


class ESState(NamedTuple):
    master: object  # float32 pytree, theta
    opt_state: object
    step: int


def sigma_at(step: int, cfg: ESConfig) -> float:
    """The cosine-decayed noise scale ``sigma_t`` (module docstring)."""
    frac = min(step, cfg.steps) / cfg.steps
    return cfg.sigma_final + (cfg.sigma - cfg.sigma_final) * 0.5 * (1.0 + math.cos(math.pi * frac))


def member_seeds(cfg: ESConfig, step: int) -> np.ndarray:
    """The ``n`` integer seeds of step ``step``'s pairs (a pure function of config seed and step)."""
    return (np.uint32(cfg.seed) * np.uint32(1_000_003) + np.uint32(step) * np.uint32(cfg.pairs)
            + np.arange(cfg.pairs, dtype=np.uint32)).astype(np.uint32)


def selected(params, subset: tuple[str, ...]):
    """A tuple of bools over the flattened leaves: True for the leaves ES moves (hashable, so static under jit)."""
    paths = jax.tree_util.tree_flatten_with_path(params)[0]
    flags = [not subset or any(s in jax.tree_util.keystr(p) for s in subset) for p, _ in paths]
    if not any(flags):
        raise UsageError(f"subset={subset} matches no parameter; use path substrings such as 'block_1' or ().")
    return tuple(flags)


def noise(seed, params, mask):
    """``eps`` for one seed: ``N(0, I)`` float32 on the selected leaves, 0 elsewhere (leaf ``k`` uses
    ``fold_in(PRNGKey(seed), k)``)."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    key = jax.random.PRNGKey(seed)
    out = [jax.random.normal(jax.random.fold_in(key, k), x.shape, jnp.float32) if f else jnp.zeros(x.shape, jnp.float32)
           for k, (x, f) in enumerate(zip(leaves, mask))]
    return jax.tree_util.tree_unflatten(treedef, out)


def perturbed(master, seed, scale, mask, dtype=jnp.float32):
    """``theta + scale * eps(seed)`` cast to the evaluation dtype."""
    eps = noise(seed, master, mask)
    return jax.tree_util.tree_map(lambda p, e: (p + scale * e).astype(dtype), master, eps)


def centered_ranks(fitness):
    """Ranks of ``fitness`` (any shape) mapped linearly onto ``[-1/2, 1/2]``; ties get their mean rank.

    Written with array operators only, so it runs on numpy arrays (float64, on the host) and on JAX
    arrays inside a jitted generation (:mod:`longhorizon.evolution.meta`) alike."""
    fitness = fitness if hasattr(fitness, "ravel") else np.asarray(fitness, np.float64)
    x = fitness.ravel()
    below = (x[None, :] < x[:, None]).sum(axis=1)
    equal = (x[None, :] == x[:, None]).sum(axis=1)  # equal fitnesses carry no preference between them
    ranks = below + 0.5 * (equal - 1)
    last = x.shape[0] - 1  # (2 rank - last) / (2 last): exact at the middle rank, also in float32
    return ((2 * ranks - last) / (2 * max(last, 1))).reshape(fitness.shape)


def shaped(f_plus, f_minus, shaping: str) -> tuple[np.ndarray, np.ndarray]:
    """The weights ``(w^+, w^-)`` of the estimate (module docstring), each ``[n]``."""
    f_plus, f_minus = np.asarray(f_plus, np.float64), np.asarray(f_minus, np.float64)
    if shaping == "none":
        return f_plus, f_minus
    w = centered_ranks(np.stack([f_plus, f_minus]))
    return w[0], w[1]


@functools.partial(jax.jit, static_argnames=("mask",))
def _weighted_noise_sum(seeds, weights, params, mask):
    """``sum_i weights_i * eps(seeds_i)``, one ``eps`` in memory at a time (a scan over the seeds)."""
    def body(acc, seed_weight):
        seed, weight = seed_weight
        eps = noise(seed, params, mask)
        return jax.tree_util.tree_map(lambda a, e: a + weight * e, acc, eps), None

    zeros = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, jnp.float32), params)
    return jax.lax.scan(body, zeros, (seeds, weights))[0]


def gradient_estimate(master, seeds, f_plus, f_minus, sigma: float, mask, shaping: str = "none"):
    """``g = 1/(2 n sigma) sum_i (w_i^+ - w_i^-) eps_i`` as a float32 pytree like ``master``."""
    w_plus, w_minus = shaped(f_plus, f_minus, shaping)
    weights = jnp.asarray((w_plus - w_minus) / (2 * len(seeds) * sigma), jnp.float32)
    return _weighted_noise_sum(jnp.asarray(seeds, jnp.uint32), weights, master, mask)


@functools.lru_cache(maxsize=8)
def es_optimizer(name: str, learning_rate: float):
    return optax.adam(learning_rate) if name == "adam" else optax.sgd(learning_rate)


def es_init(params, cfg: ESConfig) -> ESState:
    """The float32 master copy of ``params`` and the optimiser's state."""
    master = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), params)
    return ESState(master, es_optimizer(cfg.optimizer, cfg.learning_rate).init(master), 0)


def es_update(state: ESState, f_plus, f_minus, cfg: ESConfig, mask) -> tuple[ESState, dict]:
    """One ES step from the fitnesses of ``member_seeds(cfg, state.step)``: the optimiser on ``-g``."""
    seeds = member_seeds(cfg, state.step)
    sigma = sigma_at(state.step, cfg)
    grad = gradient_estimate(state.master, seeds, f_plus, f_minus, sigma, mask, cfg.fitness_shaping)
    opt = es_optimizer(cfg.optimizer, cfg.learning_rate)
    updates, opt_state = opt.update(jax.tree_util.tree_map(jnp.negative, grad), state.opt_state, state.master)
    master = optax.apply_updates(state.master, updates)
    metrics = {"sigma": sigma, "grad_norm": float(optax.tree.norm(grad)),
               "fitness_mean": float(np.mean(np.concatenate([np.ravel(f_plus), np.ravel(f_minus)])))}
    return ESState(master, opt_state, state.step + 1), metrics
