r"""MBDPO ("Scaling World-Model RL Through Diffusion Policy Optimization"): a flow policy over H-step action
sequences inside a learned latent world model, and TD-MPC2's MPPI planner on the same model as the baseline
(``method="mppi"``). An algorithm of the fused engine (:mod:`longhorizon.algos` protocol).

**Policy.** A flow (rectified-flow / flow-matching, :mod:`longhorizon.offline.flows`) over the flattened action
sequence :math:`x = a_{0:H} \in [-1, 1]^{H A}` conditioned on the latent :math:`z = h_\theta(s)`: noise
:math:`x_0 \sim \mathcal N(0, I)` is integrated by ``flow_steps`` Euler steps of :math:`v_\phi(z, x_t, t)`.

**Policy improvement** (one update, on replay states :math:`s_b`, :math:`z_b = \mathrm{sg}(h_\theta(s_b))`):

1. draw ``N`` candidate sequences per state from the current policy, perturbed by ``exploration_std``;
2. score each by the imagined return with terminal value, :math:`J_{bi} = J(z_b, a^{(i)})`
   (:func:`longhorizon.control.world_model.imagined_return`);
3. the KL-regularised improvement :math:`\max_\pi \mathbb E_\pi[J] - \tau\, \mathrm{KL}(\pi \Vert \pi_{old})` has the
   solution :math:`\pi^*(a \mid z) \propto \pi_{old}(a \mid z) \exp(J(z, a) / \tau)`, so candidates are resampled
   with weights :math:`w_{bi} = \mathrm{softmax}_i(\tilde J_{bi} / \tau)` on per-state standardised returns
   :math:`\tilde J` (:func:`sequence_weights`): the score field is moved toward higher imagined return while the
   KL term keeps it a trust-region step from the previous policy;
4. fit the resampled sequences by flow matching, plus the **behaviour energy**: the flow-matching loss on replay
   action sequences :math:`a_{t:t+H}` (the data's implicit energy :math:`-\log \mu(a \mid s)` up to the flow's
   bound), weighted by ``behaviour_coef``, which anchors the policy to the data the world model was trained on:

.. math:: L(\phi) = L_{FM}(\phi; z, a^*) + \beta\, L_{FM}(\phi; z, a^{\mathrm{replay}}_{t:t+H}).

**Execution** is receding-horizon: sample one sequence, execute its first action (plus exploration noise when
collecting), replan at the next step.

**MPPI** (TD-MPC2's planner): from :math:`\mu = 0, \sigma = \sigma_{max}` per step, ``mppi_iterations`` times
sample ``mppi_samples`` sequences :math:`\mathcal N(\mu, \sigma^2)` clipped to the box, keep the ``mppi_elites``
best by :math:`J`, weight them :math:`w_e \propto \exp(\kappa (J_e - \max J))` and refit
:math:`\mu = \sum_e w_e a_e`, :math:`\sigma = \mathrm{clip}(\sqrt{\sum_e w_e (a_e - \mu)^2}, \sigma_{min}, \sigma_{max})`
(:func:`mppi_update`); execute :math:`\mu_0`.

**On the engine.** ``collect`` takes ``num_steps`` receding-horizon steps in each of ``num_envs`` environments
(uniformly random actions before ``learning_starts``) and appends them to the replay buffer (``core.replay``);
``learn`` takes ``num_steps x updates_per_step`` updates, each a world-model step on ``batch_size`` windows of
``max(unroll, H)`` transitions (:func:`longhorizon.control.world_model.world_model_loss`, then the EMA target) and,
for ``mbdpo``, a policy step on the first ``policy_batch`` of those windows. No update runs before
``learning_starts`` environment steps (decided inside jit).

Deviations from the paper (as far as its abstract and project page describe it): a flow with Euler sampling in
place of a DDPM-style diffusion; the score correction is realised by exponentially weighted resampling of the
policy's own candidates (the closed form of the KL trust region) rather than by an explicit score-gradient term;
the behaviour energy is the replay flow-matching loss, not a separately learned energy network; no policy prior
inside the planner; MPPI does not warm-start from the previous step's plan.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from longhorizon.config import AlgoConfig, float_fields
from longhorizon.control import world_model as wm
from longhorizon.core import replay
from longhorizon.core.optim import make_optimizer
from longhorizon.envs import true_next_obs, vectorize
from longhorizon.errors import UsageError
from longhorizon.offline.flows import VelocityField, euler_sample, flow_matching_loss

NAME = "mbdpo"
METHODS = ("mbdpo", "mppi")


# ----------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class Config(AlgoConfig):
    method: str = "mbdpo"  # mbdpo (flow policy) | mppi (planner on the same world model)
    num_envs: int = 4
    num_steps: int = 1  # vector-environment steps per collect
    total_steps: int = 8_000  # environment steps per seed
    learning_starts: int = 1_000  # uniformly random actions (and no update) before this many steps
    updates_per_step: int = 1  # gradient updates per vector-environment step
    batch_size: int = 128
    buffer_size: int = 100_000  # transitions, all environments together
    horizon: int = 5  # H: length of the planned action sequences
    reward_scale: float = 0.1
    exploration_std: float = 0.3
    # world model (world_model.WorldModelConfig's fields, flat so that each is a CLI setting)
    latent_dim: int = 32
    wm_hidden: tuple[int, ...] = (64, 64)
    unroll: int = 3
    gamma: float = 0.95
    rho: float = 0.5
    consistency_coef: float = 20.0
    reward_coef: float = 0.5
    value_coef: float = 0.1
    target_tau: float = 0.01
    wm_learning_rate: float = 1e-3
    wm_max_grad_norm: float = 10.0
    # flow policy
    policy_hidden: tuple[int, ...] = (128, 128)
    flow_steps: int = 4
    policy_batch: int = 32  # states per policy update (the first of the world model's windows)
    num_candidates: int = 16  # N sequences scored per state
    temperature: float = 0.5  # tau on standardised returns
    behaviour_coef: float = 0.2  # beta
    policy_lr: float = 3e-4
    # MPPI
    mppi_samples: int = 64
    mppi_elites: int = 8
    mppi_iterations: int = 3
    mppi_temperature: float = 0.5  # kappa
    min_std: float = 0.05
    max_std: float = 2.0

    def validate(self) -> None:
        object.__setattr__(self, "policy_hidden", tuple(int(h) for h in self.policy_hidden))
        object.__setattr__(self, "wm_hidden", tuple(int(h) for h in self.wm_hidden))
        if self.method not in METHODS:
            raise UsageError(f"unknown MBDPO method '{self.method}'; choose one of {', '.join(METHODS)}.")
        self._check_positive("num_envs", "num_steps", "updates_per_step", "batch_size", "buffer_size", "horizon",
                             "reward_scale", "flow_steps", "policy_batch", "num_candidates", "temperature", "policy_lr",
                             "mppi_samples", "mppi_elites", "mppi_iterations", "mppi_temperature", "min_std", "max_std")
        if self.behaviour_coef < 0 or self.exploration_std < 0 or self.learning_starts < 0:
            raise UsageError("mbdpo behaviour_coef, exploration_std and learning_starts must be non-negative; "
                             "set them to 0 or more.")
        if self.mppi_elites > self.mppi_samples:
            raise UsageError(f"mppi_elites ({self.mppi_elites}) exceeds mppi_samples ({self.mppi_samples}); "
                             "keep fewer elites than samples.")
        if self.min_std > self.max_std:
            raise UsageError(f"min_std ({self.min_std}) exceeds max_std ({self.max_std}); give min_std <= max_std.")
        if not self.policy_hidden or min(self.policy_hidden) < 1:
            raise UsageError(f"policy_hidden must list positive widths, got {self.policy_hidden}; e.g. 128,128.")
        if self.policy_batch > self.batch_size:
            self._fail("policy_batch", f"exceeds batch_size {self.batch_size}", "pass at most the batch size")
        if self.learning_starts + steps_per_update(self) > self.total_steps:
            raise UsageError(f"total_steps {self.total_steps} leaves no training after learning_starts "
                             f"{self.learning_starts}; raise total_steps or lower learning_starts.")
        if self.buffer_size < self.num_envs * (self.num_steps + self.window):
            self._fail("buffer_size", "cannot hold a replay window per environment", "pass e.g. --buffer-size 100000")
        self.world_model  # validates the world-model fields  # noqa: B018

    def static_floats(self) -> set[str]:
        return set(float_fields(self))  # the world model's settings are validated as Python numbers

    @property
    def world_model(self) -> wm.WorldModelConfig:
        return wm.WorldModelConfig(self.latent_dim, self.wm_hidden, self.unroll, self.gamma, self.rho,
                                   self.consistency_coef, self.reward_coef, self.value_coef, self.target_tau,
                                   self.wm_learning_rate, self.wm_max_grad_norm)

    @property
    def window(self) -> int:  # replay window: the world model's unroll and the behaviour sequences
        return max(self.unroll, self.horizon)


def default_config(env_id) -> Config:  # an id or an environment object
    return Config()


def check_env(env, config: Config) -> None:
    if env.act_info.discrete:
        raise UsageError(f"mbdpo needs a continuous action space but {env.id} has {env.act_info.describe()}; "
                         "choose e.g. Pendulum-v1.")


def steps_per_update(config: Config) -> int:
    return config.num_envs * config.num_steps


# ----------------------------------------------------------------------------- pure pieces
def sequence_weights(returns: jax.Array, temperature: float) -> jax.Array:
    r""":math:`w_{bi} = \mathrm{softmax}_i(\tilde J_{bi} / \tau)`, :math:`\tilde J = (J - \bar J_b) / (\mathrm{std}_b(J) + 10^{-6})`;
    ``returns [B, N]`` -> ``[B, N]`` (each row sums to 1)."""
    standardised = (returns - returns.mean(-1, keepdims=True)) / (returns.std(-1, keepdims=True) + 1e-6)
    return jax.nn.softmax(standardised / temperature, axis=-1)


def resample(key: jax.Array, candidates: jax.Array, weights: jax.Array) -> jax.Array:
    """One candidate per state drawn by its weight: ``candidates [B, N, ...]``, ``weights [B, N]`` -> ``[B, ...]``."""
    index = jax.random.categorical(key, jnp.log(weights + 1e-30), axis=-1)
    return jnp.take_along_axis(candidates, index.reshape((-1, 1) + (1,) * (candidates.ndim - 2)), axis=1)[:, 0]


def mppi_update(samples: jax.Array, returns: jax.Array, num_elites: int, temperature: float, min_std: float,
                max_std: float) -> tuple[jax.Array, jax.Array]:
    r"""One MPPI refit (module docstring): ``samples [N, H, A]``, ``returns [N]`` -> ``(mean, std)``, each ``[H, A]``."""
    elite_returns, elite_index = jax.lax.top_k(returns, num_elites)
    elites = samples[elite_index]
    w = jnp.exp(temperature * (elite_returns - elite_returns.max()))
    w = w / w.sum()
    mean = jnp.einsum("e,eha->ha", w, elites)
    std = jnp.sqrt(jnp.einsum("e,eha->ha", w, (elites - mean) ** 2))
    return mean, jnp.clip(std, min_std, max_std)


def mppi_plan(model: wm.Bound, z: jax.Array, key: jax.Array, config: Config, action_dim: int) -> jax.Array:
    """MPPI's plan ``[H, A]`` (the final mean) from one latent ``z [Z]``."""
    shape = (config.horizon, action_dim)
    gamma = config.gamma

    def iteration(carry, key):
        mean, std = carry
        samples = jnp.clip(mean + std * jax.random.normal(key, (config.mppi_samples,) + shape), -1.0, 1.0)
        returns = wm.imagined_return(model, jnp.broadcast_to(z, (config.mppi_samples,) + z.shape), samples, gamma)
        return mppi_update(samples, returns, config.mppi_elites, config.mppi_temperature, config.min_std,
                           config.max_std), None

    init = (jnp.zeros(shape), jnp.full(shape, config.max_std))
    (mean, _), _ = jax.lax.scan(iteration, init, jax.random.split(key, config.mppi_iterations))
    return mean


