"""Tree-structured branching with a bounded teacher, for on-policy self-distillation (TreeOPSD; issue 15, item 4).

A group's episodes are rolled out as a tree: from a shared prefix of ``t`` turns the rollout
branches ``b`` continuations, so the turns after a branch point are ``b`` samples of the policy in
one and the same state. Each node is a turn prefix (the root: no turn yet; depth ``d``: the first
``d`` turns). With ``R_i`` the outcome of trajectory ``i`` and ``n_{i,t}`` its node at depth ``t``:

    backup       V(n) = mean( {V(c) : c child of n}  U  {R_i : trajectory i ends at n} )
    credit       A(c) = V(c) - V(parent(c))           turn t of i gets A_{i,t} = A(n_{i,t+1})
    teacher      pi_T(c | n) = pi_theta(c | n) exp(A(c) / tau) / Z(n),
                 Z(n) = sum_{c'} w_{c'} exp(A(c') / tau)     (w: the empirical pi_theta over the
                                                             sampled children, uniform by default)
    bounded      l(c) = clip( log pi_T(c | n) / pi_theta(c | n), -clip, clip )
                      = clip( A(c) / tau - log Z(n), -clip, clip )

Sum over a path telescopes: ``sum_t A_{i,t} = V(leaf_i) - V(root)``. The mean over children (not over
trajectories below) makes each sampled continuation count once however far it was branched later,
as ``V(n)`` is the mean of the ``Q`` estimates of its sampled next turns.

Normalisation comes before the clip, so the bound ``|l| <= clip`` holds exactly; when the clip binds,
``sum_c w_c exp(l(c))`` is no longer exactly one (the price of the bound; we do not renormalise, which
would move every child). A node with one child has ``l = 0``: nothing to compare.

Distillation, on-policy: at each branching node minimise ``KL(pi_theta || pi_T)`` over the sampled
turn with ``pi_T`` held fixed. Its gradient is ``E_{c ~ pi_theta}[grad log pi_theta(c) (log pi_theta(c)
- log pi_T(c))]``, a policy gradient with advantage ``l(c)``; a turn's log-probability is the sum of
its action tokens', so every action token of the turn carries ``l(c)``
(:func:`bounded_teacher_token_advantages`), and these per-token advantages go into the GRPO update
(``batch["advantages"]`` of shape ``[B, N]``) unchanged.

The TreeOPSD paper's text was not reachable from this machine; the definitions above are the
issue's (teacher ``pi_T ~ pi_theta exp(A / tau)``, log-ratio clipped to ``[-c, c]``), with the backup and
the per-node normalisation documented here as our choices.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.agents.credit import token_advantages
from longhorizon.lm.agents.trajectory import Trajectory


@dataclasses.dataclass(eq=False)
class TreeNode:
    """A turn prefix: ``depth`` turns taken; ``children`` its sampled next turns."""

    depth: int = 0
    parent: TreeNode | None = None
    key: Hashable = None  # identifies the node among its siblings (the turn's text when inferred)
    children: list[TreeNode] = dataclasses.field(default_factory=list)
    trajectories: list[int] = dataclasses.field(default_factory=list)  # whose path passes through here
    outcomes: list[float] = dataclasses.field(default_factory=list)  # of the trajectories that end here
    value: float = math.nan
    advantage: float = 0.0

    def add_child(self, key: Hashable = None) -> TreeNode:
        """A new next turn from this prefix (what a rollout calls once per branch)."""
        child = TreeNode(depth=self.depth + 1, parent=self, key=key)
        self.children.append(child)
        return child

    def child(self, key: Hashable) -> TreeNode:
        """The child with ``key``, created if absent (merging identical turns)."""
        for c in self.children:
            if c.key == key:
                return c
        return self.add_child(key)


@dataclasses.dataclass
class Tree:
    """A batch's prefix trees, one root per group (``roots[group]``); ``paths[i]`` = trajectory ``i``'s
    nodes at depths ``1..T_i``."""

    roots: dict[int, TreeNode]
    paths: list[list[TreeNode]]

    def nodes(self) -> list[TreeNode]:
        """Every node, parents before children."""
        out, stack = [], list(reversed(self.roots.values()))
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.children))
        return out


def turn_key(turn) -> tuple:
    """What makes two turns the same state transition: the model's text and what came back."""
    return (turn.action, turn.observation)


