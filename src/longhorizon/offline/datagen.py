r"""OGBench's data-collection recipes, run locally (written from ``data_gen_scripts/`` of seohongpark/ogbench).

**PointMaze** (``generate_locomaze.py``). Each episode has a fixed length :math:`L` and starts in a
uniformly drawn free cell. The controller steers toward the centre of the next cell on a BFS shortest
path to the goal cell (ties broken in the order up, left, down, right) and adds Gaussian noise:

.. math:: a_t = \mathrm{clip}\big(d_t + \varepsilon_t, -1, 1\big), \quad
          d_t = \frac{c(s_t) - xy_t}{\lVert c(s_t) - xy_t \rVert + 10^{-6}}, \quad \varepsilon_t \sim \mathcal N(0, 0.5^2 I).

* ``navigate``: the goal is a uniformly drawn *vertex* cell (not a straight hallway cell); when the
  goal is reached, a new one is drawn, so one episode visits many goals (:math:`L` = 1001, 2001 on giant).
* ``stitch``: the goal is a cell exactly 4 BFS steps from the start (the start itself if none), and
  the point stays there once reached (:math:`L` = 201); long paths exist only as stitched segments.

**cube-single-play** (``generate_manipspace.py``): the scripted plan oracle that ships in the ogbench
package (``CubePlanOracle``, action noise 0.1, smoothing 0.5) picks up the cube and places it at a new
random target, again and again, for :math:`L` = 1001 steps.

Each row stores the observation *before* the action, the action, ``terminals`` (True at an episode's
last row) and the simulator state ``qpos``/``qvel`` of that observation, exactly as OGBench's files.
Episode ``e`` of split ``k`` (0 train, 1 val) draws all its randomness from the seed
``SeedSequence([seed, k, e])``, so a dataset is the same whatever the number of workers.
"""

from __future__ import annotations

import dataclasses
import difflib
import multiprocessing
import os
import sys
import warnings
from collections import deque
from pathlib import Path

import numpy as np

from longhorizon.errors import UsageError

KEYS = ("observations", "actions", "terminals", "qpos", "qvel")
MOVES = ((-1, 0), (0, -1), (1, 0), (0, 1))  # OGBench's BFS order: the first strictly better neighbour wins


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How one OGBench dataset is collected: environment, behaviour, episode count and length."""

    env_id: str  # the ogbench environment, e.g. "pointmaze-giant-v0"
    kind: str  # "navigate" | "stitch" | "play"
    episodes: int  # training episodes (OGBench's num_episodes); validation gets episodes // 10
    length: int  # rows per episode (OGBench's max_episode_steps)
    noise: float  # action noise: Gaussian std (maze) or the plan oracle's noise (cube)

    @property
    def size(self) -> int:
        """Training transitions: ``length - 1`` per episode (its last row is a final observation)."""
        return self.episodes * (self.length - 1)

    def episodes_for(self, size: int | None) -> tuple[int, int]:
        """(train, val) episode counts for ``size`` training transitions (rounded up to whole episodes)."""
        train = self.episodes if size is None else max(1, -(-int(size) // (self.length - 1)))
        return train, max(1, train // 10)


# OGBench's data_gen_scripts/commands.sh: (env, kind, episodes, length, noise) per dataset.
RECIPES: dict[str, Recipe] = {
    **{f"pointmaze-{maze}-navigate-v0": Recipe(f"pointmaze-{maze}-v0", "navigate", 1000, 1001, 0.5)
       for maze in ("medium", "large")},
    "pointmaze-giant-navigate-v0": Recipe("pointmaze-giant-v0", "navigate", 500, 2001, 0.5),
    **{f"pointmaze-{maze}-stitch-v0": Recipe(f"pointmaze-{maze}-v0", "stitch", 5000, 201, 0.5)
       for maze in ("medium", "large", "giant")},
    "cube-single-play-v0": Recipe("cube-single-v0", "play", 1000, 1001, 0.1),
}
DATASETS: tuple[str, ...] = tuple(RECIPES)


def recipe(name: str) -> Recipe:
    """The recipe of a dataset name; an unknown name is a UsageError that suggests the closest names."""
    if name not in RECIPES:
        close = difflib.get_close_matches(name, DATASETS, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(close)}?" if close else f"choose one of {', '.join(DATASETS)}."
        raise UsageError(f"unknown dataset '{name}'; {hint} (`longhorizon offline datasets` lists them; "
                         "a path to an .npz file also works)")
    return RECIPES[name]


# --------------------------------------------------------------------------- the maze's BFS (cached)


class MazeGraph:
    """The free cells of a maze map (1 = wall) and BFS tables, each computed once per maze and goal."""

    def __init__(self, maze_map: np.ndarray):
        self.maze_map = m = np.asarray(maze_map)
        self.free_cells = [(int(i), int(j)) for i, j in zip(*np.nonzero(m == 0))]  # OGBench's all_cells
        # navigate's goals: free cells that are not straight hallway cells
        self.vertex_cells = [(i, j) for i, j in self.free_cells if not (
            (m[i - 1, j] == 0 and m[i + 1, j] == 0 and m[i, j - 1] == 1 and m[i, j + 1] == 1)
            or (m[i, j - 1] == 0 and m[i, j + 1] == 0 and m[i - 1, j] == 1 and m[i + 1, j] == 1))]
        self._next: dict[tuple[int, int], np.ndarray] = {}
        self._near: dict[tuple[tuple[int, int], int], tuple] = {}

    def bfs(self, source: tuple[int, int]) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Distances [H, W] from ``source`` (-1 where unreachable or a wall) and the cells in visiting order."""
        dist = np.full(self.maze_map.shape, -1, dtype=np.int64)
        dist[source] = 0
        order, queue = [], deque([source])
        while queue:
            i, j = queue.popleft()
            for di, dj in MOVES:
                ni, nj = i + di, j + dj
                if (0 <= ni < dist.shape[0] and 0 <= nj < dist.shape[1] and self.maze_map[ni, nj] == 0
                        and dist[ni, nj] == -1):
                    dist[ni, nj] = dist[i, j] + 1
                    order.append((ni, nj))
                    queue.append((ni, nj))
        return dist, order

    def next_cells(self, goal: tuple[int, int]) -> np.ndarray:
        """[H, W, 2]: from each cell, the neighbour one BFS step closer to ``goal`` (the cell itself at the
        goal, in a wall, or where no neighbour is closer)."""
        if goal not in self._next:
            dist, _ = self.bfs(goal)
            nxt = np.stack(np.indices(dist.shape), axis=-1)
            for i, j in self.free_cells:
                best = (i, j)
                for di, dj in MOVES:
                    ni, nj = i + di, j + dj
                    if self.maze_map[ni, nj] == 0 and dist[ni, nj] < dist[best]:
                        best = (ni, nj)
                nxt[i, j] = best
            self._next[goal] = nxt
        return self._next[goal]

    def cells_at(self, start: tuple[int, int], steps: int) -> tuple[tuple[int, int], ...]:
        """Cells exactly ``steps`` BFS steps from ``start``, in visiting order (``stitch``'s goals)."""
        if (start, steps) not in self._near:
            dist, order = self.bfs(start)
            self._near[start, steps] = tuple(c for c in order if dist[c] == steps)
        return self._near[start, steps]