def policy_network(config: Config, action_dim: int) -> VelocityField:
    return VelocityField(config.horizon * action_dim, config.policy_hidden, "silu", True)


def sample_sequences(network: VelocityField, params, z: jax.Array, key: jax.Array, config: Config,
                     action_dim: int) -> jax.Array:
    """Flow samples ``[B, H, A]`` in the box at latents ``z [B, Z]``."""
    noise = jax.random.normal(key, (z.shape[0], config.horizon * action_dim))
    x = euler_sample(lambda o, x, t: network.apply(params, o, x, t), z, noise, config.flow_steps)
    return x.reshape(z.shape[0], config.horizon, action_dim)


def policy_loss(network: VelocityField, params, z: jax.Array, targets: jax.Array, behaviour: jax.Array,
                key: jax.Array, behaviour_coef: float) -> jax.Array:
    r""":math:`L_{FM}(z, a^*) + \beta L_{FM}(z, a^{replay})`; ``z [B, Z]``, ``targets, behaviour [B, H, A]``."""
    velocity = lambda o, x, t: network.apply(params, o, x, t)  # noqa: E731
    keys = jax.random.split(key, 4)
    flat = lambda a: a.reshape(a.shape[0], -1)  # noqa: E731

    def fm(x1, k_noise, k_t):
        return flow_matching_loss(velocity, z, flat(x1), jax.random.normal(k_noise, flat(x1).shape),
                                  jax.random.uniform(k_t, (z.shape[0],)))

    return fm(targets, keys[0], keys[1]) + behaviour_coef * fm(behaviour, keys[2], keys[3])



