r"""SQIRL, shallow Q-iteration via reinforcement learning (Laidlaw, Zhu, Russell, Dragan, ICLR 2024,
"The Effective Horizon Explains Deep RL Performance in Stochastic Environments").

Many MDPs are solved by a few steps of value iteration on the random policy's Q-function followed by
acting greedily (they are *k-QVI-solvable*). SQIRL learns a finite-horizon, time-indexed policy
:math:`\pi_0, \dots, \pi_{T-1}` one block of time steps at a time. Iteration :math:`i` (learning the
time steps :math:`[i s, (i+1) s)` for a stride :math:`s`):

1. **collect** ``num_envs`` fresh episodes that follow the frozen greedy policies :math:`\pi_t` for
   :math:`t < i s` and act uniformly at random from :math:`t = i s` on;
2. **regress the random policy's Q**: head 1 of the Q-network fits the Monte-Carlo return of the
   random continuation, :math:`Q^1(s_t, a_t) \leftarrow \sum_{t' \ge t} \gamma^{t'-t} r_{t'}` (time
   steps :math:`t \ge i s` only: the actions after :math:`t` were random);
3. **k - 1 steps of fitted-Q iteration** on the same transitions: head :math:`j+1` fits
   :math:`r_t + \gamma (1 - \text{end}_t) \max_a Q^j(s_{t+1}, a)` (no bootstrap at the end of an
   episode, termination or horizon alike: the problem is finite-horizon);
4. **freeze** the network: :math:`\pi_t(s) = \arg\max_a Q^k(s, a)` for the block's time steps.

Time steps not yet learned act at random while collecting and greedily with the latest network in
greedy evaluation. After the last block the sweep starts again at time 0 with the networks learned
so far as the prefix. The environment is wrapped in :class:`~longhorizon.envs.TimeFeature` so a
policy reads its time step from the observation's last entry; the network also sees it.

Each iteration regresses on the transitions of its window of time steps (the block plus the
:math:`k - 1` steps its backups reach, :func:`window`). Deviations from the paper, for a fused JAX
loop: one network with :math:`k` heads and the time step as an input, warm-started from the previous
block (as in the authors' deep-RL implementation); only the fresh iteration's data (no replay across
iterations); a stride above 1 learns several time steps per iteration.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from longhorizon.config import AlgoConfig
from longhorizon.core.minibatch import minibatch_epochs
from longhorizon.core.nets import ACTIVATIONS, QNetwork, q_values
from longhorizon.core.optim import make_optimizer
from longhorizon.envs import TimeFeature, env_name, true_next_obs, vectorize
from longhorizon.envs.api import require_discrete_actions
from longhorizon.errors import UsageError

NAME = "sqirl"
AUTO_BLOCKS = 32  # stride 0 splits the horizon into about this many blocks


# ----------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class Config(AlgoConfig):
    total_steps: int = 1_000_000
    num_envs: int = 64  # episodes per iteration (m in the paper)
    planning_depth: int = 1  # k: 1 = act greedily on the random policy's Q; k-1 fitted-Q steps after it
    stride: int = 0  # time steps learned per iteration; 0: ceil(horizon / 32)
    horizon: int = 0  # episode step budget T; 0: the environment's time limit
    window: int = 0  # time steps regressed on per iteration, from the block's start; 0: stride + k - 1 (the paper)
    update_epochs: int = 8
    num_minibatches: int = 4
    learning_rate: float = 1e-3
    max_grad_norm: float = 10.0
    gamma: float = 1.0  # the paper's finite-horizon, undiscounted return
    reward_scale: float = 1.0  # rewards are multiplied by this before regression (greedy actions are unchanged)
    hidden: tuple[int, ...] = (64, 64)
    activation: str = "relu"
    layer_norm: bool = True

    def validate(self) -> None:
        self._check_positive("num_envs", "planning_depth", "update_epochs", "num_minibatches", "learning_rate",
                             "max_grad_norm", "reward_scale")
        self._check_unit_interval("gamma")
        self._check_choice("activation", sorted(ACTIVATIONS))
        if self.stride < 0 or self.horizon < 0 or self.window < 0:
            raise UsageError("--stride, --horizon and --window must be 0 (automatic) or positive; pass e.g. --stride 4.")
        if not self.hidden or any(w <= 0 for w in self.hidden):
            self._fail("hidden", "must list positive layer widths", "pass e.g. --hidden 64,64")
        if self.num_envs % self.num_minibatches:
            raise UsageError(f"--num-minibatches {self.num_minibatches} does not divide --num-envs {self.num_envs}; "
                             f"choose a divisor of {self.num_envs}, e.g. {math.gcd(self.num_envs, 4)}.")
        if self.horizon and self.stride > self.horizon:
            raise UsageError(f"--stride {self.stride} exceeds the horizon {self.horizon}; pass a stride of at most {self.horizon}.")

    def static_floats(self) -> set[str]:
        return {"learning_rate", "max_grad_norm", "gamma", "reward_scale"}  # act() reads the config as Python values


def default_config(env_id) -> Config:  # an id or an environment object
    """The paper's regression window for tabular MDPs (``.npz``); for gymnax environments (dense
    rewards, e.g. CartPole) every later step of the random continuation as well (measured: CartPole-v1
    greedy return 368-500 after one sweep, against 200-290 with the paper's window; docs/sqirl.md)."""
    if env_name(env_id).endswith(".npz"):
        return Config()
    from longhorizon.envs import make

    return Config(window=make(env_id).max_episode_steps, num_minibatches=32)


def check_env(env, config: Config) -> None:
    require_discrete_actions(env, NAME)


def resolve_config(env, config: Config) -> Config:
    """Fill in the automatic horizon (the environment's time limit) and stride."""
    horizon = config.horizon or env.max_episode_steps
    if config.horizon and config.horizon != env.max_episode_steps:
        raise UsageError(f"--horizon {config.horizon} differs from the environment's time limit {env.max_episode_steps}; "
                         f"leave --horizon at 0 (set the limit on the environment, e.g. --env-arg horizon=...).")
    stride = config.stride or max(1, math.ceil(horizon / AUTO_BLOCKS))
    return dataclasses.replace(config, horizon=horizon, stride=stride)


def wrap_env(env, config: Config):
    """SQIRL's policies are indexed by time: the observation carries the time step."""
    return env if isinstance(env, TimeFeature) else TimeFeature(env)


def steps_per_update(config: Config) -> int:
    """Environment steps simulated per iteration (``num_envs`` rollouts of ``horizon`` steps; the steps
    after an episode's end are simulated but not used, see the ``sample_steps`` metric)."""
    return config.num_envs * max(1, config.horizon)


def num_blocks(config: Config) -> int:
    return math.ceil(config.horizon / config.stride)


# ----------------------------------------------------------------------------- state
@struct.dataclass
class AgentParams:
    frozen: Any  # network weights per block of time steps, stacked on a leading axis
    latest: Any  # the network being trained (used greedily for blocks not learned yet)
    learned: jax.Array  # number of blocks learned so far (at most num_blocks)
    network: QNetwork = struct.field(pytree_node=False)
    config: Config = struct.field(pytree_node=False)


@struct.dataclass
class State:
    agent: AgentParams
    opt_state: Any
    block: jax.Array  # the block this iteration learns
    key: jax.Array
    config: Config = struct.field(pytree_node=False)
    env: Any = struct.field(pytree_node=False)
    optimizer: Any = struct.field(pytree_node=False)


@struct.dataclass
class Batch:
    obs: jax.Array  # [T, N, D]
    action: jax.Array
    reward: jax.Array
    ended: jax.Array  # the episode ended at this step (terminated or out of time)
    next_obs: jax.Array  # the true next observation
    alive: jax.Array  # the step belongs to the first episode of its environment
    prefix: jax.Array  # time steps below this followed the learned policy
    episode_return: jax.Array
    episode_done: jax.Array
    episode_length: jax.Array


# ----------------------------------------------------------------------------- acting
def _q_heads(network, weights, obs, planning_depth: int) -> jax.Array:
    """Q-values of every head, ``[..., k, A]``."""
    out = q_values(network, weights, obs)
    return out.reshape(out.shape[:-1] + (planning_depth, -1))


def _time_step(obs: jax.Array, horizon: int) -> jax.Array:
    return jnp.round(obs[..., -1] * horizon).astype(jnp.int32)


def _weights_for_block(params: AgentParams, block: jax.Array):
    """The frozen weights of ``block``, or the latest ones where that block is not learned yet."""
    use_frozen = block < params.learned
    index = jnp.minimum(block, num_blocks(params.config) - 1)
    return jax.tree.map(lambda stack, latest: jnp.where(use_frozen, stack[index], latest), params.frozen, params.latest)


def act(params: AgentParams, obs: jax.Array, key: jax.Array, greedy: bool = False) -> jax.Array:
    """Greedy on the last head with the policy of each row's time step. Not greedy: uniformly random
    at time steps whose block is not learned yet (the exploration SQIRL collects with)."""
    config = params.config
    blocks = _time_step(obs, config.horizon) // config.stride

    def one(o, block):
        q = _q_heads(params.network, _weights_for_block(params, block), o[None], config.planning_depth)[0, -1]
        return jnp.argmax(q)

    greedy_action = jax.vmap(one)(obs, blocks)
    random_action = jax.random.randint(key, greedy_action.shape, 0, params.network.num_actions // config.planning_depth)
    return jnp.where(jnp.logical_or(greedy, blocks < params.learned), greedy_action, random_action)


def agent_params(state: State) -> AgentParams:
    return state.agent


# ----------------------------------------------------------------------------- init
def init(key: jax.Array, env, config: Config) -> State:
    if not config.horizon or not config.stride:
        config = resolve_config(env, config)
    env = wrap_env(env, config)
    network = QNetwork(obs_shape=env.obs_info.shape, num_actions=config.planning_depth * env.act_info.n,
                       hidden=config.hidden, activation=config.activation, layer_norm=config.layer_norm)
    key, net_key = jax.random.split(key)
    weights = network.init(net_key, jnp.zeros((1,) + env.obs_info.shape, jnp.float32))
    frozen = jax.tree.map(lambda w: jnp.broadcast_to(w, (num_blocks(config),) + w.shape), weights)
    optimizer = make_optimizer(config.learning_rate, config.max_grad_norm, "adam")
    agent = AgentParams(frozen, weights, jnp.zeros((), jnp.int32), network, config)
    return State(agent, optimizer.init(weights), jnp.zeros((), jnp.int32), key, config,
                 vectorize(env, config.num_envs), optimizer)


# ----------------------------------------------------------------------------- collect
def collect(state: State) -> tuple[State, Batch]:
    """``num_envs`` fresh episodes of at most ``horizon`` steps: learned policy before the block, random from it."""
    config, agent, venv = state.config, state.agent, state.env
    prefix = state.block * config.stride
    key, reset_key, loop_key = jax.random.split(state.key, 3)
    obs, env_state = venv.reset(reset_key)

    def env_step(carry, t):
        env_state, obs, alive, key = carry
        key, act_key, step_key = jax.random.split(key, 3)
        # Every environment of the first episode is at time t: one set of frozen weights serves all.
        learned_action = lambda: jnp.argmax(  # noqa: E731
            _q_heads(agent.network, _weights_for_block(agent, t // config.stride), obs, config.planning_depth)[:, -1], -1)
        random_action = jax.random.randint(act_key, (config.num_envs,), 0, venv.act_info.n)
        action = jax.lax.cond(t < prefix, learned_action, lambda: random_action)
        next_obs, env_state, reward, terminated, truncated, info = venv.step(step_key, env_state, action)
        ended = jnp.logical_or(terminated, truncated)
        step = Batch(obs, action, reward, ended, true_next_obs(next_obs, info, terminated, truncated), alive, prefix,
                     info["episode_return"], jnp.logical_and(info["episode_done"], alive), info["episode_length"])
        return (env_state, next_obs, jnp.logical_and(alive, ~ended), key), step

    alive = jnp.ones(config.num_envs, bool)
    _, batch = jax.lax.scan(env_step, (env_state, obs, alive, loop_key), jnp.arange(config.horizon))
    return state.replace(key=key), batch


# ----------------------------------------------------------------------------- learn
def monte_carlo_returns(reward: jax.Array, ended: jax.Array, gamma: float) -> jax.Array:
    r""":math:`G_t = r_t + \gamma (1 - \text{end}_t) G_{t+1}`, :math:`G_T = 0` (time-major ``[T, N]``)."""

    def backward(next_return, step):
        r, end = step
        g = r + gamma * (1.0 - end) * next_return
        return g, g

    _, returns = jax.lax.scan(backward, jnp.zeros_like(reward[0]), (reward, ended.astype(reward.dtype)), reverse=True)
    return returns


def fitted_q_targets(mc_return, reward, ended, next_q, gamma: float) -> jax.Array:
    r"""Targets of every head, ``[B, k]``: head 1 the Monte-Carlo return of the random continuation,
    head :math:`j+1` the backup :math:`r + \gamma (1 - \text{end}) \max_a Q^j(s', a)` of head :math:`j`
    (``next_q`` is ``[B, k, A]`` on the true next states)."""
    backups = reward[:, None] + gamma * (1.0 - ended[:, None]) * jnp.max(next_q[:, :-1], axis=-1)
    return jnp.concatenate([mc_return[:, None], backups], axis=1)


def window(config: Config) -> int:
    """Time steps an iteration learns from: by default the block's ``stride`` steps plus the ``k - 1``
    after it that the fitted-Q backups reach (head :math:`j` is needed :math:`k - j` steps after the
    block); a larger ``--window`` also regresses on later steps of the random continuation, which
    helps a time-conditioned network generalise when rewards are dense (CartPole)."""
    return min(config.horizon, max(config.window, config.stride + config.planning_depth - 1))


def learn(state: State, batch: Batch) -> tuple[State, dict[str, jax.Array]]:
    config, agent = state.config, state.agent
    k = config.planning_depth
    ended = batch.ended.astype(jnp.float32)
    reward = batch.reward * config.reward_scale
    returns = monte_carlo_returns(reward, ended, config.gamma)
    prefix = batch.prefix[0]

    # The rows of this block's window: the time steps [prefix, prefix + window) of every first episode.
    width = window(config)
    start = jnp.minimum(prefix, config.horizon - width)
    take = lambda x: jax.lax.dynamic_slice_in_dim(x, start, width, axis=0).reshape((-1,) + x.shape[2:])  # noqa: E731
    time = start + jnp.arange(width)[:, None]
    usable = jnp.logical_and(jax.lax.dynamic_slice_in_dim(batch.alive, start, width, axis=0), time >= prefix)
    data = dict(obs=take(batch.obs), action=take(batch.action), reward=take(reward), ended=take(ended),
                next_obs=take(batch.next_obs), mc=take(returns), weight=usable.reshape(-1).astype(jnp.float32))
    key, epoch_key = jax.random.split(state.key)

    def loss_fn(weights, mb):
        q = _q_heads(agent.network, weights, mb["obs"], k)  # [B, k, A]
        chosen = jnp.take_along_axis(q, mb["action"][:, None, None].astype(jnp.int32), axis=-1)[..., 0]  # [B, k]
        per_row = jnp.mean((chosen - mb["target"]) ** 2, axis=-1)
        loss = jnp.sum(mb["weight"] * per_row) / jnp.maximum(jnp.sum(mb["weight"]), 1.0)
        return loss, loss

    def minibatch_step(carry, mb):
        weights, opt_state = carry
        grads, loss = jax.grad(loss_fn, has_aux=True)(weights, mb)
        updates, opt_state = state.optimizer.update(grads, opt_state, weights)
        return (optax.apply_updates(weights, updates), opt_state), loss

    def with_targets(carry, data):
        # Fitted-Q targets from the network as it stands at the start of the epoch.
        next_q = jax.lax.stop_gradient(_q_heads(agent.network, carry[0], data["next_obs"], k))
        return {**data, "target": fitted_q_targets(data["mc"], data["reward"], data["ended"], next_q, config.gamma)}

    (weights, opt_state), losses = minibatch_epochs(minibatch_step, (agent.latest, state.opt_state), data, epoch_key,
                                                    config.update_epochs, config.num_minibatches, with_targets)
    frozen = jax.tree.map(lambda stack, w: stack.at[state.block].set(w), agent.frozen, weights)
    learned = jnp.maximum(agent.learned, state.block + 1)
    used = data["weight"]
    metrics = {"loss": jnp.mean(losses), "block": state.block.astype(jnp.float32), "prefix": prefix.astype(jnp.float32),
               "usable_rows": jnp.sum(used), "sample_steps": jnp.sum(batch.alive.astype(jnp.float32)),
               "mc_return_mean": jnp.sum(used * data["mc"]) / jnp.maximum(jnp.sum(used), 1.0)}
    agent = agent.replace(frozen=frozen, latest=weights, learned=learned)
    state = state.replace(agent=agent, opt_state=opt_state, key=key, block=(state.block + 1) % num_blocks(config))
    return state, metrics
