"""OGBench datasets: the loaded format on a hand-built case, the recipes' BFS, generation, determinism, bad files."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("ogbench")

from longhorizon.errors import UsageError
from longhorizon.offline import datasets as ds
from longhorizon.offline.datagen import MazeGraph, save_npz


def _two_trajectories() -> dict[str, np.ndarray]:
    """Raw rows of a length-3 and a length-2 episode: s0 s1 s2 | t0 t1 (obs = 10 * episode + step)."""
    obs = np.array([[0.0], [1.0], [2.0], [10.0], [11.0]], np.float32)
    return {"observations": obs, "actions": obs * 2, "terminals": np.array([0, 0, 1, 0, 1], bool),
            "qpos": obs + 100, "qvel": obs - 100}


def test_transitions_on_a_hand_built_two_trajectory_case():
    data = ds.transitions(_two_trajectories())
    # the final observation of each episode (s2, t1) is dropped as a start: 3 transitions remain
    np.testing.assert_array_equal(data["observations"][:, 0], [0, 1, 10])
    np.testing.assert_array_equal(data["actions"][:, 0], [0, 2, 20])
    np.testing.assert_array_equal(data["next_observations"][:, 0], [1, 2, 11])
    np.testing.assert_array_equal(data["terminals"], [0, 1, 1])  # 1 at each trajectory's last transition
    np.testing.assert_array_equal(data["valids"], [1, 1, 1])  # every next observation is of the same trajectory
    np.testing.assert_array_equal(data["qpos"][:, 0], [100, 101, 110])
    assert data["terminals"].dtype == data["valids"].dtype == data["observations"].dtype == np.float32


def test_the_loaded_format_is_ogbench_load_dataset(tmp_path):
    """Our reader gives what ogbench.load_dataset gives for the same file (its non-compact format)."""
    import ogbench

    path = tmp_path / "x.npz"
    save_npz(path, _two_trajectories())
    ours, theirs = ds.load_dataset(path), ogbench.load_dataset(str(path), add_info=True)
    for key in theirs:
        np.testing.assert_array_equal(ours[key], theirs[key])
        assert ours[key].dtype == theirs[key].dtype, key


def test_maze_bfs_on_a_small_map():
    #   0 1 2 3 4
    # 0 # # # # #
    # 1 # . . . #      (1,1) (1,2) (1,3)
    # 2 # . # . #      (2,1)       (2,3)
    # 3 # . . . #      (3,1) (3,2) (3,3)
    # 4 # # # # #
    m = np.ones((5, 5), int)
    m[1, 1:4] = m[3, 1:4] = m[2, 1] = m[2, 3] = 0
    g = MazeGraph(m)
    dist, order = g.bfs((1, 1))
    assert dist[3, 3] == 4 and dist[1, 3] == 2 and dist[2, 2] == -1 and dist[0, 0] == -1
    assert order[:2] == [(2, 1), (1, 2)]  # neighbours in the order up, left, down, right
    assert g.cells_at((1, 1), 4) == ((3, 3),)
    assert g.cells_at((1, 1), 2) == ((3, 1), (1, 3))
    # toward (3,3) from (1,1) both neighbours are 3 away: the first in that order (down) wins
    nxt = g.next_cells((3, 3))
    assert tuple(nxt[1, 1]) == (2, 1) and tuple(nxt[1, 2]) == (1, 3) and tuple(nxt[3, 3]) == (3, 3)
    # a ring has no hallway-free corner cells only: corners are vertices, the straight middles are not
    assert set(g.vertex_cells) == {(1, 1), (1, 3), (3, 1), (3, 3)}


@pytest.mark.parametrize("maze", ["medium", "giant"])
def test_cached_bfs_waypoints_equal_ogbench_get_oracle_subgoal(maze):
    """Our table lookup gives the subgoal OGBench's own per-step BFS (``get_oracle_subgoal``) gives."""
    import gymnasium

    env = gymnasium.make(f"pointmaze-{maze}-v0").unwrapped
    graph, rng = MazeGraph(env.maze_map), np.random.default_rng(0)
    cells = graph.free_cells
    for _ in range(150):
        here, goal = cells[rng.integers(len(cells))], cells[rng.integers(len(cells))]
        xy = np.asarray(env.ij_to_xy(here)) + rng.uniform(-2, 2, 2)  # anywhere in the cell
        goal_xy = np.asarray(env.ij_to_xy(goal)) + rng.uniform(-1, 1, 2)
        theirs, _ = env.get_oracle_subgoal(xy, goal_xy)
        ours = env.ij_to_xy(graph.next_cells(env.xy_to_ij(goal_xy))[env.xy_to_ij(xy)])
        np.testing.assert_array_equal(ours, theirs)


