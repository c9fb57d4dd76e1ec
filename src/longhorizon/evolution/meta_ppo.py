r"""Meta-training a drift with the engine's PPO as the inner loop, on any environment of the registry.

The bandit meta-trainer (:mod:`longhorizon.evolution.meta`) is cheap; this one is the paper's setting:
each population member is a drift ``phi``, its fitness the return PPO reaches when it trains *with* that
drift (``algos.ppo`` with ``State.drift = phi``) for a lifetime of ``N`` updates,

.. math::
    F(\phi) = \frac{1}{|\mathcal N|} \sum_{N \in \mathcal N} \frac{\bar R_N(\phi) - lo}{hi - lo},

with ``R_N`` the mean return of the episodes that end in the last quarter of the lifetime, averaged over
``seeds`` inner runs, and ``[lo, hi]`` the environment's return range (a random policy to the best
possible). Every member starts from the same initial networks in a generation (common random
numbers), drawn afresh each generation. One jitted program per generation runs members x seeds x
lifetimes; the outer loop is the same evosax OpenES as the bandit trainer's.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from longhorizon.errors import UsageError
from longhorizon.evolution import lpo
from longhorizon.evolution.meta import ESConfig, OpenESLoop

# normalised return: (R - lo) / (hi - lo), lo ~ a random policy, hi = the best possible
RETURN_RANGE = {"CartPole-v1": (0.0, 500.0), "Acrobot-v1": (-500.0, 0.0), "MountainCar-v0": (-200.0, 0.0),
                "Breakout-MinAtar": (0.0, 60.0), "Asterix-MinAtar": (0.0, 60.0), "SpaceInvaders-MinAtar": (0.0, 300.0),
                "Freeway-MinAtar": (0.0, 60.0)}


def return_range(env_id: str) -> tuple[float, float]:
    if env_id not in RETURN_RANGE:
        raise UsageError(f"no return range is known for {env_id}; meta-training on an environment needs one to "
                         f"normalise returns: use one of {sorted(RETURN_RANGE)}.")
    return RETURN_RANGE[env_id]


@dataclasses.dataclass(frozen=True)
class InnerPPO:
    env: str = "CartPole-v1"
    lifetimes: tuple = (8, 32)  # PPO updates per inner run (each a separate compiled scan)
    seeds: int = 2  # inner runs per member and lifetime
    overrides: tuple = ()  # PPO config fields as (name, value) pairs, over the environment's defaults

    def __post_init__(self):
        if not self.lifetimes or min(self.lifetimes) < 1 or self.seeds < 1:
            raise UsageError(f"lifetimes must be positive update counts and seeds >= 1 (got {self.lifetimes}, "
                             f"{self.seeds}).")
        return_range(self.env)


def lifetime_config(inner: InnerPPO, lifetime: int):
    """The PPO config of a ``lifetime``-update run: the environment's defaults, the overrides, and
    ``total_steps`` such that the run has exactly ``lifetime`` updates (so ``n/N`` means what it says)."""
    from longhorizon.algos import ppo

    base = dataclasses.replace(ppo.default_config(inner.env), **dict(inner.overrides))
    return dataclasses.replace(base, total_steps=lifetime * ppo.steps_per_update(base))


def inner_env_steps(inner: InnerPPO, population: int) -> int:
    """Environment steps one generation simulates over the whole population."""
    from longhorizon.algos import ppo

    return sum(population * inner.seeds * n * ppo.steps_per_update(lifetime_config(inner, n)) for n in inner.lifetimes)


def tail_return(metrics: dict, lifetime: int) -> jax.Array:
    """Mean return of the episodes that ended in the last quarter of a lifetime (0 if none ended)."""
    tail = max(1, lifetime // 4)
    episodes = metrics["episodes"][-tail:].sum()
    return metrics["episode_return_sum"][-tail:].sum() / jnp.maximum(episodes, 1.0)


@dataclasses.dataclass
class EnvMetaTrainer(OpenESLoop):
    """Meta-trains one drift with PPO inner runs; ``generation()`` is one jitted generation."""
    drift: lpo.DriftConfig
    inner: InnerPPO
    es: ESConfig
    seed: int = 0

    def __post_init__(self):
        from longhorizon.algos import ppo
        from longhorizon.engine.fused import init_over_seeds, make_update
        from longhorizon.envs.registry import make

        self.env = make(self.inner.env)
        self.lo, self.hi = return_range(self.inner.env)
        self.configs = {n: lifetime_config(self.inner, n) for n in self.inner.lifetimes}
        self._init = {n: init_over_seeds(lambda k, c=c: ppo.init(k, self.env, c), self.inner.seeds)
                      for n, c in self.configs.items()}
        self._update = make_update(ppo)
        self.start_es(lpo.init_drift(self.drift, jax.random.PRNGKey(self.seed)), self.es, self.seed)

    def member_fitness(self, params, states: dict) -> jax.Array:
        """``F(phi)`` of the module docstring for one drift, from the generation's initial states."""
        def one_run(state, lifetime):
            _, metrics = jax.lax.scan(self._update, state.replace(drift=params), None, lifetime)
            return (tail_return(metrics, lifetime) - self.lo) / (self.hi - self.lo)

        per_lifetime = [jax.vmap(lambda s, n=n: one_run(s, n))(states[n]).mean() for n in self.inner.lifetimes]
        return jnp.mean(jnp.stack(per_lifetime))

    def population_fitness(self, members, k_init):
        keys = jax.random.split(k_init, self.inner.seeds)
        states = {n: init(keys) for n, init in self._init.items()}
        return jax.vmap(self.member_fitness, in_axes=(0, None))(members, states)

    def inner_steps_per_generation(self) -> int:
        return inner_env_steps(self.inner, self.es.population)