# ----------------------------------------------------------------------------- state
@struct.dataclass
class AgentParams:
    wm_params: Any
    policy_params: Any
    low: jax.Array  # [A]: the environment's action box
    high: jax.Array
    config: Config = struct.field(pytree_node=False)


@struct.dataclass
class Transition:
    obs: jax.Array
    action: jax.Array  # in [-1, 1]
    reward: jax.Array  # scaled by reward_scale
    next_obs: jax.Array  # the true next observation (final one at an episode end)
    terminated: jax.Array
    done: jax.Array  # terminated or truncated


@struct.dataclass
class State:
    agent: AgentParams
    wm_target: Any
    wm_opt: Any
    policy_opt: Any
    buffer: replay.ReplayBuffer
    env_state: Any
    obs: jax.Array  # [E, o]
    key: jax.Array
    env_steps: jax.Array
    config: Config = struct.field(pytree_node=False)
    env: Any = struct.field(pytree_node=False)


@struct.dataclass
class Batch:
    transition: Transition
    episode_return: jax.Array
    episode_done: jax.Array
    episode_length: jax.Array


def world_model_network(config: Config) -> wm.WorldModel:
    return wm.WorldModel(config.latent_dim, config.wm_hidden)


def wm_optimizer(config: Config) -> optax.GradientTransformation:
    return make_optimizer(config.wm_learning_rate, config.wm_max_grad_norm)