@given(st.lists(st.integers(2, 6), min_size=1, max_size=6))
@settings(max_examples=40, deadline=None)
def test_transitions_of_any_episode_lengths(lengths):
    obs = np.concatenate([100 * e + np.arange(n) for e, n in enumerate(lengths)]).astype(np.float32)[:, None]
    terminals = np.concatenate([np.arange(n) == n - 1 for n in lengths])
    data = ds.transitions({"observations": obs, "actions": obs, "terminals": terminals})
    assert len(data["observations"]) == sum(lengths) - len(lengths)
    np.testing.assert_array_equal(data["next_observations"] - data["observations"], 1)  # same episode, next step
    assert data["terminals"].sum() == len(lengths) and data["terminals"][-1] == 1
    starts = data["observations"][1:, 0] % 100 == 0  # the next row starts another episode exactly after a terminal
    np.testing.assert_array_equal(data["terminals"][:-1] == 1, starts)
    assert (data["valids"] == 1).all()


def test_generated_file_has_ogbench_format_and_loads(tmp_path):
    out = ds.make_dataset("pointmaze-medium-stitch-v0", tmp_path / "d.npz", size=400, workers=1, progress=False)
    assert out == tmp_path / "d.npz" and (tmp_path / "d-val.npz").is_file()
    with np.load(out) as f:
        assert sorted(f.files) == ["actions", "observations", "qpos", "qvel", "terminals"]
        raw = {k: f[k] for k in f.files}
    assert raw["observations"].shape == (402, 2) and raw["observations"].dtype == np.float32  # 2 x 201 rows
    assert raw["actions"].shape == (402, 2) and raw["actions"].dtype == np.float32
    assert raw["terminals"].dtype == bool and np.flatnonzero(raw["terminals"]).tolist() == [200, 401]
    np.testing.assert_array_equal(raw["qpos"], raw["observations"])  # PointMaze observes its position
    assert np.abs(raw["actions"]).max() <= 1
    data = ds.load_dataset(out)
    assert data["observations"].shape == (400, 2) and np.flatnonzero(data["terminals"]).tolist() == [199, 399]
    inside = data["terminals"][:-1] == 0  # within a trajectory the next row is the next observation
    np.testing.assert_array_equal(data["next_observations"][:-1][inside], data["observations"][1:][inside])
    assert np.linalg.norm(data["next_observations"] - data["observations"], axis=1).max() < 0.5  # one step moves < 0.2 * sqrt(2)
    val = ds.load_dataset(out, split="val")
    assert val["observations"].shape == (200, 2)  # max(1, 2 // 10) = 1 episode
    assert not np.array_equal(val["observations"], data["observations"][:200])
    # OGBench's own loader reads the pair (it finds the -val file by its naming rule) and agrees with ours
    import ogbench

    env, train, theirs_val = ogbench.make_env_and_datasets("pointmaze-medium-stitch-v0", dataset_path=str(out))
    assert env.observation_space.shape == data["observations"].shape[1:]
    for ours, theirs in ((data, train), (val, theirs_val)):
        for key in theirs:
            np.testing.assert_array_equal(ours[key], theirs[key])


def _cell_path(data, episode_rows):
    """Per episode: (BFS distance start -> final cell, largest BFS distance from the start) in medium's maze."""
    import gymnasium

    env = gymnasium.make("pointmaze-medium-v0").unwrapped
    graph = MazeGraph(env.maze_map)
    result = []
    for start in range(0, len(data), episode_rows):
        cells = [env.xy_to_ij(xy) for xy in data[start:start + episode_rows]]
        dist, _ = graph.bfs(cells[0])
        result.append((dist[cells[-1]], max(dist[c] for c in cells)))
    return result


