r"""A graph-network policy with a Dirichlet head for E-AMoD (:mod:`longhorizon.structured.amod`), trained by A2C.

Node features per region ``i`` (shape [R, F], ``F = C + 5``): idle vehicles per charge level after matching
and the next step's forecast outgoing and incoming demand rates (both over the fleet per region), a station
flag, and the time of day (sin, cos). Two message-passing layers over the road graph,

    h^{l+1}_i = relu(W_self h^l_i + W_nb mean_{j in N(i)} h^l_j),

then per region ``C`` concentrations ``alpha[i, c] = softplus(.) + alpha_min``: the desired distribution
``w ~ Dirichlet(alpha)`` over the ``R C`` space-charge nodes, with

    log p(w | alpha) = log Gamma(sum_n alpha_n) - sum_n log Gamma(alpha_n) + sum_n (alpha_n - 1) log w_n.

The critic is the same network with a mean over regions and one output. The weights are shared by all
regions, so a policy trained on one city runs on another graph (any ``R``, the same ``C``) unchanged.

A2C (synchronous advantage actor-critic): each update collects ``episodes`` whole days on the host (the
two LPs per step run in numpy/HiGHS outside the compiled program; ``act`` and ``learn`` are jitted),
advantages by GAE (:func:`longhorizon.core.returns.gae`, terminal at the day's end), and minimises

    L = -mean(A_t log p(w_t)) + c_v mean((V(s_t) - G_t)^2) - c_H mean(H[Dirichlet(alpha_t)]).
"""

from __future__ import annotations

import dataclasses
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.scipy.special import digamma, gammaln

from longhorizon.core.optim import make_optimizer
from longhorizon.core.returns import gae
from longhorizon.errors import UsageError
from longhorizon.structured import amod


@dataclasses.dataclass(frozen=True)
class Config:
    updates: int = 100
    episodes: int = 4  # days per update
    hidden: int = 32
    learning_rate: float = 1e-3
    max_grad_norm: float = 1.0
    gamma: float = 0.97
    gae_lambda: float = 0.95
    value_coef: float = 0.5
    entropy_coef: float = 1e-3
    normalize_advantages: bool = True
    alpha_min: float = 0.1  # keeps concentrations positive and the log-density finite
    alpha_init: float = 1.0  # every concentration at initialisation (about)
    reward_scale: float = 0.0  # rewards are divided by this; 0: the fleet size times the base fare
    seed: int = 0

    def __post_init__(self):
        if self.updates < 1 or self.episodes < 1 or self.hidden < 1:
            raise UsageError("updates, episodes and hidden must be at least 1; pass positive integers.")
        if not (0 < self.gamma <= 1 and 0 <= self.gae_lambda <= 1):
            raise UsageError("gamma must lie in (0, 1] and gae_lambda in [0, 1]; pass values in those ranges.")
        if self.learning_rate <= 0 or self.alpha_min <= 0 or self.reward_scale < 0:
            raise UsageError("learning_rate and alpha_min must be positive and reward_scale non-negative; fix them.")
        if self.alpha_init <= self.alpha_min:
            raise UsageError(f"alpha_init ({self.alpha_init}) must exceed alpha_min ({self.alpha_min}); raise alpha_init.")


def dirichlet_log_prob(alpha: jax.Array, w: jax.Array) -> jax.Array:
    """log Dirichlet(w | alpha) (module docstring) over the last axis; alpha, w [..., N], w on the simplex."""
    return gammaln(alpha.sum(-1)) - gammaln(alpha).sum(-1) + ((alpha - 1) * jnp.log(w)).sum(-1)


def dirichlet_entropy(alpha: jax.Array) -> jax.Array:
    """H = log B(alpha) + (a0 - N) psi(a0) - sum_n (alpha_n - 1) psi(alpha_n), a0 = sum alpha; [..., N] -> [...]."""
    a0, n = alpha.sum(-1), alpha.shape[-1]
    log_b = gammaln(alpha).sum(-1) - gammaln(a0)
    return log_b + (a0 - n) * digamma(a0) - ((alpha - 1) * digamma(alpha)).sum(-1)


class GraphNet(nn.Module):
    """Two mean-aggregation message-passing layers, then ``out`` features per region. x [R, F], mean_adj [R, R]."""

    hidden: int
    out: int
    out_bias: float = 0.0

    @nn.compact
    def __call__(self, x, mean_adj):
        h = x
        for _ in range(2):
            h = nn.relu(nn.Dense(self.hidden)(h) + nn.Dense(self.hidden, use_bias=False)(mean_adj @ h))
        return nn.Dense(self.out, bias_init=nn.initializers.constant(self.out_bias))(h)


