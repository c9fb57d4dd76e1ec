r"""Factored subgoal diffusion (HECRL: Haramati et al., "Hierarchical Entity-centric RL with Factored
Subgoal Diffusion", ICLR 2026), composed at test time with a value-based goal-conditioned agent.

The state is a set of entity tokens ``[E, c]`` (here ``c = 2``: the agent's and each block's position).
A conditional diffusion model :math:`p_\theta(\tilde g \mid s, g)` proposes subgoals; it is trained on
triples from the dataset: :math:`s = s_t`, a goal :math:`g = s_{t_g}` later in the same trajectory and
the subgoal :math:`\tilde g = s_{\min(t + k, t_g)}`::

    for each update:
        i ~ U(valid);  t_g ~ U(i .. end of i's trajectory);  j = min(i + k, t_g)
        x_0 = 2 s_j - 1  (tokens [B, E, c], scaled to [-1, 1]);  t ~ U{1..T};  eps ~ N(0, I)
        x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps                        (DDPM forward process)
        min_theta  E || eps - eps_theta(x_t, t, s_i, g) ||^2                 (Ho et al. 2020, eq. 14)

The denoiser is a small transformer over the entity tokens: token ``e`` embeds ``[x_t^e, s^e, g^e]``
plus an entity embedding and the diffusion-time embedding; self-attention lets entities coordinate
while each token predicts its own noise (the factored structure).

Test time (:func:`select_subgoal`, HECRL's selective subgoal generation): with the agent's value
:math:`V(s, g) \approx -(1 - \gamma^{d})/(1 - \gamma)` for ``d`` steps to go and the reachability
threshold :math:`V_{\min} = -(1 - \gamma^{K})/(1 - \gamma)` (``K = reach_steps``):

* if :math:`V(s, g) \ge V_{\min}` the goal itself is within reach: pursue ``g``;
* else sample ``N`` candidates :math:`\tilde g_i \sim p_\theta(\cdot \mid s, g)`, keep the reachable
  ones :math:`V(s, \tilde g_i) \ge V_{\min}` and pick :math:`\arg\max_i V(\tilde g_i, g)` (the one
  closest to the goal); if none is reachable pick :math:`\arg\max_i V(s, \tilde g_i)` (our fallback);

the agent acts toward the chosen subgoal and re-plans every ``replan_every`` steps.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from longhorizon.config import AlgoConfig
from longhorizon.offline.nets import TrainState, gradient_step, init_state
from longhorizon.offline.samplers import GoalData, start_indices, subgoals, trajectory_goals

NAME = "subgoal-diffusion"


@dataclasses.dataclass(frozen=True)
class Config:
    entity_dim: int = 2  # features per entity token
    subgoal_steps: int = 8  # k: the subgoal is s_{min(t + k, t_g)}
    diffusion_steps: int = 50  # T
    sample_steps: int = 10  # DDIM steps at test time (<= T)
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    batch_size: int = 256
    learning_rate: float = 3e-4
    num_candidates: int = 16  # N subgoals sampled per re-plan
    reach_steps: int = 8  # K: V(s, g~) >= -(1 - gamma^K) / (1 - gamma) counts as reachable
    discount: float = 0.99  # the agent's discount (for the threshold)
    replan_every: int = 4

    _fail = AlgoConfig._fail
    _check_positive = AlgoConfig._check_positive
    to_dict = AlgoConfig.to_dict

    def __post_init__(self):
        self._check_positive("entity_dim", "subgoal_steps", "diffusion_steps", "sample_steps", "d_model", "heads",
                             "layers", "batch_size", "learning_rate", "num_candidates", "reach_steps", "replan_every")
        if self.sample_steps > self.diffusion_steps:
            self._fail("sample_steps", f"must not exceed diffusion_steps={self.diffusion_steps}", "pass a smaller value")
        if self.d_model % self.heads:
            self._fail("d_model", f"must be a multiple of heads={self.heads}", "pass e.g. --d-model 64 --heads 4")
        if not 0.0 < self.discount < 1.0:
            self._fail("discount", "must lie strictly between 0 and 1", "pass e.g. --discount 0.99")

    @property
    def threshold(self) -> float:
        return reach_threshold(self.reach_steps, self.discount)


def reach_threshold(steps: int, discount: float) -> float:
    r""":math:`V_{\min} = -(1 - \gamma^K)/(1 - \gamma)`: the value of a goal ``K`` steps away under the -1/step reward."""
    return -(1.0 - discount**steps) / (1.0 - discount)


# ----------------------------------------------------------------------------- noise schedule
class Schedule(NamedTuple):
    betas: jax.Array  # [T + 1], index 0 unused (= 0)
    alphas: jax.Array  # [T + 1], 1 - beta
    alpha_bars: jax.Array  # [T + 1], prod_{s <= t} alpha_s, alpha_bars[0] = 1


def cosine_schedule(steps: int, s: float = 0.008) -> Schedule:
    r"""Nichol & Dhariwal (2021): :math:`\bar\alpha_t = f(t)/f(0)`, :math:`f(t) = \cos^2\!\big(\tfrac{t/T + s}{1 + s}\tfrac\pi2\big)`,
    :math:`\beta_t = \min(1 - \bar\alpha_t/\bar\alpha_{t-1}, 0.999)`; arrays ``[T + 1]`` indexed by ``t = 0..T``."""
    t = jnp.arange(steps + 1, dtype=jnp.float32)
    f = jnp.cos((t / steps + s) / (1 + s) * math.pi / 2) ** 2
    abar = f / f[0]
    betas = jnp.concatenate([jnp.zeros(1), jnp.minimum(1.0 - abar[1:] / abar[:-1], 0.999)])
    alphas = 1.0 - betas
    return Schedule(betas, alphas, jnp.cumprod(alphas))


def q_sample(schedule: Schedule, x0: jax.Array, t: jax.Array, noise: jax.Array) -> jax.Array:
    r""":math:`x_t = \sqrt{\bar\alpha_t} x_0 + \sqrt{1 - \bar\alpha_t}\,\epsilon`; ``t`` ``[B]`` int, ``x0``/``noise`` ``[B, ...]``."""
    abar = schedule.alpha_bars[t].reshape(t.shape + (1,) * (x0.ndim - t.ndim))
    return jnp.sqrt(abar) * x0 + jnp.sqrt(1.0 - abar) * noise


def noise_loss(eps_pred: jax.Array, noise: jax.Array) -> jax.Array:
    r"""DDPM's simple loss :math:`\mathbb E\lVert\epsilon - \epsilon_\theta\rVert^2`: the squared error summed over a
    sample's dimensions, averaged over the batch."""
    return jnp.mean(jnp.sum((noise - eps_pred).reshape(noise.shape[0], -1) ** 2, axis=-1))