# --------------------------------------------------------------------------- one episode


class Collector:
    """Owns one environment (created once per worker) and collects whole episodes of a recipe."""

    def __init__(self, recipe: Recipe):
        import gymnasium

        import ogbench  # noqa: F401  (registers the environments)

        self.recipe = recipe
        kwargs = dict(terminate_at_goal=False)
        if recipe.kind == "play":
            kwargs["mode"] = "data_collection"
        self.env = gymnasium.make(recipe.env_id, max_episode_steps=recipe.length, **kwargs)
        if recipe.kind == "play":
            from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle

            self.oracle = CubePlanOracle(env=self.env, noise=recipe.noise, noise_smoothing=0.5)
        else:
            self.graph = MazeGraph(np.asarray(self.env.unwrapped.maze_map))
            self.cells, self.vertices = self.graph.free_cells, self.graph.vertex_cells

    def episode(self, seed: int, split: int, index: int) -> dict[str, np.ndarray]:
        """Rows of episode ``index`` of ``split``: ``observations [L, obs]``, ``actions [L, act]``,
        ``terminals [L]`` (bool, True at the last row), ``qpos [L, nq]``, ``qvel [L, nv]``."""
        episode_seed = int(np.random.SeedSequence([seed, split, index]).generate_state(1)[0])
        saved = np.random.get_state()  # ogbench draws from the global generator; leave the caller's alone
        np.random.seed(episode_seed)
        try:
            rows = self._play(episode_seed) if self.recipe.kind == "play" else self._maze(episode_seed)
        finally:
            np.random.set_state(saved)
        L = self.recipe.length
        terminals = np.zeros(L, dtype=bool)
        terminals[-1] = True
        return {"observations": np.asarray(rows[0], np.float32), "actions": np.asarray(rows[1], np.float32),
                "terminals": terminals, "qpos": np.asarray(rows[2], np.float32), "qvel": np.asarray(rows[3], np.float32)}

    def _maze(self, episode_seed: int):
        env, maze, recipe = self.env.unwrapped, self.graph, self.recipe
        start = self.cells[np.random.randint(len(self.cells))]
        if recipe.kind == "navigate":
            goal = self.vertices[np.random.randint(len(self.vertices))]
        else:
            near = maze.cells_at(start, 4)
            goal = near[np.random.randint(len(near))] if near else start
        self.env.action_space.seed(episode_seed)
        ob, _ = env.reset(seed=episode_seed, options=dict(task_info=dict(init_ij=start, goal_ij=goal)))
        obs, acts, qpos, qvel = [], [], [], []
        for _ in range(recipe.length):
            xy = env.get_xy()
            ci, cj = maze.next_cells(env.xy_to_ij(env.cur_goal_xy))[env.xy_to_ij(xy)]
            direction = np.asarray(env.ij_to_xy((ci, cj))) - xy
            direction = direction / (np.linalg.norm(direction) + 1e-6)
            action = np.clip(direction + np.random.normal(0, recipe.noise, direction.shape), -1, 1)
            next_ob, _, _, _, info = env.step(action)
            if info["success"] and recipe.kind == "navigate":
                # OGBench calls set_goal(goal_ij): the same noisy goal; passing goal_xy also moves the marker
                goal = self.vertices[np.random.randint(len(self.vertices))]
                env.set_goal(goal_xy=env.add_noise(env.ij_to_xy(goal)))
            obs.append(ob), acts.append(action), qpos.append(info["prev_qpos"]), qvel.append(info["prev_qvel"])
            ob = next_ob
        return obs, acts, qpos, qvel

    def _play(self, episode_seed: int):
        env, oracle = self.env, self.oracle
        ob, info = env.reset(seed=episode_seed)
        oracle.reset(ob, info)
        obs, acts, qpos, qvel = [], [], [], []
        for _ in range(self.recipe.length):
            action = np.clip(np.asarray(oracle.select_action(ob, info)), -1, 1)
            next_ob, _, _, _, info = env.step(action)
            if oracle.done:  # a new pick-and-place target (p_stack = 0 for a single cube)
                target_ob, target_info = env.unwrapped.set_new_target(p_stack=0.0)
                oracle.reset(target_ob, target_info)
            obs.append(ob), acts.append(action), qpos.append(info["prev_qpos"]), qvel.append(info["prev_qvel"])
            ob = next_ob
        return obs, acts, qpos, qvel


