"""Rewards and credit assignment for multi-turn trajectories (issue 15, items 1 and 4).

Rewards of an episode of ``T`` model turns (``t = 0 .. T-1`` here; round ``t + 1`` in the papers):

* weighted terms (Router-R1): ``R = sum_k w_k r_k``, e.g. ``format + outcome - w * cost``;
* EAPO (IterResearch): round ``t`` of ``T`` (1-based) gets ``gamma^(T - t) R_T``;
* milestones (MiRA): milestone ``m`` first reached at turn ``t_m`` adds ``bonus_m`` to ``r_{t_m}``.

Advantages (all group-relative through :func:`longhorizon.lm.grpo.group_advantages`):

* trajectory level (Mobile-Agent-v3's TRPO): one ``A_i`` from the outcome ``R_i``, normalised within
  the group, the same value on every action token of every turn;
* turn level: returns-to-go ``G_{i,t} = sum_{s >= t} gamma^(s - t) r_{i,s}`` (outcome added to the last
  turn's reward), normalised within the group over all turns of all its members;
* :func:`token_advantages` spreads either over a trajectory's tokens by their ``turn``.

Everything here runs on the host, once per trajectory, in numpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import jax
import numpy as np

from longhorizon.core.returns import lambda_returns
from longhorizon.errors import UsageError
from longhorizon.lm.agents.trajectory import Trajectory
from longhorizon.lm.grpo import group_advantages

# ----------------------------------------------------------------------------- rewards


def combine_rewards(terms: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """``R = sum_{k in weights} w_k r_k`` (Router-R1: ``format + outcome - w * cost`` is
    ``weights={"format": 1, "outcome": 1, "cost": -w}``).

    Every weighted term must be present and finite; terms without a weight are not part of ``R``
    (they stay in ``Trajectory.reward_terms`` for the metrics).
    """
    total = 0.0
    for name, w in weights.items():
        if name not in terms:
            raise UsageError(
                f"reward term {name!r} has a weight but the episode produced no such term (it has {sorted(terms)}); "
                "remove the weight or make the environment report the term."
            )
        value = float(terms[name])
        if not (math.isfinite(value) and math.isfinite(float(w))):
            raise UsageError(f"reward term {name!r} = {value} with weight {w} is not finite; fix the reward function.")
        total += float(w) * value
    return total


def eapo_turn_rewards(outcome: float, n_turns: int, gamma: float) -> np.ndarray:
    """EAPO (IterResearch, Chen et al. 2025): ``r_t = gamma^(T - t) R_T`` for rounds ``t = 1..T``.

    Returns ``[n_turns]``; index ``i`` is round ``i + 1``, so the last round gets ``R_T`` itself and
    earlier rounds geometrically less (shorter successful episodes earn more per round).
    """
    if not 0.0 < gamma <= 1.0:
        raise UsageError(f"EAPO discount gamma={gamma} must lie in (0, 1]; pass e.g. 0.9.")
    if n_turns < 0:
        raise UsageError(f"n_turns={n_turns} must be >= 0.")
    exponents = np.arange(n_turns - 1, -1, -1, dtype=np.float64)  # T - t for t = 1..T
    return float(outcome) * gamma**exponents


def milestone_turn_rewards(reached_at: Sequence[int | None], n_turns: int, bonus: float | Sequence[float]) -> np.ndarray:
    """MiRA-style milestone rewards ``r_t = sum_m bonus_m [t_m = t]`` of shape ``[n_turns]``.

    ``reached_at[m]`` is the (0-based) turn at which milestone ``m`` was *first* reached, or ``None``
    if it never was; ``bonus`` is one value for every milestone or one per milestone. MiRA (Wang et
    al. 2026, "A Subgoal-driven Framework for Improving Long-Horizon LLM Agents") rewards each
    completed subgoal densely, at the step it is completed, on top of the sparse outcome; we
    implement exactly that indicator form (each milestone pays once, at its first turn), not a
    learned progress critic (the paper's reward equation was not readable from this machine; its
    abstract and summaries describe this form). Add the outcome separately (e.g. :func:`turn_advantages` adds it at the
    last turn).
    """
    bonuses = np.broadcast_to(np.asarray(bonus, np.float64), (len(reached_at),)) if np.ndim(bonus) == 0 \
        else np.asarray(bonus, np.float64)
    if bonuses.shape != (len(reached_at),):
        raise UsageError(f"{len(bonuses)} milestone bonuses for {len(reached_at)} milestones; give one per milestone.")
    rewards = np.zeros(n_turns, np.float64)
    for m, t in enumerate(reached_at):
        if t is None:
            continue
        if not 0 <= int(t) < n_turns:
            raise UsageError(f"milestone {m} is reached at turn {t} but the episode has {n_turns} turns (0..{n_turns - 1}).")
        rewards[int(t)] += bonuses[m]
    return rewards


# ----------------------------------------------------------------------------- advantages


def trajectory_advantages(trajectories: Sequence[Trajectory], scale_rewards: str = "group") -> np.ndarray:
    """Mobile-Agent-v3's trajectory-aware relative advantage, ``[N]``:
    ``A_i = (R_i - mean_{j in g(i)} R_j) / (std_{j in g(i)} R_j + eps)`` from each outcome ``R_i =
    Trajectory.reward``, groups by ``Trajectory.group`` (``scale_rewards`` as in GRPO)."""
    rewards = [t.reward for t in trajectories]
    return group_advantages(rewards, [t.group for t in trajectories], scale_rewards)


_lambda_returns = jax.jit(lambda_returns)


def returns_to_go(rewards: Sequence[np.ndarray], gamma: float) -> list[np.ndarray]:
    """``G_t = sum_{s >= t} gamma^(s - t) r_s`` for each episode's ``rewards [T_i]`` (Monte-Carlo: it ended).

    One call of :func:`longhorizon.core.returns.lambda_returns` (``lambda = 1``, no bootstrap) over all
    episodes side by side, time-major ``[T_max, N]``, each cut at its last turn; ``T_max`` and ``N`` are
    rounded up to powers of two so few shapes compile.
    """
    lengths = [len(r) for r in rewards]
    if not rewards or max(lengths) == 0:
        return [np.zeros(n) for n in lengths]
    t_max, n = _pow2(max(lengths)), _pow2(len(rewards))
    r = np.zeros((t_max, n), np.float32)
    done = np.zeros((t_max, n), bool)
    for i, ri in enumerate(rewards):
        r[: len(ri), i] = ri
        done[max(len(ri) - 1, 0), i] = True
    g = np.asarray(_lambda_returns(r, np.zeros_like(r), done, done, np.float32(gamma), np.float32(1.0)), np.float64)
    return [g[: len(ri), i] for i, ri in enumerate(rewards)]


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def turn_advantages(trajectories: Sequence[Trajectory], gamma: float = 1.0, scale_rewards: str = "group", *,
                    turn_rewards: Sequence[np.ndarray] | None = None,
                    outcomes: Sequence[float] | None = None) -> list[np.ndarray]:
    """Per-turn advantages, one ``[n_turns_i]`` array per trajectory.

    ``r_{i,t}`` = the turn's own reward (milestones, EAPO), plus the outcome ``R_i`` at the last turn;
    ``G_{i,t} = sum_{s >= t} gamma^(s - t) r_{i,s}``; then
    ``A_{i,t} = (G_{i,t} - mean_g G) / (std_g G + eps)`` where mean and std pool *all turns of all
    members* of the group ``g`` of ``i``. Baseline choice: one baseline per group, not per turn index,
    because trajectories of one group differ in length and turn ``t`` of one is no state of another;
    the pooled mean is the group's average return-to-go. A group with a single turn in all gets 0.
    ``turn_rewards`` / ``outcomes`` replace ``Trajectory.turn_rewards()`` / ``Trajectory.reward``
    (e.g. with milestone bonuses added, or a weighted sum of reward terms).
    """
    if not 0.0 < gamma <= 1.0:
        raise UsageError(f"gamma={gamma} must lie in (0, 1].")
    rewards = []
    for i, traj in enumerate(trajectories):
        r = np.array(traj.turn_rewards() if turn_rewards is None else turn_rewards[i], np.float64)
        if r.size:
            r[-1] += traj.reward if outcomes is None else outcomes[i]
        rewards.append(r)
    return pooled_group_advantages(returns_to_go(rewards, gamma), [t.group for t in trajectories], scale_rewards)


def pooled_group_advantages(values: Sequence[np.ndarray], groups: Sequence, scale_rewards: str = "group") -> list[np.ndarray]:
    """Group-relative advantages of per-turn values ``[n_turns_i]``, mean and std pooled over all turns
    of all members of a group (:func:`turn_advantages`; EAPO's per-round rewards use it directly)."""
    flat = np.concatenate(values) if len(values) else np.zeros(0)
    if flat.size == 0:
        return [np.zeros(len(v), np.float32) for v in values]
    owners = np.concatenate([np.full(len(v), g) for v, g in zip(values, groups)])
    adv = group_advantages(flat, owners, scale_rewards)
    bounds = np.cumsum([0] + [len(v) for v in values])
    return [adv[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def milestones_reached(trajectory: Trajectory) -> list[int | None]:
    """The turn at which each milestone was first reached (``None``: never), from the rollout's per-turn
    record ``Turn.info["milestones"]`` (the environment's ``milestones`` after that turn)."""
    reached: list[int | None] = []
    for t, turn in enumerate(trajectory.turns):
        marks = turn.info.get("milestones") or []
        reached += [None] * (len(marks) - len(reached))
        for m, value in enumerate(marks):
            if reached[m] is None and value >= 1.0:
                reached[m] = t
    return reached


def token_advantages(trajectory: Trajectory, per_turn: np.ndarray | float) -> list[np.ndarray]:
    """Spread a scalar or per-turn advantage ``[n_turns]`` over each sequence's tokens: ``A[l] =
    per_turn[turn[l]]`` for ``turn[l] >= 0`` and 0 for prompt / rebuilt-context tokens (``turn = -1``).

    Returns one ``[L_k]`` float32 array per ``trajectory.sequences[k]``. Observation tokens of a turn get
    the turn's value too (the action mask removes them from the loss; keeping them makes the mapping
    checkable).
    """
    n = trajectory.n_turns
    values = np.full(n, float(per_turn)) if np.ndim(per_turn) == 0 else np.asarray(per_turn, np.float64)
    if values.shape != (n,):
        raise UsageError(f"{values.size} per-turn advantages for a trajectory of {n} turns; give one per turn.")
    out = []
    for seq in trajectory.sequences:
        if seq.turn.size and seq.turn.max() >= n:
            raise UsageError(f"a sequence has tokens of turn {seq.turn.max()} but the trajectory records {n} turns.")
        padded = np.concatenate([values, [0.0]])  # index -1 reads the trailing 0
        out.append(padded[seq.turn].astype(np.float32))
    return out