def test_stitch_segments_are_four_cells_and_navigate_goes_far(tmp_path):
    stitch = ds.make_dataset("pointmaze-medium-stitch-v0", tmp_path / "s.npz", size=2000, workers=1, progress=False)
    with np.load(stitch) as f:
        segments = _cell_path(f["observations"], 201)
    assert len(segments) == 10
    # the controller reaches the goal cell 4 BFS steps away and stays there (noise may end it one cell off)
    assert sum(end == 4 for end, _ in segments) >= 7
    assert all(far <= 5 for _, far in segments)
    nav = ds.make_dataset("pointmaze-medium-navigate-v0", tmp_path / "n.npz", size=1000, workers=1, progress=False)
    with np.load(nav) as f:
        assert len(f["observations"]) == 1001
        (_, far), = _cell_path(f["observations"], 1001)
    assert far > 5  # one episode visits several random goals across the maze


def test_generation_is_deterministic_given_a_seed(tmp_path):
    a = ds.make_dataset("pointmaze-large-stitch-v0", tmp_path / "a.npz", size=600, seed=3, workers=1, progress=False)
    b = ds.make_dataset("pointmaze-large-stitch-v0", tmp_path / "b.npz", size=600, seed=3, workers=1, progress=False)
    c = ds.make_dataset("pointmaze-large-stitch-v0", tmp_path / "c.npz", size=600, seed=4, workers=1, progress=False)
    la, lb, lc = (ds.load_dataset(p) for p in (a, b, c))
    for key in la:
        np.testing.assert_array_equal(la[key], lb[key])
    assert not np.array_equal(la["observations"], lc["observations"])


@pytest.mark.slow
def test_workers_do_not_change_the_dataset(tmp_path):
    one = ds.make_dataset("pointmaze-giant-stitch-v0", tmp_path / "1.npz", size=1000, seed=1, workers=1, progress=False)
    two = ds.make_dataset("pointmaze-giant-stitch-v0", tmp_path / "2.npz", size=1000, seed=1, workers=2, progress=False)
    for split in ("train", "val"):
        x, y = ds.load_dataset(one, split=split), ds.load_dataset(two, split=split)
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])


@pytest.mark.slow
def test_cube_single_play_with_the_plan_oracle(tmp_path):
    out = ds.make_dataset("cube-single-play-v0", tmp_path / "c.npz", size=300, workers=1, progress=False)
    with np.load(out) as f:
        raw = {k: f[k] for k in f.files}
    assert raw["observations"].shape == (1001, 28) and raw["actions"].shape == (1001, 5)
    assert raw["qpos"].shape[0] == raw["qvel"].shape[0] == 1001 and raw["terminals"].sum() == 1
    cube_xyz = raw["qpos"][:, 14:17]  # the cube's position: the oracle moves it
    assert np.linalg.norm(cube_xyz.max(0) - cube_xyz.min(0)) > 0.05
    data = ds.load_dataset(out, env="cube-single-play-v0")
    assert data["observations"].shape == (1000, 28)