# --------------------------------------------------------------------------- many episodes, in parallel

_WORKER: Collector | None = None


def _init_worker(recipe: Recipe) -> None:
    """A worker process's one environment (its warnings silenced: they would repeat once per worker)."""
    global _WORKER
    warnings.filterwarnings("ignore")
    _WORKER = Collector(recipe)


def _run(jobs: list[tuple[int, int, int]]) -> list[tuple[int, int, dict[str, np.ndarray]]]:
    return [(split, index, _WORKER.episode(seed, split, index)) for seed, split, index in jobs]


def collect(recipe: Recipe, episodes: tuple[int, int], *, seed: int = 0, workers: int | None = None,
            progress: bool = True, description: str = "") -> tuple[dict, dict]:
    """(train, val) row dicts of ``episodes = (train, val)`` episodes, collected by ``workers`` processes.

    ``workers=None`` uses every CPU for large datasets and the calling process for small ones (starting a
    worker costs about a second). The result does not depend on ``workers``. Workers are started with
    ``spawn``, so a script that calls this needs Python's ``if __name__ == "__main__":`` guard.
    """
    jobs = [(seed, split, e) for split, count in enumerate(episodes) for e in range(count)]
    rows = len(jobs) * recipe.length
    if workers is None:
        workers = 1 if rows < 20_000 else min(os.cpu_count() or 1, len(jobs))
    done: dict[tuple[int, int], dict] = {}
    with _Progress(rows, description or recipe.env_id, quiet=not progress) as bar:
        if workers <= 1:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # gymnasium's and glfw's start-up warnings
                collector = Collector(recipe)
                for job_seed, split, index in jobs:
                    done[split, index] = collector.episode(job_seed, split, index)
                    bar.advance(recipe.length)
        else:
            from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

            per = max(1, min(16, len(jobs) // (8 * workers)))  # a few chunks per worker: even load, smooth progress
            with ProcessPoolExecutor(workers, multiprocessing.get_context("spawn"), _init_worker, (recipe,)) as pool:
                pending = {pool.submit(_run, jobs[i:i + per]) for i in range(0, len(jobs), per)}
                try:
                    while pending:
                        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for future in finished:  # a worker that failed re-raises its error here
                            for split, index, episode in future.result():
                                done[split, index] = episode
                                bar.advance(recipe.length)
                finally:
                    for future in pending:
                        future.cancel()
    return tuple({k: np.concatenate([done[split, e][k] for e in range(count)]) for k in KEYS}
                 for split, count in enumerate(episodes))


class _Progress:
    """A rich progress bar on a terminal; otherwise one plain line per tenth."""

    def __init__(self, total: int, description: str, quiet: bool = False):
        from rich.console import Console

        self.total, self.description, self.quiet, self.completed, self._shown = total, description, quiet, 0, 0
        self.console = Console(stderr=True)
        self._bar = None

    def __enter__(self):
        if not self.quiet and self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
                TimeRemainingColumn

            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("rows"), TimeElapsedColumn(), TimeRemainingColumn(), console=self.console)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.description, total=self.total)
        return self

    def advance(self, n: int) -> None:
        self.completed += n
        if self._bar is not None:
            self._bar.update(self._task, completed=self.completed)
        elif not self.quiet and self.completed * 10 >= (self._shown + 1) * self.total:
            self._shown = self.completed * 10 // self.total
            print(f"[{self.description}] {self.completed:>10,}/{self.total:,} rows", file=sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)


def save_npz(path: Path, rows: dict[str, np.ndarray]) -> None:
    """``np.savez_compressed`` to a temporary file in the same folder, then an atomic rename (no partial file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")  # savez appends .npz to any other suffix
    try:
        np.savez_compressed(tmp, **rows)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
