r"""A multi-block push world in JAX and its scripted single-block dataset (HECRL's task at CPU scale).

A ``size x size`` grid holds an agent and ``num_blocks`` blocks. The state is a set of entity tokens,
agent first: ``positions [1 + n, 2]`` (integer cells). An action ``a in [-1, 1]^2`` picks the direction
``d = argmax_{d in {+x, -x, +y, -y}} <a, d>``; the agent moves to ``p + d`` if that cell is inside the
grid and free; if a block is there it is pushed to ``b + d`` when that cell is inside and free of
blocks, otherwise nothing moves (no chains of blocks, walls stop pushes).

Observations are the token positions flattened and scaled to [0, 1]: ``obs = positions / (size - 1)``,
shape ``[2 (1 + n)]``. A goal is a full observation; success means every block is on its goal cell
(the agent's position is ignored, as OGBench's cube tasks ignore the arm).

Dataset (OGBench's format, ``observations [N, D]``, ``actions [N, 2]``, ``terminals``, ``next_observations``,
``valids``): each trajectory starts from random positions and a scripted pusher moves **one** block
toward random interior targets (a new target whenever it arrives), taking a random action with
probability ``noise``. A goal that moves several blocks therefore never appears within a trajectory:
reaching it needs stitching.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.envs.api import Environment
from longhorizon.errors import UsageError

DIRECTIONS = np.array([[1, 0], [-1, 0], [0, 1], [0, -1]], np.int32)  # +x, -x, +y, -y


class PushParams(NamedTuple):
    max_steps_in_episode: int = 100


class PushState(NamedTuple):
    positions: jax.Array  # [1 + n, 2] int32, agent first
    goal: jax.Array  # [2 (1 + n)] float32, a goal observation
    time: jax.Array  # [] int32


class PushWorld(Environment):
    """``reset(key, params) -> (obs, state)``; ``step(key, state, action, params) -> (obs, state, reward,
    terminated, truncated, info)`` with reward = success (1.0 once every block is on its goal) and
    ``info = {"final_obs", "success", "goal"}``; auto-resets like every environment of the project."""

    def __init__(self, num_blocks: int = 2, size: int = 6):
        if not 1 <= num_blocks <= 4:
            raise UsageError(f"num_blocks must be between 1 and 4 (got {num_blocks}); pass e.g. num_blocks=2.")
        if size < 4:
            raise UsageError(f"the push world needs size >= 4 (got {size}) so blocks have interior cells; pass e.g. size=6.")
        self.num_blocks, self.size = num_blocks, size
        self.id = f"PushWorld-{num_blocks}x{size}"
        self.obs_dim = 2 * (1 + num_blocks)

    @property
    def default_params(self) -> PushParams:
        return PushParams()

    def observe(self, positions: jax.Array) -> jax.Array:
        return positions.reshape(*positions.shape[:-2], -1).astype(jnp.float32) / (self.size - 1)

    def positions_of(self, obs) -> np.ndarray:
        """Integer token positions ``[..., 1 + n, 2]`` of observations ``[..., D]`` (rounded)."""
        obs = np.asarray(obs)
        return np.rint(obs * (self.size - 1)).astype(np.int32).reshape(*obs.shape[:-1], 1 + self.num_blocks, 2)

    def random_positions(self, key: jax.Array) -> jax.Array:
        """Blocks on distinct interior cells, the agent on any other cell: ``[1 + n, 2]``."""
        k_blocks, k_agent = jax.random.split(key)
        s = self.size
        interior = jnp.array([(x, y) for x in range(1, s - 1) for y in range(1, s - 1)], jnp.int32)
        blocks = interior[jax.random.choice(k_blocks, len(interior), (self.num_blocks,), replace=False)]
        cells = jnp.array([(x, y) for x in range(s) for y in range(s)], jnp.int32)
        taken = jnp.any(jnp.all(cells[:, None] == blocks[None], -1), -1)
        agent = cells[jax.random.choice(k_agent, len(cells), p=jnp.where(taken, 0.0, 1.0) / (len(cells) - self.num_blocks))]
        return jnp.concatenate([agent[None], blocks])

    def reset(self, key, params=None):
        k_start, k_goal = jax.random.split(key)
        positions = self.random_positions(k_start)
        state = PushState(positions, self.observe(self.random_positions(k_goal)), jnp.zeros([], jnp.int32))
        return self.observe(positions), state

    def move(self, positions: jax.Array, action: jax.Array) -> jax.Array:
        """The dynamics on token positions ``[1 + n, 2]`` for one action ``[2]`` (see the module docstring)."""
        d = jnp.asarray(DIRECTIONS)[jnp.argmax(jnp.array([action[0], -action[0], action[1], -action[1]]))]
        inside = lambda p: jnp.all((p >= 0) & (p < self.size))
        agent, blocks = positions[0], positions[1:]
        target = agent + d
        hit = jnp.all(blocks == target, axis=-1)  # [n]
        pushed = blocks + hit[:, None] * d
        block_free = ~jnp.any(jnp.all(blocks == target + d, axis=-1))
        can_push = inside(target + d) & block_free
        ok = inside(target) & (~jnp.any(hit) | can_push)
        new_blocks = jnp.where(ok & jnp.any(hit), pushed, blocks)
        return jnp.concatenate([jnp.where(ok, target, agent)[None], new_blocks])

    def success(self, positions: jax.Array, goal: jax.Array) -> jax.Array:
        goal_cells = jnp.rint(goal * (self.size - 1)).astype(jnp.int32).reshape(-1, 2)
        return jnp.all(positions[1:] == goal_cells[1:])

    def step(self, key, state: PushState, action, params=None):
        params = self.default_params if params is None else params
        positions = self.move(state.positions, action)
        success = self.success(positions, state.goal)
        time = state.time + 1
        truncated = (time >= params.max_steps_in_episode) & ~success
        obs = self.observe(positions)
        reset_obs, reset_state = self.reset(key, params)
        done = success | truncated
        next_state = jax.tree.map(lambda r, c: jnp.where(done, r, c), reset_state, PushState(positions, state.goal, time))
        info = {"final_obs": obs, "success": success, "goal": state.goal}
        return jnp.where(done, reset_obs, obs), next_state, success.astype(jnp.float32), success, truncated, info

    def observation_space(self, params=None):
        import gymnax.environments.spaces as spaces

        return spaces.Box(0.0, 1.0, (self.obs_dim,), jnp.float32)

    def action_space(self, params=None):
        import gymnax.environments.spaces as spaces

        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)


# ----------------------------------------------------------------------------- the scripted pusher
def path_step(size: int, start, target, obstacles: set) -> int | None:
    """The first direction index of a shortest 4-connected path from ``start`` to ``target`` around
    ``obstacles`` (BFS), or None when there is none (or ``start == target``)."""
    start, target = tuple(int(v) for v in start), tuple(int(v) for v in target)
    if start == target:
        return None
    first = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        for a, (dx, dy) in enumerate(DIRECTIONS):
            nxt = (cell[0] + dx, cell[1] + dy)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in obstacles and nxt not in first:
                first[nxt] = a if first[cell] is None else first[cell]
                if nxt == target:
                    return first[nxt]
                queue.append(nxt)
    return None


def push_action(size: int, positions: np.ndarray, block: int, target, rng: np.random.Generator) -> int | None:
    """The scripted pusher's direction index for moving block ``block`` (1-based token) toward ``target``:
    push along an axis that reduces the distance when the cell ahead is free, walking (BFS) to the cell
    behind the block first; None when the block is on target or no push is possible from here."""
    agent, b = positions[0], positions[block]
    others = {tuple(p) for i, p in enumerate(positions[1:], 1) if i != block}
    delta = np.asarray(target) - b
    options = [a for a, d in enumerate(DIRECTIONS) if np.dot(d, delta) > 0 and tuple(b + d) not in others]
    rng.shuffle(options)
    for a in options:
        behind = b - DIRECTIONS[a]
        if not (0 <= behind[0] < size and 0 <= behind[1] < size) or tuple(behind) in others:
            continue
        if np.array_equal(agent, behind):
            return a
        step = path_step(size, agent, behind, others | {tuple(b)})
        if step is not None:
            return step
    return None


def random_positions(num_blocks: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """:meth:`PushWorld.random_positions`'s law drawn on the host (data generation): ``[1 + n, 2]``."""
    interior = np.array([(x, y) for x in range(1, size - 1) for y in range(1, size - 1)], np.int32)
    blocks = interior[rng.choice(len(interior), num_blocks, replace=False)]
    cells = np.array([(x, y) for x in range(size) for y in range(size)], np.int32)
    free = cells[~np.any(np.all(cells[:, None] == blocks[None], -1), -1)]
    return np.concatenate([free[rng.integers(len(free))][None], blocks])


