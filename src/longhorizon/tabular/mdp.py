"""Finite tabular MDPs as arrays, and the BRIDGE ``.npz`` file format.

A :class:`TabularMDP` has ``S`` states, ``A`` actions and a start state ``0``. Every state-action pair
has ``K`` outcomes (``K == 1`` for a deterministic MDP): outcome ``j`` of taking ``a`` in ``s`` happens
with probability ``next_probs[s, a, j]``, pays ``next_rewards[s, a, j]`` and leads to state
``next_states[s, a, j]``, or ends the episode when that index is ``-1``. The horizon ``T`` is not part
of the dynamics; analyses take it as an argument (``mdp.horizon`` is only a default, e.g. the value
stored in a file).

BRIDGE format (Laidlaw, Russell, Dragan, NeurIPS 2023): ``transitions[S, A]`` (int, next state or -1
for terminal), ``rewards[S, A]``, start state 0, optional ``screens[N, H, W, 3]`` with
``screen_mapping[S]`` and ``states[S, L]`` with ``state_lengths[S]``. Deterministic MDPs are written in
exactly that format; stochastic MDPs (e.g. sticky-action variants) add our own keys ``next_states``,
``next_probs`` and ``next_rewards`` of shape ``[S, A, K]`` instead of ``transitions``/``rewards``.
BRIDGE does not ship sticky-action files: its sticky analyses build the sticky MDP from the
deterministic one at analysis time, which :func:`sticky` reproduces.
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
from typing import Any

import numpy as np

from longhorizon.errors import UsageError

PROB_TOLERANCE = 1e-6
OPTIONAL_ARRAYS = ("screens", "screen_mapping", "states", "state_lengths")


@dataclasses.dataclass(frozen=True, eq=False)
class TabularMDP:
    """A finite MDP with start state 0; terminal outcomes are the next-state index -1."""

    next_states: np.ndarray  # int64 [S, A, K], -1 = episode ends
    next_probs: np.ndarray  # float64 [S, A, K], rows sum to 1
    next_rewards: np.ndarray  # float64 [S, A, K]
    horizon: int | None = None
    name: str = "mdp"
    extras: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = _problem(self.next_states, self.next_probs, self.next_rewards)
        if problem is not None:
            raise UsageError(f"Invalid tabular MDP '{self.name}': {problem}.")
        if self.horizon is not None and int(self.horizon) < 1:
            raise UsageError(f"Invalid tabular MDP '{self.name}': horizon must be >= 1, got {self.horizon}.")

    # ----------------------------------------------------------------------------------- builders
    @classmethod
    def deterministic(cls, transitions, rewards, **kwargs) -> TabularMDP:
        """Build from BRIDGE arrays ``transitions[S, A]`` (-1 = terminal) and ``rewards[S, A]``."""
        transitions = np.asarray(transitions)
        rewards = np.asarray(rewards)
        if transitions.ndim != 2 or rewards.shape != transitions.shape:
            raise UsageError(
                f"transitions and rewards must both have shape [S, A], got {transitions.shape} and {rewards.shape}."
            )
        if not np.issubdtype(transitions.dtype, np.integer):
            raise UsageError(f"transitions must be an integer array, got dtype {transitions.dtype}.")
        return cls(
            next_states=transitions.astype(np.int64)[..., None],
            next_probs=np.ones(transitions.shape + (1,)),
            next_rewards=rewards.astype(np.float64)[..., None],
            **kwargs,
        )

    # --------------------------------------------------------------------------------- properties
    @property
    def num_states(self) -> int:
        return int(self.next_states.shape[0])

    @property
    def num_actions(self) -> int:
        return int(self.next_states.shape[1])

    @property
    def num_outcomes(self) -> int:
        return int(self.next_states.shape[2])

    @property
    def is_deterministic(self) -> bool:
        """True when every state-action pair has a single outcome of probability 1."""
        if self.num_outcomes == 1:
            return True
        return bool(np.all(self.next_probs.max(axis=-1) >= 1.0 - PROB_TOLERANCE))

    @property
    def rewards(self) -> np.ndarray:
        """Expected immediate reward ``R[s, a] = sum_j P_j r_j`` (float64 [S, A])."""
        return np.einsum("sak,sak->sa", self.next_probs, self.next_rewards)

    @property
    def transitions(self) -> np.ndarray:
        """BRIDGE ``transitions[S, A]`` (int, -1 terminal); only for deterministic MDPs."""
        if not self.is_deterministic:
            raise UsageError(f"MDP '{self.name}' is stochastic; it has no deterministic transitions array.")
        if self.num_outcomes == 1:
            return self.next_states[..., 0]
        best = self.next_probs.argmax(axis=-1)
        return np.take_along_axis(self.next_states, best[..., None], axis=-1)[..., 0]

    def deterministic_rewards(self) -> np.ndarray:
        """Rewards of the single outcome of each pair (equals :attr:`rewards` for deterministic MDPs)."""
        if self.num_outcomes == 1:
            return self.next_rewards[..., 0]
        best = self.next_probs.argmax(axis=-1)
        return np.take_along_axis(self.next_rewards, best[..., None], axis=-1)[..., 0]

    def absorbing(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Arrays with one extra absorbing, zero-reward 'done' state at index ``S``.

        Returns ``(next_states, next_probs, next_rewards)`` of shape ``[S + 1, A, K]`` in which every
        ``-1`` is replaced by ``S``. Indexing a value array padded with a trailing 0 by these indices
        gives the value of the episode's end.
        """
        s, a, k = self.next_states.shape
        nxt = np.where(self.next_states < 0, s, self.next_states)
        nxt = np.concatenate([nxt, np.full((1, a, k), s, dtype=np.int64)], axis=0)
        probs = np.concatenate([self.next_probs, np.zeros((1, a, k))], axis=0)
        probs[s, :, 0] = 1.0
        rew = np.concatenate([self.next_rewards, np.zeros((1, a, k))], axis=0)
        return nxt, probs, rew

    def with_horizon(self, horizon: int | None) -> TabularMDP:
        return dataclasses.replace(self, horizon=horizon)

    def resolve_horizon(self, horizon: int | None) -> int:
        """The given horizon, else the MDP's own, else a UsageError."""
        if horizon is None:
            horizon = self.horizon
        if horizon is None:
            raise UsageError(f"MDP '{self.name}' has no horizon; pass one (e.g. --horizon 100).")
        if int(horizon) < 1:
            raise UsageError(f"The horizon must be at least 1, got {horizon}.")
        return int(horizon)

    def __repr__(self) -> str:
        kind = "deterministic" if self.is_deterministic else f"stochastic, K={self.num_outcomes}"
        return f"TabularMDP({self.name!r}, states={self.num_states}, actions={self.num_actions}, {kind})"


