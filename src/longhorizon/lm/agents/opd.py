"""On-policy distillation advantages for the agent trainer (``AgentTrainer(token_advantages=...)``; issue 15, items 4-5).

Both are callables ``(trajectories, trainer) -> per trajectory, one [L] float array per sequence``
that replace the trainer's credit rules; the GRPO-family update then descends them on the action
tokens (``beta = 0``; the advantages carry the distillation signal).

TreeOPSD (:class:`TreeOPSD`): on a batch of prefix trees (:mod:`longhorizon.lm.agents.branching`,
:mod:`longhorizon.lm.agents.tree`), turn ``t`` of trajectory ``i`` at node ``c = n_{i,t+1}`` gets

    a_{i,t} = w_credit * A(c) + w_distill * clip(A(c) / tau - log Z(parent(c)), -clip, clip)

the tree's turn-level credit ``A(c) = V(c) - V(parent(c))`` plus the bounded self-teacher
``pi_T ~ pi_theta exp(A / tau)``'s log-ratio, distilled on-policy (every action token of the turn
carries it; tree.py's docstring derives why). Without branch records the tree is inferred from equal turns.

Agents-A1 (:class:`RoutedDistillation`): every sequence of a trajectory is scored by the teacher of
its task's domain (the row's ``domain`` column, :func:`~longhorizon.lm.agents.distill.route_by_domain`;
a teacher with another tokenizer through its :class:`~longhorizon.lm.agents.distill.VocabularyMap`), and

    A_l = -(log pi_s(x_l | x_<l) - log pi_t(x_l | x_<l))     at action tokens, 0 elsewhere

with ``log pi_s`` the behaviour log-probabilities the rollout recorded (on-policy: the current
student's), i.e. :func:`~longhorizon.lm.agents.distill.distillation_advantages`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.agents.branching import branch_records
from longhorizon.lm.agents.credit import token_advantages
from longhorizon.lm.agents.distill import Teacher, distillation_advantages, route_by_domain, teacher_token_logprobs
from longhorizon.lm.agents.trajectory import Trajectory
from longhorizon.lm.agents.tree import bounded_teacher_turn_log_ratios, build_tree, node_advantages


def _check_rewards(trajectories: Sequence[Trajectory]) -> None:
    bad = [t.uid for t in trajectories if not math.isfinite(float(t.reward))]
    if bad:
        raise UsageError(f"trajectories {bad[:3]} have a non-finite reward; make the environment's reward a "
                         "finite number.")


@dataclasses.dataclass(frozen=True)
class TreeOPSD:
    """Tree credit plus the bounded teacher (module docstring); ``tau``, ``clip`` as in tree.py."""

    tau: float = 1.0
    clip: float = 1.0
    credit_weight: float = 1.0
    distill_weight: float = 1.0

    def __post_init__(self):
        for name in ("tau", "clip"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise UsageError(f"{name}={getattr(self, name)} must be a positive number.")
        for name in ("credit_weight", "distill_weight"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise UsageError(f"{name}={getattr(self, name)} must be a finite number >= 0.")
        if self.credit_weight == self.distill_weight == 0:
            raise UsageError("credit_weight and distill_weight are both 0, so nothing would be learned; "
                             "make one positive.")

    def turn_advantages(self, trajectories: Sequence[Trajectory], branched_from=None) -> list[np.ndarray]:
        """``[T_i]`` per trajectory: ``a_{i,t}`` of the module docstring."""
        _check_rewards(trajectories)
        tree = build_tree(trajectories, branched_from)
        credit = node_advantages(tree)
        ratio = bounded_teacher_turn_log_ratios(tree, self.tau, self.clip)
        return [self.credit_weight * a + self.distill_weight * l for a, l in zip(credit, ratio)]

    def __call__(self, trajectories: Sequence[Trajectory], trainer=None) -> list[list[np.ndarray]]:
        links = branch_records(trajectories, None if trainer is None else trainer.rollout)
        per_turn = self.turn_advantages(trajectories, links)
        return [token_advantages(t, a) for t, a in zip(trajectories, per_turn)]


@dataclasses.dataclass(frozen=True)
class RoutedDistillation:
    """Agents-A1's multi-teacher on-policy distillation (module docstring). ``teachers[name]`` scores the
    tasks whose ``domain_column`` is ``name``; others go to ``default`` (or are refused). One teacher under
    ``default`` for every domain is the single-teacher baseline."""

    teachers: Mapping[str, Teacher] = dataclasses.field(compare=False, repr=False)
    default: str | None = None
    domain_column: str = "domain"
    length_bucket: int = 256  # sequences padded to a multiple of this, rows to a multiple of 8 (few compiled shapes)

    def __post_init__(self):
        if not self.teachers:
            raise UsageError("RoutedDistillation needs at least one teacher; pass teachers={domain: Teacher(...)}.")
        if self.default is not None and self.default not in self.teachers:
            raise UsageError(f"default teacher {self.default!r} is not one of {sorted(self.teachers)}; "
                             "name one of them.")
        if self.length_bucket < 1:
            raise UsageError(f"length_bucket={self.length_bucket} must be a positive integer.")

    def __repr__(self) -> str:
        return f"RoutedDistillation(teachers={sorted(self.teachers)}, default={self.default!r})"

    def domains(self, trajectories: Sequence[Trajectory]) -> list[str]:
        out = []
        for t in trajectories:
            task = t.task if isinstance(t.task, dict) else {}
            if self.domain_column not in task and self.default is None:
                raise UsageError(f"a task row has no {self.domain_column!r} column (columns: {sorted(task)}); "
                                 "tag every row with its domain or give a default teacher.")
            out.append(str(task.get(self.domain_column, "")))
        return out

    def teacher_logprobs(self, sequences: list, domains: list[str]) -> list[np.ndarray]:
        """``log pi_t`` of each sequence's tokens under its domain's teacher, ``[L]`` each (0 at the first token)."""
        import jax.numpy as jnp

        out: list[np.ndarray | None] = [None] * len(sequences)
        for name, rows in route_by_domain(domains, self.teachers, self.default).items():
            teacher = self.teachers[name]
            length = -(-max(len(sequences[r]) for r in rows) // self.length_bucket) * self.length_bucket
            n = -(-len(rows) // 8) * 8
            tokens = np.zeros((n, length), np.int32)
            valid = np.zeros((n, length), bool)
            valid[:, 0] = True  # filler rows: one valid token
            for j, r in enumerate(rows):
                tokens[j, : len(sequences[r])], valid[j, : len(sequences[r])] = sequences[r].tokens, True
            if teacher.vocab.identity:  # the padded batch as it is (Teacher.score would trim it to its longest row)
                logp = np.asarray(teacher_token_logprobs(teacher.params, teacher.cfg, jnp.asarray(tokens),
                                                         jnp.asarray(valid), teacher.temperature))
            else:
                logp = teacher.score(tokens, valid)
            for j, r in enumerate(rows):
                out[r] = logp[j, : len(sequences[r])]
        return out

    def __call__(self, trajectories: Sequence[Trajectory], trainer=None) -> list[list[np.ndarray]]:
        seqs = [(i, s) for i, t in enumerate(trajectories) for s in t.sequences]
        domains = self.domains(trajectories)
        teacher = self.teacher_logprobs([s for _, s in seqs], [domains[i] for i, _ in seqs])
        out: list[list[np.ndarray]] = [[] for _ in trajectories]
        for (i, s), t_logp in zip(seqs, teacher):
            adv = distillation_advantages(s.logprobs, t_logp, s.action_mask.astype(np.float32))
            out[i].append(np.asarray(adv, np.float32))
        return out
