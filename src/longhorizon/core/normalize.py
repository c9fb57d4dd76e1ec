"""Running mean and variance (Chan et al.'s parallel update), used for observation and reward
normalisation everywhere in longhorizon."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class RunningMeanStd:
    mean: jax.Array
    var: jax.Array
    count: jax.Array

    @classmethod
    def create(cls, shape=()) -> "RunningMeanStd":
        return cls(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.asarray(1e-4, jnp.float32))

    def update(self, batch: jax.Array) -> "RunningMeanStd":
        r"""Merge the moments of ``batch`` (leading axis = samples) into the running moments.

        .. math::
            \delta = \bar x_B - \mu,\quad n' = n + n_B,\quad \mu' = \mu + \delta\, n_B / n',\quad
            \sigma'^2 = \big(n \sigma^2 + n_B \sigma_B^2 + \delta^2 n n_B / n'\big) / n'.
        """
        batch = jnp.asarray(batch, jnp.float32).reshape((-1,) + self.mean.shape)
        batch_mean, batch_var, batch_count = batch.mean(0), batch.var(0), batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        return RunningMeanStd(mean, m2 / total, total)

    def normalize(self, x: jax.Array, clip: float = 10.0) -> jax.Array:
        return jnp.clip((x - self.mean) / jnp.sqrt(self.var + 1e-8), -clip, clip)