def _problem(next_states, next_probs, next_rewards) -> str | None:
    """Describe what is wrong with the arrays, or return None."""
    arrays = {"next_states": next_states, "next_probs": next_probs, "next_rewards": next_rewards}
    for key, arr in arrays.items():
        if not isinstance(arr, np.ndarray) or arr.ndim != 3:
            return f"{key} must be a 3-d array [S, A, K]"
    if next_probs.shape != next_states.shape or next_rewards.shape != next_states.shape:
        return (
            f"next_states, next_probs and next_rewards must share one shape, got {next_states.shape}, "
            f"{next_probs.shape} and {next_rewards.shape}"
        )
    s, a, k = next_states.shape
    if s < 1 or a < 1 or k < 1:
        return f"it needs at least one state, one action and one outcome, got shape {next_states.shape}"
    if not np.issubdtype(next_states.dtype, np.integer):
        return f"next states must be integers, got dtype {next_states.dtype}"
    low, high = int(next_states.min()), int(next_states.max())
    if low < -1 or high >= s:
        bad = low if low < -1 else high
        return f"transition target {bad} is out of range (valid: -1 for terminal, or 0..{s - 1})"
    if not np.all(np.isfinite(next_rewards)):
        count = int((~np.isfinite(next_rewards)).sum())
        return f"{count} reward(s) are NaN or infinite; rewards must be finite numbers"
    if not np.all(np.isfinite(next_probs)) or next_probs.min() < -PROB_TOLERANCE:
        return "transition probabilities must be finite and non-negative"
    sums = next_probs.sum(axis=-1)
    if np.abs(sums - 1.0).max() > PROB_TOLERANCE:
        return f"transition probabilities must sum to 1 for every state-action pair (worst sum {sums.flat[np.abs(sums - 1).argmax()]:.6g})"
    return None


