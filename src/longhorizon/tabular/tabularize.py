"""Tabularizers: enumerate the reachable states of real environments into a :class:`TabularMDP`.

Both tabularizers explore breadth-first from the start state (reset with seed 0), so a state's depth is
the first timestep at which it can occur; states at depth ``<= T - 1`` are kept and a transition out of
depth ``T - 1`` into a new state ends the episode (it happens at the horizon anyway). Exceeding
``max_states`` raises :class:`UsageError`. States that always produce the same future are then merged:

* ``merge="observation"`` (default, BRIDGE's ``consolidated.npz``): states are merged when every
  action sequence gives the same rewards *and the same observations* (the coarsest bisimulation that
  respects observations);
* ``merge="future"`` (BRIDGE's ``consolidated_ignore_screen``): the same rewards suffice;
* ``merge="none"``: keep every distinct internal state.

**MiniGrid** (:func:`tabularize_minigrid`) follows BRIDGE's conventions: fully observable (the
observation is the full grid encoding with the agent), reset with seed 0, the ``done`` action removed
(three navigation actions for ``Empty`` environments), positive rewards replaced by 1, no internal step
limit (the horizon replaces it), and optional shaping in BRIDGE's id scheme, e.g.
``MiniGrid-UnlockPickup-OpenDoorsPickupShaped-v0`` (``Distance``, ``OpenDoors``, ``Pickup``,
``Lava``).

**gymnax-style environments** (:func:`tabularize_gymnax`): any functional environment with
``reset(key, params)`` and ``step_env``/``step`` whose state is a finite pytree of arrays. States are
hashed by the bytes of their leaves; transitions are sampled with ``transition_samples`` keys per
state-action pair, so stochastic dynamics are estimated by their empirical frequencies (and reported
in ``mdp.info``). The environment's own time limit is switched off (``max_steps_in_episode``) so that
the horizon ``T`` is the only one.
"""

from __future__ import annotations

import dataclasses
import re
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.tabular.mdp import TabularMDP

DEFAULT_MAX_STATES = 200_000
_EXPAND_CACHE: dict = {}
MERGE_MODES = ("observation", "future", "none")


# ------------------------------------------------------------------------------------ progress
@contextmanager
def _status(enabled: bool, label: str) -> Iterator[Callable[[int, int], None]]:
    """A transient rich status line ``label: N states, depth d, r states/s`` on stderr."""
    if not enabled:
        yield lambda n, d: None
        return
    from rich.console import Console

    console = Console(stderr=True)
    start = time.perf_counter()
    with console.status(f"{label}: starting") as status:
        last = [0.0]

        def update(n: int, depth: int) -> None:
            now = time.perf_counter()
            if now - last[0] < 0.1:
                return
            last[0] = now
            rate = n / max(now - start, 1e-9)
            status.update(f"{label}: {n:,} states, depth {depth}, {rate:,.0f} states/s")

        yield update


def _limit_error(what: str, max_states: int, horizon: int) -> UsageError:
    return UsageError(
        f"{what} has more than {max_states:,} reachable states within horizon {horizon}; "
        f"raise --max-states or lower --horizon."
    )


