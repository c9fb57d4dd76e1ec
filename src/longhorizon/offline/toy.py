r"""A toy multi-modal 2-D offline task where test-time guidance is visible in a picture.

One step, one state (a contextual bandit with a single context): the action :math:`a \in [-1, 1]^2`
earns the smooth reward

.. math:: r(a) = \sum_k c_k \exp\!\big(-\lVert a - \mu_k \rVert^2 / (2\sigma_r^2)\big),

a bump of height :math:`c_k` around each mode centre :math:`\mu_k`. The behaviour data are a
mixture: with probability :math:`1 - p_{bad}` an action from one of the modes (equal weights,
:math:`\mathcal N(\mu_k, \sigma_m^2 I)`), otherwise a "bad" action from a broad Gaussian around the
origin (:math:`\mathcal N(0, \sigma_{bad}^2 I)`, where every bump is low). Behaviour cloning
therefore covers every mode; a critic's gradient can move samples to the best mode; the corners
beyond the modes hold no data, so a critic extrapolates there and an over-weighted guidance leaves
the support (the true reward there is near zero).

The dataset uses OGBench's single-task keys: ``observations [N, 1]`` (all zero), ``actions [N, 2]``,
``rewards [N]``, ``masks [N]`` (0: nothing to bootstrap after the one step), ``terminals [N]`` (1),
``next_observations [N, 1]``.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError


def _ring(radius: float, count: int, phase: float) -> tuple[tuple[float, float], ...]:
    return tuple((round(radius * math.cos(phase + 2 * math.pi * k / count), 6),
                  round(radius * math.sin(phase + 2 * math.pi * k / count), 6)) for k in range(count))


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    """The task and its behaviour dataset."""

    centers: tuple[tuple[float, float], ...] = _ring(0.6, 4, math.pi / 4)  # the four diagonals
    heights: tuple[float, ...] = (1.0, 0.7, 0.4, 0.1)  # c_k: mode 0 (upper right) is the best
    reward_width: float = 0.3  # sigma_r: wide enough that the bumps overlap, so the reward has a slope between modes
    mode_std: float = 0.08  # sigma_m of the behaviour modes
    bad_fraction: float = 0.2  # p_bad
    bad_std: float = 0.25  # sigma_bad
    success_radius: float = 0.15  # an action this close to the best centre is a success
    size: int = 20_000
    seed: int = 0

    def __post_init__(self):
        if len(self.centers) < 2 or len(self.centers) != len(self.heights):
            raise UsageError(f"the toy task needs at least 2 centers and one height each, got {len(self.centers)} "
                             f"centers and {len(self.heights)} heights; give matching tuples.")
        if any(len(c) != 2 or max(abs(x) for x in c) > 1 for c in self.centers):
            raise UsageError("every toy center must be a pair inside [-1, 1]^2; move the centers into the action box.")
        for name in ("reward_width", "mode_std", "bad_std", "success_radius"):
            if not getattr(self, name) > 0:
                raise UsageError(f"toy {name} must be positive, got {getattr(self, name)}; choose a positive width.")
        if not 0 <= self.bad_fraction < 1:
            raise UsageError(f"toy bad_fraction must be in [0, 1), got {self.bad_fraction}; choose a fraction.")
        if self.size < 1:
            raise UsageError(f"toy size must be at least 1, got {self.size}; choose a positive dataset size.")

    @property
    def best(self) -> int:
        return int(np.argmax(self.heights))


OBS_DIM, ACTION_DIM = 1, 2


def reward(config: ToyConfig, actions: jax.Array) -> jax.Array:
    """``r(a)`` of the module docstring for actions ``[..., 2]`` -> ``[...]``."""
    centers = jnp.asarray(config.centers, jnp.float32)  # [K, 2]
    heights = jnp.asarray(config.heights, jnp.float32)  # [K]
    sq = jnp.sum((actions[..., None, :] - centers) ** 2, axis=-1)  # [..., K]
    return jnp.sum(heights * jnp.exp(-sq / (2 * config.reward_width**2)), axis=-1)


def success(config: ToyConfig, actions: jax.Array) -> jax.Array:
    """1 where an action ``[..., 2]`` lies within ``success_radius`` of the best mode's centre."""
    best = jnp.asarray(config.centers[config.best], jnp.float32)
    return (jnp.linalg.norm(actions - best, axis=-1) <= config.success_radius).astype(jnp.float32)


def mode_of(config: ToyConfig, actions: jax.Array) -> jax.Array:
    """Index of the nearest centre for actions ``[..., 2]`` (for histograms of the modes covered)."""
    centers = jnp.asarray(config.centers, jnp.float32)
    return jnp.argmin(jnp.sum((actions[..., None, :] - centers) ** 2, axis=-1), axis=-1)


def off_support(actions: jax.Array, support: jax.Array, radius: float) -> jax.Array:
    """1 where an action ``[..., B, 2]`` is farther than ``radius`` from every dataset action ``support [N, 2]``
    (it left the data's support), else 0."""
    far = jnp.min(jnp.linalg.norm(actions[..., :, None, :] - support, axis=-1), axis=-1)
    return (far > radius).astype(jnp.float32)


def make_dataset(config: ToyConfig = ToyConfig()) -> dict[str, np.ndarray]:
    """The behaviour dataset (deterministic given ``config.seed``), actions clipped to ``[-1, 1]^2``."""
    rng = np.random.default_rng(config.seed)
    n = config.size
    bad = rng.random(n) < config.bad_fraction
    modes = rng.integers(len(config.centers), size=n)
    centers = np.asarray(config.centers, np.float32)
    actions = np.where(bad[:, None], rng.normal(0.0, config.bad_std, (n, 2)),
                       centers[modes] + rng.normal(0.0, config.mode_std, (n, 2)))
    actions = np.clip(actions, -1.0, 1.0).astype(np.float32)
    obs = np.zeros((n, OBS_DIM), np.float32)
    return {"observations": obs, "actions": actions, "rewards": np.asarray(reward(config, actions), np.float32),
            "masks": np.zeros(n, np.float32), "terminals": np.ones(n, np.float32), "next_observations": obs.copy()}