def interior_target(size: int, positions: np.ndarray, block: int, rng: np.random.Generator) -> np.ndarray:
    taken = {tuple(p) for i, p in enumerate(positions[1:], 1) if i != block}
    cells = [(x, y) for x in range(1, size - 1) for y in range(1, size - 1) if (x, y) not in taken
             and (x, y) != tuple(positions[block])]
    return np.array(cells[rng.integers(len(cells))], np.int32)


def make_dataset(num_blocks: int, trajectories: int, length: int, noise: float = 0.2, size: int = 6,
                 seed: int = 0) -> dict[str, np.ndarray]:
    """The scripted single-block dataset in OGBench's loaded format (``trajectories * length`` transitions)."""
    if trajectories < 1 or length < 2:
        raise UsageError(f"a push-world dataset needs trajectories >= 1 and length >= 2 (got {trajectories}, {length}); "
                         "pass larger values.")
    if not 0.0 <= noise <= 1.0:
        raise UsageError(f"noise must lie in [0, 1] (got {noise}); pass e.g. noise=0.2.")
    env = PushWorld(num_blocks, size)
    rng = np.random.default_rng(seed)
    positions = np.stack([random_positions(num_blocks, size, rng) for _ in range(trajectories)])  # [E, 1 + n, 2]
    move = jax.jit(jax.vmap(env.move))
    blocks = rng.integers(1, num_blocks + 1, trajectories)
    targets = np.stack([interior_target(size, positions[e], blocks[e], rng) for e in range(trajectories)])
    obs, actions = [], []
    for _ in range(length):
        chosen = np.empty(trajectories, np.int32)
        for e in range(trajectories):
            if np.array_equal(positions[e, blocks[e]], targets[e]):
                targets[e] = interior_target(size, positions[e], blocks[e], rng)
            a = push_action(size, positions[e], blocks[e], targets[e], rng)
            chosen[e] = rng.integers(4) if a is None or rng.random() < noise else a
        action = DIRECTIONS[chosen].astype(np.float32)
        obs.append(positions), actions.append(action)
        positions = np.asarray(move(jnp.asarray(positions), jnp.asarray(action)))
    obs.append(positions)
    cells = np.stack(obs, 1)  # [E, length + 1, 1 + n, 2]
    flat = cells.reshape(trajectories, length + 1, -1).astype(np.float32) / (size - 1)
    terminals = np.zeros((trajectories, length), np.float32)
    terminals[:, -1] = 1.0
    return {"observations": flat[:, :-1].reshape(-1, env.obs_dim), "next_observations": flat[:, 1:].reshape(-1, env.obs_dim),
            "actions": np.stack(actions, 1).reshape(-1, 2), "terminals": terminals.reshape(-1),
            "valids": np.ones(trajectories * length, np.float32)}


