"""How far an agent policy has moved from where it started, measured on its own episodes (KL and entropy)."""

from __future__ import annotations

import dataclasses

import numpy as np

from longhorizon.lm.agents.rollout import AgentConfig, MultiTurnRollout


def policy_drift(policy, params, env: str, agent: AgentConfig, rows, seed: int = 0) -> dict:
    """How far an agent policy ``params`` (pi) has moved from ``policy.params`` (pi_0, e.g. its warm start): per episode
    of ``env`` on ``rows`` that pi samples at temperature 1 (``agent``'s other settings), ``kl``, the mean k3 estimate
    of KL(pi || pi_0) over its action tokens (:func:`longhorizon.core.kl.kl_k3`), and ``entropy``, pi's mean token
    entropy there. Episodes without an action token are left out."""
    import jax
    import jax.numpy as jnp

    from longhorizon.core.kl import kl_k3
    from longhorizon.lm.agents.spec import environment_class
    from longhorizon.lm.model import token_logprobs

    sampling = dataclasses.replace(agent, temperature=1.0)
    rollout = MultiTurnRollout(policy.model_cfg, policy.tokenizer, environment_class(env), sampling)
    trajs = rollout.run(params, list(rows), 1, jax.random.PRNGKey(seed + 77))
    seqs = [(i, s) for i, t in enumerate(trajs) for s in t.sequences]
    bucket = agent.length_bucket
    length = -(-max(len(s) for _, s in seqs) // bucket) * bucket
    rows_b = -(-len(seqs) // 8) * 8  # a multiple of 8 rows: few compiled shapes
    tokens = np.full((rows_b, length), policy.tokenizer.pad_id, np.int32)
    valid = np.zeros((rows_b, length), bool)
    mask = np.zeros((rows_b, length - 1), np.float32)
    valid[:, 0] = True
    for j, (_, s) in enumerate(seqs):
        tokens[j, :len(s)], valid[j, :len(s)], mask[j, :len(s) - 1] = s.tokens, True, s.action_mask[1:]
    logp_fn = jax.jit(token_logprobs, static_argnums=(1,))
    logp, entropy = logp_fn(params, policy.model_cfg, jnp.asarray(tokens), jnp.asarray(valid))
    ref_logp, _ = logp_fn(policy.params, policy.model_cfg, jnp.asarray(tokens), jnp.asarray(valid))
    k3 = np.asarray(kl_k3(logp, ref_logp)) * mask
    entropy = np.asarray(entropy) * mask
    kl_sum, ent_sum, count = np.zeros(len(trajs)), np.zeros(len(trajs)), np.zeros(len(trajs))
    for j, (i, _) in enumerate(seqs):
        kl_sum[i] += k3[j].sum()
        ent_sum[i] += entropy[j].sum()
        count[i] += mask[j].sum()
    keep = count > 0
    return {"kl": list(kl_sum[keep] / count[keep]), "entropy": list(ent_sum[keep] / count[keep])}
