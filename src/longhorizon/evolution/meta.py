r"""Meta-training a drift (LPO / TA-LPO) with antithetic OpenES over a population of inner PPO runs.

Inner task (cheap, so a generation takes about a second): a ``K``-armed Gaussian bandit, arm means
``mu ~ N(0, 1)``, rewards ``mu_a + N(0, noise^2)``. The inner agent is a softmax policy over logits
``[K]``; each of its ``N`` updates (its *lifetime*) samples ``B`` pulls, takes one-step advantages
``A = R - mean(R)`` (GAE with every step terminal, :func:`longhorizon.core.returns.gae`), normalises
them, and takes ``epochs`` plain gradient steps on the mirror-learning objective
``E[r A - f_phi(r, A)]`` (:mod:`longhorizon.evolution.lpo`). This is a compact inner PPO written here
because the engine's PPO (``algos/ppo.py``) takes no custom objective.

Fitness of a drift: the normalised final score of the inner policy, averaged over tasks,

.. math::
    S = \frac{\sum_a \pi(a)\mu_a - \bar\mu}{\max_a \mu_a - \bar\mu} \in (-\infty, 1].

Outer loop, antithetic OpenES (Salimans et al. 2017): perturbations ``theta +- sigma eps_i``,

.. math::
    \hat g = \frac{1}{2\sigma P'} \sum_{i=1}^{P'} \big(F(\theta+\sigma\epsilon_i) - F(\theta-\sigma\epsilon_i)\big)\,\epsilon_i,

with centred-rank fitness shaping in meta-training and Adam on ``theta`` (evosax's ``Open_ES``). The whole population's inner
runs (members x tasks) are vmapped in one jitted program; lifetimes shorter than the scan length are
masked, so several training horizons share it.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import optax

from longhorizon.core.losses import clipped_surrogate_loss
from longhorizon.core.returns import gae
from longhorizon.errors import UsageError
from longhorizon.evolution import lpo


@dataclasses.dataclass(frozen=True)
class BanditConfig:
    arms: int = 10
    noise: float = 1.0
    batch: int = 16  # pulls per inner update
    epochs: int = 4  # gradient steps per inner update
    inner_lr: float = 1.0

    def __post_init__(self):
        if self.arms < 2 or self.batch < 2 or self.epochs < 1:
            raise UsageError(f"bandit needs arms >= 2, batch >= 2, epochs >= 1 (got {self.arms}, {self.batch}, "
                             f"{self.epochs}); pass larger values.")
        if self.inner_lr <= 0 or self.noise < 0:
            raise UsageError(f"inner_lr must be > 0 and noise >= 0 (got {self.inner_lr}, {self.noise}); fix them.")


@dataclasses.dataclass(frozen=True)
class ESConfig:
    population: int = 32  # even: antithetic pairs
    sigma: float = 0.05
    learning_rate: float = 0.03
    tasks: int = 16  # bandits per member per generation (shared by all members: common random numbers)
    train_lifetimes: tuple = (8, 64)

    def __post_init__(self):
        if self.population < 2 or self.population % 2:
            raise UsageError(f"ES population must be even and >= 2 (got {self.population}); pass e.g. 32.")
        if self.sigma <= 0 or self.learning_rate <= 0 or self.tasks < 1:
            raise UsageError("ES sigma and learning_rate must be > 0 and tasks >= 1; fix the ES config.")
        if not self.train_lifetimes or min(self.train_lifetimes) < 1:
            raise UsageError(f"train_lifetimes must be positive update counts (got {self.train_lifetimes}).")


# --- inner loop -------------------------------------------------------------------------------------------

def bandit_advantages(rewards: jax.Array) -> jax.Array:
    """One-step advantages ``[B]``: GAE with each pull terminal and the batch mean as the value, normalised."""
    baseline = jnp.full_like(rewards, rewards.mean())
    ones = jnp.ones_like(rewards)
    adv, _ = gae(rewards, baseline, jnp.zeros_like(rewards), ones, ones, gamma=1.0, lam=1.0)
    return adv / (adv.std() + 1e-8)


def normalised_score(logits: jax.Array, means: jax.Array) -> jax.Array:
    """``S`` of the module docstring for one bandit: 1 at the best arm, 0 at the uniform policy's value."""
    value = jax.nn.softmax(logits) @ means
    return (value - means.mean()) / (means.max() - means.mean())