def test_a_name_loads_from_the_cache_and_generates_on_first_use(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LONGHORIZON_CACHE", str(tmp_path))
    data = ds.load_dataset("pointmaze-medium-stitch-v0", size=200, seed=0)
    assert "generating pointmaze-medium-stitch-v0" in capsys.readouterr().err  # stdout stays clean
    cached = tmp_path / "ogbench" / "pointmaze-medium-stitch-v0-size200-seed0.npz"
    assert cached.is_file() and data["observations"].shape == (200, 2)
    again = ds.load_dataset("pointmaze-medium-stitch-v0", size=200, seed=0)
    assert "generating" not in capsys.readouterr().err
    np.testing.assert_array_equal(again["observations"], data["observations"])
    assert ds.cached_path("pointmaze-giant-stitch-v0").name == "pointmaze-giant-stitch-v0.npz"  # OGBench's name


# ----------------------------------------------------------------------------- bad input


def test_unknown_name_suggests_the_closest():
    with pytest.raises(UsageError, match="did you mean pointmaze-giant-stitch-v0"):
        ds.load_dataset("pointmaze-gaint-stitch-v0")
    with pytest.raises(UsageError, match="unknown dataset 'zzz'; choose one of"):
        ds.make_dataset("zzz")


def _write(path, **arrays):
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist"),
    ("not_npz", "is not a readable .npz file"),
    ("no_actions", "lacks the key\\(s\\) actions"),
    ("lengths", "arrays of different lengths"),
    ("open_end", "with a 1 on the last row"),
    ("nan", "NaN or Inf in observations"),
    ("empty", "expected \\[R, obs\\]"),
])
def test_malformed_files_are_one_sentence_usage_errors(tmp_path, case, message):
    good = _two_trajectories()
    path = tmp_path / f"{case}.npz"
    if case == "not_npz":
        path.write_text("not a zip")
    elif case == "no_actions":
        _write(path, observations=good["observations"], terminals=good["terminals"])
    elif case == "lengths":
        _write(path, **{**good, "actions": good["actions"][:4]})
    elif case == "open_end":
        _write(path, **{**good, "terminals": np.array([0, 0, 1, 0, 0], bool)})
    elif case == "nan":
        _write(path, **{**good, "observations": np.where(good["observations"] == 1, np.nan, good["observations"])})
    elif case == "empty":
        _write(path, observations=np.zeros((0, 2)), actions=np.zeros((0, 2)), terminals=np.zeros(0))
    with pytest.raises(UsageError, match=message) as error:
        ds.load_dataset(path)
    assert str(error.value).count(". ") == 0 and str(error.value).endswith((".", ")"))  # one sentence


def test_observation_size_must_match_the_environment(tmp_path):
    path = _write(tmp_path / "pointmaze-medium-navigate-v0.npz", **{  # the name says PointMaze: 2-D observations
        **_two_trajectories(), "observations": np.zeros((5, 3), np.float32)})
    with pytest.raises(UsageError, match="observations of shape \\(3,\\) but pointmaze-medium-navigate-v0"):
        ds.load_dataset(path)
    other = _write(tmp_path / "mine.npz", **{**_two_trajectories(), "observations": np.zeros((5, 3), np.float32)})
    assert ds.load_dataset(other)["observations"].shape == (3, 3)  # no environment named: no check
    with pytest.raises(UsageError, match="pass a dataset made for pointmaze-large-stitch-v0"):
        ds.load_dataset(other, env="pointmaze-large-stitch-v0")


def test_bad_arguments_and_failures_write_nothing(tmp_path, monkeypatch):
    for kwargs, message in ((dict(size=0), "--size must be at least 1"), (dict(workers=0), "--workers"),
                            (dict(seed=-1), "--seed")):
        with pytest.raises(UsageError, match=message):
            ds.make_dataset("pointmaze-medium-stitch-v0", tmp_path / "x.npz", **kwargs)
    with pytest.raises(UsageError, match="must end with .npz"):
        ds.make_dataset("pointmaze-medium-stitch-v0", tmp_path / "x.h5")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is not a writable folder"):
        ds.make_dataset("pointmaze-medium-stitch-v0", tmp_path / "file" / "x.npz")
    (tmp_path / "file").unlink()
    with pytest.raises(UsageError, match="size=5 applies to generated datasets"):
        ds.load_dataset(tmp_path / "x.npz", size=5)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("longhorizon.offline.datagen.collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ds.make_dataset("pointmaze-medium-stitch-v0", tmp_path / "x.npz", size=10)
    assert list(tmp_path.iterdir()) == []  # no partial file, no temporary file

    def half_written(path, **rows):
        path.write_bytes(b"PK partial")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", half_written)
    with pytest.raises(OSError):
        save_npz(tmp_path / "y.npz", _two_trajectories())
    assert list(tmp_path.iterdir()) == []