class ActorCritic(nn.Module):
    charge_levels: int
    hidden: int
    alpha_min: float
    alpha_init: float

    @nn.compact
    def __call__(self, x, mean_adj):
        # the output bias starts every concentration near alpha_init: larger means less noisy first proposals
        bias = float(np.log(np.expm1(self.alpha_init - self.alpha_min)))
        alpha = nn.softplus(GraphNet(self.hidden, self.charge_levels, bias)(x, mean_adj)) + self.alpha_min  # [R, C]
        value = GraphNet(self.hidden, 1)(x, mean_adj).mean()
        return alpha.reshape(alpha.shape[:-2] + (-1,)), value


def features(net: amod.Network, t: int, idle: np.ndarray) -> np.ndarray:
    """Node features [R, C + 5] (module docstring)."""
    per_region = net.city.fleet / net.R
    rates = net.rates[t + 1]
    hour = 2 * np.pi * t / net.city.steps
    clock = np.broadcast_to([np.sin(hour), np.cos(hour)], (net.R, 2))
    return np.concatenate([idle / per_region, rates.sum(1)[:, None] / per_region,
                           rates.sum(0)[:, None] / per_region, net.station[:, None], clock], 1).astype(np.float32)


def mean_adjacency(net: amod.Network) -> np.ndarray:
    return (net.adjacency / net.adjacency.sum(1, keepdims=True)).astype(np.float32)


