"""Nash learning from preferences at the policy level: an intransitive preference oracle on LM completions, and
the pairwise losses over sequence log-probs that train a policy against it.

The oracle (:class:`Oracle`). A completion ``y`` of an arithmetic prompt is an answer and a style tag,
``"w=42;r"``; ``c(y) in {0, 1}`` is the verifier's exact-match correctness and ``s(y) in {r, p, s}`` its tag
(the last character after the last ``;``; none if it is something else). With ``beats = {r > s, s > p, p > r}``::

    P(y > y') = 1/2 + m_c (c(y) - c(y'))                      if c(y) != c(y')    (transitive part)
              = 1/2 + m_s sign(s(y), s(y'))                    otherwise           (cyclic part)

``sign = +1`` if ``s(y)`` beats ``s(y')``, ``-1`` if it loses, 0 for equal or missing tags, so ``P + P^T = 1`` and
r, p, s form a cycle among equally correct completions: no scalar reward orders them.

Losses, for pairs (winner w, loser l) by their summed sequence log-probs ``log pi(y)`` under the trained policy,
the sampling policy ``pi_t`` and the reference ``pi_ref`` (``h_pi(y) = log pi(y) - log pi_ref(y)``)::

    INPO   (h_t(w, l) - eta/2)^2,  h_t = log pi(w)/pi(l) - eta tau log pi_ref(w)/pi_ref(l) - (1 - eta tau) log pi_t(w)/pi_t(l)
    DPO    -log sigmoid(tau (h_pi(w) - h_pi(l)))
    IPO    (h_pi(w) - h_pi(l) - 1/(2 tau))^2

INPO's pairs are sampled from the current policy (online); DPO's and IPO's from the reference (offline). The two
policy-gradient arms reuse the GRPO trainer unchanged with a reward per completion: reward-model GRPO scores the
transitive part ``c(y)``; policy-gradient Nash-MP (mirror prox) first takes a half step whose reward is the win rate
against other samples of ``pi_k``, then, from ``pi_k`` again, a full step whose reward is the win rate against
samples of the half-step policy ``pi_{k+1/2}``; both steps carry GRPO's k3 KL to ``pi_ref`` with weight ``tau``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from longhorizon.errors import TrainingDiverged, UsageError
from longhorizon.lm.grpo import GRPOTrainer, completion_logprobs, completion_logprobs_of
from longhorizon.lm.tasks import Problem, score

TAGS = "rps"
BEATS = {"r": "s", "s": "p", "p": "r"}
PAIR_LOSSES = ("inpo", "dpo", "ipo")


@dataclasses.dataclass(frozen=True)
class Oracle:
    """The intransitive preference oracle of the module docstring."""

    correct_margin: float = 0.5  # m_c: a correct completion beats a wrong one with probability 1/2 + m_c
    cyclic_margin: float = 0.4  # m_s: among equally correct ones, a beating tag wins with probability 1/2 + m_s

    def __post_init__(self):
        for name in ("correct_margin", "cyclic_margin"):
            if not 0 <= getattr(self, name) <= 0.5:
                raise UsageError(f"{name}={getattr(self, name)} must lie in [0, 0.5] so that P(y > y') is a probability.")

    def __call__(self, problem: Problem, text: str, other: str) -> float:
        """``P(text > other)`` for two completions of ``problem``."""
        c, c_other = score(problem, text), score(problem, other)
        if c != c_other:
            return 0.5 + self.correct_margin * (c - c_other)
        return 0.5 + self.cyclic_margin * cyclic_sign(tag(text), tag(other))

    def matrix(self, problem: Problem, texts: Sequence[str], others: Sequence[str]) -> np.ndarray:
        """``P[i, j] = P(texts[i] > others[j])``, ``[len(texts), len(others)]``."""
        return np.array([[self(problem, a, b) for b in others] for a in texts], np.float64)

    def tag_matrix(self) -> np.ndarray:
        """The cyclic part over the tags r, p, s (equally correct completions), ``[3, 3]``."""
        return np.array([[0.5 + self.cyclic_margin * cyclic_sign(a, b) for b in TAGS] for a in TAGS])


def tag(text: str) -> str | None:
    """The style tag of a completion: the text after its last ``;`` if that is one of r, p, s, else None."""
    tail = text.rsplit(";", 1)[-1] if ";" in text else None
    return tail if tail in BEATS else None


def cyclic_sign(a: str | None, b: str | None) -> int:
    if a is None or b is None or a == b:
        return 0
    return 1 if BEATS[a] == b else -1


def tagged(problems: Sequence[Problem], rng: np.random.Generator, mix: dict) -> list[Problem]:
    """The problems with a style tag appended to each reference completion, drawn from the tag mix ``mix``
    (``{tag: probability}``): teacher-forcing data for a reference policy with that mix."""
    tags = rng.choice(list(mix), len(problems), p=list(mix.values()))
    return [dataclasses.replace(p, target=p.target + t) for p, t in zip(problems, tags)]


def cached_reference_policy(task, tags: dict, *, d_model: int, n_layers: int, n_heads: int, steps: int, batch_size: int,
                            learning_rate: float, seed: int = 0, log=print):
    """A reference policy pi_ref for the oracle: a character-level transformer taught by teacher forcing
    (:func:`longhorizon.lm.sft.train_sft`) to answer single problems of ``task`` with a style tag drawn from the mix
    ``tags`` appended (:func:`tagged`), so it is correct only sometimes and its tag mix is skewed. Kept in the policy
    cache (:mod:`longhorizon.lm.policy_cache`) by its settings; ``(params, model_cfg, tokenizer)``."""
    from longhorizon.lm.model import ModelConfig, init_params
    from longhorizon.lm.policy_cache import cache_path, load_or_train
    from longhorizon.lm.sft import SFTConfig, train_sft
    from longhorizon.lm.tasks import ProblemStream, max_lengths
    from longhorizon.lm.tokenizer import Tokenizer

    tokenizer = Tokenizer()
    model_cfg = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads)
    fields = {"d_model": d_model, "n_layers": n_layers, "n_heads": n_heads, "sft_steps": steps, "sft_batch": batch_size,
              "sft_lr": learning_rate, "seed": seed, "task": repr(task), "tags": tags, "version": 1}
    params = init_params(jax.random.PRNGKey(seed), model_cfg)

    def train():
        plen, clen = max_lengths("packed", 1, task)
        cfg = SFTConfig(steps=steps, batch_size=batch_size, learning_rate=learning_rate,
                        warmup_steps=min(50, steps // 4), seq_len=plen + clen + 3)
        stream, rng = ProblemStream("packed", task, seed), np.random.default_rng(seed)
        log(f"  pi_ref: {steps} teacher-forcing steps")
        return train_sft(params, model_cfg, tokenizer, lambda _: tagged(stream.sample([1], batch_size), rng, tags), cfg,
                         log_every=max(1, steps // 3))[0]

    return load_or_train(cache_path("lm", "inpo_ref_", fields), params, train), model_cfg, tokenizer


def nash_tag_mix(oracle: Oracle, tau: float, ref_tags: dict) -> dict:
    """The regularised (KL weight ``tau``) Nash tag mix of the oracle's cyclic part alone (equally correct
    completions), regularised toward the reference tag mix ``ref_tags`` (:func:`longhorizon.games.preference.regularised_nash`)."""
    from longhorizon.games import preference

    pi = preference.regularised_nash(oracle.tag_matrix(), tau, np.array(list(ref_tags.values())))
    return dict(zip(ref_tags, pi.tolist()))


def tag_exploitability(oracle: Oracle, tags: dict) -> float:
    """``max_t' sum_t q(t) P(t' > t) - 1/2`` for a tag mix ``q`` (``tags[t]``, renormalised over r, p, s): how much
    the best single tag beats it among equally correct completions; 0 for the uniform (unregularised Nash) mix."""
    q = np.array([tags[t] for t in TAGS], np.float64)
    return float((oracle.tag_matrix() @ (q / q.sum())).max() - 0.5)


# ----------------------------------------------------------------------------- evaluation


def sample_completions(trainer: GRPOTrainer, params, problems: Sequence[Problem], samples: int) -> dict:
    """``samples`` completions per problem from ``params`` through ``trainer``'s rollout (its temperature): texts
    ``[P][S]`` and per completion ``log pi(y) - log pi_ref(y)`` ``[P*S]``, the Monte-Carlo terms of KL(pi || pi_ref)."""
    policy, cfg = trainer.params, trainer.cfg
    try:
        trainer.params, trainer.cfg = params, dataclasses.replace(cfg, num_generations=samples)
        ro = trainer.rollout(problems)
    finally:
        trainer.params, trainer.cfg = policy, cfg
    batch = grouped_batch(ro, samples, trainer.tokenizer.pad_id)
    ref = completion_logprobs(trainer.ref_params, batch, model_cfg=trainer.model_cfg, temperature=cfg.temperature)
    texts = [ro["texts"][i * samples:(i + 1) * samples] for i in range(len(problems))]
    return {"texts": texts, "log_ratio": batch["old_seq"] - (np.asarray(ref) * batch["mask"]).sum(-1)}


def describe_samples(problems: Sequence[Problem], sample: dict) -> dict:
    """A policy described by its samples (:func:`sample_completions`): exact-match accuracy, the share of each tag
    (``None``: no tag) and the Monte-Carlo ``KL(pi || pi_ref)``."""
    flat = [(p, t) for p, ts in zip(problems, sample["texts"]) for t in ts]
    tags = [tag(t) for _, t in flat]
    return {"accuracy": float(np.mean([score(p, t) for p, t in flat])),
            "tags": {str(k): float(np.mean([t == k for t in tags])) for k in (*TAGS, None)},
            "kl_to_ref": float(np.mean(sample["log_ratio"]))}


def win_rate(oracle: Oracle, problems: Sequence[Problem], texts_a, texts_b, same: bool = False) -> tuple[float, float]:
    """Mean ``P(y_a > y_b)`` over problems and all sample pairs of a problem (``same``: the two sets are one
    policy's, so a sample is not compared with itself), and its standard error over problems."""
    per_problem = []
    for p, a, b in zip(problems, texts_a, texts_b):
        P = oracle.matrix(p, a, b)
        per_problem.append((P.sum() - np.trace(P)) / (P.size - len(a)) if same else P.mean())
    v = np.asarray(per_problem)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0


# ----------------------------------------------------------------------------- pairwise losses


def pair_loss(loss: str, logp_w, logp_l, ref_w, ref_l, old_w=None, old_l=None, *, tau: float, eta: float = 1.0):
    """Per-pair loss ``[M]`` from summed sequence log-probs ``[M]`` (module docstring); ``old_*`` is ``pi_t`` (INPO)."""
    if loss == "inpo":
        h = (logp_w - logp_l) - eta * tau * (ref_w - ref_l) - (1 - eta * tau) * (old_w - old_l)
        return (h - eta / 2) ** 2
    margin = (logp_w - ref_w) - (logp_l - ref_l)
    if loss == "dpo":
        return -jax.nn.log_sigmoid(tau * margin)
    if loss == "ipo":
        return (margin - 1 / (2 * tau)) ** 2
    raise UsageError(f"pairwise loss {loss!r} is unknown; use one of {PAIR_LOSSES}.")


def sequence_logprobs(params, batch, model_cfg, temperature: float = 1.0):
    """``sum_t mask_t log pi(o_t | prompt, o_<t)`` per completion ``[B]`` (the GRPO trainer's scoring)."""
    logp, _ = completion_logprobs_of(params, batch, model_cfg, temperature)
    return (logp * batch["mask"]).sum(-1)


@functools.partial(jax.jit, static_argnames=("model_cfg", "optimizer"), donate_argnums=(0, 1))
def pair_update(params, opt_state, batch, *, model_cfg, optimizer):
    """One optimiser step on the mean pair loss; ``batch["winner"], batch["loser"] [M]`` index its completions,
    ``batch["which"] [3]`` is the one-hot choice among :data:`PAIR_LOSSES` and ``tau, eta`` are scalars (traced,
    so the three losses share one compiled program)."""
    w, l = batch["winner"], batch["loser"]

    def objective(p):
        seq = sequence_logprobs(p, batch, model_cfg)
        ref, old = batch["ref_seq"], batch["old_seq"]
        per_pair = sum(batch["which"][k] * pair_loss(name, seq[w], seq[l], ref[w], ref[l], old[w], old[l],
                                                     tau=batch["tau"], eta=batch["eta"])
                       for k, name in enumerate(PAIR_LOSSES))
        return per_pair.mean(), (seq[w] - seq[l]).mean()

    (value, margin), grads = jax.value_and_grad(objective, has_aux=True)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, {"loss": value, "logp_margin": margin,
                                                             "grad_norm": optax.tree.norm(grads)}


def all_pairs(group_size: int, groups: int) -> np.ndarray:
    """Every unordered pair ``(i, j), i < j`` within each group of consecutive rows: ``[groups * S(S-1)/2, 2]``."""
    i, j = np.triu_indices(group_size, 1)
    base = (np.arange(groups) * group_size)[:, None]
    return np.stack([(base + i).ravel(), (base + j).ravel()], axis=1)


class PairwiseTrainer(GRPOTrainer):
    """INPO (pairs from the current policy) or DPO/IPO (pairs from the reference), through the GRPO trainer's
    rollout; each step samples ``num_generations`` completions per prompt, labels every pair within a prompt by
    one Bernoulli draw of the oracle, and takes ``inner_steps`` optimiser steps on :func:`pair_loss` over that
    batch (pi_t stays the sampling policy, so more steps minimise the iteration's loss more fully)."""

    def __init__(self, model_cfg, params, tokenizer, cfg, *, loss: str, oracle: Oracle, tau: float, eta: float = 1.0,
                 inner_steps: int = 1, seed: int = 0):
        if loss not in PAIR_LOSSES:
            raise UsageError(f"pairwise loss {loss!r} is unknown; use one of {PAIR_LOSSES}.")
        if inner_steps < 1:
            raise UsageError(f"inner_steps={inner_steps} must be at least 1; pass 1 for one optimiser step per batch.")
        super().__init__(model_cfg, params, tokenizer, cfg, ref_params=params, seed=seed)  # pairs read the reference
        self.loss, self.oracle, self.tau, self.eta, self.inner_steps = loss, oracle, tau, eta, inner_steps
        self.rng = np.random.default_rng(seed + 17)

    def step(self, problems: Sequence[Problem], group_sizes=None) -> dict:
        s = self.cfg.num_generations
        if self.loss == "inpo":
            ro = self.rollout(problems)
        else:  # offline: the reference generates (sampling does not change it, so this is a fixed dataset's law)
            policy, self.params = self.params, self.ref_params
            try:
                ro = self.rollout(problems)
            finally:
                self.params = policy
        pairs = all_pairs(s, len(problems))
        prefs = np.array([self.oracle(problems[a // s], ro["texts"][a], ro["texts"][b]) for a, b in pairs])
        first_wins = self.rng.random(len(pairs)) < prefs
        batch = grouped_batch(ro, s, self.tokenizer.pad_id)
        batch["ref_seq"] = (np.asarray(completion_logprobs(self.ref_params, batch, model_cfg=self.model_cfg,
                                                           temperature=self.cfg.temperature)) * batch["mask"]).sum(-1)
        batch["winner"] = np.where(first_wins, pairs[:, 0], pairs[:, 1]).astype(np.int32)
        batch["loser"] = np.where(first_wins, pairs[:, 1], pairs[:, 0]).astype(np.int32)
        batch.update(which=np.eye(len(PAIR_LOSSES), dtype=np.float32)[PAIR_LOSSES.index(self.loss)],
                     tau=np.float32(self.tau), eta=np.float32(self.eta))
        batch = {k: jnp.asarray(v) for k, v in batch.items()}
        for _ in range(self.inner_steps):
            self.params, self.opt_state, m = pair_update(self.params, self.opt_state, batch, model_cfg=self.model_cfg,
                                                         optimizer=self.optimizer)
            self.counters["optimizer_steps"] += 1
        metrics = {k: float(v) for k, v in jax.device_get(m).items()}
        if not np.isfinite(metrics["loss"]):
            raise TrainingDiverged(f"the {self.loss} loss became {metrics['loss']}; lower the learning rate.")
        metrics.update(reward=float(np.mean([score(problems[i // s], t) for i, t in enumerate(ro["texts"])])),
                       generations=self.counters["generations"])
        return metrics


def grouped_batch(ro: dict, group_size: int, pad_id: int) -> dict:
    """The shared-prompt layout of a rollout (rows ``g*S .. g*S+S-1`` continue prompt ``g``) with each row's
    sampling log-prob ``old_seq [B]``."""
    valid = ro["valid"]
    return {"prompt": ro["prompt_tokens"][::group_size], "prompt_valid": ro["prompt_valid"][::group_size],
            "completion": np.where(valid, ro["tokens"], pad_id), "completion_valid": valid,
            "mask": valid.astype(np.float32), "old_seq": (ro["logprobs"] * valid).sum(-1)}


# ----------------------------------------------------------------------------- policy-gradient rewards


def win_rates_in_group(oracle: Oracle, problems: Sequence[Problem], texts: Sequence[str], group_size: int) -> np.ndarray:
    """Row i's mean ``P(y_i > y_j)`` over the other rows j of its group (samples of the same policy) ``[B]``."""
    out = np.zeros(len(texts))
    for g in range(len(texts) // group_size):
        rows = range(g * group_size, (g + 1) * group_size)
        P = oracle.matrix(problems[g * group_size], [texts[i] for i in rows], [texts[i] for i in rows])
        out[list(rows)] = (P.sum(1) - np.diag(P)) / (group_size - 1)
    return out


def win_rates_against(oracle: Oracle, problems: Sequence[Problem], texts: Sequence[str], opponents: Sequence[str],
                      group_size: int) -> np.ndarray:
    """Row i's mean ``P(y_i > y'_j)`` over the opponents' rows j of the same prompt ``[B]``."""
    out = np.zeros(len(texts))
    for g in range(len(texts) // group_size):
        rows = slice(g * group_size, (g + 1) * group_size)
        out[rows] = oracle.matrix(problems[g * group_size], texts[rows], opponents[rows]).mean(1)
    return out


class NashMPTrainer(GRPOTrainer):
    """Policy-gradient Nash-MP (module docstring): a mirror-prox half step and a full step from pi_k, each a GRPO
    update whose reward is a win rate. Per step: 3 rollouts and 2 optimiser steps (one of them discarded)."""

    def __init__(self, model_cfg, params, tokenizer, cfg, *, oracle: Oracle, seed: int = 0):
        super().__init__(model_cfg, params, tokenizer, cfg, seed=seed)
        self.oracle = oracle

    def step(self, problems: Sequence[Problem], group_sizes=None) -> dict:
        s = self.cfg.num_generations
        anchor = jax.tree_util.tree_map(jnp.copy, (self.params, self.opt_state))  # the update donates its inputs
        self.batch_rewards = lambda rows, texts, _: (win_rates_in_group(self.oracle, rows, texts, s), {})
        super().step(problems)  # -> pi_{k+1/2}
        opponents = self.rollout(problems)["texts"]
        self.params, self.opt_state = anchor
        self.batch_rewards = lambda rows, texts, _: (win_rates_against(self.oracle, rows, texts, opponents, s), {})
        metrics = super().step(problems)
        metrics["win_rate_vs_half_step"] = metrics["reward"]
        return metrics


def reward_model_trainer(model_cfg, params, tokenizer, cfg, seed: int = 0) -> GRPOTrainer:
    """Reward-model GRPO: the transitive part of the oracle, the verifier's correctness ``c(y)``, as the reward."""
    return GRPOTrainer(model_cfg, params, tokenizer, cfg, ref_params=params, seed=seed, reward_fn=score)  # KL is reported
