"""LPO and TA-LPO's meta-learned drift, on the evolution side: its initial parameters and their count, and how to
read a learned drift (its values on a grid, and how much they change over the lifetime).

The drift itself (:class:`DriftConfig`, :func:`drift`, :func:`lpo_objective`, the ``.npz`` file format) is
:mod:`longhorizon.core.drift`, where ``algos.ppo`` reads it without importing this family; its names are
also this module's, so meta-training code says ``lpo.drift`` and ``lpo.init_drift`` alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.core.drift import DriftConfig, drift, load_drift, lpo_objective, save_drift  # noqa: F401


def init_drift(config: DriftConfig, key: jax.Array) -> dict:
    """Drift MLP parameters ``{w1: [F, H], b1: [H], w2: [H], b2: []}``; small output weights start f near
    ``softplus(b2) (r-1)^2``, a quadratic trust region."""
    k1, k2 = jax.random.split(key)
    f, h = config.num_features, config.hidden
    return {"w1": jax.random.normal(k1, (f, h)) / np.sqrt(f), "b1": jnp.zeros(h),
            "w2": 0.1 * jax.random.normal(k2, (h,)) / np.sqrt(h), "b2": jnp.asarray(0.0)}


def num_params(params: dict) -> int:
    return int(sum(np.size(p) for p in jax.tree_util.tree_leaves(params)))


def drift_grid(config: DriftConfig, params: dict, ratios, progress: float, horizon: float) -> np.ndarray:
    """The drift ``f(r, A)`` at the ratios ``r = ratios`` and the advantage signs ``A = -1, +1``, shape ``[2, R]``
    (row 0: ``A = -1``); a temporal drift at the lifetime ``progress`` ``n/N`` and ``horizon`` ``N``."""
    r, a = np.meshgrid(ratios, [-1.0, 1.0])
    extra = dict(progress=progress, horizon=horizon) if config.temporal else {}
    return np.asarray(drift(config, params, jnp.asarray(r), jnp.asarray(a), **extra))


def lifetime_change(early, late) -> float:
    """``mean |f_late - f_early| / mean |f|`` of a drift's grids (:func:`drift_grid`) early and late in the
    lifetime: 0 for a drift that ignores the lifetime."""
    early, late = np.asarray(early), np.asarray(late)
    return float(np.abs(late - early).mean() / max(0.5 * (np.abs(early).mean() + np.abs(late).mean()), 1e-12))
