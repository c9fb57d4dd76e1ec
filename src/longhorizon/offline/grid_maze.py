"""OGBench's PointMaze layouts as grids: exact shortest paths, noise-free navigate-style datasets, and how well
a goal-conditioned value orders the states of a shortest path.

A layout is refined ``scale`` times (each maze cell a ``scale x scale`` block of grid states); the four actions
move one grid state. :func:`navigate_dataset` writes OGBench's loaded format (``observations``,
``next_observations``, ``actions``, ``terminals``; observations the (x, y) position scaled to about [-1, 1]),
so the offline agents train on it as on OGBench's files. Exact distances make the quality of a learnt value
measurable: :func:`value_order_metrics` (used by ``longhorizon repro ota`` to compare HIQL's and OTA's values).
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from longhorizon.core.stats import spearman
from longhorizon.errors import UsageError
from longhorizon.offline.datagen import MazeGraph

# OGBench's PointMaze layouts (ogbench/locomaze/maze.py), 1 = wall
MAZES = {
    "medium": ["11111111", "10011001", "10010001", "11000111", "10010001", "10100101", "10001001", "11111111"],
    "large": ["111111111111", "100001000001", "101101010101", "100000010001", "101111011101", "100101000001",
              "110101010111", "100100010001", "111111111111"],
}
MOVES = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]])  # (row, col) steps: the four actions


class GridMaze:
    """A maze map refined ``scale`` times (each cell a ``scale x scale`` block), with all-pairs BFS distances."""

    def __init__(self, name: str, scale: int):
        if name not in MAZES:
            raise UsageError(f"unknown maze '{name}'; choose one of {', '.join(MAZES)}.")
        coarse = np.array([[int(c) for c in row] for row in MAZES[name]])
        self.free = np.kron(coarse == 0, np.ones((scale, scale), bool))
        self.cells = np.argwhere(self.free)  # [C, 2] (row, col)
        self.index = -np.ones(self.free.shape, int)
        self.index[tuple(self.cells.T)] = np.arange(len(self.cells))
        self.scale = scale
        graph = MazeGraph((~self.free).astype(np.int64))
        at_cells = tuple(self.cells.T)
        self.dist = np.stack([graph.bfs(tuple(c))[0][at_cells] for c in self.cells])  # [C, C] steps

    def obs(self, cells: np.ndarray) -> np.ndarray:
        """Observations [.., 2]: (x, y) in maze-cell units, centred and scaled to about [-1, 1]."""
        rc = self.cells[cells] / self.scale
        half = np.array(self.free.shape) / self.scale / 2
        return ((rc[..., ::-1] - half[::-1]) / half.max()).astype(np.float32)

    def step_toward(self, cell: int, goal: int, rng) -> tuple[int, int]:
        """(next cell, action index) on a shortest path to ``goal`` (ties broken at random)."""
        options = []
        for a, move in enumerate(MOVES):
            r, q = self.cells[cell] + move
            if 0 <= r < self.free.shape[0] and 0 <= q < self.free.shape[1] and self.free[r, q]:
                n = self.index[r, q]
                if self.dist[n, goal] == self.dist[cell, goal] - 1:
                    options.append((n, a))
        return options[rng.integers(len(options))]

    def path(self, start: int, goal: int, rng) -> np.ndarray:
        """A shortest path from ``start`` to ``goal``, both included (cell indices; ties broken at random)."""
        cells = [start]
        while cells[-1] != goal:
            cells.append(self.step_toward(cells[-1], goal, rng)[0])
        return np.array(cells)


def navigate_dataset(maze: GridMaze, trajectories: int, length: int, seed: int) -> dict[str, np.ndarray]:
    """Noise-free navigate-style data: each trajectory follows shortest paths to random cells, one after another."""
    rng = np.random.default_rng(seed)
    cells, actions = [], []
    for _ in range(trajectories):
        cell, goal = rng.integers(len(maze.cells), size=2)
        for t in range(length + 1):
            while goal == cell:
                goal = rng.integers(len(maze.cells))
            nxt, a = maze.step_toward(cell, goal, rng)
            cells.append(cell), actions.append(MOVES[a][::-1].astype(np.float32))
            cell = nxt
    cells = np.array(cells)
    keep = np.ones(len(cells), bool)
    keep[length::length + 1] = False  # OGBench's loaded format: the last state is only a next observation
    obs = maze.obs(cells)
    return {"observations": obs[keep], "next_observations": obs[np.roll(keep, 1)], "actions": np.array(actions)[keep],
            "terminals": np.concatenate([np.eye(length)[-1]] * trajectories).astype(np.float32)}


def shortest_paths(maze: GridMaze, count: int, min_length: int, seed: int) -> list[np.ndarray]:
    """``count`` shortest paths (cell indices, start to goal) between distinct random pairs of cells at least
    ``min_length`` steps apart."""
    rng = np.random.default_rng(seed)
    far = np.argwhere(maze.dist >= min_length)
    return [maze.path(*far[i], rng) for i in rng.choice(len(far), count, replace=False)]


def value_order_metrics(values_fn, maze: GridMaze, paths: Sequence[np.ndarray], k: int,
                        bins: np.ndarray) -> dict[str, list]:
    """How well a goal-conditioned value ``values_fn(observations, goals)`` orders the states of shortest paths,
    per bin of distance to the goal (``bins`` are bin edges in steps): the advantage-sign accuracy
    ``P[V(s_{t+k}, g) > V(s_t, g)]`` with its count, and the order consistency, the mean over paths of the
    Spearman correlation of V with -distance over the path's states in the bin (``None``: an empty bin)."""
    correct = [[] for _ in bins[:-1]]
    order = [[] for _ in bins[:-1]]
    # every path's states in one call (one compiled shape), then split back per path
    goals = np.concatenate([np.repeat(maze.obs(path[-1:]), len(path), 0) for path in paths])
    all_v = np.asarray(values_fn(jnp.asarray(maze.obs(np.concatenate(paths))), jnp.asarray(goals)))
    for path, v in zip(paths, np.split(all_v, np.cumsum([len(p) for p in paths])[:-1])):
        dist = len(path) - 1 - np.arange(len(path))
        which = np.digitize(dist, bins) - 1
        for t in range(len(path) - k):
            if 0 <= which[t] < len(correct):
                correct[which[t]].append(v[t + k] > v[t])
        for b in range(len(order)):
            sel = which == b
            if sel.sum() > 2:
                order[b].append(spearman(v[sel], -dist[sel]))
    return {"sign_accuracy": [float(np.mean(c)) if c else None for c in correct], "sign_count": [len(c) for c in correct],
            "order_consistency": [float(np.nanmean(o)) if o else None for o in order]}
