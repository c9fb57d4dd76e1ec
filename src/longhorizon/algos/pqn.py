r"""Parallelised Q-Network, PQN (Gallici et al., 2024, "Simplifying Deep Temporal Difference Learning").

Online Q-learning without a replay buffer and without a target network: a Q-network with LayerNorm
after every hidden layer, many vectorised environments acting epsilon-greedily, and Peng's Q(lambda)
targets computed once per rollout from the Q-values cached while acting. Per update:

1. roll ``num_steps`` steps in each of ``num_envs`` environments; every environment draws its own
   exploratory action with probability epsilon (one linearly decaying epsilon for all);
2. targets, with :math:`b_t = \max_a Q(s'_t, a)` on the *true* next state (the final observation
   when an episode ended, so a time limit bootstraps and a termination does not):

   .. math:: G_t = c\,r_t + \gamma (1 - \text{term}_t)\big[(1-\lambda_t) b_t + \lambda_t G_{t+1}\big],
             \quad \lambda_t = \lambda (1 - \text{done}_t), \ \lambda_{T-1} = 0

   (``core.returns.lambda_returns``; ``c`` is ``reward_scale``);
3. ``update_epochs`` x ``num_minibatches`` steps of RAdam (global-norm clipped, optionally linearly
   decayed learning rate) on :math:`\tfrac12 (Q(s_t, a_t) - G_t)^2`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from longhorizon.config import AlgoConfig
from longhorizon.core.distributions import epsilon_greedy
from longhorizon.core.minibatch import flatten_time, minibatch_epochs
from longhorizon.core.nets import ACTIVATIONS, QNetwork, q_values
from longhorizon.core.optim import flat_step, init_flat, make_optimizer
from longhorizon.core.returns import lambda_returns
from longhorizon.envs import env_name, true_next_obs, vectorize
from longhorizon.envs.api import require_discrete_actions
from longhorizon.errors import UsageError

NAME = "pqn"


# ----------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class Config(AlgoConfig):
    num_envs: int = 32
    num_steps: int = 64
    update_epochs: int = 4
    num_minibatches: int = 16
    learning_rate: float = 1e-4
    anneal_lr: bool = True  # linear decay to 0 over training
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    q_lambda: float = 0.95
    reward_scale: float = 0.1
    epsilon_start: float = 1.0
    epsilon_end: float = 0.2
    epsilon_fraction: float = 0.2  # share of total_steps over which epsilon decays linearly
    hidden: tuple[int, ...] = (256, 256)  # MLP widths; for image observations (conv channels, dense units)
    activation: str = "relu"
    layer_norm: bool = True
    batch_norm: bool = False  # BatchNorm instead (pass --layer-norm false): batch statistics while learning

    def validate(self) -> None:
        self._check_positive("num_envs", "num_steps", "update_epochs", "num_minibatches", "learning_rate",
                             "max_grad_norm", "reward_scale")
        self._check_unit_interval("gamma", "q_lambda", "epsilon_start", "epsilon_end", "epsilon_fraction")
        self._check_choice("activation", sorted(ACTIVATIONS))
        if not self.hidden or any(w <= 0 for w in self.hidden):
            self._fail("hidden", "must list positive layer widths", "pass e.g. --hidden 256,256")
        if self.layer_norm and self.batch_norm:
            raise UsageError("--batch-norm and --layer-norm exclude each other; pass --batch-norm true --layer-norm false.")
        batch = self.num_envs * self.num_steps
        if batch % self.num_minibatches:
            divisor = max(d for d in (1, 2, 4, 8, 16, 32) if batch % d == 0)
            raise UsageError(f"--num-minibatches {self.num_minibatches} does not divide num_envs x num_steps = {batch}; "
                             f"choose a divisor of {batch} such as {divisor}.")

    def static_floats(self) -> set[str]:
        return {"epsilon_end"}  # act() keeps it as a Python number for exploratory evaluation


def default_config(env_id) -> Config:  # an id or an environment object
    """The reference settings per family (purejaxql's CartPole and MinAtar configurations)."""
    if env_name(env_id).endswith("-MinAtar"):
        return Config(num_envs=128, num_steps=32, update_epochs=2, num_minibatches=32, learning_rate=5e-4,
                      q_lambda=0.65, reward_scale=1.0, epsilon_end=0.05, epsilon_fraction=0.1, hidden=(16, 128),
                      total_steps=10_000_000)
    return Config()


def check_env(env, config: Config) -> None:
    require_discrete_actions(env, NAME)


def steps_per_update(config: Config) -> int:
    return config.num_envs * config.num_steps


def epsilon(config: Config, update_step: jax.Array) -> jax.Array:
    """Linear decay from ``epsilon_start`` to ``epsilon_end`` over the first ``epsilon_fraction`` of
    training, then constant; ``update_step`` counts updates done before this rollout."""
    decay_steps = jnp.maximum(1.0, config.epsilon_fraction * config.total_steps)  # traced in a sweep
    progress = jnp.minimum(1.0, update_step * steps_per_update(config) / decay_steps)
    return config.epsilon_start + (config.epsilon_end - config.epsilon_start) * progress


# ----------------------------------------------------------------------------- state
@struct.dataclass
class AgentParams:
    weights: Any
    network: QNetwork = struct.field(pytree_node=False)
    epsilon: float = struct.field(pytree_node=False, default=0.0)  # for act(greedy=False)
    update_step: Any = None  # the learner's update count when published (sets an asynchronous actor's epsilon)


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


@struct.dataclass
class Batch:
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_q_max: jax.Array  # max_a Q(s'_t, a) on the true next state, cached while acting
    episode_return: jax.Array
    episode_done: jax.Array
    episode_length: jax.Array


# ----------------------------------------------------------------------------- acting
def act(params: AgentParams, obs: jax.Array, key: jax.Array, greedy: bool = False) -> jax.Array:
    """Greedy action for ``obs`` (a batch), or epsilon-greedy with the final training epsilon."""
    q = q_values(params.network, params.weights, obs)
    return epsilon_greedy(key, q, jnp.where(greedy, 0.0, params.epsilon))


def agent_params(state: State) -> AgentParams:
    return state.agent.replace(update_step=state.update_step)


def max_staleness(config: Config) -> tuple[int, str]:
    """``--engine ray --mode async``: the Q(lambda) targets bootstrap from Q-values cached while acting,
    so a batch one version old learns towards a one-update-old network (like a target network lagging
    one update); more lag is not an algorithm the paper validated."""
    return 1, "(its Q(lambda) targets come from the acting network's cached Q-values)"


def with_agent_params(state: State, params: AgentParams) -> State:
    """``state`` acting with the learner's ``params`` and its update count (for epsilon's schedule)."""
    return state.replace(agent=params.replace(update_step=None), update_step=params.update_step)


# ----------------------------------------------------------------------------- init
def init(key: jax.Array, env, config: Config) -> State:
    obs_info = env.obs_info
    network = QNetwork(obs_shape=obs_info.shape, num_actions=env.act_info.n, hidden=config.hidden,
                       activation=config.activation, layer_norm=config.layer_norm, batch_norm=config.batch_norm)
    venv = vectorize(env, config.num_envs)
    key, net_key, env_key = jax.random.split(key, 3)
    obs, env_state = venv.reset(env_key)
    weights = network.init(net_key, jnp.zeros((1,) + obs_info.shape, jnp.float32))
    agent = AgentParams(weights, network, float(config.epsilon_end))
    return State(agent, init_flat(optimizer(config), weights["params"]), env_state, obs, key, jnp.zeros((), jnp.int32), config, venv)


def optimizer(config: Config) -> optax.GradientTransformation:
    """Clipped RAdam, learning rate linearly annealed to 0 if asked. Built where it is used, not stored in
    the state, because in a sweep its learning rate and clipping norm are traced values."""
    num_updates = max(1, config.total_steps // steps_per_update(config))
    anneal = num_updates * config.update_epochs * config.num_minibatches if config.anneal_lr else None
    return make_optimizer(config.learning_rate, config.max_grad_norm, "radam", anneal)


# ----------------------------------------------------------------------------- collect
def collect(state: State) -> tuple[State, Batch]:
    """Roll ``num_steps`` epsilon-greedy steps in every environment.

    The Q-values of each next observation serve twice: to act on it, and as the Q(lambda) bootstrap
    of the step just taken. Only a truncated step needs another pass, on its final observation (a
    terminated step does not bootstrap), and only steps where some environment was truncated pay it."""
    agent, venv = state.agent, state.env
    eps = epsilon(state.config, state.update_step)
    q_fn = lambda obs: q_values(agent.network, agent.weights, obs)  # noqa: E731

    def env_step(carry, _):
        env_state, obs, q_obs, key = carry
        key, act_key, step_key = jax.random.split(key, 3)
        action = epsilon_greedy(act_key, q_obs, eps)
        next_obs, env_state, reward, terminated, truncated, info = venv.step(step_key, env_state, action)
        q_next = q_fn(next_obs)
        q_bootstrap = jax.lax.cond(truncated.any(), lambda: q_fn(true_next_obs(next_obs, info, terminated, truncated)),
                                   lambda: q_next)
        step = Batch(obs, action, reward, terminated, truncated, jnp.max(q_bootstrap, axis=-1),
                     info["episode_return"], info["episode_done"], info["episode_length"])
        return (env_state, next_obs, q_next, key), step

    (env_state, obs, _, key), batch = jax.lax.scan(env_step, (state.env_state, state.obs, q_fn(state.obs), state.key),
                                                   None, state.config.num_steps)
    return state.replace(env_state=env_state, obs=obs, key=key), batch


# ----------------------------------------------------------------------------- learn
def q_lambda_targets(batch: Batch, config: Config) -> jax.Array:
    """Peng's Q(lambda) targets of a time-major rollout (see the module docstring)."""
    done = jnp.logical_or(batch.terminated, batch.truncated)
    return lambda_returns(batch.reward * config.reward_scale, batch.next_q_max, batch.terminated, done,
                          config.gamma, config.q_lambda)


def learn(state: State, batch: Batch) -> tuple[State, dict[str, jax.Array]]:
    config, agent = state.config, state.agent
    targets = q_lambda_targets(batch, config)
    data = jax.tree.map(flatten_time, (batch.obs, batch.action, targets))

    def loss_fn(params, batch_stats, mb):
        obs, action, target = mb
        variables = {"params": params, **batch_stats}
        if config.batch_norm:  # normalise with this minibatch's statistics and update the running ones
            q, batch_stats = agent.network.apply(variables, jnp.asarray(obs, jnp.float32), train=True,
                                                 mutable=["batch_stats"])
        else:
            q = q_values(agent.network, variables, obs)
        chosen = jnp.take_along_axis(q, action[:, None].astype(jnp.int32), axis=-1)[:, 0]
        loss = 0.5 * jnp.mean((chosen - target) ** 2)
        return loss, (dict(td_loss=loss, q_values=chosen.mean()), batch_stats)  # CleanRL's names

    flat_params, unravel = ravel_pytree(agent.weights["params"])  # the optimiser steps the flat vector (core.optim)
    step = flat_step(optimizer(config), loss_fn, unravel)

    def minibatch_step(carry, mb):
        flat, batch_stats, opt_state = carry
        flat, opt_state, (metrics, batch_stats) = step(flat, opt_state, batch_stats, mb)
        return (flat, batch_stats, opt_state), metrics

    key, epoch_key = jax.random.split(state.key)
    batch_stats = {k: v for k, v in agent.weights.items() if k != "params"}
    (flat_params, batch_stats, opt_state), metrics = minibatch_epochs(
        minibatch_step, (flat_params, batch_stats, state.opt_state), data, epoch_key, config.update_epochs,
        config.num_minibatches)
    weights = {"params": unravel(flat_params), **batch_stats}
    metrics = {**jax.tree.map(jnp.mean, metrics), "target_mean": targets.mean(),
               "epsilon": epsilon(config, state.update_step)}
    state = state.replace(agent=agent.replace(weights=weights), opt_state=opt_state, key=key,
                          update_step=state.update_step + 1)
    return state, metrics