# ------------------------------------------------------------------------------------- file format
def load_npz(path: str | os.PathLike, *, horizon: int | None = None) -> TabularMDP:
    """Load a BRIDGE ``consolidated.npz`` (or a stochastic file written by :func:`save_npz`).

    Raises :class:`UsageError` with one sentence naming the problem and the fix when the file is
    missing, truncated, not an ``.npz`` archive, lacks the required arrays, or holds invalid values.
    """
    path = os.fspath(path)
    name = os.path.basename(os.path.dirname(os.path.abspath(path))) or os.path.basename(path)
    if not os.path.exists(path):
        raise UsageError(f"MDP file '{path}' does not exist; check the path or give an environment id.")
    if os.path.isdir(path):
        candidate = os.path.join(path, "consolidated.npz")
        if os.path.exists(candidate):
            return load_npz(candidate, horizon=horizon)
        raise UsageError(f"'{path}' is a directory without a consolidated.npz; pass the .npz file itself.")
    fix = "re-create or re-download the file (a BRIDGE .npz holds transitions[S, A] and rewards[S, A])"
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as exc:
        reason = str(exc).strip().rstrip(".") or type(exc).__name__
        raise UsageError(f"MDP file '{path}' is not a readable .npz archive ({reason}); {fix}.") from None
    if not isinstance(arrays, dict) or not arrays:
        raise UsageError(f"MDP file '{path}' holds no arrays; {fix}.")
    stored_horizon = None
    if "horizon" in arrays:
        try:
            stored_horizon = int(np.asarray(arrays.pop("horizon")).reshape(()))
        except (TypeError, ValueError):
            raise UsageError(f"MDP file '{path}' has a 'horizon' entry that is not one integer; {fix}.") from None
    extras = {key: arrays[key] for key in OPTIONAL_ARRAYS if key in arrays}
    kwargs = dict(horizon=horizon if horizon is not None else stored_horizon, name=name, extras=extras)
    try:
        if "next_states" in arrays:
            missing = [k for k in ("next_probs", "next_rewards") if k not in arrays]
            if missing:
                raise UsageError(f"it has next_states but lacks {', '.join(missing)}")
            mdp = TabularMDP(
                next_states=_as_int(arrays["next_states"], "next_states"),
                next_probs=np.asarray(arrays["next_probs"], dtype=np.float64),
                next_rewards=np.asarray(arrays["next_rewards"], dtype=np.float64),
                **kwargs,
            )
        else:
            missing = [k for k in ("transitions", "rewards") if k not in arrays]
            if missing:
                raise UsageError(f"it lacks the array(s) {', '.join(missing)} (found: {', '.join(sorted(arrays)) or 'none'})")
            rewards = np.asarray(arrays["rewards"])
            if not np.issubdtype(rewards.dtype, np.number):
                raise UsageError(f"rewards must be numbers, got dtype {rewards.dtype}")
            mdp = TabularMDP.deterministic(_as_int(arrays["transitions"], "transitions"), rewards.astype(np.float64), **kwargs)
    except UsageError as exc:
        detail = str(exc).rstrip(".")
        prefix = f"Invalid tabular MDP '{name}': "
        detail = detail[len(prefix):] if detail.startswith(prefix) else detail
        detail = detail[:1].lower() + detail[1:]
        raise UsageError(f"MDP file '{path}' is malformed: {detail}; {fix}.") from None
    if "screen_mapping" in extras and extras["screen_mapping"].shape[:1] != (mdp.num_states,):
        raise UsageError(f"MDP file '{path}' is malformed: screen_mapping must have one entry per state; {fix}.")
    return mdp


