"""`longhorizon offline datasets|make-dataset`: dry runs, a real (tiny) generation, exit 2 on bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("ogbench")

from longhorizon.cli import main


def test_datasets_lists_names_sizes_and_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LONGHORIZON_CACHE", str(tmp_path))
    (tmp_path / "ogbench").mkdir()
    (tmp_path / "ogbench" / "pointmaze-giant-stitch-v0.npz").write_bytes(b"")
    assert main(["offline", "datasets", "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in plan["datasets"]}
    assert rows["pointmaze-giant-stitch-v0"]["cached"] and not rows["pointmaze-large-stitch-v0"]["cached"]
    assert rows["pointmaze-large-navigate-v0"]["transitions"] == 1_000_000
    assert rows["pointmaze-giant-navigate-v0"]["transitions"] == 1_000_000  # 500 x 2001 rows
    assert set(rows) >= {f"pointmaze-{m}-{k}-v0" for m in ("medium", "large", "giant") for k in ("navigate", "stitch")}
    assert main(["offline", "datasets"]) == 0
    assert "cube-single-play-v0" in capsys.readouterr().out


def test_make_dataset_dry_run_writes_nothing_and_a_real_run_writes_both_splits(tmp_path, capsys):
    out = tmp_path / "m.npz"
    args = ["offline", "make-dataset", "pointmaze-medium-stitch-v0", "--out", str(out), "--size", "400"]
    assert main(args + ["--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["episodes"] == 2 and plan["val_episodes"] == 1 and plan["transitions"] == 400
    assert plan["val_out"] == str(tmp_path / "m-val.npz") and list(tmp_path.iterdir()) == []
    assert main(args + ["--workers", "1"]) == 0
    assert "wrote" in capsys.readouterr().out
    with np.load(out) as f:
        assert f["observations"].shape == (402, 2)
    assert (tmp_path / "m-val.npz").is_file()
    assert main(args) == 0 and "exists" in capsys.readouterr().out  # not regenerated without --force


@pytest.mark.parametrize("args, message", [
    (["offline", "make-dataset", "pointmaze-gaint-stitch-v0"], "did you mean pointmaze-giant-stitch-v0"),
    (["offline", "make-dataset", "pointmaze-giant-stitch-v0", "--size", "0"], "--size must be at least 1"),
    (["offline", "make-dataset", "pointmaze-giant-stitch-v0", "--out", "x.h5"], "must end with .npz"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(args + ["--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert main(args) == 2
    assert list(tmp_path.iterdir()) == []


def test_inspect_checks_a_file_and_refuses_bad_ones(tmp_path, capsys):
    from longhorizon.offline.datagen import save_npz

    rows = {"observations": np.arange(10, dtype=np.float32).reshape(5, 2), "actions": np.zeros((5, 2), np.float32),
            "terminals": np.array([0, 0, 1, 0, 1], bool)}
    good = tmp_path / "pointmaze-medium-stitch-v0.npz"  # the name says PointMaze: its sizes are checked
    save_npz(good, rows)
    assert main(["offline", "inspect", str(good)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["transitions"] == 3 and summary["trajectories"] == 2 and summary["shapes"]["observations"] == [2]
    wide = tmp_path / "pointmaze-giant-navigate-v0.npz"
    save_npz(wide, {**rows, "observations": np.zeros((5, 29), np.float32)})
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK\x03\x04 not really")
    assert main(["offline", "inspect", str(good), "--env", "pointmaze-giant-navigate-v0"]) == 0  # same sizes
    capsys.readouterr()
    for args, message in (([str(wide)], "observations of shape (29,) but pointmaze-giant-navigate-v0"),
                          ([str(wide), "--env", "pointmaze-medium-stitch-v0"], "pass a dataset made for pointmaze-medium"),
                          ([str(tmp_path / "none.npz")], "does not exist"),
                          ([str(broken)], "is not a readable .npz file"),
                          (["pointmaze-huge-stitch-v0"], "unknown dataset")):
        assert main(["offline", "inspect", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