def ddpm_sample(key: jax.Array, eps_fn: Callable, schedule: Schedule, shape: tuple[int, ...]) -> jax.Array:
    r"""Ancestral DDPM sampling (Ho et al. 2020, Alg. 2) with :math:`\sigma_t^2 = \tilde\beta_t =
    \tfrac{1 - \bar\alpha_{t-1}}{1 - \bar\alpha_t}\beta_t`:
    :math:`x_{t-1} = \tfrac{1}{\sqrt{\alpha_t}}\big(x_t - \tfrac{\beta_t}{\sqrt{1 - \bar\alpha_t}}\epsilon(x_t, t)\big) + \sigma_t z`.
    ``eps_fn(x [*shape], t [] int) -> [*shape]``."""
    steps = schedule.betas.shape[0] - 1
    key, k0 = jax.random.split(key)

    def body(x, inputs):
        t, k = inputs
        beta, alpha, abar = schedule.betas[t], schedule.alphas[t], schedule.alpha_bars[t]
        mean = (x - beta / jnp.sqrt(1.0 - abar) * eps_fn(x, t)) / jnp.sqrt(alpha)
        var = (1.0 - schedule.alpha_bars[t - 1]) / (1.0 - abar) * beta
        return mean + jnp.where(t > 1, jnp.sqrt(var), 0.0) * jax.random.normal(k, x.shape), None

    ts = jnp.arange(steps, 0, -1)
    x, _ = jax.lax.scan(body, jax.random.normal(k0, shape), (ts, jax.random.split(key, steps)))
    return x


