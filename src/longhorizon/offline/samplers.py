r"""Goal-conditioned samplers (HIQL, Park et al. 2023; OGBench's ``GCDataset``), jitted, on device.

A dataset of trajectories laid end to end (OGBench's ``.npz`` after loading: ``terminals[i] = 1`` at
each trajectory's last transition, ``next_observations[i]`` the state after ``actions[i]``) becomes a
:class:`GoalData` of device arrays plus, for every transition ``i``, the index ``final[i]`` of its
trajectory's last transition. Every sampler is a pure function of a key and that data:

* **value goals** (HIQL eq. 3): a mixture of the current state (``p_current``), a state of the same
  trajectory ``min(i + k, final[i])`` with a geometric offset :math:`k \sim \mathrm{Geom}(1 - \gamma)`
  on :math:`\{1, 2, \dots\}` (``p_trajectory``), and a uniform dataset state (``p_random``);
* **actor goals**: their own mixture; with ``geometric=False`` a trajectory goal is uniform over
  ``i+1 .. final[i]`` (OGBench's ``actor_geom_sample=False``);
* **subgoals** (HIQL's low-level target) ``s_{min(i + k, final[i])}``, and the high-level target
  ``min(i + k, goal)`` for a goal ahead in the same trajectory;
* **options** (OTA): the bootstrap state ``s_tau``, ``tau = min(i + n, goal step, final[i] + 1)``.

Rewards follow OGBench's ``gc_negative=True`` convention (the one HIQL's and OTA's results use):
:math:`r = \mathbb 1(s_i = g) - 1 \in \{-1, 0\}` and mask :math:`m = 1 - \mathbb 1(s_i = g)`, where
"reached" means the goal *is* transition ``i``'s state (index equality), so :math:`V(s, g) \approx
-\text{(steps to } g)` discounted.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError


class GoalData(NamedTuple):
    """A dataset on device: ``observations``/``next_observations`` [N, obs], ``actions`` [N, act],
    ``final`` [N] int32 (index of the last transition of i's trajectory), ``valid`` [M] int32 (the
    indices a batch may start from)."""

    observations: jax.Array
    next_observations: jax.Array
    actions: jax.Array
    final: jax.Array
    valid: jax.Array


def goal_data(dataset: dict[str, np.ndarray]) -> GoalData:
    """A :class:`GoalData` from a dataset dict (``load_dataset``'s keys); malformed data is a UsageError."""
    missing = [k for k in ("observations", "actions", "terminals", "next_observations") if k not in dataset]
    if missing:
        raise UsageError(f"the dataset lacks {', '.join(missing)}; pass an OGBench-format dataset "
                         "(observations, actions, terminals, next_observations).")
    obs = np.asarray(dataset["observations"], np.float32)
    n = len(obs)
    terminals = np.asarray(dataset["terminals"]).reshape(-1)
    if obs.ndim != 2 or n == 0 or len(terminals) != n or len(dataset["actions"]) != n or len(dataset["next_observations"]) != n:
        raise UsageError(f"the dataset's arrays disagree in length or shape (observations {obs.shape}, terminals "
                         f"{terminals.shape}); regenerate it with `longhorizon offline make-dataset`.")
    if terminals[-1] <= 0:
        raise UsageError("the dataset's last transition is not marked terminal (terminals[-1] must be 1 at each "
                         "trajectory's end); regenerate it or fix its terminals array.")
    for key in ("observations", "next_observations", "actions"):
        if not np.all(np.isfinite(np.asarray(dataset[key], np.float32))):
            raise UsageError(f"the dataset's {key} hold NaN or Inf; regenerate it or drop those transitions.")
    ends = np.flatnonzero(terminals > 0)
    final = ends[np.searchsorted(ends, np.arange(n))].astype(np.int32)
    valids = np.asarray(dataset.get("valids", np.ones(n))).reshape(-1)
    valid = np.flatnonzero(valids > 0).astype(np.int32)
    if len(valid) == 0:
        raise UsageError("the dataset has no valid transition (valids is all zero); regenerate it.")
    actions = np.asarray(dataset["actions"], np.float32)
    return GoalData(jnp.asarray(obs), jnp.asarray(np.asarray(dataset["next_observations"], np.float32)),
                    jnp.asarray(actions.reshape(n, -1)), jnp.asarray(final), jnp.asarray(valid))


@dataclasses.dataclass(frozen=True)
class GoalMixture:
    """Probabilities of the current state, a same-trajectory state and a random state as the goal."""

    p_current: float
    p_trajectory: float
    p_random: float
    geometric: bool  # trajectory goals: geometric offset (True) or uniform over the rest of the trajectory

    def __post_init__(self):
        probs = (self.p_current, self.p_trajectory, self.p_random)
        if min(probs) < 0 or abs(sum(probs) - 1.0) > 1e-6:
            raise UsageError(f"goal probabilities {probs} must be non-negative and sum to 1; adjust the p_* settings.")


VALUE_GOALS = GoalMixture(0.2, 0.5, 0.3, geometric=True)  # HIQL / OGBench's value_p_* defaults
ACTOR_GOALS = GoalMixture(0.0, 1.0, 0.0, geometric=False)  # OGBench's actor_p_* defaults


def start_indices(key: jax.Array, data: GoalData, batch_size: int) -> jax.Array:
    """``[B]`` int32 transition indices drawn uniformly from the valid ones."""
    return data.valid[jax.random.randint(key, (batch_size,), 0, data.valid.shape[0])]


def trajectory_goals(key: jax.Array, data: GoalData, idx: jax.Array, discount: float, geometric: bool) -> jax.Array:
    r"""Same-trajectory goal indices ``[B]``: ``min(i + k, final[i])`` with :math:`k \sim \mathrm{Geom}(1-\gamma)`
    (:math:`P(k) = \gamma^{k-1}(1-\gamma)`, :math:`k \ge 1`), or uniform over ``min(i+1, final) .. final``."""
    final = data.final[idx]
    if geometric:
        offset = jax.random.geometric(key, 1.0 - discount, idx.shape).astype(jnp.int32)
        return jnp.minimum(idx + offset, final)
    u = jax.random.uniform(key, idx.shape)
    return jnp.round(jnp.minimum(idx + 1, final) * u + final * (1.0 - u)).astype(jnp.int32)


def mixture_goals(key: jax.Array, data: GoalData, idx: jax.Array, mixture: GoalMixture, discount: float) -> jax.Array:
    """Goal indices ``[B]`` from ``mixture``: current state, same-trajectory state or random dataset state."""
    k_traj, k_rand, k_pick = jax.random.split(key, 3)
    traj = trajectory_goals(k_traj, data, idx, discount, mixture.geometric)
    rand = start_indices(k_rand, data, idx.shape[0])
    u = jax.random.uniform(k_pick, idx.shape)
    # one uniform split into [0, p_random) random, [p_random, p_random + p_current) current, the rest trajectory
    goal = jnp.where(u < mixture.p_random, rand, traj)
    return jnp.where((u >= mixture.p_random) & (u < mixture.p_random + mixture.p_current), idx, goal)


def goal_rewards(idx: jax.Array, goal: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(reward, mask)`` [B]: reward 0 and mask 0 where transition ``idx`` is the goal, else -1 and 1."""
    success = (idx == goal).astype(jnp.float32)
    return success - 1.0, 1.0 - success


def ahead_in_trajectory(data: GoalData, idx: jax.Array, goal: jax.Array) -> jax.Array:
    """Whether goal ``goal`` lies at or after ``idx`` in the same trajectory ``[B]`` bool."""
    return (data.final[goal] == data.final[idx]) & (goal >= idx)


def subgoals(data: GoalData, idx: jax.Array, steps: int, goal: jax.Array | None = None) -> jax.Array:
    """HIQL's subgoal index ``min(i + steps, end)`` [B], ``end`` = the goal if it lies ahead in the same
    trajectory (the high-level target), else the trajectory's last transition (the low-level goal)."""
    end = data.final[idx]
    if goal is not None:
        end = jnp.where(ahead_in_trajectory(data, idx, goal), goal, end)
    return jnp.minimum(idx + steps, end)


def option_ends(data: GoalData, idx: jax.Array, goal: jax.Array, length: int) -> jax.Array:
    r"""OTA's option end, as an index ``j`` into ``next_observations`` [B] (``s_tau = next_observations[j]``).

    In steps from the trajectory start, :math:`\tau = \min(t + n, t_g, T + 1)` with :math:`t_g` the
    step of the goal if it lies ahead in the same trajectory, :math:`T` the last transition (so
    :math:`s_{T+1}` is its next observation); ``j = tau - 1``. With ``length`` = 1, ``j = idx``:
    the one-step target. (A goal at ``idx`` itself is masked out by :func:`goal_rewards`.)
    """
    end = data.final[idx] + 1
    end = jnp.where(ahead_in_trajectory(data, idx, goal) & (goal > idx), jnp.minimum(goal, end), end)
    return jnp.minimum(idx + length, end) - 1


class ValueBatch(NamedTuple):
    """A goal-conditioned transition batch: ``observations``, ``next_observations``, ``goals`` [B, obs],
    ``actions`` [B, act], ``rewards``, ``masks`` [B] float32, and the indices ``idx``, ``goal_idx`` [B]."""

    observations: jax.Array
    next_observations: jax.Array
    actions: jax.Array
    goals: jax.Array
    rewards: jax.Array
    masks: jax.Array
    idx: jax.Array
    goal_idx: jax.Array


def value_batch(key: jax.Array, data: GoalData, batch_size: int, mixture: GoalMixture, discount: float,
                idx: jax.Array | None = None) -> ValueBatch:
    """Transitions with goals from ``mixture`` and their rewards and masks (starting at ``idx`` if given)."""
    k_idx, k_goal = jax.random.split(key)
    idx = start_indices(k_idx, data, batch_size) if idx is None else idx
    goal = mixture_goals(k_goal, data, idx, mixture, discount)
    reward, mask = goal_rewards(idx, goal)
    return ValueBatch(data.observations[idx], data.next_observations[idx], data.actions[idx],
                      data.observations[goal], reward, mask, idx, goal)