def policy_optimizer(config: Config) -> optax.GradientTransformation:
    return make_optimizer(config.policy_lr, 1.0)


def init(key: jax.Array, env, config: Config) -> State:
    obs_dim, action_dim = env.obs_info.shape[0], env.act_info.shape[0]
    venv = vectorize(env, config.num_envs)
    k_wm, k_pi, k_env, key = jax.random.split(key, 4)
    wm_params = world_model_network(config).init(k_wm, jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim)))
    policy_params = policy_network(config, action_dim).init(
        k_pi, jnp.zeros((1, config.latent_dim)), jnp.zeros((1, config.horizon * action_dim)), jnp.zeros((1,)))
    obs, env_state = venv.reset(k_env)
    n = config.num_envs
    example = Transition(obs, jnp.zeros((n, action_dim)), jnp.zeros(n), obs, jnp.zeros(n), jnp.zeros(n))
    box = lambda bound: jnp.broadcast_to(jnp.asarray(bound, jnp.float32), (action_dim,))  # noqa: E731  a scalar bound too
    agent = AgentParams(wm_params, policy_params, box(env.act_info.low), box(env.act_info.high), config)
    return State(agent, wm_params, wm_optimizer(config).init(wm_params), policy_optimizer(config).init(policy_params),
                 replay.create(example, config.buffer_size // n), env_state, obs, key, jnp.zeros((), jnp.int32),
                 config, venv)


# ----------------------------------------------------------------------------- acting
def plan(params: AgentParams, obs: jax.Array, key: jax.Array) -> jax.Array:
    """Planned sequences ``[E, H, A]`` in [-1, 1] for observations ``obs [E, o]``: flow samples or MPPI plans."""
    config, action_dim = params.config, params.low.shape[-1]
    online = wm.bind(world_model_network(config), params.wm_params)
    z = online.encode(obs)
    if config.method == "mppi":
        return jax.vmap(lambda zi, k: mppi_plan(online, zi, k, config, action_dim))(z, jax.random.split(key, z.shape[0]))
    return sample_sequences(policy_network(config, action_dim), params.policy_params, z, key, config, action_dim)


def unit_action(params: AgentParams, obs: jax.Array, key: jax.Array, greedy) -> jax.Array:
    """The plan's first action ``[E, A]`` in [-1, 1], plus clipped exploration noise unless ``greedy``."""
    k_plan, k_noise = jax.random.split(key)
    first = plan(params, obs, k_plan)[:, 0]
    noisy = jnp.clip(first + params.config.exploration_std * jax.random.normal(k_noise, first.shape), -1.0, 1.0)
    return jnp.where(greedy, first, noisy)


def to_env(params: AgentParams, a: jax.Array) -> jax.Array:
    """[-1, 1] -> the environment's action box."""
    return params.low + 0.5 * (a + 1.0) * (params.high - params.low)


def act(params: AgentParams, obs: jax.Array, key: jax.Array, greedy: bool = False) -> jax.Array:
    return to_env(params, unit_action(params, obs, key, greedy))


def agent_params(state: State) -> AgentParams:
    return state.agent


# ----------------------------------------------------------------------------- collect
def collect(state: State) -> tuple[State, Batch]:
    """``num_steps`` receding-horizon steps in every environment (random before ``learning_starts``), replayed."""
    agent, venv, config = state.agent, state.env, state.config
    action_dim = agent.low.shape[-1]

    def env_step(carry, _):
        env_state, obs, env_steps, key = carry
        key, k_act, k_env = jax.random.split(key, 3)
        a = jax.lax.cond(env_steps < config.learning_starts,
                         lambda: jax.random.uniform(k_act, (config.num_envs, action_dim), minval=-1.0, maxval=1.0),
                         lambda: unit_action(agent, obs, k_act, False))
        next_obs, env_state, reward, terminated, truncated, info = venv.step(k_env, env_state, to_env(agent, a))
        done = jnp.logical_or(terminated, truncated)
        row = Transition(obs, a, reward * config.reward_scale, true_next_obs(next_obs, info, terminated, truncated),
                         terminated.astype(jnp.float32), done.astype(jnp.float32))
        return (env_state, next_obs, env_steps + config.num_envs, key), Batch(row, info["episode_return"],
                                                                              info["episode_done"], info["episode_length"])

    (env_state, obs, env_steps, key), batch = jax.lax.scan(
        env_step, (state.env_state, state.obs, state.env_steps, state.key), None, config.num_steps)
    buffer = replay.add(state.buffer, batch.transition)
    return state.replace(env_state=env_state, obs=obs, env_steps=env_steps, key=key, buffer=buffer), batch


# ----------------------------------------------------------------------------- learn
def update(state: State, key: jax.Array) -> tuple[State, dict[str, jax.Array]]:
    """One world-model step (then the EMA target) and, for ``mbdpo``, one policy-improvement step."""
    config, agent = state.config, state.agent
    action_dim = agent.low.shape[-1]
    model, network = world_model_network(config), policy_network(config, action_dim)
    k_sample, k_cand, k_noise, k_pick, k_fm = jax.random.split(key, 5)
    data = replay.sample(state.buffer, k_sample, config.batch_size, config.window)
    u = config.unroll
    window = wm.Window(data.obs[:, :u], data.action[:, :u], data.reward[:, :u], data.next_obs[:, :u],
                       data.terminated[:, :u], data.done[:, :u])
    target = wm.bind(model, state.wm_target)
    (wm_loss, metrics), grads = jax.value_and_grad(
        lambda p: wm.world_model_loss(wm.bind(model, p), target, window, config.world_model), has_aux=True)(agent.wm_params)
    updates, wm_opt = wm_optimizer(config).update(grads, state.wm_opt, agent.wm_params)
    wm_params = optax.apply_updates(agent.wm_params, updates)
    state = state.replace(agent=agent.replace(wm_params=wm_params), wm_opt=wm_opt,
                          wm_target=wm.ema(state.wm_target, wm_params, config.target_tau))
    metrics = {**metrics, "world_model_loss": wm_loss}
    if config.method == "mppi":
        return state, metrics
    online = wm.bind(model, wm_params)
    n, b = config.num_candidates, config.policy_batch
    z = jax.lax.stop_gradient(online.encode(data.obs[:b, 0]))  # [b, Z]
    z_rep = jnp.repeat(z, n, axis=0)
    candidates = sample_sequences(network, agent.policy_params, z_rep, k_cand, config, action_dim)
    candidates = jnp.clip(candidates + config.exploration_std * jax.random.normal(k_noise, candidates.shape), -1, 1)
    returns = wm.imagined_return(online, z_rep, candidates, config.gamma).reshape(b, n)
    targets = resample(k_pick, candidates.reshape(b, n, config.horizon, action_dim),
                       sequence_weights(returns, config.temperature))
    behaviour = data.action[:b, :config.horizon]
    loss, grads = jax.value_and_grad(lambda p: policy_loss(network, p, z, jax.lax.stop_gradient(targets), behaviour,
                                                           k_fm, config.behaviour_coef))(agent.policy_params)
    updates, policy_opt = policy_optimizer(config).update(grads, state.policy_opt, agent.policy_params)
    state = state.replace(agent=state.agent.replace(policy_params=optax.apply_updates(agent.policy_params, updates)),
                          policy_opt=policy_opt)
    return state, {**metrics, "policy_loss": loss, "imagined_return": returns.mean()}


def learn(state: State, batch: Batch) -> tuple[State, dict[str, jax.Array]]:
    """``num_steps x updates_per_step`` updates once ``learning_starts`` steps are in the buffer."""
    config = state.config
    key, learn_key = jax.random.split(state.key)

    # Only the learned parts pass through the branch: the replay buffer is read, never copied.
    def train(learned):
        agent, wm_target, wm_opt, policy_opt = learned
        start = state.replace(agent=agent, wm_target=wm_target, wm_opt=wm_opt, policy_opt=policy_opt)
        end, metrics = jax.lax.scan(update, start, jax.random.split(learn_key, config.num_steps * config.updates_per_step))
        return (end.agent, end.wm_target, end.wm_opt, end.policy_opt), jax.tree.map(jnp.mean, metrics)

    def skip(learned):
        shapes = jax.eval_shape(train, learned)[1]
        return learned, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    ready = jnp.logical_and(state.env_steps >= config.learning_starts, state.buffer.size >= config.window)
    learned = (state.agent, state.wm_target, state.wm_opt, state.policy_opt)
    (agent, wm_target, wm_opt, policy_opt), metrics = jax.lax.cond(ready, train, skip, learned)
    state = state.replace(agent=agent, wm_target=wm_target, wm_opt=wm_opt, policy_opt=policy_opt, key=key)
    return state, {**metrics, "learning": ready.astype(jnp.float32)}


def policy_parameter_count(config: Config, env) -> int:
    """Parameters of the flow policy's velocity network."""
    network = policy_network(config, env.act_info.shape[0])
    params = jax.eval_shape(lambda: network.init(jax.random.PRNGKey(0), jnp.zeros((1, config.latent_dim)),
                                                 jnp.zeros((1, config.horizon * env.act_info.shape[0])), jnp.zeros((1,))))
    return int(sum(x.size for x in jax.tree.leaves(params)))
