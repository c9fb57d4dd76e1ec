r"""The learned drift of LPO (Lu et al. 2022) and of its temporally-aware form TA-LPO (Jackson et al. 2024).

Mirror learning (Kuba et al. 2022) lets a policy update maximise any objective of the form

.. math::
    L(\theta) = \mathbb E\big[r A - f_\phi(r, A)\big], \qquad r = \pi_\theta(a|s) / \pi_{old}(a|s),

where the *drift* ``f`` is non-negative, zero at ``r = 1`` and has zero gradient in ``r`` there. LPO
meta-learns ``f_phi`` as a small MLP; TA-LPO adds the lifetime inputs ``n/N`` (progress through training)
and ``log N`` (the training horizon), so the drift can change over the agent's lifetime.

Construction (ours; it meets the three conditions exactly, by design rather than by training):

.. math::
    f_\phi(r, A, n, N) = (r - 1)^2\, \mathrm{softplus}\big(g_\phi(x)\big),\qquad
    x = [r-1,\ \log r,\ A,\ (r-1)A,\ A \log r,\ (n/N,\ \log N)_{\text{TA only}}],

with ``g_phi`` a tanh MLP. ``(r-1)^2`` vanishes with its derivative at ``r = 1``; ``softplus > 0``.

The drift lives here, with its objective and its file format, because an algorithm uses it
(``algos.ppo``'s ``drift FILE`` replaces the clipped surrogate); :mod:`longhorizon.evolution` meta-learns it.
Bad input raises ``ValueError`` with one sentence naming the fix (``algos.ppo`` reports a bad ``--drift``
file as a usage error).
"""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class DriftConfig:
    hidden: int = 16
    temporal: bool = False  # True: TA-LPO (lifetime inputs n/N, log N)
    ratio_clip: float = 10.0  # features see r clipped to [1/c, c] so log r stays finite; the (r-1)^2 factor does not

    def __post_init__(self):
        if self.hidden < 1:
            raise ValueError(f"drift hidden size must be >= 1 (got {self.hidden}); pass a positive width.")
        if self.ratio_clip <= 1.0:
            raise ValueError(f"ratio_clip must be > 1 (got {self.ratio_clip}); pass e.g. 10.")

    @property
    def num_features(self) -> int:
        return 7 if self.temporal else 5


def drift_features(config: DriftConfig, ratio, advantage, progress=None, horizon=None) -> jax.Array:
    """Features ``x`` of the module docstring, shape ``[..., F]``; ``progress = n/N`` and ``horizon = N``
    broadcast against ``ratio`` (TA-LPO only)."""
    r = jnp.clip(ratio, 1.0 / config.ratio_clip, config.ratio_clip)
    log_r = jnp.log(r)
    feats = [r - 1.0, log_r, advantage, (r - 1.0) * advantage, log_r * advantage]
    if config.temporal:
        if progress is None or horizon is None:
            raise ValueError("a temporally-aware drift needs progress n/N and horizon N; pass both.")
        feats += [jnp.broadcast_to(progress, r.shape), jnp.broadcast_to(jnp.log(horizon), r.shape)]
    return jnp.stack(jnp.broadcast_arrays(*feats), axis=-1)


def drift(config: DriftConfig, params: dict, ratio, advantage, progress=None, horizon=None) -> jax.Array:
    r"""``f_phi(r, A[, n/N, log N]) = (r-1)^2 softplus(g_phi(x)) >= 0``, same shape as ``ratio``."""
    x = drift_features(config, ratio, advantage, progress, horizon)
    g = jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    return jnp.square(ratio - 1.0) * jax.nn.softplus(g)


def lpo_objective(config: DriftConfig, params: dict | None, log_prob, old_log_prob, advantage,
                  progress=None, horizon=None) -> jax.Array:
    r"""Mirror-learning objective to maximise, ``E[r A - f_phi(r, A)]`` over a batch ``[B]``.

    ``params=None`` is the zero drift: PPO's unclipped surrogate ``E[r A]``.
    """
    ratio = jnp.exp(log_prob - old_log_prob)
    surrogate = ratio * advantage
    if params is None:
        return jnp.mean(surrogate)
    return jnp.mean(surrogate - drift(config, params, ratio, advantage, progress, horizon))


DRIFT_KEYS = ("w1", "b1", "w2", "b2")


def config_of(params: dict) -> DriftConfig:
    """The drift's config, read from its parameter shapes (``w1`` is ``[F, H]``; F = 7 means TA-LPO)."""
    features, hidden = np.shape(params["w1"])
    return DriftConfig(hidden=int(hidden), temporal=features == 7)


def save_drift(path, params: dict) -> None:
    """Write a drift as ``.npz`` (what ``algos.ppo``'s ``--drift FILE`` reads), atomically: a stop mid-write
    leaves the previous file whole. The zip format stores a CRC-32 per array, checked by :func:`load_drift`."""
    import os

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        np.savez(handle, **{k: np.asarray(params[k], np.float32) for k in DRIFT_KEYS})
    os.replace(tmp, path)


def load_drift(path) -> dict:
    """A drift saved by :func:`save_drift`; a clear error for anything else."""
    fix = "pass an .npz written by `longhorizon repro ta-lpo` (its lpo_drift.npz or ta_lpo_drift.npz)"
    if not Path(path).is_file():
        raise ValueError(f"--drift {path} does not exist; {fix}.")
    try:
        with np.load(path) as data:
            params = {k: np.asarray(data[k], np.float32) for k in DRIFT_KEYS}
    except (OSError, KeyError, ValueError, AttributeError, zipfile.BadZipFile):  # BadZipFile: a CRC mismatch
        raise ValueError(f"--drift {path} is not a drift file (or is damaged) (an .npz with arrays {', '.join(DRIFT_KEYS)}); {fix}.") from None
    features, hidden = params["w1"].shape if params["w1"].ndim == 2 else (0, 0)
    if features not in (5, 7) or params["b1"].shape != (hidden,) or params["w2"].shape != (hidden,) or params["b2"].shape:
        raise ValueError(f"--drift {path} has parameter shapes no drift has (w1 {params['w1'].shape}); {fix}.")
    return params
