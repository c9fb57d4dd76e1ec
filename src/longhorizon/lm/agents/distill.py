"""On-policy distillation, multi-teacher and domain-routed (Agents-A1; issue 15, item 4).

The student ``pi_s`` samples; the teacher ``pi_t`` routed to the sample's domain scores the
student's own tokens; the student minimises the per-token reverse KL along its samples (on-policy
distillation, Agarwal et al. 2024 "GKD"; Agents-A1 routes each domain to its own teacher):

    exact     KL_t = sum_v pi_s(v | x_<t) (log pi_s(v | x_<t) - log pi_t(v | x_<t))     (one vocabulary)
    sampled   k1_t = log pi_s(x_t | x_<t) - log pi_t(x_t | x_<t),  x_t ~ pi_s          (E[k1_t] = KL_t)

Teachers with another tokenizer score the student's text through a :class:`VocabularyMap`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.core.kl import kl_k1
from longhorizon.errors import UsageError
from longhorizon.lm.model import token_logprobs

T = TypeVar("T")

# ----------------------------------------------------------------------------- reverse KL


def reverse_kl_exact(student_logits: jax.Array, teacher_logits: jax.Array, mask: jax.Array) -> jax.Array:
    """``KL(pi_s || pi_t)`` per token over the full vocabulary, ``[B, T, V] x2, [B, T] -> [B, T]``
    (0 where ``mask`` is 0). Needs one vocabulary; a differing teacher goes through the sampled form."""
    if student_logits.shape != teacher_logits.shape:
        raise UsageError(
            f"student logits {student_logits.shape} and teacher logits {teacher_logits.shape} differ; the exact KL "
            "needs one vocabulary, so use reverse_kl_sampled with a VocabularyMap for differing tokenizers."
        )
    log_s = jax.nn.log_softmax(student_logits.astype(jnp.float32), axis=-1)
    log_t = jax.nn.log_softmax(teacher_logits.astype(jnp.float32), axis=-1)
    return jnp.sum(jnp.exp(log_s) * (log_s - log_t), axis=-1) * mask


def reverse_kl_sampled(student_logp, teacher_logp):
    """``k1_t = log pi_s(x_t) - log pi_t(x_t)`` at the student's sampled tokens, elementwise ``[B, T]``;
    an unbiased estimate of :func:`reverse_kl_exact` (``x_t ~ pi_s``)."""
    return kl_k1(student_logp, teacher_logp)


def distillation_advantages(student_logp, teacher_logp, mask):
    """Per-token advantages ``A_t = -(log pi_s(x_t) - log pi_t(x_t))`` (masked, no gradient), ``[B, T]``.

    Equivalence: with ``pi_t`` fixed, ``grad sum_t KL_t = E_{x ~ pi_s}[ sum_t grad log pi_s(x_t | x_<t) *
    (log pi_s(x_t) - log pi_t(x_t)) ]`` when each token's own term is kept and the future terms are
    dropped (discount 0, as on-policy distillation does), so the GRPO/PPO update with these
    advantages (``batch["advantages"]``, ``beta = 0``) descends the per-token reverse KL.
    """
    return jax.lax.stop_gradient(-reverse_kl_sampled(student_logp, teacher_logp) * mask)


# ----------------------------------------------------------------------------- routing


def route_by_domain(domains: Sequence[str], teachers: Mapping[str, T], default: str | None = None) -> dict[str, np.ndarray]:
    """Which rows each teacher scores: ``{teacher name: row indices [n_k]}`` (Agents-A1's routing by
    domain tag). Row ``i`` goes to ``teachers[domains[i]]``, or to ``teachers[default]`` when its domain
    has no teacher; with no default an unrouted domain is refused."""
    if default is not None and default not in teachers:
        raise UsageError(f"default teacher {default!r} is not one of the teachers {sorted(teachers)}; name one of them.")
    rows: dict[str, list[int]] = {}
    for i, domain in enumerate(domains):
        name = domain if domain in teachers else default
        if name is None:
            raise UsageError(
                f"domain {domain!r} has no teacher (teachers: {sorted(teachers)}); add a teacher for it or pass a default."
            )
        rows.setdefault(name, []).append(i)
    return {name: np.asarray(idx, np.int64) for name, idx in rows.items()}


# ----------------------------------------------------------------------------- vocabulary alignment


class VocabularyMap:
    """Maps student token sequences to the teacher's tokens so the teacher can score them.

    Identity when the tokenizers are the same (one object, or the same vocabulary: equal sizes and
    every id decodes to the same string). Otherwise each student token is re-tokenised by its text:
    ``teacher_ids(s) = teacher.encode(decode_s([s]))`` (exact when that is one teacher token), and the
    teacher log-prob of a student token is the sum of the teacher log-probs of its teacher tokens,
    teacher-forced on the concatenation:
    ``log pi_t(s_l) = sum_{j : owner(j) = l} log pi_t(u_j | u_<j)`` (the probability of that text under this
    one segmentation: a lower bound of its marginal over segmentations). Rules for the rest:

    * a student token that is not whole text (a byte-level token holding part of a UTF-8 character)
      joins the next ones until their text is whole; the span's teacher log-prob is credited to its
      last token, 0 to the others (so the span's sum is right);
    * a student stop id maps to the teacher's first stop id; BOS to the teacher's BOS (or nothing);
      padding and tokens outside ``valid`` to nothing (log-prob 0);
    * text the teacher cannot encode is refused with a :class:`UsageError`.
    """

    def __init__(self, student_tokenizer, teacher_tokenizer):
        self.student, self.teacher = student_tokenizer, teacher_tokenizer
        self.identity = student_tokenizer is teacher_tokenizer or (
            type(student_tokenizer) is type(teacher_tokenizer)
            and student_tokenizer.vocab_size == teacher_tokenizer.vocab_size
            and all(self._text([i]) == teacher_tokenizer.decode([i]) for i in range(student_tokenizer.vocab_size))
        )

    def _text(self, ids) -> str:
        return self.student.decode(list(ids))

    def _special(self, s: int) -> list[int] | None:
        """Teacher ids of a student control token, or None if ``s`` is ordinary text."""
        if s in tuple(self.student.eos_ids):
            return [int(self.teacher.eos_ids[0])]
        if self.student.bos_id == s:
            bos = self.teacher.bos_id  # None: a tokenizer without BOS
            return [] if bos is None else [int(bos)]
        if self.student.pad_id == s:
            return []
        return None

    def _encode(self, text: str, ids) -> list[int]:
        try:
            out = list(self.teacher.encode(text))
        except UsageError as err:
            raise UsageError(f"student tokens {list(ids)} ({text!r}) cannot be written in the teacher's vocabulary "
                             f"({err}); give that domain a teacher with the student's tokenizer.") from None
        if text and not out:
            raise UsageError(f"student tokens {list(ids)} ({text!r}) have no teacher tokens; use a teacher whose "
                             "tokenizer covers the student's text.")
        return out

    def to_teacher(self, tokens, valid=None) -> tuple[np.ndarray, np.ndarray]:
        """One student sequence ``tokens [L]`` -> ``(teacher tokens [L'], owner [L'])``, ``owner[j]`` the
        student position whose text teacher token ``j`` writes."""
        tokens = np.asarray(tokens).reshape(-1)
        valid = np.ones(tokens.shape, bool) if valid is None else np.asarray(valid, bool).reshape(-1)
        if self.identity:
            keep = np.flatnonzero(valid)
            return tokens[keep].astype(np.int32), keep.astype(np.int64)
        out, owner, span = [], [], []
        for l, s in enumerate(tokens.tolist()):
            if not valid[l]:
                continue
            special = self._special(int(s))
            if special is not None:
                if span:
                    raise UsageError(f"student token {s} interrupts the incomplete text of tokens {span}; "
                                     "the student's sequence is not valid text.")
                out += special
                owner += [l] * len(special)
                continue
            span.append(int(s))
            text = self._text(span)
            if text.endswith("\ufffd") and len(span) < 4:  # part of a UTF-8 character: wait for the rest
                continue
            ids = self._encode(text, span)
            out += ids
            owner += [l] * len(ids)  # credited to the span's last token
            span = []
        if span:
            ids = self._encode(self._text(span), span)
            out += ids
            owner += [int(np.flatnonzero(valid)[-1])] * len(ids)
        return np.asarray(out, np.int32), np.asarray(owner, np.int64)

    def to_teacher_batch(self, tokens, valid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows ``[B, L]`` -> right-padded ``(teacher tokens [B, L'], valid [B, L'], owner [B, L'])``,
        owner -1 on padding."""
        rows = [self.to_teacher(t, v) for t, v in zip(np.asarray(tokens), np.asarray(valid))]
        width = max([len(r[0]) for r in rows] + [1])
        t_tok = np.full((len(rows), width), int(self.teacher.pad_id or 0), np.int32)
        owner = np.full((len(rows), width), -1, np.int64)
        for b, (tok, own) in enumerate(rows):
            t_tok[b, : len(tok)], owner[b, : len(own)] = tok, own
        return t_tok, owner >= 0, owner

    @staticmethod
    def to_student(teacher_logp, owner, length: int) -> np.ndarray:
        """Fold teacher log-probs ``[B, L']`` back onto student positions: ``out[b, l] = sum_{j: owner[b, j] = l}
        teacher_logp[b, j]`` -> ``[B, L]``."""
        teacher_logp, owner = np.asarray(teacher_logp, np.float64), np.asarray(owner)
        out = np.zeros((owner.shape[0], length), np.float64)
        for b in range(owner.shape[0]):
            keep = owner[b] >= 0
            np.add.at(out[b], owner[b][keep], teacher_logp[b][keep])
        return out.astype(np.float32)


# ----------------------------------------------------------------------------- teachers


@functools.partial(jax.jit, static_argnames=("teacher_cfg", "temperature"))
def teacher_token_logprobs(teacher_params, teacher_cfg, tokens, valid, temperature: float = 1.0):
    """The teacher's ``log pi_t(tokens[:, l] | tokens[:, :l])`` aligned with the tokens, ``[B, L] -> [B, L]``
    (as ``TokenSequence.logprobs``): each row's first valid token (it has no context) and positions outside
    ``valid`` are 0. Calls
    :func:`longhorizon.lm.model.token_logprobs`, so any model config with a ``module()`` serves."""
    logp, _ = token_logprobs(teacher_params, teacher_cfg, tokens, valid, temperature)
    logp = jnp.concatenate([jnp.zeros_like(logp[:, :1]), logp], axis=1)
    has_context = jnp.cumsum(valid.astype(jnp.int32), axis=1) > 1
    return jnp.where(valid & has_context, logp, 0.0)


@dataclasses.dataclass(frozen=True)
class Teacher:
    """A scoring model: its parameters, config, and the map from the student's vocabulary to its own."""

    params: Any
    cfg: Any
    vocab: VocabularyMap
    temperature: float = 1.0

    def score(self, tokens, valid) -> np.ndarray:
        """Teacher log-probs of the student's tokens ``[B, L] -> [B, L]`` (through the vocabulary map)."""
        t_tok, t_valid, owner = self.vocab.to_teacher_batch(tokens, valid)
        logp = teacher_token_logprobs(self.params, self.cfg, jnp.asarray(t_tok), jnp.asarray(t_valid), self.temperature)
        return VocabularyMap.to_student(np.asarray(logp), owner, np.asarray(tokens).shape[1])


def routed_teacher_logprobs(domains: Sequence[str], teachers: Mapping[str, Teacher], tokens, valid,
                            default: str | None = None) -> np.ndarray:
    """Agents-A1's multi-teacher scoring: row ``i`` of the student's ``tokens [B, L]`` scored by its
    domain's teacher (:func:`route_by_domain`), one batch per teacher -> ``[B, L]``."""
    tokens, valid = np.asarray(tokens), np.asarray(valid, bool)
    out = np.zeros(tokens.shape, np.float32)
    for name, rows in route_by_domain(domains, teachers, default).items():
        out[rows] = teachers[name].score(tokens[rows], valid[rows])
    return out
