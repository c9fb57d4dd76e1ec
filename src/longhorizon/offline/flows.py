r"""Flow-matching behaviour cloning, and test-time guidance of its samples by a critic (QGF).

**Flow BC** (conditional flow matching with the linear path, Lipman et al. 2023; Liu et al. 2023).
With noise :math:`x_0 \sim \mathcal N(0, I)`, a dataset action :math:`x_1 = a` and :math:`t \sim U[0, 1]`,
:math:`x_t = (1 - t) x_0 + t x_1`, the velocity network :math:`v_\theta(s, x_t, t)` regresses the
path's velocity:

.. math:: L(\theta) = \mathbb E_{s, a, x_0, t}\, \tfrac1d \lVert v_\theta(s, x_t, t) - (x_1 - x_0) \rVert^2.

Sampling integrates :math:`\dot x = v_\theta` from :math:`t = 0` to 1 with :math:`K` Euler steps
(:math:`t_k = k / K`, :math:`x_{k+1} = x_k + v_\theta(s, x_k, t_k) / K`) and clips to the action box.

**QGF** ("Test-Time Gradient Guidance of Flow Policies"): the same Euler steps with the critic's
action gradient added to the velocity. At step :math:`k` the one-step denoised action is
:math:`\hat a = x_k + (1 - t_k)\, v_\theta(s, x_k, t_k)`; the gradient of :math:`Q(s, \hat a)` with
respect to :math:`x_k` is taken with the Jacobian :math:`\partial \hat a / \partial x_k` replaced by the
identity, i.e. :math:`g = \nabla_a Q(s, a)|_{a = \hat a}`, and

.. math:: x_{k+1} = x_k + \tfrac1K \big(v_\theta(s, x_k, t_k) + w\, g\big).

:math:`w = 0` is plain BC. The critic is trained once, separately (``offline.iql``); nothing is retrained per ``w``.

**Best-of-N** (test-time baseline): draw :math:`N` BC samples per state and keep the one with the
highest :math:`Q`.

**Sampling compute** is counted in network evaluations per action (:func:`evaluations_per_action`):
a velocity evaluation, a critic evaluation (a critic gradient counts as one: one forward and one
backward pass of the twin critic, the same network as a forward of it for best-of-N's selection).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from longhorizon.core.nets import ACTIVATIONS, MLPTorso, orthogonal
from longhorizon.core.optim import make_optimizer
from longhorizon.errors import UsageError

Velocity = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]  # (obs [B, o], x [B, d], t [B]) -> [B, d]
ActionGrad = Callable[[jax.Array, jax.Array], jax.Array]  # (obs [B, o], a [B, d]) -> dQ/da [B, d]
QFn = Callable[[jax.Array, jax.Array], jax.Array]  # (obs [B, o], a [B, d]) -> Q [B]


@dataclasses.dataclass(frozen=True)
class FlowConfig:
    """Flow BC: the velocity network, its training and the sampler."""

    hidden: tuple[int, ...] = (256, 256, 256, 256)  # FQL's and OGBench's actor size; use (128, 128) on CPU
    activation: str = "gelu"
    layer_norm: bool = True
    num_steps: int = 10  # K Euler steps at sampling time
    learning_rate: float = 3e-4
    max_grad_norm: float = 10.0
    batch_size: int = 256
    num_updates: int = 10_000
    action_low: float = -1.0
    action_high: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        _check_positive(self, ("num_steps", "learning_rate", "max_grad_norm", "batch_size", "num_updates"))
        if not self.hidden or min(self.hidden) < 1:
            raise UsageError(f"flow hidden must list positive layer widths, got {self.hidden}; e.g. hidden=(256, 256).")
        if self.activation not in ACTIVATIONS:
            raise UsageError(f"unknown flow activation '{self.activation}'; choose one of {', '.join(ACTIVATIONS)}.")
        if not self.action_low < self.action_high:
            raise UsageError(f"flow action_low ({self.action_low}) must be below action_high ({self.action_high}); "
                             "give the action box's bounds.")


def _check_positive(config, names: Sequence[str]) -> None:
    for name in names:
        value = getattr(config, name)
        if not (isinstance(value, (int, float)) and value > 0):
            raise UsageError(f"{type(config).__name__}.{name} must be positive, got {value!r}; choose a positive value.")


# ----------------------------------------------------------------------------- network
class VelocityField(nn.Module):
    """:math:`v_\\theta(s, x_t, t)`: an MLP on ``[obs, x_t, t]`` -> ``[..., action_dim]``."""

    action_dim: int
    hidden: Sequence[int] = (256, 256)
    activation: str = "gelu"
    layer_norm: bool = True

    @nn.compact
    def __call__(self, obs, x, t):
        h = jnp.concatenate([obs, x, t[..., None]], axis=-1)
        h = MLPTorso(tuple(self.hidden), self.activation, self.layer_norm)(h)
        return nn.Dense(self.action_dim, kernel_init=orthogonal(1.0))(h)


def velocity_network(config: FlowConfig, action_dim: int) -> VelocityField:
    return VelocityField(action_dim, config.hidden, config.activation, config.layer_norm)


def velocity_fn(network: VelocityField, params) -> Velocity:
    """The velocity with its parameters bound: ``v(obs [B, o], x [B, d], t [B]) -> [B, d]``."""
    return lambda obs, x, t: network.apply(params, obs, x, t)


# ----------------------------------------------------------------------------- learn
def flow_matching_loss(velocity: Velocity, obs: jax.Array, actions: jax.Array, noise: jax.Array,
                       t: jax.Array) -> jax.Array:
    r"""The conditional flow-matching loss of the module docstring on one batch.

    ``obs [B, o]``, ``actions [B, d]`` (:math:`x_1`), ``noise [B, d]`` (:math:`x_0`), ``t [B]`` -> scalar
    :math:`\frac1{Bd}\sum_b \lVert v(s_b, x_{t_b}, t_b) - (x_{1,b} - x_{0,b}) \rVert^2`.
    """
    x_t = (1.0 - t[:, None]) * noise + t[:, None] * actions
    return jnp.mean((velocity(obs, x_t, t) - (actions - noise)) ** 2)


def make_train(config: FlowConfig, obs_dim: int, action_dim: int):
    """``(init, train)``: ``init(key) -> params`` and ``train(params, key, data) -> (params, losses
    [num_updates])``, flow BC on ``data`` (``observations [N, o]``, ``actions [N, d]``) with minibatches
    drawn uniformly with replacement. ``train`` is pure and jittable, so ``jax.vmap(train, in_axes=(0, 0,
    None))`` trains several seeds in one program (initialise them with :func:`init_seeds`)."""
    network = velocity_network(config, action_dim)
    optimizer = make_optimizer(config.learning_rate, config.max_grad_norm)

    def init(key):
        return network.init(key, jnp.zeros((1, obs_dim)), jnp.zeros((1, action_dim)), jnp.zeros((1,)))

    def train(params, key, data):
        n = data["actions"].shape[0]

        def update(carry, key):
            params, opt_state = carry
            k_idx, k_noise, k_t = jax.random.split(key, 3)
            idx = jax.random.randint(k_idx, (config.batch_size,), 0, n)
            obs, actions = data["observations"][idx], data["actions"][idx]
            noise = jax.random.normal(k_noise, actions.shape)
            t = jax.random.uniform(k_t, (config.batch_size,))
            loss, grads = jax.value_and_grad(
                lambda p: flow_matching_loss(velocity_fn(network, p), obs, actions, noise, t))(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        (params, _), losses = jax.lax.scan(update, (params, optimizer.init(params)),
                                           jax.random.split(key, config.num_updates))
        return params, losses

    return init, train


def init_seeds(init, keys: jax.Array):
    """``init`` per key, stacked along a leading seed axis. A loop, not ``vmap``: XLA's CPU runtime
    can hang on a vmapped batch of the QR factorisations that orthogonal initialisation runs."""
    init = jax.jit(init)
    return jax.tree.map(lambda *xs: jnp.stack(xs), *[init(k) for k in keys])


def train_seeds(init, train, keys: jax.Array, data):
    """Initialise and train one model per key in one vmapped program -> (params, metrics), both with a
    leading seed axis."""
    init_keys, train_keys = jnp.split(jax.vmap(jax.random.split)(keys), 2, axis=1)
    params = init_seeds(init, init_keys[:, 0])
    return jax.jit(jax.vmap(train, in_axes=(0, 0, None)))(params, train_keys[:, 0], data)


def check_finite(losses, what: str) -> None:
    """A NaN or Inf training loss is a usage error naming the first bad update (nothing is saved from it)."""
    losses = np.asarray(losses).reshape(-1, np.shape(losses)[-1])
    bad = ~np.isfinite(losses)
    if bad.any():
        first = int(np.argmax(bad.any(axis=0)))
        raise UsageError(f"{what} training diverged (NaN or Inf loss at update {first}); lower its learning_rate "
                         "or check the dataset for NaN values.")


# ----------------------------------------------------------------------------- sample
def euler_sample(velocity: Velocity, obs: jax.Array, noise: jax.Array, num_steps: int,
                 action_grad: ActionGrad | None = None, w: float | jax.Array = 0.0,
                 low: float = -1.0, high: float = 1.0) -> jax.Array:
    r"""Integrate the flow from ``noise [B, d]`` at states ``obs [B, o]`` with ``num_steps`` Euler steps,
    guided by ``action_grad`` (:math:`\nabla_a Q`) with weight ``w`` if given (QGF), then clip to
    ``[low, high]``. Returns actions ``[B, d]``. ``w`` may be traced (vmap over guidance weights)."""
    dt = 1.0 / num_steps

    def step(k, x):
        t = jnp.full(x.shape[:1], k * dt)
        v = velocity(obs, x, t)
        if action_grad is not None:
            a_hat = x + (1.0 - t[:, None]) * v  # one-step denoised action
            v = v + w * action_grad(obs, a_hat)  # d a_hat / d x replaced by the identity
        return x + dt * v

    return jnp.clip(jax.lax.fori_loop(0, num_steps, step, noise), low, high)


def q_action_grad(q: QFn) -> ActionGrad:
    """:math:`\\nabla_a Q(s, a)` per row, for a critic ``q(obs [B, o], a [B, d]) -> [B]`` (rows are independent)."""
    return jax.grad(lambda obs, a: jnp.sum(q(obs, a)), argnums=1)


def best_of_n(q: QFn, obs: jax.Array, candidates: jax.Array) -> jax.Array:
    """Per state, the candidate with the highest Q: ``candidates [N, B, d]`` at ``obs [B, o]`` -> ``[B, d]``."""
    values = jax.vmap(lambda a: q(obs, a))(candidates)  # [N, B]
    best = jnp.argmax(values, axis=0)  # [B]
    return jnp.take_along_axis(candidates, best[None, :, None], axis=0)[0]


def sample_best_of_n(velocity: Velocity, q: QFn, obs: jax.Array, key: jax.Array, n: int, num_steps: int,
                     action_dim: int, low: float = -1.0, high: float = 1.0) -> jax.Array:
    """Best-of-N over ``n`` BC samples (``num_steps`` Euler steps each) at ``obs [B, o]`` -> ``[B, d]``."""
    noise = jax.random.normal(key, (n, obs.shape[0], action_dim))
    candidates = jax.vmap(lambda z: euler_sample(velocity, obs, z, num_steps, low=low, high=high))(noise)
    return best_of_n(q, obs, candidates)


def sample(method: str, velocity: Velocity, q: QFn, obs: jax.Array, key: jax.Array, num_steps: int, action_dim: int,
           w: float | jax.Array = 0.0, n: int = 1, low: float = -1.0, high: float = 1.0) -> jax.Array:
    """Actions ``[B, d]`` at ``obs [B, o]`` by one of the test-time methods :func:`evaluations_per_action` counts:
    ``bc`` (the flow alone from noise drawn with ``key``), ``qgf`` (the same noise, guided by ``q``'s action
    gradient with weight ``w``: :func:`euler_sample`) or ``best_of_n`` (:func:`sample_best_of_n` over ``n``)."""
    if method == "best_of_n":
        return sample_best_of_n(velocity, q, obs, key, n, num_steps, action_dim, low, high)
    if method not in ("bc", "qgf"):
        raise UsageError(f"unknown sampling method '{method}'; choose one of bc, qgf, best_of_n.")
    noise = jax.random.normal(key, (obs.shape[0], action_dim))
    return euler_sample(velocity, obs, noise, num_steps, q_action_grad(q) if method == "qgf" else None, w, low, high)


def evaluations_per_action(method: str, num_steps: int = 0, n: int = 1) -> dict[str, int]:
    """Network evaluations to produce one action: ``velocity``, ``critic`` and ``policy`` (a one-step
    policy's forward) counts and their ``total``.

    bc: K velocity; qgf: K velocity + K critic gradients; best_of_n: N K velocity + N critic;
    fql: 1 one-step policy evaluation."""
    counts = {"bc": (num_steps, 0, 0), "qgf": (num_steps, num_steps, 0), "best_of_n": (n * num_steps, n, 0),
              "fql": (0, 0, 1)}
    if method not in counts:
        raise UsageError(f"unknown sampling method '{method}'; choose one of {', '.join(counts)}.")
    velocity, critic, policy = counts[method]
    return {"velocity": velocity, "critic": critic, "policy": policy, "total": velocity + critic + policy}