# ------------------------------------------------------------------------------------ merging
def merge_equivalent_states(
    next_states: np.ndarray,
    next_probs: np.ndarray,
    next_rewards: np.ndarray,
    observation_keys: list | np.ndarray | None = None,
) -> np.ndarray:
    """Coarsest partition of states with identical futures; returns ``block[S]`` with ``block[0] == 0``.

    Partition refinement: start from blocks of equal observation (or one block), then split blocks
    until every member has, for every action, the same reward and next-block distribution. Blocks
    are numbered in order of their first member, so block 0 contains state 0.
    """
    S, A, K = next_states.shape
    if observation_keys is None:
        block = np.zeros(S, dtype=np.int64)
    else:
        _, block = np.unique(np.asarray(_as_key_array(observation_keys)), return_inverse=True)
        block = block.reshape(-1).astype(np.int64)
    reward_bits = np.ascontiguousarray(next_rewards).view(np.int64)
    prob_bits = np.ascontiguousarray(np.round(next_probs, 12)).view(np.int64)
    count = -1
    while True:
        nb = np.where(next_states >= 0, block[np.maximum(next_states, 0)], -1)
        if K == 1:
            sig = np.concatenate([block[:, None], nb[..., 0], reward_bits[..., 0]], axis=1)
        else:
            # Canonical outcome order per (s, a): sort by (next block, reward), merging duplicates is not
            # needed for exactness of the refinement as long as the sort is canonical.
            order = np.lexsort((reward_bits, prob_bits, nb), axis=-1)
            take = lambda arr: np.take_along_axis(arr, order, axis=-1).reshape(S, -1)  # noqa: E731
            sig = np.concatenate([block[:, None], take(nb), take(reward_bits), take(prob_bits)], axis=1)
        _, new_block = np.unique(sig, axis=0, return_inverse=True)
        new_block = new_block.reshape(-1)
        n = int(new_block.max()) + 1
        block = new_block
        if n == count:
            break
        count = n
    # Renumber by first occurrence so that state 0 is in block 0.
    first = np.full(count, S, dtype=np.int64)
    np.minimum.at(first, block, np.arange(S))
    rank = np.empty(count, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(count)
    return rank[block]


def _as_key_array(keys) -> np.ndarray:
    """Observation keys (bytes or arrays) as an array ``np.unique`` can group."""
    if isinstance(keys, np.ndarray):
        return keys.reshape(len(keys), -1) if keys.ndim > 1 else keys
    lookup: dict[Any, int] = {}
    return np.array([lookup.setdefault(k, len(lookup)) for k in keys], dtype=np.int64)


def _quotient(next_states, next_probs, next_rewards, block):
    """The MDP on blocks, taking each block's first member as its representative."""
    count = int(block.max()) + 1
    rep = np.full(count, -1, dtype=np.int64)
    for s in range(len(block) - 1, -1, -1):
        rep[block[s]] = s
    nxt = next_states[rep]
    return (
        np.where(nxt >= 0, block[np.maximum(nxt, 0)], -1),
        next_probs[rep],
        next_rewards[rep],
        rep,
    )


def _collapse_outcomes(next_states, next_probs, next_rewards):
    """Sum the probabilities of identical (next state, reward) outcomes; drop zero-probability ones."""
    S, A, K = next_states.shape
    if K == 1:
        return next_states, next_probs, next_rewards
    rows = []
    width = 1
    for s in range(S):
        row = []
        for a in range(A):
            acc: dict[tuple[int, float], float] = {}
            for j in range(K):
                if next_probs[s, a, j] > 0:
                    key = (int(next_states[s, a, j]), float(next_rewards[s, a, j]))
                    acc[key] = acc.get(key, 0.0) + float(next_probs[s, a, j])
            row.append(sorted(acc.items()))
            width = max(width, len(acc))
        rows.append(row)
    ns = np.full((S, A, width), -1, dtype=np.int64)
    ps = np.zeros((S, A, width))
    rs = np.zeros((S, A, width))
    for s, row in enumerate(rows):
        for a, items in enumerate(row):
            for j, ((nxt, rew), p) in enumerate(items):
                ns[s, a, j], ps[s, a, j], rs[s, a, j] = nxt, p, rew
    return ns, ps, rs


def build_mdp(
    next_states: np.ndarray,
    next_probs: np.ndarray,
    next_rewards: np.ndarray,
    *,
    observation_keys=None,
    merge: str = "observation",
    name: str,
    horizon: int,
    info: dict | None = None,
) -> TabularMDP:
    """Merge equivalent states (see module docstring) and wrap the arrays in a TabularMDP."""
    if merge not in MERGE_MODES:
        raise UsageError(f"merge must be one of {', '.join(MERGE_MODES)}, got '{merge}'.")
    info = dict(info or {})
    info["enumerated_states"] = int(next_states.shape[0])
    next_states, next_probs, next_rewards = _collapse_outcomes(next_states, next_probs, next_rewards)
    if merge != "none":
        keys = observation_keys if merge == "observation" else None
        block = merge_equivalent_states(next_states, next_probs, next_rewards, keys)
        next_states, next_probs, next_rewards, rep = _quotient(next_states, next_probs, next_rewards, block)
        next_states, next_probs, next_rewards = _collapse_outcomes(next_states, next_probs, next_rewards)
        info["representatives"] = rep
    return TabularMDP(
        next_states=next_states, next_probs=next_probs, next_rewards=next_rewards,
        horizon=horizon, name=name, info=info,
    )


# ------------------------------------------------------------------------------------ MiniGrid
_SHAPING_NAMES = ("Distance", "OpenDoors", "Pickup", "Lava")
_MINIGRID_ID = re.compile(r"^(?:BRIDGE/)?(MiniGrid-.+?)(?:-((?:Distance|OpenDoors|Pickup|Lava)+)Shaped)?(-v\d+)$")


def parse_minigrid_id(env_id: str) -> tuple[str, tuple[str, ...]]:
    """``MiniGrid-X-[<shaping>Shaped-]vN`` -> (``MiniGrid-X-vN``, shaping names)."""
    match = _MINIGRID_ID.match(env_id)
    if not match:
        raise UsageError(f"'{env_id}' is not a MiniGrid id; MiniGrid ids look like MiniGrid-KeyCorridorS3R1-v0.")
    base = match.group(1) + match.group(3)
    shaping = tuple(re.findall("|".join(_SHAPING_NAMES), match.group(2) or ""))
    return base, shaping


class _MiniGridSim:
    """Save, restore, key and step a MiniGrid environment's full internal state (host side).

    A snapshot holds the grid's cell list, every non-wall object's attributes (door state, box
    contents, pickup flags), the agent's pose, what it carries and the random generator's state, so
    restoring one is a few dictionary copies; no objects are created or copied while exploring.
    """

    def __init__(self, env_id: str, *, seed: int = 0):
        try:
            import gymnasium as gym
            import minigrid  # noqa: F401  (registers the MiniGrid environments)
        except ImportError:
            raise UsageError(
                "MiniGrid tabularization needs the 'minigrid' package; install it with pip install 'longhorizon[tabular]'."
            ) from None
        from minigrid.core.world_object import Box, Door, Goal, Lava, WorldObj

        self.Box, self.Door, self.Goal, self.Lava, self.WorldObj = Box, Door, Goal, Lava, WorldObj
        base, shaping = parse_minigrid_id(env_id)
        if base not in gym.registry:
            known = sorted(k for k in gym.registry if k.startswith("MiniGrid-"))
            import difflib

            close = difflib.get_close_matches(base, known, n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}?" if close else "see the minigrid package for the list of ids."
            raise UsageError(f"unknown MiniGrid environment '{base}': {hint}")
        self.env_id, self.base_id, self.shaping = env_id, base, set(shaping)
        env = gym.make(base)
        env.reset(seed=seed)
        self.env = env.unwrapped
        self.env.gen_obs = lambda: None  # observations are built on demand below, not on every step
        self.num_actions = 3 if "Empty" in base else 6
        with_obj = ("KeyCorridorEnv", "UnlockPickupEnv", "BlockedUnlockPickupEnv", "ObstructedMazeEnv")
        self.target = getattr(self.env, "obj", None) if any(
            cls.__name__ in with_obj for cls in type(self.env).__mro__
        ) else None
        if "Pickup" in self.shaping:
            for obj in self._objects():
                if obj.can_pickup():
                    obj.has_been_picked_up = False

    # --- state handling
    def _objects(self):
        env = self.env
        seen = []
        for obj in list(env.grid.grid) + [env.carrying]:
            while obj is not None:
                if obj.type != "wall":
                    seen.append(obj)
                obj = obj.contains if isinstance(obj, self.Box) else None
        return seen

    def snapshot(self):
        env = self.env
        objs = [(o, dict(o.__dict__)) for o in self._objects()]
        rng = env.np_random.bit_generator.state
        return (list(env.grid.grid), objs, env.agent_pos, int(env.agent_dir), env.carrying, rng)

    def restore(self, snap) -> None:
        grid, objs, pos, direction, carrying, rng = snap
        env = self.env
        env.grid.grid = list(grid)
        for obj, attrs in objs:
            obj.__dict__.clear()
            obj.__dict__.update(attrs)
        env.agent_pos, env.agent_dir, env.carrying = pos, direction, carrying
        env.np_random.bit_generator.state = rng
        env.step_count = 0

    def observation(self) -> bytes:
        """The fully observable view: the grid encoding with the agent drawn in it."""
        env = self.env
        grid = env.grid.encode()
        x, y = env.agent_pos
        grid[x, y] = np.array([10, 0, env.agent_dir])  # OBJECT_TO_IDX["agent"], COLOR_TO_IDX["red"]
        return grid.tobytes()

    def key(self) -> tuple:
        """Everything the future depends on: observation, carried object, hidden contents and flags."""
        env = self.env
        extra = []
        cells = list(enumerate(env.grid.grid)) + [(-1, env.carrying)]
        for pos, obj in cells:
            depth = 0
            while obj is not None:
                if isinstance(obj, self.Box) and obj.contains is not None:
                    extra.append(("box", pos, depth, obj.contains.encode()))
                if "Pickup" in self.shaping and obj.can_pickup():
                    extra.append(("picked", pos, depth, bool(getattr(obj, "has_been_picked_up", False))))
                obj = obj.contains if isinstance(obj, self.Box) else None
                depth += 1
        carrying = env.carrying.encode() if env.carrying is not None else None
        rng = env.np_random.bit_generator.state
        return (self.observation(), carrying, tuple(extra), repr(rng["state"]))

    # --- dynamics with BRIDGE's conventions
    def step(self, action: int) -> tuple[float, bool]:
        env = self.env
        before = self._shaping_terms() if self.shaping else None
        env.step_count = 0  # no internal time limit: the horizon replaces it
        _, reward, terminated, _, _ = env.step(action)
        env.step_count = 0
        reward = 1.0 if float(reward) > 0 else 0.0
        if self.shaping:
            if "Pickup" in self.shaping and env.carrying is not None:
                env.carrying.has_been_picked_up = True
            after = self._shaping_terms()
            reward += self._shaping_reward(before, after, action, terminated)
        return reward, bool(terminated)

    def _distance(self):
        env = self.env
        ax, ay = env.agent_pos
        dx_dir, dy_dir = env.dir_vec
        best = []
        for x in range(env.grid.width):
            for y in range(env.grid.height):
                tile = env.grid.get(x, y)
                if (tile is not None and tile.type == "goal") or (self.target is not None and tile is self.target):
                    dx, dy = x - ax, y - ay
                    dot = np.sign(dx) * dx_dir + np.sign(dy) * dy_dir
                    if dx == 0 and dy == 0:
                        turns = 0
                    elif dx == 0 or dy == 0:
                        turns = 1 - dot
                    else:
                        turns = 1 + (1 if dot < 0 else 0)
                    best.append(turns + abs(dx) + abs(dy))
        if self.target is not None and env.carrying is self.target:
            best.append(0)
        return min(best) if best else None

    def _shaping_terms(self):
        env = self.env
        terms = {}
        if "Distance" in self.shaping:
            terms["distance"] = self._distance()
        if "OpenDoors" in self.shaping:
            terms["doors"] = sum(1 for o in env.grid.grid if isinstance(o, self.Door) and o.is_open)
        if "Pickup" in self.shaping:
            terms["picked"] = sum(1 for o in self._objects() if o.can_pickup() and getattr(o, "has_been_picked_up", False))
        return terms

    def _shaping_reward(self, before, after, action, terminated) -> float:
        env = self.env
        shaped = 0.0
        if "Distance" in self.shaping and before["distance"] is not None and after["distance"] is not None:
            shaped += 0.1 * (round(before["distance"], 2) - round(after["distance"], 2))
        if "OpenDoors" in self.shaping:
            shaped += 0.2 * (after["doors"] - before["doors"])
        if "Pickup" in self.shaping:
            shaped += 0.2 * (after["picked"] - before["picked"])
        if "Lava" in self.shaping and action == env.actions.forward and terminated:
            front = env.grid.get(*env.front_pos)
            if front is not None and front.type == "lava":
                shaped -= 1.0
        return shaped


def tabularize_minigrid(
    env_id: str,
    *,
    horizon: int = 100,
    max_states: int = DEFAULT_MAX_STATES,
    merge: str = "observation",
    seed: int = 0,
    show_progress: bool = False,
) -> TabularMDP:
    """Enumerate a MiniGrid environment with BRIDGE's conventions (see the module docstring)."""
    if horizon < 1:
        raise UsageError(f"The horizon must be at least 1, got {horizon}.")
    sim = _MiniGridSim(env_id, seed=seed)
    A = sim.num_actions
    start = time.perf_counter()
    index: dict[tuple, int] = {sim.key(): 0}
    snaps = [sim.snapshot()]
    observations = [sim.observation()]
    rows_next: list[list[int]] = []
    rows_reward: list[list[float]] = []
    frontier, depth = [0], 0
    with _status(show_progress, f"tabularizing {env_id}") as update:
        while frontier:
            new_frontier = []
            for s in frontier:
                nxt_row, rew_row = [], []
                for a in range(A):
                    sim.restore(snaps[s])
                    reward, terminated = sim.step(a)
                    if terminated:
                        nxt_row.append(-1)
                    else:
                        key = sim.key()
                        target = index.get(key)
                        if target is None:
                            if depth + 1 >= horizon:
                                target = -1  # first reachable at the horizon: the episode is over
                            else:
                                if len(snaps) >= max_states:
                                    raise _limit_error(env_id, max_states, horizon)
                                target = len(snaps)
                                index[key] = target
                                snaps.append(sim.snapshot())
                                observations.append(sim.observation())
                                new_frontier.append(target)
                        nxt_row.append(target)
                    rew_row.append(reward)
                rows_next.append(nxt_row)
                rows_reward.append(rew_row)
                update(len(snaps), depth)
            frontier, depth = new_frontier, depth + 1
    seconds = time.perf_counter() - start
    # Rows were appended in BFS order, which is the state numbering.
    nxt = np.asarray(rows_next, dtype=np.int64)[..., None]
    rew = np.asarray(rows_reward, dtype=np.float64)[..., None]
    mdp = build_mdp(
        nxt, np.ones_like(rew), rew, observation_keys=observations, merge=merge, name=env_id, horizon=horizon,
        info={"source": "minigrid", "seconds": seconds, "states_per_second": len(snaps) / max(seconds, 1e-9)},
    )
    return mdp


# ------------------------------------------------------------------------------------ gymnax
def _resolve_gymnax(env: Any, params: Any, overrides: dict[str, Any]):
    """(inner env with a functional API, params, display name) from an id, a GymnaxEnv or a raw env."""
    name = getattr(env, "id", None) or getattr(env, "name", None) or type(env).__name__
    if isinstance(env, str):
        name = env
        try:
            from longhorizon.envs import make as lh_make  # the library's registry: clear errors
        except ImportError:  # pragma: no cover - registry not present
            lh_make = None
        if lh_make is not None:
            wrapped = lh_make(env, **overrides)
            env, params = wrapped.inner, (params if params is not None else wrapped.default_params)
        else:  # pragma: no cover
            import gymnax

            if env not in gymnax.registered_envs:
                raise UsageError(f"unknown environment '{env}'; run `longhorizon envs` to list them.")
            env, default = gymnax.make(env, **overrides)
            params = params if params is not None else default
    elif hasattr(env, "inner"):  # longhorizon.envs.api.GymnaxEnv
        params = params if params is not None else env.default_params
        env = env.inner
    if params is None:
        params = env.default_params
    return env, params, str(name)


def _row_bytes(tree, batch: int, ignore: tuple[str, ...] = ()) -> np.ndarray:
    """[batch, nbytes] uint8 matrix of a batched pytree's leaves (the state's identity).

    Leaves whose path ends in a name listed in ``ignore`` (e.g. ``time``) are left out.
    """
    import jax

    parts = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if ignore and path and getattr(path[-1], "name", getattr(path[-1], "key", None)) in ignore:
            continue
        arr = np.asarray(leaf)
        if arr.dtype == np.bool_:
            arr = arr.astype(np.uint8)
        parts.append(np.ascontiguousarray(arr.reshape(batch, -1)).view(np.uint8).reshape(batch, -1))
    return np.concatenate(parts, axis=1) if parts else np.zeros((batch, 0), np.uint8)


def tabularize_gymnax(
    env: Any,
    params: Any = None,
    *,
    horizon: int = 100,
    max_states: int = DEFAULT_MAX_STATES,
    merge: str = "observation",
    seed: int = 0,
    transition_samples: int = 8,
    batch_size: int = 256,
    keep_time: bool = False,
    show_progress: bool = False,
    **overrides: Any,
) -> TabularMDP:
    """Enumerate a gymnax-style environment (an id, a ``longhorizon.envs`` env or a gymnax env).

    ``overrides`` set environment settings (e.g. ``size=8`` for DeepSea) when ``env`` is an id.
    gymnax states count their steps in a ``time`` field that only drives the time limit; with the
    limit switched off it is left out of a state's identity (``keep_time=True`` keeps it, for
    environments whose dynamics or rewards depend on time).
    """
    import jax
    import jax.numpy as jnp

    if horizon < 1:
        raise UsageError(f"The horizon must be at least 1, got {horizon}.")
    if transition_samples < 1:
        raise UsageError(f"transition_samples must be at least 1, got {transition_samples}.")
    inner, params, name = _resolve_gymnax(env, params, overrides)
    ignore: tuple[str, ...] = ()
    if dataclasses.is_dataclass(params) and any(f.name == "max_steps_in_episode" for f in dataclasses.fields(params)):
        params = params.replace(max_steps_in_episode=2**30)  # the horizon is the only time limit
        ignore = () if keep_time else ("time",)
    try:
        space = inner.action_space(params)
        A = int(space.n)
    except (AttributeError, TypeError):
        raise UsageError(f"environment '{name}' does not have a finite (discrete) action space; it cannot be tabularized.") from None
    uses_step_env = hasattr(inner, "step_env")
    N = int(transition_samples)

    def step_one(key, state, action, params):
        if uses_step_env:
            obs, nstate, reward, done, _ = inner.step_env(key, state, action, params)
        else:  # auto-resetting step: a finished episode's next state is never used
            obs, nstate, reward, term, trunc, _ = inner.step(key, state, action, params)
            done = jnp.logical_or(term, trunc)
        return obs, nstate, jnp.asarray(reward, jnp.float64 if jax.config.jax_enable_x64 else jnp.float32), done

    def expand_fn(keys, states, params):
        # keys: [B, A, N, 2]; states: batched [B]; returns outputs of shape [B, A, N, ...]
        actions = jnp.arange(A)
        per_sample = jax.vmap(step_one, in_axes=(0, None, None, None))
        per_action = jax.vmap(per_sample, in_axes=(0, None, 0, None))
        return jax.vmap(per_action, in_axes=(0, 0, None, None))(keys, states, actions, params)

    # Environments given by id are rebuilt on every call; reuse their compiled expansion.
    cache_key = (name, tuple(sorted((k, repr(v)) for k, v in overrides.items())), A, N, batch_size) if isinstance(env, str) else None
    expand = _EXPAND_CACHE.get(cache_key) if cache_key else None
    if expand is None:
        expand = jax.jit(expand_fn)
        if cache_key:
            _EXPAND_CACHE[cache_key] = expand

    reset_key = jax.random.PRNGKey(seed)
    reset = inner.reset_env if hasattr(inner, "reset_env") else inner.reset
    obs0, state0 = jax.jit(reset)(reset_key, params)
    to_batch = lambda tree: jax.tree.map(lambda x: np.asarray(x)[None], tree)  # noqa: E731
    start_bytes = _row_bytes(to_batch(state0), 1, ignore)[0].tobytes()
    index: dict[bytes, int] = {start_bytes: 0}
    states_store = [to_batch(state0)]  # list of batched [n_i] pytrees, concatenated on demand
    observations = [_row_bytes(to_batch(obs0), 1)[0].tobytes()]
    n_states = 1
    rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    stochastic = False
    key = jax.random.PRNGKey(seed + 1)
    frontier = np.array([0])
    depth = 0
    all_states = jax.tree.map(lambda *xs: np.concatenate(xs), *states_store)
    begin = time.perf_counter()
    with _status(show_progress, f"tabularizing {name}") as update:
        while frontier.size:
            new_ids: list[int] = []
            new_states: list[Any] = []
            for chunk_start in range(0, frontier.size, batch_size):
                ids = frontier[chunk_start : chunk_start + batch_size]
                B = ids.size
                pad = np.concatenate([ids, np.full(batch_size - B, ids[0])])
                batch = jax.tree.map(lambda x: x[pad], all_states)
                key, sub = jax.random.split(key)
                keys = jax.random.split(sub, batch_size * A * N).reshape(batch_size, A, N, -1)
                obs, nstate, reward, done = expand(keys, batch, params)
                flat = batch_size * A * N
                state_rows = _row_bytes(nstate, flat, ignore)
                obs_rows = _row_bytes(obs, flat)
                reward = np.asarray(reward, dtype=np.float64).reshape(batch_size, A, N)[:B]
                done = np.asarray(done).reshape(batch_size, A, N)[:B]
                targets = np.full((B, A, N), -1, dtype=np.int64)
                nstate_np = None
                for b in range(B):
                    for a in range(A):
                        for j in range(N):
                            if done[b, a, j]:
                                continue
                            r = (b * A + a) * N + j
                            kb = state_rows[r].tobytes()
                            t = index.get(kb)
                            if t is None:
                                if depth + 1 >= horizon:
                                    continue  # first reachable at the horizon: the episode is over
                                if n_states >= max_states:
                                    raise _limit_error(f"environment '{name}'", max_states, horizon)
                                t = n_states
                                index[kb] = t
                                n_states += 1
                                if nstate_np is None:
                                    nstate_np = jax.tree.map(np.asarray, nstate)
                                new_states.append(jax.tree.map(lambda x, r=r: x.reshape((flat,) + x.shape[3:])[r : r + 1], nstate_np))
                                observations.append(obs_rows[r].tobytes())
                                new_ids.append(t)
                            targets[b, a, j] = t
                    s = int(ids[b])
                    if N > 1 and not stochastic:
                        same = (targets[b] == targets[b][:, :1]).all() and np.allclose(reward[b], reward[b][:, :1])
                        stochastic = not same
                    rows[s] = (targets[b], reward[b], done[b])
                update(n_states, depth)
            if new_states:
                all_states = jax.tree.map(lambda *xs: np.concatenate(xs), all_states, *new_states)
            frontier = np.asarray(new_ids, dtype=np.int64)
            depth += 1
    seconds = time.perf_counter() - begin
    S = n_states
    nxt = np.stack([rows[s][0] for s in range(S)])  # [S, A, N]
    rew = np.stack([rows[s][1] for s in range(S)])
    probs = np.full(nxt.shape, 1.0 / N)
    info = {
        "source": "gymnax", "seconds": seconds, "states_per_second": S / max(seconds, 1e-9),
        "transition_samples": N, "estimated_transitions": bool(stochastic), "ignored_state_fields": list(ignore),
    }
    if not stochastic:
        nxt, rew, probs = nxt[..., :1], rew[..., :1], probs[..., :1] * N
    return build_mdp(nxt, probs, rew, observation_keys=observations, merge=merge, name=name, horizon=horizon, info=info)


def tabularize(
    env_id: str,
    *,
    horizon: int = 100,
    max_states: int = DEFAULT_MAX_STATES,
    merge: str = "observation",
    show_progress: bool = False,
    **kwargs: Any,
) -> TabularMDP:
    """MiniGrid ids (``MiniGrid-...``) go to :func:`tabularize_minigrid`, everything else to gymnax."""
    if env_id.startswith(("MiniGrid-", "BRIDGE/MiniGrid-")):
        return tabularize_minigrid(env_id, horizon=horizon, max_states=max_states, merge=merge, show_progress=show_progress, **kwargs)
    return tabularize_gymnax(env_id, horizon=horizon, max_states=max_states, merge=merge, show_progress=show_progress, **kwargs)
