"""Per-sample estimators of KL(pi || pi_ref) from log-probabilities of samples drawn from pi.

With ``x ~ pi`` and the log-ratio ``log r = log pi_ref(x) - log pi(x)`` (Schulman, "Approximating
KL divergence", 2020):

* ``k1 = -log r``                unbiased, high variance, can be negative;
* ``k2 = (log r)^2 / 2``         biased, low variance, always >= 0;
* ``k3 = (r - 1) - log r``       unbiased, low variance, always >= 0 (GRPO's per-token KL term,
  ``exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1``).

All functions are elementwise over arrays of per-token log-probabilities.

PPO's diagnostics (CleanRL's names) are the means of k1 and k3 for ``KL(pi_old || pi)`` on the
rollout's actions, drawn from ``pi_old``: with ``rho = pi(a|s) / pi_old(a|s)``,
``old_approx_kl = mean(kl_k1(log pi_old, log pi)) = mean(-log rho)`` and
``approx_kl = mean(kl_k3(log pi_old, log pi)) = mean((rho - 1) - log rho)``.
"""

from __future__ import annotations

import jax.numpy as jnp


def kl_k1(logp, ref_logp):
    """``k1 = log pi(x) - log pi_ref(x)``."""
    return logp - ref_logp


def kl_k2(logp, ref_logp):
    """``k2 = (log pi_ref(x) - log pi(x))^2 / 2``."""
    return 0.5 * jnp.square(ref_logp - logp)


def kl_k3(logp, ref_logp):
    """``k3 = exp(log pi_ref(x) - log pi(x)) - (log pi_ref(x) - log pi(x)) - 1``."""
    log_ratio = ref_logp - logp
    return jnp.exp(log_ratio) - log_ratio - 1.0
