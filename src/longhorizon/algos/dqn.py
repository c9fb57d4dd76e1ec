r"""Deep Q-Network (Mnih et al., 2015) with the usual options: n-step returns, double DQN
(van Hasselt et al., 2016), hard or Polyak target updates, Huber or squared loss.

Per update: ``collect`` takes ``num_steps`` epsilon-greedy steps in each of ``num_envs`` environments
and appends them to a replay buffer in device memory (``core.replay``); ``learn`` then takes
``gradient_steps`` Adam steps, each on ``batch_size`` windows of ``n_step`` consecutive transitions,
minimising :math:`\ell(Q(s_t, a_t) - G_t)` towards

.. math::
    G_t = \sum_{i<m} \gamma^i c\,r_{t+i} + \gamma^m (1 - \text{term}_{t+m-1})\, Q_{\bar\theta}(s'_{t+m-1}, a^*),

with :math:`m \le n` cut at the end of the episode (``core.returns.n_step_returns``),
:math:`s'` the *true* next state (so a time limit bootstraps and a termination does not),
:math:`a^* = \arg\max_a Q_{\bar\theta}(s', a)` or, for double DQN, :math:`\arg\max_a Q_\theta(s', a)`.
Every ``target_update_every`` gradient steps :math:`\bar\theta \leftarrow \tau\theta + (1-\tau)\bar\theta`.
No gradient step is taken before ``learning_starts`` environment steps (decided inside jit).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from longhorizon.config import AlgoConfig
from longhorizon.core.distributions import epsilon_greedy
from longhorizon.core import replay
from longhorizon.core.losses import huber
from longhorizon.core.nets import ACTIVATIONS, QNetwork, q_values
from longhorizon.core.optim import make_optimizer
from longhorizon.core.returns import n_step_returns
from longhorizon.envs import env_name, true_next_obs, vectorize
from longhorizon.envs.api import require_discrete_actions

NAME = "dqn"


# ----------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class Config(AlgoConfig):
    num_envs: int = 4
    num_steps: int = 64  # env steps per environment between two learn calls
    gradient_steps: int = 128  # per learn call
    batch_size: int = 64
    buffer_size: int = 100_000  # transitions, all environments together
    learning_starts: int = 1_000  # env steps (all environments) before the first gradient step
    learning_rate: float = 2.3e-3
    anneal_lr: bool = False
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    n_step: int = 1
    double_dqn: bool = False
    loss: str = "huber"
    target_update_every: int = 128  # gradient steps
    tau: float = 1.0  # 1: hard copy; below 1: Polyak averaging
    reward_scale: float = 1.0
    epsilon_start: float = 1.0
    epsilon_end: float = 0.04
    epsilon_fraction: float = 0.16  # share of total_steps over which epsilon decays linearly
    hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    layer_norm: bool = False
    total_steps: int = 50_000

    def validate(self) -> None:
        self._check_positive("num_envs", "num_steps", "gradient_steps", "batch_size", "buffer_size", "learning_rate",
                             "max_grad_norm", "n_step", "target_update_every", "tau", "reward_scale")
        self._check_unit_interval("gamma", "tau", "epsilon_start", "epsilon_end", "epsilon_fraction")
        self._check_choice("loss", ["huber", "mse"])
        self._check_choice("activation", sorted(ACTIVATIONS))
        if self.learning_starts < 0:
            self._fail("learning_starts", "must not be negative", "pass 0 or more, e.g. --learning-starts 1000")
        if not self.hidden or any(w <= 0 for w in self.hidden):
            self._fail("hidden", "must list positive layer widths", "pass e.g. --hidden 256,256")
        need = self.num_envs * (self.num_steps + self.n_step)
        if self.buffer_size < need:
            self._fail("buffer_size", f"must hold at least num_envs x (num_steps + n_step) = {need} transitions",
                       f"pass --buffer-size {max(need, 100_000)} or fewer --num-envs/--num-steps")

    def static_floats(self) -> set[str]:
        return {"epsilon_end"}  # act() keeps it as a Python number for exploratory evaluation


def default_config(env_id) -> Config:  # an id or an environment object
    """Classic control: Stable-Baselines3 zoo's tuned CartPole-v1 DQN settings (lr 2.3e-3, batch 64,
    256 env steps then 128 gradient steps, target synced each learn call, epsilon 1 -> 0.04 over 16%)."""
    if env_name(env_id).endswith("-MinAtar"):
        return Config(num_envs=8, num_steps=4, gradient_steps=1, batch_size=32, buffer_size=100_000,
                      learning_starts=5_000, learning_rate=1e-4, target_update_every=250, epsilon_end=0.01,
                      epsilon_fraction=0.1, hidden=(16, 128), total_steps=5_000_000)
    return Config()


def check_env(env, config: Config) -> None:
    require_discrete_actions(env, NAME)


def steps_per_update(config: Config) -> int:
    return config.num_envs * config.num_steps


def epsilon(config: Config, env_steps: jax.Array) -> jax.Array:
    """1 before ``learning_starts``; then linear from ``epsilon_start`` to ``epsilon_end`` over the first
    ``epsilon_fraction`` of ``total_steps`` (counted from step 0), then constant."""
    decay_steps = jnp.maximum(1.0, config.epsilon_fraction * config.total_steps)  # traced in a sweep
    progress = jnp.minimum(1.0, env_steps / decay_steps)
    eps = config.epsilon_start + (config.epsilon_end - config.epsilon_start) * progress
    return jnp.where(env_steps < config.learning_starts, 1.0, eps)


# ----------------------------------------------------------------------------- state
@struct.dataclass
class AgentParams:
    weights: Any
    network: QNetwork = struct.field(pytree_node=False)
    epsilon: float = struct.field(pytree_node=False, default=0.0)  # for act(greedy=False)


@struct.dataclass
class Transition:
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array  # the true next observation (final one at an episode end)
    terminated: jax.Array
    done: jax.Array  # terminated or truncated


@struct.dataclass
class State:
    agent: AgentParams
    target_weights: Any
    opt_state: Any
    buffer: replay.ReplayBuffer
    env_state: Any
    obs: jax.Array
    key: jax.Array
    env_steps: jax.Array
    grad_steps: jax.Array
    config: Config  # a pytree: all static, or (in a sweep) float fields as traced values
    env: Any = struct.field(pytree_node=False)


@struct.dataclass
class Batch:
    transition: Transition
    episode_return: jax.Array
    episode_done: jax.Array
    episode_length: jax.Array


# ----------------------------------------------------------------------------- acting
def act(params: AgentParams, obs: jax.Array, key: jax.Array, greedy: bool = False) -> jax.Array:
    """Greedy action for ``obs`` (a batch), or epsilon-greedy with the final training epsilon."""
    return epsilon_greedy(key, q_values(params.network, params.weights, obs), jnp.where(greedy, 0.0, params.epsilon))


def agent_params(state: State) -> AgentParams:
    return state.agent


# ----------------------------------------------------------------------------- init
def init(key: jax.Array, env, config: Config) -> State:
    obs_info = env.obs_info
    network = QNetwork(obs_shape=obs_info.shape, num_actions=env.act_info.n, hidden=config.hidden,
                       activation=config.activation, layer_norm=config.layer_norm)
    venv = vectorize(env, config.num_envs)
    key, net_key, env_key = jax.random.split(key, 3)
    obs, env_state = venv.reset(env_key)
    weights = network.init(net_key, jnp.zeros((1,) + obs_info.shape, jnp.float32))
    n = config.num_envs
    example = Transition(obs, jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.float32), obs, jnp.zeros(n, bool),
                         jnp.zeros(n, bool))
    buffer = replay.create(example, config.buffer_size // n)
    zero = jnp.zeros((), jnp.int32)
    return State(AgentParams(weights, network, float(config.epsilon_end)), weights, optimizer(config).init(weights), buffer,
                 env_state, obs, key, zero, zero, config, venv)


def optimizer(config: Config) -> optax.GradientTransformation:
    """Clipped Adam, learning rate linearly annealed to 0 if asked. Built where it is used, not stored in
    the state, because in a sweep its learning rate and clipping norm are traced values."""
    num_updates = max(1, config.total_steps // steps_per_update(config))
    anneal = num_updates * config.gradient_steps if config.anneal_lr else None
    return make_optimizer(config.learning_rate, config.max_grad_norm, "adam", anneal)


# ----------------------------------------------------------------------------- collect
def collect(state: State) -> tuple[State, Batch]:
    """``num_steps`` epsilon-greedy steps in every environment, appended to the replay buffer."""
    agent, venv, config = state.agent, state.env, state.config

    def env_step(carry, _):
        env_state, obs, env_steps, key = carry
        key, act_key, step_key = jax.random.split(key, 3)
        action = epsilon_greedy(act_key, q_values(agent.network, agent.weights, obs), epsilon(config, env_steps))
        next_obs, env_state, reward, terminated, truncated, info = venv.step(step_key, env_state, action)
        done = jnp.logical_or(terminated, truncated)
        true_next = true_next_obs(next_obs, info, terminated, truncated)
        step = Batch(Transition(obs, action, reward, true_next, terminated, done),
                     info["episode_return"], info["episode_done"], info["episode_length"])
        return (env_state, next_obs, env_steps + config.num_envs, key), step

    (env_state, obs, env_steps, key), batch = jax.lax.scan(
        env_step, (state.env_state, state.obs, state.env_steps, state.key), None, config.num_steps)
    buffer = replay.add(state.buffer, batch.transition)
    return state.replace(env_state=env_state, obs=obs, env_steps=env_steps, key=key, buffer=buffer), batch


# ----------------------------------------------------------------------------- learn
def td_targets(window: Transition, q_target_next: jax.Array, q_online_next: jax.Array, config: Config) -> jax.Array:
    """n-step (double) DQN targets for windows ``[B, n]`` whose next-state Q-values are ``[B, n, A]``."""
    if config.double_dqn:
        best = jnp.argmax(q_online_next, axis=-1)
        bootstrap = jnp.take_along_axis(q_target_next, best[..., None], axis=-1)[..., 0]
    else:
        bootstrap = jnp.max(q_target_next, axis=-1)
    time_major = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731  [B, n] -> [n, B]
    returns = n_step_returns(time_major(window.reward * config.reward_scale), time_major(bootstrap),
                             time_major(window.terminated), time_major(window.done), config.gamma, config.n_step)
    return returns[0]  # the return from the first step of each window


def learn(state: State, batch: Batch) -> tuple[State, dict[str, jax.Array]]:
    config, agent = state.config, state.agent
    network = agent.network

    def loss_fn(weights, obs, action, target):
        q = q_values(network, weights, obs)
        chosen = jnp.take_along_axis(q, action[:, None].astype(jnp.int32), axis=-1)[:, 0]
        error = chosen - target
        loss = jnp.mean(huber(error) if config.loss == "huber" else 0.5 * error**2)
        return loss, dict(td_loss=loss, q_values=chosen.mean())  # CleanRL's names

    def gradient_step(carry, _):
        weights, target_weights, opt_state, key, grad_steps = carry
        key, sample_key = jax.random.split(key)
        window = replay.sample(state.buffer, sample_key, config.batch_size, config.n_step)
        q_target_next = q_values(network, target_weights, window.next_obs)
        q_online_next = q_values(network, weights, window.next_obs) if config.double_dqn else None
        target = jax.lax.stop_gradient(td_targets(window, q_target_next, q_online_next, config))
        grads, metrics = jax.grad(loss_fn, has_aux=True)(weights, window.obs[:, 0], window.action[:, 0], target)
        updates, opt_state = optimizer(config).update(grads, opt_state, weights)
        weights = optax.apply_updates(weights, updates)
        grad_steps = grad_steps + 1
        sync = grad_steps % config.target_update_every == 0
        target_weights = jax.tree.map(lambda t, w: jnp.where(sync, config.tau * w + (1 - config.tau) * t, t),
                                      target_weights, weights)
        return (weights, target_weights, opt_state, key, grad_steps), metrics

    def train(carry):
        carry, metrics = jax.lax.scan(gradient_step, carry, None, config.gradient_steps)
        return carry, jax.tree.map(jnp.mean, metrics)

    def skip(carry):
        shapes = jax.eval_shape(train, carry)[1]
        return carry, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    key, learn_key = jax.random.split(state.key)
    ready = jnp.logical_and(state.env_steps >= config.learning_starts, state.buffer.size >= config.n_step)
    carry = (agent.weights, state.target_weights, state.opt_state, learn_key, state.grad_steps)
    (weights, target_weights, opt_state, _, grad_steps), metrics = jax.lax.cond(ready, train, skip, carry)
    metrics = {**metrics, "epsilon": epsilon(config, state.env_steps), "learning": ready.astype(jnp.float32)}
    state = state.replace(agent=agent.replace(weights=weights), target_weights=target_weights, opt_state=opt_state,
                          key=key, grad_steps=grad_steps)
    return state, metrics
