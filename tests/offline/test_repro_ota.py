"""`longhorizon repro ota --quick`: the files, and claims computed from the measured values."""

import json

import numpy as np

from longhorizon.repro import ota


def test_grid_maze_distances_and_dataset_by_hand():
    maze = ota.GridMaze("medium", 1)
    assert len(maze.cells) == 26 and maze.dist.max() == 11  # medium: 26 free cells
    start, goal = maze.index[1, 1], maze.index[6, 6]
    # by hand: (1,1) (1,2) (2,2) (3,2) (3,3) (3,4) (4,4) (4,5) (4,6) (5,6) (6,6)
    assert maze.dist[start, goal] == 10
    path = maze.path(start, goal, np.random.default_rng(0))
    assert len(path) - 1 == maze.dist[start, goal] and np.all(np.abs(np.diff(maze.cells[path], axis=0)).sum(1) == 1)
    data = ota.navigate_dataset(maze, trajectories=3, length=5, seed=0)
    assert data["observations"].shape == (15, 2) and data["terminals"].tolist() == [0, 0, 0, 0, 1] * 3
    # noise-free: each next observation is the observation plus the action (in scaled maze units)
    step = 1 / (np.array(maze.free.shape) / 2).max()
    np.testing.assert_allclose(data["next_observations"] - data["observations"], data["actions"] * step, atol=1e-6)
    np.testing.assert_array_equal(data["observations"][1:5], data["next_observations"][:4])


def test_quick_run_writes_files_and_claims_from_the_data(tmp_path):
    result = ota.run(str(tmp_path), quick=True)
    for name in ("README.md", "summary.json", "ota.png"):
        assert (tmp_path / name).stat().st_size > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["claims"] and summary["verdict"].startswith("ota:")
    # the claim is recomputed from the stored per-bin accuracies
    assert ota.mechanism_claims(summary["mechanism"]) == summary["claims"] == result["claims"]
    hiql, otan = summary["mechanism"]["arms"]
    assert hiql["arm"] == "HIQL" and otan["option_length"] == 5
    assert all(v is None or 0.0 <= v <= 1.0 for v in hiql["sign_accuracy"] + otan["sign_accuracy"])
    assert "--quick" in (tmp_path / "README.md").read_text()
