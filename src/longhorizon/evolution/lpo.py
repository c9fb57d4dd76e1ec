"""LPO and TA-LPO's meta-learned drift, on the evolution side: its initial parameters and their count.

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