class Agent:
    """The actor-critic, its optimiser and its jitted ``act`` / ``learn`` (compiled once per graph size)."""

    def __init__(self, charge_levels: int, config: Config):
        self.config = config
        self.model = ActorCritic(charge_levels, config.hidden, config.alpha_min, config.alpha_init)
        self.optimizer = make_optimizer(config.learning_rate, config.max_grad_norm)
        self._init = jax.jit(self.model.init)  # one compile, not one per operation
        self._act = jax.jit(self._act_fn, static_argnames="greedy")
        self._learn = jax.jit(self._learn_fn)

    def init(self, key, net: amod.Network):
        x = features(net, 0, net.initial_vehicles())
        params = self._init(key, x, mean_adjacency(net))
        return params, self.optimizer.init(params)

    def _act_fn(self, params, x, mean_adj, key, greedy: bool):
        alpha, value = self.model.apply(params, x, mean_adj)
        w = alpha / alpha.sum() if greedy else jax.random.dirichlet(key, alpha)
        w = jnp.clip(w, 1e-12, None)  # a float32 draw can underflow to 0, where the log-density is -inf
        return w / w.sum(), value

    def act(self, params, net, t, idle, key, greedy=False):
        w, value = self._act(params, features(net, t, idle), mean_adjacency(net), key, greedy=greedy)
        return np.asarray(w, np.float64).reshape(net.R, net.C), float(value)

    def _learn_fn(self, params, opt_state, batch):
        """batch: x [B, T, R, F], mean_adj [R, R], w [B, T, N], reward [B, T], value [B, T]."""
        cfg = self.config
        done = jnp.zeros_like(batch["reward"]).at[:, -1].set(1.0)
        next_values = jnp.concatenate([batch["value"][:, 1:], jnp.zeros_like(batch["value"][:, :1])], 1)
        adv, targets = jax.vmap(lambda r, v, nv, d: gae(r, v, nv, d, d, cfg.gamma, cfg.gae_lambda))(
            batch["reward"], batch["value"], next_values, done)
        if cfg.normalize_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)

        def loss_fn(p):
            apply = jax.vmap(jax.vmap(self.model.apply, (None, 0, None)), (None, 0, None))
            alpha, value = apply(p, batch["x"], batch["mean_adj"])
            log_prob = dirichlet_log_prob(alpha, batch["w"])
            policy = -(adv * log_prob).mean()
            critic = ((value - targets) ** 2).mean()
            entropy = dirichlet_entropy(alpha).mean()
            return policy + cfg.value_coef * critic - cfg.entropy_coef * entropy, {
                "policy_loss": policy, "value_loss": critic, "entropy": entropy}

        (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, {"loss": loss, **metrics}

    def learn(self, params, opt_state, batch):
        return self._learn(params, opt_state, batch)


def policy_fn(agent: Agent, params, net: amod.Network, key=None, greedy: bool = True):
    """``desired(t, idle)`` for :func:`amod.run_episode` (greedy: the Dirichlet mean)."""
    key = key if key is not None else jax.random.PRNGKey(0)
    calls = iter(range(1 << 62))  # a fresh draw per call, across episodes
    return lambda t, idle: agent.act(params, net, t, idle, jax.random.fold_in(key, next(calls)), greedy=greedy)[0]


def decision_seconds(agent, params, net: amod.Network, repeats: int = 50) -> float:
    """Median seconds of one policy forward pass (jitted, after compilation) on a day-0 state."""
    idle = net.initial_vehicles()
    agent.act(params, net, 0, idle, jax.random.PRNGKey(0), greedy=True)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        agent.act(params, net, 0, idle, jax.random.PRNGKey(0), greedy=True)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def mean_profit(net: amod.Network, days):
    """``evaluate(agent, params)`` for :func:`train`: the greedy policy's mean profit over ``days`` (demand seeds)."""
    demand = [net.demand(d) for d in days]
    return lambda agent, params: float(np.mean([amod.run_episode(net, dm, policy_fn(agent, params, net))["profit"]
                                                for dm in demand]))


def collect(agent: Agent, params, net: amod.Network, episode_seed: int, key, scale: float) -> tuple[dict, dict]:
    """One sampled day: the arrays :meth:`Agent.learn` takes (without the batch axis), and its stats."""
    demand = net.demand(episode_seed)
    x, rows, profit, seconds = net.initial_vehicles(), [], 0.0, {"act": 0.0, "lp": 0.0}
    for t in range(len(demand)):
        key, sub = jax.random.split(key)
        matched, idle, t_match = amod.idle_after_matching(net, x, demand[t])
        start = time.perf_counter()
        w, value = agent.act(params, net, t, idle, sub)
        t_act = time.perf_counter() - start
        out = amod.finish_step(net, matched, idle, w, t_match)
        rows.append((features(net, t, idle), w.ravel(), out.profit / scale, value))
        x, profit = out.vehicles, profit + out.profit
        seconds["act"] += t_act
        seconds["lp"] += t_match + out.seconds_rebalance
    xs, ws, rewards, values = (np.stack(a).astype(np.float32) for a in zip(*rows))
    return {"x": xs, "w": ws, "reward": rewards, "value": values}, {"profit": profit, **seconds}


def train(net: amod.Network, config: Config, log=None, agent: Agent | None = None, evaluate=None,
          eval_every: int = 0) -> dict:
    """A2C on ``net``'s city; episode seeds 1000 + k (evaluation uses other seeds). Returns params and the curve
    (each update's mean sampled-day profit). ``agent``: an :class:`Agent` built for the same config up to its seed,
    to reuse its compiled functions. ``evaluate(agent, params) -> float`` is called before training and every
    ``eval_every`` updates (and after the last); its values are ``eval_curve`` (``[(updates done, value)]``)."""
    agent = agent or Agent(net.C, config)
    if dataclasses.replace(agent.config, seed=config.seed) != config:
        raise UsageError("the agent passed to train was built for another config; build it from this config.")
    key = jax.random.PRNGKey(config.seed)
    key, init_key = jax.random.split(key)
    params, opt_state = agent.init(init_key, net)
    scale = config.reward_scale or net.city.fleet * net.city.base_fare
    mean_adj = mean_adjacency(net)
    curve, seconds = [], {"act": 0.0, "lp": 0.0, "learn": 0.0}
    eval_curve = [(0, float(evaluate(agent, params)))] if evaluate and eval_every else []
    for u in range(config.updates):
        days = []
        for e in range(config.episodes):
            key, sub = jax.random.split(key)
            batch, stats = collect(agent, params, net, 1000 + config.seed * 100_000 + u * config.episodes + e, sub, scale)
            days.append((batch, stats))
            seconds["act"] += stats["act"]
            seconds["lp"] += stats["lp"]
        batch = {k: np.stack([d[0][k] for d in days]) for k in days[0][0]}
        start = time.perf_counter()
        params, opt_state, metrics = agent.learn(params, opt_state, {**batch, "mean_adj": mean_adj})
        jax.block_until_ready(params)
        seconds["learn"] += time.perf_counter() - start
        curve.append(float(np.mean([d[1]["profit"] for d in days])))
        if evaluate and eval_every and ((u + 1) % eval_every == 0 or u + 1 == config.updates):
            eval_curve.append((u + 1, float(evaluate(agent, params))))
        if log and (u + 1) % max(1, config.updates // 5) == 0:
            log(f"[eamod a2c seed {config.seed}] update {u + 1}/{config.updates}: day profit {curve[-1]:.1f}, "
                f"loss {float(metrics['loss']):.3f}")
    return {"agent": agent, "params": params, "curve": curve, "eval_curve": eval_curve, "seconds": seconds}
