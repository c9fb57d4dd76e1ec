r"""MBDPO ("Scaling World-Model RL Through Diffusion Policy Optimization"): a flow policy over H-step action
sequences inside a learned latent world model, and TD-MPC2's MPPI planner on the same model as the baseline.

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

Deviations from the paper (as far as its abstract and project page describe it): a flow with Euler sampling in
place of a DDPM-style diffusion; the score correction is realised by exponentially weighted resampling of the
policy's own candidates (the closed form of the KL trust region) rather than by an explicit score-gradient term;
the behaviour energy is the replay flow-matching loss, not a separately learned energy network; no policy prior
inside the planner; MPPI does not warm-start from the previous step's plan. The loop is one jitted function
per chunk (vmapped over seeds), not an algorithm of the fused engine: its replay buffer, two optimisers, target
network and planner-in-the-loop acting do not fit the ``collect -> learn`` split without a second copy of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from longhorizon.control import world_model as wm
from longhorizon.core import replay
from longhorizon.core.optim import make_optimizer
from longhorizon.envs.api import true_next_obs
from longhorizon.errors import UsageError
from longhorizon.offline.flows import VelocityField, euler_sample, flow_matching_loss

METHODS = ("mbdpo", "mppi")


@dataclasses.dataclass(frozen=True)
class Config:
    method: str = "mbdpo"  # mbdpo (flow policy) | mppi (planner on the same world model)
    num_envs: int = 4
    total_steps: int = 8_000  # environment steps per seed
    learning_starts: int = 1_000  # uniformly random actions before the first update
    chunks: int = 7  # points on the learning curve
    updates_per_step: int = 1  # gradient updates per vector-environment step
    batch_size: int = 128
    horizon: int = 5  # H: length of the planned action sequences
    reward_scale: float = 0.1
    exploration_std: float = 0.3
    world_model: wm.WorldModelConfig = wm.WorldModelConfig(hidden=(64, 64))
    # flow policy
    policy_hidden: tuple[int, ...] = (128, 128)
    flow_steps: int = 4
    policy_batch: int = 32  # states per policy update
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

    def __post_init__(self):
        object.__setattr__(self, "policy_hidden", tuple(int(h) for h in self.policy_hidden))
        if self.method not in METHODS:
            raise UsageError(f"unknown MBDPO method '{self.method}'; choose one of {', '.join(METHODS)}.")
        for name in ("num_envs", "total_steps", "chunks", "updates_per_step", "batch_size", "horizon", "reward_scale",
                     "flow_steps", "policy_batch", "num_candidates", "temperature", "policy_lr", "mppi_samples",
                     "mppi_elites", "mppi_iterations", "mppi_temperature", "min_std", "max_std"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise UsageError(f"mbdpo Config.{name} must be positive, got {value!r}; choose a positive value.")
        if self.behaviour_coef < 0 or self.exploration_std < 0 or self.learning_starts < 0:
            raise UsageError("mbdpo behaviour_coef, exploration_std and learning_starts must be non-negative; "
                             "set them to 0 or more.")
        if self.mppi_elites > self.mppi_samples:
            raise UsageError(f"mppi_elites ({self.mppi_elites}) exceeds mppi_samples ({self.mppi_samples}); "
                             "keep fewer elites than samples.")
        if self.min_std > self.max_std:
            raise UsageError(f"min_std ({self.min_std}) exceeds max_std ({self.max_std}); give min_std <= max_std.")
        if not self.policy_hidden or min(self.policy_hidden) < 1:
            raise UsageError(f"policy_hidden must list positive widths, got {self.policy_hidden}; e.g. (128, 128).")
        if self.learning_starts + self.chunks * self.num_envs > self.total_steps:
            raise UsageError(f"total_steps {self.total_steps} leaves no training after learning_starts "
                             f"{self.learning_starts}; raise total_steps or lower learning_starts.")

    @property
    def window(self) -> int:  # replay window: the world model's unroll and the behaviour sequences
        return max(self.world_model.unroll, self.horizon)

    @property
    def steps_per_chunk(self) -> int:  # vector steps per chunk after the random prefill
        return max(1, (self.total_steps - self.learning_starts) // (self.num_envs * self.chunks))


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
    gamma = config.world_model.gamma

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


# ----------------------------------------------------------------------------- training loop
@struct.dataclass
class State:
    wm_params: Any
    wm_target: Any
    wm_opt: Any
    policy_params: Any
    policy_opt: Any
    buffer: replay.ReplayBuffer
    env_state: Any
    obs: jax.Array  # [E, o]
    episode_return: jax.Array  # [E]
    key: jax.Array


def make(env, config: Config):
    """``(init, prefill, train_chunk, evaluate)`` for one seed; each is pure, so ``jit(vmap(...))`` runs seeds together.

    ``init(key) -> State``; ``prefill(state) -> state`` (``learning_starts`` random steps);
    ``train_chunk(state) -> (state, metrics)`` (``steps_per_chunk`` vector steps, each followed by updates);
    ``evaluate(state, key, episodes) -> returns [episodes]`` (no exploration noise, one full episode each)."""
    if env.act_info.discrete:
        raise UsageError(f"mbdpo needs a continuous action space but {env.id} has {env.act_info.describe()}; "
                         "choose e.g. Pendulum-v1.")
    obs_dim, action_dim = env.obs_info.shape[0], env.act_info.shape[0]
    low, high = jnp.asarray(env.act_info.low, jnp.float32), jnp.asarray(env.act_info.high, jnp.float32)
    model = wm.WorldModel(config.world_model.latent_dim, config.world_model.hidden)
    network = policy_network(config, action_dim)
    wm_optimizer = make_optimizer(config.world_model.learning_rate, config.world_model.max_grad_norm)
    policy_optimizer = make_optimizer(config.policy_lr, 1.0)
    rows = config.total_steps // config.num_envs + 1

    def to_env(a):  # [-1, 1] -> the action box
        return low + 0.5 * (a + 1.0) * (high - low)

    def init(key):
        k_wm, k_pi, k_env, key = jax.random.split(key, 4)
        wm_params = model.init(k_wm, jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim)))
        policy_params = network.init(k_pi, jnp.zeros((1, config.world_model.latent_dim)),
                                     jnp.zeros((1, config.horizon * action_dim)), jnp.zeros((1,)))
        obs, env_state = jax.vmap(env.reset)(jax.random.split(k_env, config.num_envs))
        example = {"obs": obs, "actions": jnp.zeros((config.num_envs, action_dim)),
                   "rewards": jnp.zeros(config.num_envs), "next_obs": obs,
                   "terminated": jnp.zeros(config.num_envs), "done": jnp.zeros(config.num_envs)}
        return State(wm_params, wm_params, wm_optimizer.init(wm_params), policy_params,
                     policy_optimizer.init(policy_params), replay.create(example, rows), env_state, obs,
                     jnp.zeros(config.num_envs), key)

    def plan(state: State, obs, key):
        """Planned sequences ``[E, H, A]`` in [-1, 1] for observations ``obs [E, o]``."""
        online = wm.bind(model, state.wm_params)
        z = online.encode(obs)
        if config.method == "mppi":
            return jax.vmap(lambda zi, k: mppi_plan(online, zi, k, config, action_dim))(z, jax.random.split(key, z.shape[0]))
        return sample_sequences(network, state.policy_params, z, key, config, action_dim)

    def env_step(state: State, random_actions: bool):
        key, k_plan, k_noise, k_env = jax.random.split(state.key, 4)
        if random_actions:
            a = jax.random.uniform(k_plan, (config.num_envs, action_dim), minval=-1.0, maxval=1.0)
        else:
            first = plan(state, state.obs, k_plan)[:, 0]
            a = jnp.clip(first + config.exploration_std * jax.random.normal(k_noise, first.shape), -1.0, 1.0)
        obs, env_state, reward, term, trunc, info = jax.vmap(env.step)(
            jax.random.split(k_env, config.num_envs), state.env_state, to_env(a))
        done = term | trunc
        row = {"obs": state.obs, "actions": a, "rewards": reward * config.reward_scale,
               "next_obs": true_next_obs(obs, info, term, trunc), "terminated": term.astype(jnp.float32),
               "done": done.astype(jnp.float32)}
        buffer = replay.add(state.buffer, jax.tree.map(lambda x: x[None], row))
        episode_return = state.episode_return + reward
        finished = (jnp.sum(jnp.where(done, episode_return, 0.0)), jnp.sum(done))
        state = state.replace(buffer=buffer, env_state=env_state, obs=obs, key=key,
                              episode_return=jnp.where(done, 0.0, episode_return))
        return state, finished

    def update(state: State, key):
        k_sample, k_cand, k_noise, k_pick, k_fm = jax.random.split(key, 5)
        data = replay.sample(state.buffer, k_sample, config.batch_size, config.window)
        u = config.world_model.unroll
        window = wm.Window(data["obs"][:, :u], data["actions"][:, :u], data["rewards"][:, :u], data["next_obs"][:, :u],
                           data["terminated"][:, :u], data["done"][:, :u])
        target = wm.bind(model, state.wm_target)
        (wm_loss, metrics), grads = jax.value_and_grad(
            lambda p: wm.world_model_loss(wm.bind(model, p), target, window, config.world_model), has_aux=True)(state.wm_params)
        updates, wm_opt = wm_optimizer.update(grads, state.wm_opt, state.wm_params)
        wm_params = optax.apply_updates(state.wm_params, updates)
        state = state.replace(wm_params=wm_params, wm_opt=wm_opt,
                              wm_target=wm.ema(state.wm_target, wm_params, config.world_model.target_tau))
        metrics = {**metrics, "world_model_loss": wm_loss}
        if config.method == "mppi":
            return state, metrics
        online = wm.bind(model, wm_params)
        n, b = config.num_candidates, config.policy_batch
        z = jax.lax.stop_gradient(online.encode(data["obs"][:b, 0]))  # [b, Z]
        z_rep = jnp.repeat(z, n, axis=0)
        candidates = sample_sequences(network, state.policy_params, z_rep, k_cand, config, action_dim)
        candidates = jnp.clip(candidates + config.exploration_std * jax.random.normal(k_noise, candidates.shape), -1, 1)
        returns = wm.imagined_return(online, z_rep, candidates, config.world_model.gamma).reshape(b, n)
        targets = resample(k_pick, candidates.reshape(b, n, config.horizon, action_dim),
                           sequence_weights(returns, config.temperature))
        behaviour = data["actions"][:b, :config.horizon]
        loss, grads = jax.value_and_grad(lambda p: policy_loss(network, p, z, jax.lax.stop_gradient(targets), behaviour,
                                                               k_fm, config.behaviour_coef))(state.policy_params)
        updates, policy_opt = policy_optimizer.update(grads, state.policy_opt, state.policy_params)
        state = state.replace(policy_params=optax.apply_updates(state.policy_params, updates), policy_opt=policy_opt)
        return state, {**metrics, "policy_loss": loss, "imagined_return": returns.mean()}

    def prefill(state: State):
        steps = config.learning_starts // config.num_envs
        state, _ = jax.lax.scan(lambda s, _: env_step(s, True), state, None, steps)
        return state

    def train_chunk(state: State):
        def one(state, _):
            state, finished = env_step(state, False)
            key, sub = jax.random.split(state.key)
            state, metrics = jax.lax.scan(update, state.replace(key=key), jax.random.split(sub, config.updates_per_step))
            return state, (finished, jax.tree.map(jnp.mean, metrics))

        state, ((return_sum, count), metrics) = jax.lax.scan(one, state, None, config.steps_per_chunk)
        episodes = jnp.sum(count)
        metrics = {name: jnp.mean(v) for name, v in metrics.items()}
        return state, {**metrics, "episodes": episodes,
                       "episode_return": jnp.where(episodes > 0, jnp.sum(return_sum) / jnp.maximum(episodes, 1), jnp.nan)}

    def evaluate(state: State, key, episodes: int):
        k_reset, key = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(k_reset, episodes))

        def step(carry, key):
            obs, env_state, total, live = carry
            k_plan, k_env = jax.random.split(key)
            a = to_env(plan(state, obs, k_plan)[:, 0])
            obs, env_state, reward, term, trunc, _ = jax.vmap(env.step)(jax.random.split(k_env, episodes), env_state, a)
            return (obs, env_state, total + live * reward, live * (1.0 - (term | trunc))), None

        init = (obs, env_state, jnp.zeros(episodes), jnp.ones(episodes))
        (_, _, total, _), _ = jax.lax.scan(step, init, jax.random.split(key, env.max_episode_steps))
        return total

    return init, prefill, train_chunk, evaluate


def policy_parameter_count(config: Config, env) -> int:
    """Parameters of the flow policy's velocity network."""
    network = policy_network(config, env.act_info.shape[0])
    params = jax.eval_shape(lambda: network.init(jax.random.PRNGKey(0), jnp.zeros((1, config.world_model.latent_dim)),
                                                 jnp.zeros((1, config.horizon * env.act_info.shape[0])), jnp.zeros((1,))))
    return int(sum(x.size for x in jax.tree.leaves(params)))
