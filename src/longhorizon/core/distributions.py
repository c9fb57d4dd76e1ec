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
