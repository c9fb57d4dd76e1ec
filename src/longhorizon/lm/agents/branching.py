"""Tree-branching rollouts: shared turn prefixes, ``b`` sampled continuations each (TreeOPSD; issue 15, item 4).

A group of ``G`` episodes on one task is sampled as ``r = G / b`` roots, each branched ``b`` ways::

    phase 1   roots = rollout(rows, r per task, max_turns = t_b)      # the shared prefixes, sampled once
    phase 2   for every root still running after t_b turns, b fresh environments:
                  reset(row); replay the root's t_b turns (its sampled token ids, so the same tool calls)
                  check observation_k == root's observation_k for k < t_b    (else refuse)
                  sample turns t_b .. max_turns-1 from the policy            (b independent continuations)

Environments cannot be copied in general, so the prefix is replayed into fresh ones; that needs an
environment that is deterministic given its row and the calls (every environment in
:mod:`longhorizon.lm.agents.envs` is), and a replay that differs is refused in one sentence.
A root that ended before ``t_b`` is kept as it is (a leaf of the tree at its own depth).

Records: continuation 0 of a root owns the prefix; continuation ``j > 0`` has
``branched_from = (index of continuation 0, t_b)`` (:func:`longhorizon.lm.agents.tree.build_tree`'s
form, kept in :attr:`BranchingRollout.branched_from` after each ``run``) and its copy of the prefix's
action tokens is masked out of the loss, so every sampled token is learned from (and counted) once:
``sum(t.action_tokens)`` is the number of tokens the policy sampled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.agents.rollout import MultiTurnRollout
from longhorizon.lm.agents.trajectory import TokenSequence, Trajectory
from longhorizon.lm.protocols import AgentRollout


@dataclasses.dataclass(frozen=True)
class BranchConfig:
    branch_turn: int = 1  # t_b: turns shared before the tree branches
    branches: int = 2  # b: continuations sampled from each shared prefix

    def __post_init__(self):
        if not (isinstance(self.branch_turn, int) and self.branch_turn >= 1):
            raise UsageError(f"branch_turn={self.branch_turn} must be a positive integer (turns before branching).")
        if not (isinstance(self.branches, int) and self.branches >= 2):
            raise UsageError(f"branches={self.branches} must be an integer >= 2 (continuations per prefix).")


def turn_actions(trajectory: Trajectory, turn: int) -> tuple[list[int], list[float]]:
    """The token ids the policy sampled at ``turn`` and their log-probabilities (stop token included)."""
    ids, lps = [], []
    for seq in trajectory.sequences:
        at = seq.action_mask & (seq.turn == turn)
        ids += seq.tokens[at].tolist()
        lps += seq.logprobs[at].tolist()
    return ids, lps


def _mask_prefix(trajectory: Trajectory, turns: int) -> None:
    """Drop the copied prefix (turns ``< turns``) from the loss: those tokens were sampled by the root."""
    trajectory.sequences = [TokenSequence(s.tokens, s.action_mask & ~((s.turn >= 0) & (s.turn < turns)), s.logprobs,
                                          s.turn) for s in trajectory.sequences]


class BranchingRollout(AgentRollout):
    """A :class:`MultiTurnRollout` run as prefix trees (module docstring).

    ``run(params, rows, group_size, key, version)`` returns per task up to ``group_size`` trajectories
    (fewer when roots end before the branch turn), grouped by task (``group`` = the row's index);
    ``branched_from`` and ``sampled_tokens`` describe the last call."""

    def __init__(self, base: MultiTurnRollout, cfg: BranchConfig = BranchConfig()):
        if cfg.branch_turn >= base.cfg.max_turns:
            raise UsageError(f"branch_turn={cfg.branch_turn} leaves no turn to branch within max_turns="
                             f"{base.cfg.max_turns}; lower branch_turn or raise max_turns.")
        self.base, self.cfg = base, cfg
        self.prefix = self._like_base(dataclasses.replace(base.cfg, max_turns=cfg.branch_turn), base.policy)
        self.branched_from: list[tuple[int, int] | None] = []
        self.sampled_tokens = 0

    def __repr__(self) -> str:
        return f"BranchingRollout(branch_turn={self.cfg.branch_turn}, branches={self.cfg.branches})"

    def _like_base(self, agent_cfg, policy) -> MultiTurnRollout:
        base = self.base
        return MultiTurnRollout(base.model_cfg, base.tok, base.factory, agent_cfg, policy=policy)

    def run(self, params, rows: Sequence[dict], group_size: int, key, version: int = 0,
            uid_prefix: str = "") -> list[Trajectory]:
        import jax

        b, t_b = self.cfg.branches, self.cfg.branch_turn
        if group_size % b:
            raise UsageError(f"group size {group_size} is not a multiple of branches={b}; give num_generations as "
                             "roots x branches.")
        k_root, k_branch = jax.random.split(key)
        roots = self.prefix.run(params, rows, group_size // b, k_root, version, uid_prefix=f"{uid_prefix}r")
        branching = [i for i, r in enumerate(roots) if not r.finished and r.n_turns == t_b]
        branches = self._continue(params, [roots[i] for i in branching], k_branch, version,
                                  uid_prefix) if branching else []
        offspring = {i: branches[j * b:(j + 1) * b] for j, i in enumerate(branching)}
        out, links = [], []
        for i, root in enumerate(roots):  # roots in task order, so groups stay contiguous
            if i not in offspring:
                out.append(root)
                links.append(None)
                continue
            first = len(out)
            for j, traj in enumerate(offspring[i]):
                traj.group = root.group
                if j:
                    _mask_prefix(traj, t_b)
                out.append(traj)
                links.append(None if j == 0 else (first, t_b))
        self.branched_from = links
        self.sampled_tokens = int(sum(t.action_tokens for t in out))
        return out

    def _continue(self, params, roots: list[Trajectory], key, version: int, uid_prefix: str) -> list[Trajectory]:
        """Phase 2: ``b`` fresh episodes per root, replaying its prefix and then sampling (module docstring)."""
        b, t_b, base = self.cfg.branches, self.cfg.branch_turn, self.base

        def policy(p, contexts, k, episodes):
            if len(episodes[0].turns) < t_b:  # every live episode is at the same round
                return [turn_actions(roots[e.index // b], len(e.turns)) for e in episodes]
            return base.sample(p, contexts, k, episodes)

        replay = self._like_base(base.cfg, policy)
        out = replay.run(params, [r.task for r in roots], b, key, version, uid_prefix=f"{uid_prefix}b")
        for i, traj in enumerate(out):
            root = roots[i // b]
            replayed = [t.observation for t in traj.turns[:t_b]]
            recorded = [t.observation for t in root.turns[:t_b]]
            if replayed != recorded:
                turn = next((k for k, (x, y) in enumerate(zip(replayed, recorded)) if x != y), len(replayed))
                raise UsageError(
                    f"replaying trajectory {root.uid}'s calls into a fresh environment returned a different "
                    f"observation at turn {turn}, so its state cannot be branched; use an environment that is deterministic given "
                    "its row and calls, or the plain rollout.")
        return out


def branch_records(trajectories: Sequence[Trajectory], rollout: AgentRollout | None) -> list[tuple[int, int] | None] | None:
    """The ``branched_from`` records of ``trajectories`` if ``rollout`` produced them in its last run, else None."""
    links = None if rollout is None else rollout.branched_from
    return list(links) if links is not None and len(links) == len(trajectories) else None


def tree_shape(trajectories: Sequence[Trajectory], branched_from) -> dict:
    """Counts of a batch's trees: trajectories, tasks and branching nodes (for metrics and tests)."""
    from longhorizon.lm.agents.tree import build_tree

    tree = build_tree(trajectories, branched_from)
    nodes = tree.nodes()
    return {"trajectories": len(trajectories), "tasks": len(tree.roots),
            "branching_nodes": int(sum(len(n.children) > 1 for n in nodes)),
            "mean_children": float(np.mean([len(n.children) for n in nodes if n.children] or [0.0]))}


@dataclasses.dataclass(frozen=True)
class TreeRollouts:
    """An ``AgentSpec.rollout`` (:mod:`longhorizon.lm.agents.spec`) that trains on prefix trees: the trainer's own
    rollout, branched by :class:`BranchingRollout` with ``cfg``. A run's config.json records its repr."""

    cfg: BranchConfig = BranchConfig()

    def __call__(self, trainer) -> BranchingRollout:
        return BranchingRollout(trainer.rollout, self.cfg)
