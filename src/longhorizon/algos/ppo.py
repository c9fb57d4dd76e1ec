"""Proximal Policy Optimization (Schulman et al., 2017), discrete and continuous actions.

Per update: collect ``num_steps`` steps from ``num_envs`` environments with the current policy,
compute GAE advantages (bootstrapping on truncation, not on termination), then run
``update_epochs`` passes of ``num_minibatches`` minibatches over the clipped surrogate objective

    L = -E[min(r A, clip(r, 1-eps, 1+eps) A)] + vf_coef * L_V - ent_coef * H,   r = pi/pi_old.

With ``drift FILE`` (a learned LPO/TA-LPO drift, :mod:`longhorizon.core.drift`) the clipped
surrogate is replaced by the mirror-learning objective ``E[r A - f_phi(r, A[, n/N, log N])]``, with
``n/N`` the fraction of the run's updates done and ``N`` the run's number of updates.

Batches acted by an older policy mu (the Ray engine's asynchronous mode) are corrected towards the
current, proximal policy pi_prox with ``--correction vtrace`` (V-trace advantages and targets,
Espeholt et al., 2018) or ``--correction decoupled`` (the decoupled objective of Hilton et al., 2022,
used by AReaL: E[min(w, rho_clip) min(r A, clip(r) A)], r = pi/pi_prox, w = pi_prox/mu).

``learn`` reports CleanRL's diagnostics under CleanRL's names: ``policy_loss``, ``value_loss``,
``entropy``, ``old_approx_kl``, ``approx_kl`` and ``clipfrac`` (means over the minibatches), and
``explained_variance`` and ``learning_rate`` (once per update); also the total ``loss``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from longhorizon.config import AlgoConfig
from longhorizon.core import distributions as dist
from longhorizon.core.kl import kl_k1, kl_k3
from longhorizon.core.losses import clipped_surrogate_loss, clipped_value_loss, explained_variance
from longhorizon.core.minibatch import flatten_time, minibatch_epochs
from longhorizon.core.nets import ACTIVATIONS, ActorCritic, PolicyOutput
from longhorizon.core.normalize import RunningMeanStd
from longhorizon.core.optim import flat_step, init_flat, learning_rate_at, make_optimizer
from longhorizon.core.returns import gae, vtrace
from longhorizon.envs import true_next_obs, vectorize
from longhorizon.envs.wrappers import NormalizeReward
from longhorizon.core import drift as lpo

NAME = "ppo"
CORRECTIONS = ("none", "vtrace", "decoupled")


# ----------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class Config(AlgoConfig):
    num_envs: int = 4
    num_steps: int = 128
    learning_rate: float = 2.5e-4
    anneal_lr: bool = True
    update_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    clip_value: bool = False
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize_advantages: bool = True
    normalize_observations: bool = False
    normalize_rewards: bool = False
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    # Off-policy correction for batches acted by an older policy mu (``--engine ray --mode async``):
    # none; vtrace (advantages and value targets by V-trace); decoupled (AReaL's decoupled PPO objective).
    correction: str = "none"
    rho_clip: float = 1.0  # truncation of the importance weights pi/mu in both corrections
    # A learned drift (.npz from `longhorizon repro ta-lpo`) in place of the clipped surrogate; "" = PPO-clip.
    drift: str = ""

    def validate(self) -> None:
        self._check_positive("num_envs", "num_steps", "learning_rate", "update_epochs", "num_minibatches",
                             "clip_eps", "max_grad_norm", "rho_clip")
        self._check_unit_interval("gamma", "gae_lambda")
        self._check_choice("activation", sorted(ACTIVATIONS))
        self._check_choice("correction", CORRECTIONS)
        if (self.num_envs * self.num_steps) % self.num_minibatches:
            raise_batch_error(self)
        if self.drift:
            from longhorizon.errors import UsageError

            try:
                lpo.load_drift(self.drift)  # refuses a file that is no drift, before anything compiles
            except ValueError as error:
                raise UsageError(str(error)) from None
            if self.correction == "decoupled":
                raise UsageError("--drift replaces the clipped surrogate that --correction decoupled weights; "
                                 "use --correction vtrace or none with a drift.")

    def static_floats(self) -> set[str]:
        return {"gamma"} if self.normalize_rewards else set()  # the reward normaliser wraps the env with gamma


def raise_batch_error(config) -> None:
    from longhorizon.errors import UsageError

    batch = config.num_envs * config.num_steps
    raise UsageError(f"--num-minibatches {config.num_minibatches} does not divide num_envs x num_steps = {batch}; "
                     f"choose a divisor of {batch} such as {max(d for d in (1, 2, 4, 8, 16, 32) if batch % d == 0)}.")


def default_config(env_id) -> Config:  # an id or an environment object
    """Per-family defaults (PureJaxRL/CleanRL-style settings)."""
    from longhorizon.envs.registry import env_name, make

    if not make(env_id).act_info.discrete:
        # Continuous control: longer rollouts, normalised observations and rewards, no entropy bonus.
        return Config(num_envs=16, num_steps=128, learning_rate=1e-3, update_epochs=10, num_minibatches=16,
                      gamma=0.95, ent_coef=0.0, normalize_observations=True, normalize_rewards=True,
                      max_grad_norm=0.5, total_steps=1_000_000)
    if env_name(env_id).endswith("-MinAtar"):
        return Config(num_envs=64, num_steps=128, learning_rate=5e-4, num_minibatches=8, hidden=(16, 128),
                      activation="relu", total_steps=5_000_000)
    # Classic control: PureJaxRL's CartPole settings with 10 epochs per rollout (measured: 5/5 seeds
    # reach a greedy return of 500 on CartPole-v1 at 5e5 steps, against 2/5 with 4 epochs).
    return Config(update_epochs=10)


def steps_per_update(config: Config) -> int:
    return config.num_envs * config.num_steps


def max_staleness(config: Config) -> tuple[int, str]:
    """How many parameter versions old a batch may be (``--engine ray --mode async``), and why."""
    if config.normalize_observations:
        return -1, ("collect updates the observation statistics, which asynchronous actors cannot hand back; "
                    "pass --normalize-observations false or --mode sync")
    if config.correction == "none":
        return 0, "without an off-policy correction (--correction vtrace or decoupled allows up to 8)"
    return 8, f"with the {config.correction} correction"


# ----------------------------------------------------------------------------- state
@struct.dataclass
class AgentParams:
    """Everything ``act`` needs: network weights, observation statistics, the network itself."""

    weights: Any
    obs_rms: RunningMeanStd
    network: ActorCritic = struct.field(pytree_node=False)
    normalize_observations: bool = struct.field(pytree_node=False, default=False)
    action_low: Any = struct.field(pytree_node=False, default=None)
    action_high: Any = struct.field(pytree_node=False, default=None)


@struct.dataclass
class State:
    agent: AgentParams
    opt_state: Any
    env_state: Any
    obs: jax.Array
    key: jax.Array
    update_step: jax.Array
    config: Config  # a pytree: all static, or (in a sweep) float fields as traced values
    env: Any = struct.field(pytree_node=False)
    drift: Any = None  # learned drift parameters (config.drift), traced so a population of drifts can be vmapped


@struct.dataclass
class Batch:
    obs: jax.Array  # normalised as the policy saw it
    next_obs: jax.Array  # true next observation (final one at episode end), normalised
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    episode_return: jax.Array
    episode_done: jax.Array
    episode_length: jax.Array


# ----------------------------------------------------------------------------- networks
def _policy(agent: AgentParams, weights, obs_normalised) -> PolicyOutput:
    return agent.network.apply(weights, obs_normalised)


def _prepare(agent: AgentParams, obs):
    obs = jnp.asarray(obs, jnp.float32)
    return agent.obs_rms.normalize(obs) if agent.normalize_observations else obs


def _log_prob_entropy(agent: AgentParams, out: PolicyOutput, action):
    if agent.network.continuous:
        return dist.diag_gaussian_log_prob(out.logits_or_mean, out.log_std, action), dist.diag_gaussian_entropy(out.log_std)
    return dist.categorical_log_prob(out.logits_or_mean, action), dist.categorical_entropy(out.logits_or_mean)


def _sample(agent: AgentParams, out: PolicyOutput, key, greedy):
    if agent.network.continuous:
        return dist.diag_gaussian_sample(key, out.logits_or_mean, out.log_std, greedy)
    return dist.categorical_sample(key, out.logits_or_mean, greedy)


def _to_env_action(agent: AgentParams, action):
    if agent.network.continuous and agent.action_low is not None:
        return jnp.clip(action, jnp.asarray(agent.action_low), jnp.asarray(agent.action_high))
    return action


def act(params: AgentParams, obs: jax.Array, key: jax.Array, greedy: bool = False) -> jax.Array:
    """Action for raw observation(s) ``obs``; ``greedy`` takes the mode of the policy."""
    out = _policy(params, params.weights, _prepare(params, obs))
    return _to_env_action(params, _sample(params, out, key, greedy))


def agent_params(state: State) -> AgentParams:
    return state.agent


def with_agent_params(state: State, params: AgentParams) -> State:
    """``state`` acting with ``params`` (an asynchronous actor receiving the learner's parameters)."""
    return state.replace(agent=params)


# ----------------------------------------------------------------------------- init
def init(key: jax.Array, env, config: Config) -> State:
    obs_info, act_info = env.obs_info, env.act_info
    network = ActorCritic(obs_shape=obs_info.shape, action_dim=act_info.n if act_info.discrete else act_info.shape[0],
                          continuous=not act_info.discrete, hidden=config.hidden, activation=config.activation)
    venv = vectorize(env, config.num_envs)
    if config.normalize_rewards:
        venv = NormalizeReward(venv, gamma=config.gamma)
    key, net_key, env_key = jax.random.split(key, 3)
    obs, env_state = venv.reset(env_key)
    weights = network.init(net_key, jnp.zeros(obs_info.shape, jnp.float32))
    obs_rms = RunningMeanStd.create(obs_info.shape)
    if config.normalize_observations:
        obs_rms = obs_rms.update(obs)
    agent = AgentParams(weights, obs_rms, network, config.normalize_observations,
                        None if act_info.discrete else tuple(map(float, act_info.low.reshape(-1))),
                        None if act_info.discrete else tuple(map(float, act_info.high.reshape(-1))))
    drift = jax.tree.map(jnp.asarray, lpo.load_drift(config.drift)) if config.drift else None
    return State(agent, init_flat(optimizer(config), weights), env_state, obs, key, jnp.zeros((), jnp.int32), config,
                 venv, drift)


def num_updates(config: Config) -> int:
    return max(1, config.total_steps // steps_per_update(config))


def optimizer(config: Config) -> optax.GradientTransformation:
    """Clipped Adam, learning rate linearly annealed to 0 if asked. Built where it is used, not stored in
    the state, because in a sweep its learning rate and clipping norm are traced values."""
    return make_optimizer(config.learning_rate, config.max_grad_norm, "adam", _anneal_steps(config), eps=1e-5)


def _anneal_steps(config: Config) -> int | None:
    """Optimiser steps over which the learning rate decays to 0 (None: constant)."""
    return num_updates(config) * config.update_epochs * config.num_minibatches if config.anneal_lr else None


# ----------------------------------------------------------------------------- collect
def collect(state: State) -> tuple[State, Batch]:
    """Roll the current policy for ``num_steps`` steps in every environment."""
    agent, venv = state.agent, state.env

    def env_step(carry, _):
        env_state, obs, key = carry
        key, act_key, step_key = jax.random.split(key, 3)
        obs_n = _prepare(agent, obs)
        out = _policy(agent, agent.weights, obs_n)
        action = _sample(agent, out, act_key, False)
        log_prob, _ = _log_prob_entropy(agent, out, action)
        next_obs, env_state, reward, terminated, truncated, info = venv.step(step_key, env_state, _to_env_action(agent, action))
        true_next = true_next_obs(next_obs, info, terminated, truncated)
        step = Batch(obs_n, _prepare(agent, true_next), action, log_prob, out.value, reward, terminated, truncated,
                     info["episode_return"], info["episode_done"], info["episode_length"])
        return (env_state, next_obs, key), (step, obs)

    (env_state, obs, key), (batch, raw_obs) = jax.lax.scan(env_step, (state.env_state, state.obs, state.key), None,
                                                           state.config.num_steps)
    if state.config.normalize_observations:  # statistics move once per rollout, after acting
        agent = agent.replace(obs_rms=agent.obs_rms.update(raw_obs))
    return state.replace(env_state=env_state, obs=obs, key=key, agent=agent), batch


# ----------------------------------------------------------------------------- learn
class Rows(NamedTuple):
    """The learner's view of a rollout, one row per (time step, environment) once flattened."""

    obs: jax.Array
    action: jax.Array
    old_log_prob: jax.Array  # log pi_old(a|s): the acting policy, or the proximal one under a correction
    old_value: jax.Array
    advantage: jax.Array
    target: jax.Array  # value target
    weight: jax.Array  # min(rho_clip, pi_prox / mu) under a correction, else 1


def advantages_and_targets(batch: Batch, next_values, prox_log_prob, prox_value, config: Config):
    r"""``(advantages, value targets, importance weights)`` of a time-major batch.

    ``correction = none``: GAE on the values recorded while acting (weights 1). Otherwise the batch
    was acted by an older policy :math:`\mu` and the current (proximal) policy's log-probabilities
    and values are given: ``vtrace`` takes V-trace targets and advantages with
    :math:`\rho_t = \min(\bar\rho, \pi_{prox}/\mu)`, :math:`c_t = \lambda \min(1, \pi_{prox}/\mu)`;
    ``decoupled`` takes GAE on the proximal values. Both return :math:`w_t = \min(\bar\rho, \pi_{prox}/\mu)`,
    which the decoupled objective multiplies into the clipped surrogate.
    """
    done = jnp.logical_or(batch.terminated, batch.truncated)
    if config.correction == "none":
        advantages, targets = gae(batch.reward, batch.value, next_values, batch.terminated, done, config.gamma,
                                  config.gae_lambda)
        return advantages, targets, jnp.ones_like(batch.log_prob)
    log_rho = prox_log_prob - batch.log_prob
    if config.correction == "vtrace":
        targets, advantages = vtrace(batch.reward, prox_value, next_values, batch.terminated, done, log_rho,
                                     config.gamma, config.gae_lambda, config.rho_clip, 1.0)
    else:  # decoupled: clip around the proximal policy, weight each sample by pi_prox / mu
        advantages, targets = gae(batch.reward, prox_value, next_values, batch.terminated, done, config.gamma,
                                  config.gae_lambda)
    return advantages, targets, jnp.minimum(config.rho_clip, jnp.exp(log_rho))


def loss(agent: AgentParams, weights, rows: Rows, config: Config, drift=None, progress=0.0
         ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """``policy_loss + vf_coef * value_loss - ent_coef * entropy`` on one minibatch (see the module
    docstring); advantages are normalised per minibatch if asked, then weighted (decoupled only).
    ``drift``: learned drift parameters, the policy loss is then ``-E[r A - f(r, A[, progress, N])]``."""
    out = _policy(agent, weights, rows.obs)
    log_prob, entropy = _log_prob_entropy(agent, out, rows.action)
    advantage = rows.advantage
    if config.normalize_advantages:
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    if config.correction == "decoupled":  # w * min(r A, clip(r) A) = min(r wA, clip(r) wA) for w >= 0
        advantage = rows.weight * advantage
    policy_loss, clipfrac = clipped_surrogate_loss(log_prob, rows.old_log_prob, advantage, config.clip_eps)
    if drift is not None:
        policy_loss = -lpo.lpo_objective(lpo.config_of(drift), drift, log_prob, rows.old_log_prob, advantage,
                                         progress, float(num_updates(config)))
    value_loss = clipped_value_loss(out.value, rows.old_value, rows.target,
                                    config.clip_eps if config.clip_value else None)
    entropy = entropy.mean()
    total = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    # KL(pi_old || pi) on the minibatch's actions (drawn from pi_old), CleanRL's two estimates (core.kl).
    old_approx_kl = jnp.mean(kl_k1(rows.old_log_prob, log_prob))
    approx_kl = jnp.mean(kl_k3(rows.old_log_prob, log_prob))
    return total, dict(loss=total, policy_loss=policy_loss, value_loss=value_loss, entropy=entropy,
                       old_approx_kl=old_approx_kl, approx_kl=approx_kl, clipfrac=clipfrac)


def bootstrap_values(agent: AgentParams, batch: Batch, values: jax.Array, max_truncations: int) -> jax.Array:
    """``V(s'_t)`` [T, E] for GAE, with the critic run only where no value is known yet.

    Where the episode goes on, ``s'_t = s_{t+1}``, whose value the rollout already has (``values[t + 1]``);
    the last step needs the critic on its next observation; a truncated step needs it on the true final
    observation (a terminated one does not bootstrap). Truncations are time limits, so a rollout holds
    at most ``max_truncations`` of them: the critic runs on that many gathered rows, not on all ``T E``
    (should an environment truncate more often, every row gets the critic, as before).
    """
    T, E = values.shape
    critic = lambda obs: agent.network.apply(agent.weights, obs, value_only=True)  # noqa: E731
    shifted = jnp.concatenate([values[1:], critic(batch.next_obs[-1])[None]]).reshape(T * E)
    truncated = batch.truncated.reshape(T * E)
    next_obs = batch.next_obs.reshape((T * E,) + batch.next_obs.shape[2:])

    def gathered():
        rows = jnp.nonzero(truncated, size=max_truncations, fill_value=0)[0]
        return shifted.at[rows].set(jnp.where(truncated[rows], critic(next_obs[rows]), shifted[rows]))

    def every_row():
        return jnp.where(truncated, critic(next_obs), shifted)

    return jax.lax.cond(truncated.sum() > max_truncations, every_row, gathered).reshape(T, E)


def max_truncations(config: Config, env) -> int:
    """Most time-limit truncations one rollout can hold: each environment at most once per episode length
    (every row where the environment declares no limit)."""
    rows, limit = config.num_envs * config.num_steps, getattr(env, "max_episode_steps", None)
    return rows if not limit else min(rows, config.num_envs * -(-config.num_steps // limit))


def learn(state: State, batch: Batch) -> tuple[State, dict[str, jax.Array]]:
    config, agent = state.config, state.agent
    old_log_prob, old_value = batch.log_prob, batch.value
    if config.correction != "none":  # the batch may come from an older policy mu: the current one is proximal
        out = _policy(agent, agent.weights, batch.obs)
        old_log_prob, old_value = _log_prob_entropy(agent, out, batch.action)[0], out.value
    next_values = bootstrap_values(agent, batch, old_value, max_truncations(config, state.env))
    advantages, targets, weight = advantages_and_targets(batch, next_values, old_log_prob, old_value, config)
    data = jax.tree.map(flatten_time, Rows(batch.obs, batch.action, old_log_prob, old_value, advantages, targets, weight))

    progress = state.update_step.astype(jnp.float32) / num_updates(config)  # n/N, for a lifetime-aware drift

    flat_weights, unravel = ravel_pytree(agent.weights)  # the optimiser steps the flat vector (core.optim)
    step = flat_step(optimizer(config), lambda weights, rows: loss(agent, weights, rows, config, state.drift, progress),
                     unravel)

    def minibatch_step(carry, rows):
        flat, opt_state, metrics = step(*carry, rows)
        return (flat, opt_state), metrics

    first_step = state.update_step * config.update_epochs * config.num_minibatches  # optimiser steps so far
    learning_rate = learning_rate_at(config.learning_rate, first_step, _anneal_steps(config))
    key, epoch_key = jax.random.split(state.key)
    (flat_weights, opt_state), metrics = minibatch_epochs(minibatch_step, (flat_weights, state.opt_state), data,
                                                          epoch_key, config.update_epochs, config.num_minibatches)
    state = state.replace(agent=agent.replace(weights=unravel(flat_weights)), opt_state=opt_state, key=key,
                          update_step=state.update_step + 1)
    metrics = jax.tree.map(jnp.mean, metrics)
    # Once per update, as CleanRL: the rollout's values against their targets, and the step size of the
    # update's first optimiser step.
    metrics["explained_variance"] = explained_variance(data.old_value, data.target)
    metrics["learning_rate"] = learning_rate
    if config.correction != "none":  # below 1 where the acting policy lagged: the correction at work
        metrics["importance_weight"] = weight.mean()
    return state, metrics