def _as_int(arr: np.ndarray, key: str) -> np.ndarray:
    arr = np.asarray(arr)
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.int64)
    if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    raise UsageError(f"{key} must hold integer state indices, got dtype {arr.dtype}")


def save_npz(mdp: TabularMDP, path: str | os.PathLike, *, include_extras: bool = True) -> None:
    """Write the MDP; deterministic MDPs use exactly BRIDGE's keys (plus ``horizon`` when set)."""
    arrays: dict[str, np.ndarray] = {}
    if mdp.is_deterministic:
        arrays["transitions"] = mdp.transitions.astype(np.int64)
        arrays["rewards"] = mdp.deterministic_rewards().astype(np.float32)
    else:
        arrays["next_states"] = mdp.next_states.astype(np.int64)
        arrays["next_probs"] = mdp.next_probs.astype(np.float64)
        arrays["next_rewards"] = mdp.next_rewards.astype(np.float64)
    if mdp.horizon is not None:
        arrays["horizon"] = np.asarray(int(mdp.horizon), dtype=np.int64)
    if include_extras:
        arrays.update(mdp.extras)
    np.savez_compressed(path, **arrays)


# --------------------------------------------------------------------------------- transformations
def reachable(mdp: TabularMDP, horizon: int | None = None) -> np.ndarray:
    """Boolean mask of states reachable from state 0 within ``horizon - 1`` steps (all steps if None)."""
    seen = np.zeros(mdp.num_states, dtype=bool)
    seen[0] = True
    frontier = np.array([0])
    depth = 0
    positive = mdp.next_probs > 0
    while frontier.size and (horizon is None or depth < horizon - 1):
        nxt = mdp.next_states[frontier][positive[frontier]]
        nxt = np.unique(nxt[nxt >= 0])
        frontier = nxt[~seen[nxt]]
        seen[frontier] = True
        depth += 1
    return seen


def restrict(mdp: TabularMDP, keep: np.ndarray) -> TabularMDP:
    """The MDP on the states in boolean mask ``keep`` (state 0 must be kept; targets must be kept)."""
    keep = np.asarray(keep, dtype=bool)
    if not keep[0]:
        raise ValueError("restrict: the start state 0 must be kept")
    new_index = np.full(mdp.num_states + 1, -1, dtype=np.int64)
    new_index[:-1][keep] = np.arange(int(keep.sum()))
    nxt = mdp.next_states[keep]
    targets = nxt[(nxt >= 0) & (mdp.next_probs[keep] > 0)]
    if targets.size and not keep[targets].all():
        raise ValueError("restrict: a kept state leads to a removed state")
    mapped = np.where(nxt >= 0, new_index[nxt], -1)
    # Zero-probability outcomes may point at removed states: send them to terminal.
    extras = {k: v[keep] for k, v in mdp.extras.items() if k != "screens" and v.shape[:1] == (mdp.num_states,)}
    if "screens" in mdp.extras:
        extras["screens"] = mdp.extras["screens"]
    return dataclasses.replace(
        mdp,
        next_states=mapped,
        next_probs=mdp.next_probs[keep],
        next_rewards=mdp.next_rewards[keep],
        extras=extras,
    )