class Task(NamedTuple):
    start: np.ndarray  # [1 + n, 2] token positions
    goal: np.ndarray  # [D] goal observation
    moved: int  # blocks that must move
    script_steps: int  # steps the noise-free script took (the task's horizon)


def make_tasks(num_blocks: int, moved: int, count: int, size: int = 6, seed: int = 0, max_steps: int = 200) -> list[Task]:
    """``count`` evaluation tasks in which ``moved`` blocks must reach new interior cells: the goal is the
    state the noise-free script reaches by pushing them one after another (so every task is solvable)."""
    if not 1 <= moved <= num_blocks:
        raise UsageError(f"moved must be between 1 and num_blocks={num_blocks} (got {moved}); pass a smaller value.")
    env = PushWorld(num_blocks, size)
    move = jax.jit(env.move)
    rng = np.random.default_rng(seed)
    tasks = []
    while len(tasks) < count:
        start = random_positions(num_blocks, size, rng)
        positions, steps, ok = start.copy(), 0, True
        for block in rng.choice(np.arange(1, num_blocks + 1), moved, replace=False):
            target = interior_target(size, positions, block, rng)
            while ok and not np.array_equal(positions[block], target):
                a = push_action(size, positions, block, target, rng)
                if a is None or steps >= max_steps:
                    ok = False
                    break
                positions = np.asarray(move(jnp.asarray(positions), jnp.asarray(DIRECTIONS[a], jnp.float32)))
                steps += 1
        moved_blocks = np.sum(np.any(positions[1:] != start[1:], -1))
        if ok and moved_blocks == moved:  # a push may displace nothing else: the script never chains blocks
            tasks.append(Task(start, np.asarray(env.observe(jnp.asarray(positions))), int(moved), steps))
    return tasks