def build_tree(trajectories: Sequence[Trajectory], branched_from: Sequence[tuple[int, int] | None] | None = None) -> Tree:
    """The prefix trees of a batch of trajectories, one per group (a group shares one task).

    ``branched_from[i] = (j, t)`` records that trajectory ``i`` shares the first ``t`` turns of
    trajectory ``j`` (``j < i``, same group) and samples its own turns from ``t`` on; ``None`` starts
    at its group's root. That is what a branching rollout knows; without it (``branched_from=None``)
    prefixes are inferred by merging turns with equal :func:`turn_key` (identical independent
    samples then count once).
    """
    roots: dict[int, TreeNode] = {}
    if branched_from is not None and len(branched_from) != len(trajectories):
        raise UsageError(f"{len(branched_from)} branch records for {len(trajectories)} trajectories; give one each.")
    paths: list[list[TreeNode]] = []
    for i, traj in enumerate(trajectories):
        root = roots.setdefault(traj.group, TreeNode())
        if branched_from is None:
            node, path = root, []
            for turn in traj.turns:
                node = node.child(turn_key(turn))
                path.append(node)
        else:
            src = branched_from[i]
            shared = 0 if src is None else int(src[1])
            if src is not None:
                j = int(src[0])
                if not (0 <= j < i and trajectories[j].group == traj.group
                        and 0 <= shared <= min(len(paths[j]), traj.n_turns)):
                    raise UsageError(
                        f"trajectory {i} is recorded as branched from trajectory {j} after {shared} turns, "
                        "which is no earlier trajectory's prefix in its group; record (earlier index, turns shared)."
                    )
            path = list(paths[int(src[0])][:shared]) if src is not None else []
            node = path[-1] if path else root
            for turn in traj.turns[shared:]:
                node = node.add_child(turn_key(turn))
                path.append(node)
        for n in [root, *path]:
            n.trajectories.append(i)
        (path[-1] if path else root).outcomes.append(float(traj.reward))
        paths.append(path)
    return Tree(roots, paths)


def backup(tree: Tree) -> Tree:
    """``V(n) = mean({V(c)} U {R_i ending at n})`` bottom-up (module docstring); sets ``node.value``."""
    for node in reversed(tree.nodes()):  # children before parents
        values = [c.value for c in node.children] + node.outcomes
        node.value = float(np.mean(values)) if values else math.nan
    return tree


def node_advantages(tree: Tree) -> list[np.ndarray]:
    """``A(c) = V(c) - V(parent(c))`` (sets ``node.advantage``); returns ``[T_i]`` per trajectory:
    ``A_{i,t} = A(n_{i,t+1})``. Backs the tree up first if it has no values yet."""
    if any(math.isnan(r.value) for r in tree.roots.values()):
        backup(tree)
    for node in tree.nodes():
        if node.parent is not None:
            node.advantage = node.value - node.parent.value
    return [np.array([n.advantage for n in path], np.float64) for path in tree.paths]


def bounded_teacher_log_ratio(advantages, tau: float, clip: float, weights=None) -> np.ndarray:
    """``l_j = clip(A_j / tau - log sum_k w_k exp(A_k / tau), -clip, clip)`` over one node's sampled
    children, ``advantages [b] -> [b]``: the bounded ``log pi_T / pi_theta`` (module docstring).

    ``weights [b]`` is the empirical ``pi_theta`` over the children (normalised here; uniform when
    ``None``), so before the clip ``sum_j w_j exp(l_j) = 1``: ``pi_T`` sums to one over them.
    """
    if not tau > 0:
        raise UsageError(f"teacher temperature tau={tau} must be > 0.")
    if not clip > 0:
        raise UsageError(f"teacher log-ratio bound clip={clip} must be > 0.")
    a = np.asarray(advantages, np.float64) / tau
    w = np.full(a.shape, 1.0 / max(a.size, 1)) if weights is None else np.asarray(weights, np.float64)
    if w.shape != a.shape or (w < 0).any() or not w.sum() > 0:
        raise UsageError("teacher weights must be one non-negative number per child with a positive sum.")
    w = w / w.sum()
    shift = a.max(initial=0.0)  # logsumexp, stably
    log_z = shift + np.log(np.sum(w * np.exp(a - shift)))
    return np.clip(a - log_z, -clip, clip)


def bounded_teacher_turn_log_ratios(tree: Tree, tau: float, clip: float) -> list[np.ndarray]:
    """``[T_i]`` per trajectory: ``l(n_{i,t+1})`` normalised over the children of ``n_{i,t}`` (uniform
    weights: every child is one sampled continuation); turns at non-branching nodes get 0."""
    node_advantages(tree)
    ratio: dict[int, float] = {}
    for node in tree.nodes():
        if node.children:
            ls = bounded_teacher_log_ratio([c.advantage for c in node.children], tau, clip)
            ratio.update({id(c): float(v) for c, v in zip(node.children, ls)})
    return [np.array([ratio[id(n)] for n in path], np.float64) for path in tree.paths]


def bounded_teacher_token_advantages(trajectories: Sequence[Trajectory], tree: Tree, tau: float,
                                     clip: float) -> list[list[np.ndarray]]:
    """Per-token advantages of the on-policy distillation to the bounded teacher: for trajectory ``i``,
    one ``[L_k]`` array per sequence, each token carrying its turn's ``l`` (0 on context tokens); use
    them as the GRPO update's per-token ``advantages`` (module docstring)."""
    per_turn = bounded_teacher_turn_log_ratios(tree, tau, clip)
    return [token_advantages(traj, l) for traj, l in zip(trajectories, per_turn)]