def sticky(mdp: TabularMDP, repeat_prob: float = 0.25) -> TabularMDP:
    """Sticky-action variant: with probability ``repeat_prob`` the previous action is executed instead.

    The state becomes ``(s, previous action)``. As in BRIDGE's sticky analyses, the first step of an
    episode is never sticky, so the start state is ``(s0, none)``. Only states reachable from the start
    are kept; the new state 0 is the start. ``info['underlying_state']`` and ``info['prev_action']``
    give, for every new state, its original state and the previous action (-1 for the start).
    """
    p = float(repeat_prob)
    if not 0.0 <= p < 1.0:
        raise UsageError(f"The sticky-action probability must be in [0, 1), got {repeat_prob}.")
    if p == 0.0:
        return mdp
    s_count, a_count, k_count = mdp.next_states.shape
    # Candidate states: index 0 = (s0, none), index 1 + s * A + b = (s, b).
    n = 1 + s_count * a_count

    def encode(states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return np.where(states >= 0, 1 + states * a_count + actions, -1)

    acts = np.arange(a_count)
    nxt = np.zeros((n, a_count, 2 * k_count), dtype=np.int64)
    prob = np.zeros((n, a_count, 2 * k_count))
    rew = np.zeros((n, a_count, 2 * k_count))
    # Start state: no stickiness; the padding outcomes get probability 0.
    nxt[0, :, :k_count] = encode(mdp.next_states[0], acts[:, None])
    prob[0, :, :k_count] = mdp.next_probs[0]
    rew[0, :, :k_count] = mdp.next_rewards[0]
    nxt[0, :, k_count:] = -1
    # (s, b) taking a: intended action a with prob 1 - p, repeated action b with prob p.
    s_idx = np.repeat(np.arange(s_count), a_count)
    b_idx = np.tile(acts, s_count)
    for a in range(a_count):
        nxt[1:, a, :k_count] = encode(mdp.next_states[s_idx, a], np.full((s_idx.size, 1), a))
        prob[1:, a, :k_count] = (1 - p) * mdp.next_probs[s_idx, a]
        rew[1:, a, :k_count] = mdp.next_rewards[s_idx, a]
        nxt[1:, a, k_count:] = encode(mdp.next_states[s_idx, b_idx], b_idx[:, None])
        prob[1:, a, k_count:] = p * mdp.next_probs[s_idx, b_idx]
        rew[1:, a, k_count:] = mdp.next_rewards[s_idx, b_idx]
    underlying = np.concatenate([[0], s_idx])
    prev = np.concatenate([[-1], b_idx])
    full = TabularMDP(
        next_states=nxt, next_probs=prob, next_rewards=rew, horizon=mdp.horizon,
        name=f"{mdp.name}-sticky{p:g}", info={**mdp.info, "sticky": p},
    )
    keep = reachable(full)
    out = restrict(full, keep)
    out = dataclasses.replace(
        out,
        info={**out.info, "underlying_state": underlying[keep], "prev_action": prev[keep]},
        extras=({"screen_mapping": mdp.extras["screen_mapping"][underlying[keep]], "screens": mdp.extras["screens"]}
                if "screen_mapping" in mdp.extras and "screens" in mdp.extras else {}),
    )
    return out


def bridge_sticky_state_count(mdp, horizon: int) -> int:
    """States of the sticky-action MDP counted as BRIDGE counts them.

    BRIDGE's sticky MDP has states ``(s, previous action)`` over the original states plus an absorbing
    'done' state, starts in ``(s0, action 0)`` and counts every pair occupied at timesteps ``0..T-1``.
    """
    S, A = mdp.num_states, mdp.num_actions
    nxt = np.where(mdp.transitions < 0, S, mdp.transitions)
    nxt = np.vstack([nxt, np.full((1, A), S)])
    current = np.zeros((S + 1, A), dtype=bool)
    current[0, 0] = True
    seen = current.copy()
    acts = np.arange(A)
    for t in range(horizon - 1):
        s_idx, b_idx = np.nonzero(current)
        new = np.zeros_like(current)
        new[nxt[s_idx][:, acts].ravel(), np.tile(acts, s_idx.size)] = True  # intended action
        if t > 0:  # the first step is never sticky
            new[nxt[s_idx, b_idx], b_idx] = True
        current = new
        seen |= current
    return int(seen.sum())