def ddim_sample(key: jax.Array, eps_fn: Callable, schedule: Schedule, shape: tuple[int, ...], sample_steps: int,
                clip: float | None = None) -> jax.Array:
    r"""Deterministic DDIM (Song et al. 2021, :math:`\eta = 0`) on ``sample_steps`` evenly spaced times
    :math:`T = \tau_S > \dots > \tau_1 \ge 1`, :math:`\tau_0 = 0`:
    :math:`\hat x_0 = (x_t - \sqrt{1 - \bar\alpha_t}\epsilon)/\sqrt{\bar\alpha_t}`,
    :math:`x_{t'} = \sqrt{\bar\alpha_{t'}}\hat x_0 + \sqrt{1 - \bar\alpha_{t'}}\,\epsilon`.

    With ``clip``, :math:`\hat x_0` is clipped to ``[-clip, clip]`` (the data's range) and
    :math:`\epsilon` recomputed from it: near ``t = T``, :math:`\sqrt{\bar\alpha_t} \approx 10^{-3}`
    multiplies a learnt predictor's error by a thousand."""
    steps = schedule.betas.shape[0] - 1
    taus = jnp.round(jnp.linspace(steps, 0, sample_steps + 1)).astype(jnp.int32)

    def body(x, pair):
        t, t_next = pair
        eps = eps_fn(x, t)
        abar, abar_next = schedule.alpha_bars[t], schedule.alpha_bars[t_next]
        x0 = (x - jnp.sqrt(1.0 - abar) * eps) / jnp.sqrt(abar)
        if clip is not None:
            x0 = jnp.clip(x0, -clip, clip)
            eps = (x - jnp.sqrt(abar) * x0) / jnp.sqrt(1.0 - abar)
        return jnp.sqrt(abar_next) * x0 + jnp.sqrt(1.0 - abar_next) * eps, None

    x, _ = jax.lax.scan(body, jax.random.normal(key, shape), (taus[:-1], taus[1:]))
    return x


# ----------------------------------------------------------------------------- denoiser
def time_embedding(t: jax.Array, dim: int) -> jax.Array:
    """Sinusoidal embedding ``[..., dim]`` of integer diffusion times ``t`` ``[...]``."""
    half = dim // 2
    freqs = jnp.exp(-math.log(10_000.0) * jnp.arange(half) / half)
    angles = t[..., None].astype(jnp.float32) * freqs
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


class EntityDenoiser(nn.Module):
    r""":math:`\epsilon_\theta(x_t, t, s, g)`: ``x``, ``s``, ``g`` ``[B, E, c]``, ``t`` ``[B]`` -> ``[B, E, c]``."""

    d_model: int = 64
    heads: int = 4
    layers: int = 2

    @nn.compact
    def __call__(self, x, t, s, g):
        entities = x.shape[-2]
        h = nn.Dense(self.d_model)(jnp.concatenate([x, s, g], axis=-1))
        h = h + nn.Embed(entities, self.d_model)(jnp.arange(entities))  # which entity (agent, block 1, ...)
        h = h + nn.Dense(self.d_model)(nn.gelu(nn.Dense(self.d_model)(time_embedding(t, self.d_model))))[:, None]
        for _ in range(self.layers):
            h = h + nn.MultiHeadDotProductAttention(self.heads)(nn.LayerNorm()(h))
            y = nn.LayerNorm()(h)
            h = h + nn.Dense(self.d_model)(nn.gelu(nn.Dense(4 * self.d_model)(y)))
        return nn.Dense(x.shape[-1], kernel_init=nn.initializers.zeros)(nn.LayerNorm()(h))


def tokens(obs: jax.Array, config: Config) -> jax.Array:
    """Observations ``[B, E c]`` in [0, 1] -> entity tokens ``[B, E, c]`` in [-1, 1]."""
    return (2.0 * obs - 1.0).reshape(*obs.shape[:-1], -1, config.entity_dim)


def untokens(x: jax.Array) -> jax.Array:
    return ((x + 1.0) / 2.0).reshape(*x.shape[:-2], -1)


# ----------------------------------------------------------------------------- the training protocol
class Batch(NamedTuple):
    observations: jax.Array  # [B, D] s_t
    goals: jax.Array  # [B, D] g = s_{t_g}
    subgoals: jax.Array  # [B, D] s_{min(t + k, t_g)}
    t: jax.Array  # [B] int diffusion times in 1..T
    noise: jax.Array  # [B, E, c]