def inner_lifetime(objective: Callable, bandit: BanditConfig, key: jax.Array, lifetime, max_lifetime: int):
    """Train one softmax policy for ``lifetime`` updates (a traced int <= static ``max_lifetime``).

    ``objective(log_prob, old_log_prob, adv, progress, horizon) -> scalar`` is maximised. Returns the
    final normalised score.
    """
    k_means, k_run = jax.random.split(key)
    means = jax.random.normal(k_means, (bandit.arms,))
    horizon = jnp.asarray(lifetime, jnp.float32)

    def update(logits, n):
        k_act, k_rew = jax.random.split(jax.random.fold_in(k_run, n))  # per-update keys, whatever the scan length
        actions = jax.random.categorical(k_act, logits, shape=(bandit.batch,))
        rewards = means[actions] + bandit.noise * jax.random.normal(k_rew, (bandit.batch,))
        adv = bandit_advantages(rewards)
        old_log_prob = jax.nn.log_softmax(logits)[actions]
        progress = n.astype(jnp.float32) / horizon

        def epoch(theta, _):
            grad = jax.grad(lambda t: objective(jax.nn.log_softmax(t)[actions], old_log_prob, adv, progress, horizon))(theta)
            return theta + bandit.inner_lr * grad, None

        new_logits, _ = jax.lax.scan(epoch, logits, None, length=bandit.epochs)
        return jnp.where(n < lifetime, new_logits, logits), None  # masked past the lifetime

    final, _ = jax.lax.scan(update, jnp.zeros(bandit.arms), jnp.arange(max_lifetime))
    return normalised_score(final, means)


def drift_objective(drift: lpo.DriftConfig, params):
    def objective(log_prob, old_log_prob, adv, progress, horizon):
        return lpo.lpo_objective(drift, params, log_prob, old_log_prob, adv, progress, horizon)
    return objective


def ppo_clip_objective(clip_eps: float = 0.2):
    def objective(log_prob, old_log_prob, adv, progress, horizon):
        return -clipped_surrogate_loss(log_prob, old_log_prob, adv, clip_eps)[0]
    return objective


def evaluate(objective: Callable, bandit: BanditConfig, key: jax.Array, lifetimes: tuple, tasks: int) -> jax.Array:
    """Final scores ``[len(lifetimes), tasks]``: the same ``tasks`` bandits trained for each lifetime (one
    masked scan of ``max(lifetimes)`` updates, so one compiled program covers every lifetime)."""
    run = lambda k, n: inner_lifetime(objective, bandit, k, n, max(lifetimes))
    per_lifetime = lambda n: jax.vmap(run, in_axes=(0, None))(jax.random.split(key, tasks), n)
    return jax.vmap(per_lifetime)(jnp.asarray(lifetimes))


def sample_tasks(k_tasks: jax.Array, k_life: jax.Array, runs: int, train_lifetimes: tuple):
    """``runs`` inner runs: a bandit key and a training lifetime for each."""
    return jax.random.split(k_tasks, runs), jax.random.choice(k_life, jnp.asarray(train_lifetimes), (runs,))


def mean_final_score(drift: lpo.DriftConfig, bandit: BanditConfig, train_lifetimes: tuple, params, task_keys, lifetimes):
    """Mean final score of the inner runs ``(task_keys, lifetimes)`` trained with the drift ``params``."""
    objective = drift_objective(drift, params)
    run = lambda k, n: inner_lifetime(objective, bandit, k, n, max(train_lifetimes))  # noqa: E731
    return jax.vmap(run)(task_keys, lifetimes).mean()


def pulls(runs: int, bandit: BanditConfig, train_lifetimes: tuple) -> int:
    """Bandit pulls simulated by ``runs`` inner runs (masked updates past a lifetime counted as not run)."""
    return int(runs * sum(train_lifetimes) / len(train_lifetimes) * bandit.batch)


# --- outer loop: antithetic OpenES (evosax) ---------------------------------------------------------------

def open_es(population: int, sigma: float, solution, optimizer: optax.GradientTransformation, centered_ranks: bool = True):
    """evosax's antithetic OpenES over pytrees shaped like ``solution``, with a constant ``sigma``.

    evosax minimises: it is told ``-F``, so its descent direction is the ascent direction of ``F``
    (``g_hat`` of the module docstring; tested on a quadratic)."""
    try:
        from evosax.algorithms import Open_ES
        from evosax.core.fitness_shaping import centered_rank_fitness_shaping_fn, identity_fitness_shaping_fn
    except ImportError:
        raise UsageError("meta-training needs evosax; install it with pip install -e '.[evolution]'.") from None
    return Open_ES(population_size=population, solution=solution, use_antithetic_sampling=True, optimizer=optimizer,
                   std_schedule=optax.constant_schedule(sigma),
                   fitness_shaping_fn=centered_rank_fitness_shaping_fn if centered_ranks else identity_fitness_shaping_fn)


def strong_types(tree):
    """``tree`` without weakly typed leaves. evosax's states mix weak and strong types (its sigma schedule
    returns a Python float), and a generation fed back its own output would otherwise compile twice."""
    return jax.tree.map(lambda x: jax.lax.convert_element_type(x, x.dtype) if getattr(x, "weak_type", False) else x, tree)


