"""The grid PointMaze: distances, paths and the navigate dataset by hand, and the value-order metrics on values
whose order is known."""

import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.offline import grid_maze as gm


def test_grid_maze_distances_and_dataset_by_hand():
    maze = gm.GridMaze("medium", 1)
    assert len(maze.cells) == 26 and maze.dist.max() == 11  # medium: 26 free cells
    start, goal = maze.index[1, 1], maze.index[6, 6]
    # by hand: (1,1) (1,2) (2,2) (3,2) (3,3) (3,4) (4,4) (4,5) (4,6) (5,6) (6,6)
    assert maze.dist[start, goal] == 10
    path = maze.path(start, goal, np.random.default_rng(0))
    assert len(path) - 1 == maze.dist[start, goal] and np.all(np.abs(np.diff(maze.cells[path], axis=0)).sum(1) == 1)
    data = gm.navigate_dataset(maze, trajectories=3, length=5, seed=0)
    assert data["observations"].shape == (15, 2) and data["terminals"].tolist() == [0, 0, 0, 0, 1] * 3
    # noise-free: each next observation is the observation plus the action (in scaled maze units)
    step = 1 / (np.array(maze.free.shape) / 2).max()
    np.testing.assert_allclose(data["next_observations"] - data["observations"], data["actions"] * step, atol=1e-6)
    np.testing.assert_array_equal(data["observations"][1:5], data["next_observations"][:4])


def test_value_order_metrics_of_an_exact_and_a_reversed_value():
    maze = gm.GridMaze("medium", 1)
    paths = gm.shortest_paths(maze, 5, min_length=8, seed=0)
    assert all(len(p) - 1 == maze.dist[p[0], p[-1]] >= 8 for p in paths)
    cell_of = {tuple(o): c for c, o in enumerate(maze.obs(np.arange(len(maze.cells))))}  # one observation per cell

    def minus_distance(obs, goals):  # the exact value up to scale: V = -steps to the goal
        return -np.array([maze.dist[cell_of[tuple(o)], cell_of[tuple(g)]] for o, g in zip(np.asarray(obs), np.asarray(goals))],
                         float)

    bins = np.array([2, 5, 12])
    exact = gm.value_order_metrics(minus_distance, maze, paths, k=2, bins=bins)
    assert exact["sign_accuracy"] == [1.0, 1.0] and exact["order_consistency"] == [pytest.approx(1.0)] * 2
    reversed_ = gm.value_order_metrics(lambda o, g: -minus_distance(o, g), maze, paths, k=2, bins=bins)
    assert reversed_["sign_accuracy"] == [0.0, 0.0] and reversed_["order_consistency"] == [pytest.approx(-1.0)] * 2
    assert exact["sign_count"] == reversed_["sign_count"] and sum(exact["sign_count"]) > 0


def test_an_unknown_maze_is_refused():
    with pytest.raises(UsageError, match="unknown maze 'huge'"):
        gm.GridMaze("huge", 1)