def network(config: Config) -> EntityDenoiser:
    return EntityDenoiser(config.d_model, config.heads, config.layers)


def optimizer(config: Config) -> optax.GradientTransformation:
    return optax.adam(config.learning_rate)


def init(key, obs_dim: int, action_dim: int, config: Config) -> TrainState:
    """``action_dim`` is unused (the protocol of :mod:`longhorizon.offline.agents`, so the offline loop trains it)."""
    k_net, k_state = jax.random.split(key)
    x = jnp.zeros((1, obs_dim // config.entity_dim, config.entity_dim))
    params = {"denoiser": network(config).init(k_net, x, jnp.ones((1,), jnp.int32), x, x)}
    return init_state(k_state, params, optimizer(config))


def sample(key, data: GoalData, config: Config) -> Batch:
    k_idx, k_goal, k_t, k_noise = jax.random.split(key, 4)
    idx = start_indices(k_idx, data, config.batch_size)
    goal = trajectory_goals(k_goal, data, idx, 0.99, geometric=False)  # uniform over the rest of the trajectory
    sub = subgoals(data, idx, config.subgoal_steps, goal)
    obs = data.observations
    t = jax.random.randint(k_t, (config.batch_size,), 1, config.diffusion_steps + 1)
    noise = jax.random.normal(k_noise, tokens(obs[sub], config).shape)
    return Batch(obs[idx], obs[goal], obs[sub], t, noise)


def learn(state: TrainState, batch: Batch, config: Config):
    schedule = cosine_schedule(config.diffusion_steps)
    net = network(config)
    x_t = q_sample(schedule, tokens(batch.subgoals, config), batch.t, batch.noise)
    s, g = tokens(batch.observations, config), tokens(batch.goals, config)

    def loss_fn(params):
        loss = noise_loss(net.apply(params["denoiser"], x_t, batch.t, s, g), batch.noise)
        return loss, {"diffusion_loss": loss}

    return gradient_step(state, loss_fn, optimizer(config))


def agent_params(state: TrainState):
    return state.params


def propose(params, key, obs: jax.Array, goal: jax.Array, config: Config) -> jax.Array:
    """``num_candidates`` subgoal observations ``[N, D]`` for one state ``obs`` ``[D]`` and goal ``[D]`` (DDIM)."""
    n, net = config.num_candidates, network(config)
    s = jnp.broadcast_to(tokens(obs, config), (n,) + tokens(obs, config).shape)
    g = jnp.broadcast_to(tokens(goal, config), s.shape)
    eps_fn = lambda x, t: net.apply(params["denoiser"], x, jnp.full((n,), t), s, g)
    x = ddim_sample(key, eps_fn, cosine_schedule(config.diffusion_steps), s.shape, config.sample_steps, clip=1.0)
    return untokens(jnp.clip(x, -1.0, 1.0))


def select_subgoal(values: Callable, obs: jax.Array, goal: jax.Array, candidates: jax.Array, threshold: float,
                   valid: jax.Array | None = None):
    r"""HECRL's selection (module docstring). ``values(obs [B, D], goals [B, D]) -> [B]``; ``obs``, ``goal`` ``[D]``,
    ``candidates`` ``[N, D]``; ``valid`` ``[N]`` bool marks candidates that are possible states (default: all).
    Returns ``(target [D], used_subgoal [] bool)``; with no valid candidate the target is the goal."""
    valid = jnp.ones(candidates.shape[0], bool) if valid is None else valid
    v_reach = jnp.where(valid, values(jnp.broadcast_to(obs, candidates.shape), candidates), -jnp.inf)  # V(s, g~_i)
    v_goal = values(candidates, jnp.broadcast_to(goal, candidates.shape))  # V(g~_i, g)
    direct = (values(obs[None], goal[None])[0] >= threshold) | ~jnp.any(valid)
    reachable = v_reach >= threshold
    best = jnp.where(jnp.any(reachable), jnp.argmax(jnp.where(reachable, v_goal, -jnp.inf)), jnp.argmax(v_reach))
    return jnp.where(direct, goal, candidates[best]), ~direct