class OpenESLoop:
    """What the meta-trainers share: evosax's OpenES state over a drift's parameters, one jitted
    generation (ask, the population's fitness, tell) and the current mean drift. A subclass defines
    ``population_fitness(members, *keys) -> [P]`` (higher is better) using ``FITNESS_KEYS`` random keys."""

    FITNESS_KEYS = 1

    def start_es(self, params, es: ESConfig, seed: int) -> None:
        self.strategy = open_es(es.population, es.sigma, params, optax.adam(es.learning_rate))
        self.key = jax.random.PRNGKey(seed + 1)
        self.es_state = strong_types(self.strategy.init(jax.random.PRNGKey(seed + 2), params, self.strategy.default_params))
        self.step = jax.jit(self._generation)

    def _generation(self, es_state, key):
        k_ask, *k_fitness, k_tell = jax.random.split(key, 2 + self.FITNESS_KEYS)
        members, es_state = self.strategy.ask(k_ask, es_state, self.strategy.default_params)
        fitness = self.population_fitness(members, *k_fitness)
        es_state, _ = self.strategy.tell(k_tell, members, -fitness, es_state, self.strategy.default_params)
        return strong_types(es_state), fitness.mean()

    def generation(self) -> float:
        self.key, k = jax.random.split(self.key)
        self.es_state, mean_fitness = self.step(self.es_state, k)
        return float(mean_fitness)

    def params(self) -> dict:
        return self.strategy.get_mean(self.es_state)


@dataclasses.dataclass
class MetaTrainer(OpenESLoop):
    """Meta-trains one drift on bandits; ``generation()`` is one jitted generation over the whole population."""
    drift: lpo.DriftConfig
    bandit: BanditConfig
    es: ESConfig
    seed: int = 0
    FITNESS_KEYS = 2

    def __post_init__(self):
        self.start_es(lpo.init_drift(self.drift, jax.random.PRNGKey(self.seed)), self.es, self.seed)

    def population_fitness(self, members, k_tasks, k_life):
        task_keys, lifetimes = sample_tasks(k_tasks, k_life, self.es.tasks, self.es.train_lifetimes)
        score = lambda params: mean_final_score(self.drift, self.bandit, self.es.train_lifetimes, params,  # noqa: E731
                                                task_keys, lifetimes)
        return jax.vmap(score)(members)

    def inner_steps_per_generation(self) -> int:
        return pulls(self.es.population * self.es.tasks, self.bandit, self.es.train_lifetimes)


@dataclasses.dataclass
class MetaGradientTrainer:
    """The meta-gradient arm: the drift trained by backpropagating the mean final score through every inner
    update (the sampled pulls held fixed, so the gradient ignores how the drift changes what is sampled), with
    Adam, on ``runs_per_step`` inner runs per step (default a quarter of the population x tasks one ES
    generation evaluates: a backward pass through the unrolled inner loop costs several forward ones).

    A step whose meta-gradient is not finite is skipped and counted (``skipped``): through 64 unrolled
    updates of 4 inner gradient steps each, the gradient can explode where ES's estimate cannot."""
    drift: lpo.DriftConfig
    bandit: BanditConfig
    es: ESConfig
    seed: int = 0
    runs_per_step: int = 0  # 0: population x tasks / 4

    def __post_init__(self):
        self.runs = self.runs_per_step or max(1, self.es.population * self.es.tasks // 4)
        self.theta = strong_types(lpo.init_drift(self.drift, jax.random.PRNGKey(self.seed)))
        self.optimizer = optax.adam(self.es.learning_rate)
        self.opt_state = self.optimizer.init(self.theta)
        self.key = jax.random.PRNGKey(self.seed + 1)
        self.skipped = 0
        self.step = jax.jit(self._step)

    def _step(self, params, opt_state, key):
        task_keys, lifetimes = sample_tasks(*jax.random.split(key), self.runs, self.es.train_lifetimes)
        score = lambda p: mean_final_score(self.drift, self.bandit, self.es.train_lifetimes, p, task_keys, lifetimes)  # noqa: E731
        value, grad = jax.value_and_grad(score)(params)
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grad)]))
        updates, new_opt_state = self.optimizer.update(jax.tree.map(jnp.negative, grad), opt_state, params)  # ascent
        new_params = optax.apply_updates(params, updates)
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)  # noqa: E731
        return strong_types(keep(new_params, params)), strong_types(keep(new_opt_state, opt_state)), value, finite

    def generation(self) -> float:
        self.key, k = jax.random.split(self.key)
        self.theta, self.opt_state, value, finite = self.step(self.theta, self.opt_state, k)
        self.skipped += int(not bool(finite))
        return float(value)

    def params(self) -> dict:
        return self.theta

    def inner_steps_per_generation(self) -> int:
        return pulls(self.runs, self.bandit, self.es.train_lifetimes)
