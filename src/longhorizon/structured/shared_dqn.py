r"""DQN agents on the networked dilemma (:mod:`longhorizon.structured.dilemma`) with a chosen degree of
parameter sharing (Lee & Weng 2026, "How Exploration Breaks Cooperation in Shared-Policy MARL").

``M`` Q-networks serve ``N`` agents; agent ``i`` uses network ``g(i) = i * M // N`` (contiguous blocks
of agents, so on the lattice a group is a band of rows):

* ``sharing="shared"``: ``M = 1``, one network for all agents (parameter sharing);
* ``sharing="independent"``: ``M = N``, one network per agent (vmapped parameters);
* ``sharing="grouped"``: ``M = groups`` shared networks.

State augmentation appends to each agent's local observation ``o_i`` (``[2]``) either the exploration
signals ``(epsilon, t / T)`` (``augment="exploration"``: the paper's learning-progress and exploration
inputs) or the one-hot of the agent's group (``augment="group"``, ``groups`` entries).

Per environment step (all agents at once): every agent acts epsilon-greedily on its network's
``Q(x_i, .)``, the joint step's ``N`` transitions enter a replay buffer (``core.replay``, one row per
step, agents on the second axis), and each network takes one Adam step on ``batch_size``
transitions drawn uniformly from its own agents' stored steps, minimising the Huber loss of

.. math::
    Q_{\theta_m}(x, a) - \big(r + \gamma \max_{a'} Q_{\bar\theta_m}(x', a')\big),

with a hard target copy :math:`\bar\theta_m \leftarrow \theta_m` every ``target_update_every`` steps.
The iterated game is continuing: the episode's time limit bootstraps (``x'`` is the true next input).
Exploration ``epsilon`` is fixed during a run (it is the swept quantity) and, with the payoffs, is an
argument of :func:`make_train`'s function, so seeds x epsilons x harshness run as one vmapped program.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct

from longhorizon.config import AlgoConfig
from longhorizon.core import replay
from longhorizon.core.distributions import epsilon_greedy
from longhorizon.core.losses import huber
from longhorizon.core.nets import QNetwork
from longhorizon.core.optim import make_optimizer
from longhorizon.errors import UsageError
from longhorizon.structured.dilemma import COOPERATE, DEFECT, OBS_DIM, NetworkedDilemma

SHARING = ("shared", "independent", "grouped")
AUGMENT = ("none", "exploration", "group")


# ----------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class Config(AlgoConfig):
    sharing: str = "shared"
    groups: int = 4  # grouped sharing, and the one-hot width of augment="group"
    augment: str = "none"
    hidden: tuple[int, ...] = (32, 32)
    learning_rate: float = 1e-3
    max_grad_norm: float = 10.0
    gamma: float = 0.9
    batch_size: int = 32  # per network, per gradient step
    buffer_steps: int = 500  # joint steps kept (each N transitions)
    learning_starts: int = 100  # joint steps before the first gradient step
    target_update_every: int = 100  # joint steps
    total_steps: int = 3_000  # joint steps

    def validate(self) -> None:
        self._check_choice("sharing", SHARING)
        self._check_choice("augment", AUGMENT)
        self._check_positive("groups", "learning_rate", "max_grad_norm", "batch_size", "buffer_steps", "target_update_every")
        self._check_unit_interval("gamma")
        if not self.hidden or any(w <= 0 for w in self.hidden):
            self._fail("hidden", "must list positive layer widths", "pass e.g. hidden=(32, 32)")
        if self.learning_starts < 1:
            self._fail("learning_starts", "must be at least 1 (a gradient step needs stored data)", "pass e.g. 100")
        if self.sharing == "independent" and self.augment == "group":
            self._fail("augment", "gives independent networks a constant input", "pass augment='none' or 'exploration'")

    def num_networks(self, num_agents: int) -> int:
        """``M``; raises UsageError when the agents cannot be split into equal groups."""
        m = {"shared": 1, "independent": num_agents, "grouped": self.groups}[self.sharing]
        if num_agents % m or (self.augment == "group" and num_agents % self.groups):
            raise UsageError(f"{num_agents} agents do not split into {self.groups} equal groups; "
                             f"pass groups dividing {num_agents}.")
        return m

    def input_dim(self) -> int:
        return OBS_DIM + {"none": 0, "exploration": 2, "group": self.groups}[self.augment]


# ----------------------------------------------------------------------------- networks
def network_inputs(config: Config, obs: jax.Array, epsilon: jax.Array, progress: jax.Array) -> jax.Array:
    """``[N, input_dim]``: the local observations ``[N, 2]`` with the configured augmentation."""
    n = obs.shape[0]
    if config.augment == "exploration":
        extra = jnp.broadcast_to(jnp.stack([epsilon, progress]).astype(jnp.float32), (n, 2))
    elif config.augment == "group":
        extra = jax.nn.one_hot(jnp.arange(n) * config.groups // n, config.groups)
    else:
        return obs
    return jnp.concatenate([obs, extra], axis=1)


def all_q_values(network: QNetwork, params, inputs: jax.Array) -> jax.Array:
    """``[N, 2]``: Q of every agent under its own network; ``params`` leaves ``[M, ...]`` and agents in
    ``M`` contiguous blocks, so the blocks are a reshape and the networks a vmap."""
    m = jax.tree.leaves(params)[0].shape[0]
    blocks = inputs.reshape(m, -1, inputs.shape[-1])
    return jax.vmap(network.apply)(params, blocks).reshape(inputs.shape[0], 2)


# ----------------------------------------------------------------------------- state
@struct.dataclass
class TrainState:
    params: dict  # leaves [M, ...]
    target_params: dict
    opt_state: tuple  # leaves [M, ...]
    buffer: replay.ReplayBuffer  # rows [buffer_steps, N, ...]
    env_state: object
    obs: jax.Array  # [N, 2]
    step: jax.Array  # [] joint steps taken
    key: jax.Array


def make_train(env: NetworkedDilemma, config: Config) -> Callable:
    """``train(key, epsilon, payoff) -> metrics``, with its parts as attributes ``train.init``,
    ``train.collect``, ``train.learn`` (and ``train.sample``, ``train.network``):

    * ``init(key, payoff) -> TrainState``;
    * ``collect(state, epsilon) -> (state, step_metrics)``: one joint epsilon-greedy step, stored;
    * ``learn(state) -> state``: one gradient step per network (skipped before ``learning_starts``).
    """
    n = env.num_agents
    m = config.num_networks(n)
    network = QNetwork((config.input_dim(),), 2, hidden=config.hidden, activation="relu", layer_norm=False)
    optimizer = make_optimizer(config.learning_rate, config.max_grad_norm)

    def init(key, payoff) -> TrainState:
        key, net_key, env_key = jax.random.split(key, 3)
        params = jax.vmap(network.init, in_axes=(0, None))(jax.random.split(net_key, m),
                                                             jnp.zeros((1, config.input_dim())))
        obs, env_state = env.reset_arrays(env_key, payoff)
        example = {"x": jnp.zeros((n, config.input_dim())), "a": jnp.zeros(n, jnp.int32), "r": jnp.zeros(n),
                   "x_next": jnp.zeros((n, config.input_dim()))}
        return TrainState(params, params, jax.vmap(optimizer.init)(params), replay.create(example, config.buffer_steps),
                          env_state, obs, jnp.zeros((), jnp.int32), key)

    def collect(state: TrainState, epsilon) -> tuple[TrainState, dict]:
        key, act_key, env_key = jax.random.split(state.key, 3)
        progress = state.step / config.total_steps
        x = network_inputs(config, state.obs, epsilon, progress)
        q = all_q_values(network, state.params, x)
        actions = epsilon_greedy(act_key, q, epsilon)
        obs, env_state, rewards, _, info = env.step_arrays(env_key, state.env_state, actions)
        x_next = network_inputs(config, info["final_obs"], epsilon, (state.step + 1) / config.total_steps)
        row = jax.tree.map(lambda v: v[None], {"x": x, "a": actions, "r": rewards, "x_next": x_next})
        metrics = {"cooperation": jnp.mean(actions == COOPERATE),
                   "greedy_cooperation": jnp.mean(jnp.argmax(q, -1) == COOPERATE),
                   "q_gap": jnp.mean(q[:, COOPERATE] - q[:, DEFECT]), "reward": jnp.mean(rewards)}
        return state.replace(buffer=replay.add(state.buffer, row), env_state=env_state, obs=obs,
                             step=state.step + 1, key=key), metrics

    def td_loss(params, target_params, batch):
        q = network.apply(params, batch["x"])[jnp.arange(batch["a"].shape[0]), batch["a"]]
        target = batch["r"] + config.gamma * network.apply(target_params, batch["x_next"]).max(-1)
        return huber(q - jax.lax.stop_gradient(target)).mean()

    def sample(buffer: replay.ReplayBuffer, key) -> dict:
        """``[M, B]`` transitions: network ``m`` draws stored steps and agents of its own block."""
        time_key, agent_key = jax.random.split(key)
        rows = jax.random.randint(time_key, (m, config.batch_size), 0, buffer.size)
        agents = jnp.arange(m)[:, None] * (n // m) + jax.random.randint(agent_key, (m, config.batch_size), 0, n // m)
        return jax.tree.map(lambda leaf: leaf[rows, agents], buffer.data)

    def learn(state: TrainState) -> TrainState:
        key, sample_key = jax.random.split(state.key)
        batch = sample(state.buffer, sample_key)
        grads = jax.vmap(jax.grad(td_loss))(state.params, state.target_params, batch)
        updates, opt_state = jax.vmap(optimizer.update)(grads, state.opt_state, state.params)
        params = jax.tree.map(jnp.add, state.params, updates)
        ready = state.step >= config.learning_starts
        params, opt_state = jax.tree.map(lambda new, old: jnp.where(ready, new, old), (params, opt_state),
                                         (state.params, state.opt_state))
        copy = state.step % config.target_update_every == 0
        target = jax.tree.map(lambda p, t: jnp.where(copy, p, t), params, state.target_params)
        return state.replace(params=params, target_params=target, opt_state=opt_state, key=key)

    def train(key, epsilon, payoff) -> dict:
        """Metrics per joint step, leaves ``[total_steps]``; ``final_q_gap`` ``[N]`` at the end."""
        def one_step(state, _):
            state, metrics = collect(state, epsilon)
            return learn(state), metrics

        state, metrics = jax.lax.scan(one_step, init(key, payoff), None, length=config.total_steps)
        x = network_inputs(config, state.obs, epsilon, jnp.ones(()))
        q = all_q_values(network, state.params, x)
        return metrics | {"final_q_gap": q[:, COOPERATE] - q[:, DEFECT]}

    train.init, train.collect, train.learn, train.sample, train.network = init, collect, learn, sample, network
    return train


def make_sweep(env: NetworkedDilemma, config: Config) -> Callable:
    """``sweep(keys [R, 2], epsilons [R], payoffs [R, 2, 2]) -> metrics`` with leaves ``[R, ...]``:
    every row (seed, epsilon, harshness) trained in one jitted, vmapped program."""
    return jax.jit(jax.vmap(make_train(env, config)))
