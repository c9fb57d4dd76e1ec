"""Action distributions for policy-gradient methods: log-probabilities, entropy and sampling."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def categorical_log_prob(logits: jax.Array, actions: jax.Array) -> jax.Array:
    r""":math:`\log \pi(a|s) = \ell_a - \log\sum_b e^{\ell_b}` for logits :math:`\ell`."""
    log_probs = jax.nn.log_softmax(logits)
    return jnp.take_along_axis(log_probs, actions[..., None].astype(jnp.int32), axis=-1)[..., 0]


def categorical_entropy(logits: jax.Array) -> jax.Array:
    r""":math:`H = -\sum_a \pi(a) \log \pi(a)`."""
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)


def categorical_sample(key: jax.Array, logits: jax.Array, greedy: bool | jax.Array = False) -> jax.Array:
    sampled = jax.random.categorical(key, logits)
    return jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled)


def categorical_sample_inverse_cdf(key: jax.Array, logits: jax.Array, block: int = 256) -> jax.Array:
    r"""One draw per row of :math:`\mathrm{softmax}(\ell)` by inverting its CDF, in two levels.

    Draw :math:`u \sim U[0, 1)` per row, then the first token :math:`i` with
    :math:`\sum_{j \le i} p_j > u`: first the block of ``block`` tokens whose cumulative mass
    passes :math:`u`, then the token inside it. Exact like ``jax.random.categorical`` (which draws
    one Gumbel variable per token), but with one random number per row and cumulative sums over
    ``V / block`` and ``block`` entries instead of one over ``V``: on a CPU, for a 49k-token
    vocabulary, it costs about a twentieth of the Gumbel draw. Tokens of probability 0 (logit
    ``-inf``, e.g. outside a top-p nucleus) are never drawn, also when rounding puts :math:`u` past
    the last cumulative sum. ``logits [..., V]`` -> ``int32 [...]``.
    """
    *batch, v = logits.shape
    flat = logits.reshape(-1, v)
    n_blocks = -(-v // block)
    padded = jnp.pad(flat, ((0, 0), (0, n_blocks * block - v)), constant_values=-jnp.inf)
    probs = jnp.exp(padded - jnp.max(padded, axis=-1, keepdims=True)).reshape(-1, n_blocks, block)
    block_mass = probs.sum(-1)  # [R, n_blocks]
    u = jax.random.uniform(key, (flat.shape[0],)) * block_mass.sum(-1)

    def first_passing(cumulative, mass, target):  # first index whose cumulative sum exceeds target
        index = jnp.sum(cumulative <= target[:, None], axis=-1)
        last_positive = mass.shape[-1] - 1 - jnp.argmax((mass > 0)[:, ::-1], axis=-1)
        return jnp.where(index >= mass.shape[-1], last_positive, index)

    cumulative = jnp.cumsum(block_mass, axis=-1)
    chosen = first_passing(cumulative, block_mass, u)
    rest = u - jnp.take_along_axis(cumulative - block_mass, chosen[:, None], axis=1)[:, 0]
    inside = jnp.take_along_axis(probs, chosen[:, None, None], axis=1)[:, 0]  # [R, block]
    token = chosen * block + first_passing(jnp.cumsum(inside, axis=-1), inside, rest)
    return token.astype(jnp.int32).reshape(batch)


def diag_gaussian_log_prob(mean: jax.Array, log_std: jax.Array, actions: jax.Array) -> jax.Array:
    r""":math:`\log \mathcal N(a; \mu, \sigma^2) = \sum_i -\tfrac12 ((a_i-\mu_i)/\sigma_i)^2 - \log\sigma_i - \tfrac12\log 2\pi`."""
    z = (actions - mean) / jnp.exp(log_std)
    return jnp.sum(-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi), axis=-1)


def diag_gaussian_entropy(log_std: jax.Array) -> jax.Array:
    r""":math:`H = \sum_i \log\sigma_i + \tfrac12 (1 + \log 2\pi)`."""
    return jnp.sum(log_std + 0.5 * (1.0 + math.log(2 * math.pi)), axis=-1)


def diag_gaussian_sample(key: jax.Array, mean: jax.Array, log_std: jax.Array, greedy: bool | jax.Array = False) -> jax.Array:
    noise = jax.random.normal(key, mean.shape)
    return jnp.where(greedy, mean, mean + jnp.exp(log_std) * noise)


def epsilon_greedy(key: jax.Array, q_values: jax.Array, epsilon: float | jax.Array) -> jax.Array:
    r"""Greedy action :math:`\arg\max_a Q(s, a)` per row, replaced by a uniform random action with
    probability :math:`\epsilon` (drawn independently for every row)."""
    explore_key, action_key = jax.random.split(key)
    greedy = jnp.argmax(q_values, axis=-1)
    random = jax.random.randint(action_key, greedy.shape, 0, q_values.shape[-1])
    return jnp.where(jax.random.uniform(explore_key, greedy.shape) < epsilon, random, greedy)
