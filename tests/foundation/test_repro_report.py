"""The reproductions' shared statistics and writer."""

import json
import math

import pytest

from longhorizon.repro.report import mean_se, resumable, write


def test_mean_se_by_hand():
    mean, se = mean_se([1.0, 2.0, 6.0])  # mean 3, sample variance ((4 + 1 + 9) / 2) = 7
    assert mean == pytest.approx(3.0)
    assert se == pytest.approx(math.sqrt(7.0 / 3.0))
    assert mean_se([4.0]) == (4.0, 0.0)
    with pytest.raises(ValueError, match="at least one"):
        mean_se([])


def test_write_puts_summary_and_readme(tmp_path):
    write(tmp_path / "out", {"verdict": "v", "claims": {"c": "holds (x)"}}, ["# title", "", "text"])
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["claims"] == {"c": "holds (x)"}
    assert (tmp_path / "out" / "README.md").read_text() == "# title\n\ntext\n"


def test_bootstrap_slope_recovers_a_line_and_its_spread():
    import numpy as np

    from longhorizon.repro.report import bootstrap_slope

    x = np.arange(5.0)
    exact = np.stack([2.0 * x + 1.0] * 4)  # every seed on y = 2x + 1: no spread at all
    assert bootstrap_slope(x, exact, resamples=50) == pytest.approx((2.0, 2.0, 2.0))
    noisy = exact + np.random.default_rng(0).normal(0, 0.5, exact.shape)
    slope, low, high = bootstrap_slope(x, noisy, resamples=300)
    assert low < slope < high and low < 2.0 < high
    no_curve = lambda r: np.full(r.shape[1], np.nan)  # noqa: E731  (say, the log of a negative mean)
    assert np.isnan(bootstrap_slope(x, exact, summary=no_curve, resamples=10)).all()


def test_write_run_keeps_the_curves_and_the_readme_lists_each_verdict_and_why(tmp_path):
    from longhorizon.repro import claims as C
    from longhorizon.repro.report import verdict_lines, write_run

    stalled = C.arm_signal("arm", eval_start=0.5, eval_end=0.5)
    claims = [C.judge("it works", C.difference([2.0, 3.0, 4.0], [0.0] * 3)), C.judge("it learns", C.difference([1.0] * 3, 0.0), [stalled])]
    summary = C.summary(paper="p", claims=claims, arms={"arm": C.arm(5, 3, stalled)}, scale="tiny", quick=False,
                        command="longhorizon repro p", wall_seconds=1.0)
    lines = verdict_lines(summary)
    assert lines[0].startswith("- it works: **holds** (the interval") and "its evaluation 0.5 is not above" in lines[1]
    write_run(tmp_path, summary, ["# p", *lines], {"arm": [{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.2}]})
    assert json.loads((tmp_path / "summary.json").read_text())["claims"][1]["verdict"] == C.NO_SIGNAL
    assert (tmp_path / "curves" / "arm.csv").read_text().splitlines() == ["step,reward", "1,0.1", "2,0.2"]


def test_resumable_computes_an_arm_once_per_setup_and_saves_it_as_recorded(tmp_path):
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Setup:
        steps: int = 3
        sizes: tuple = (1, 2)

    calls = []

    def compute():
        calls.append(1)
        return {"returns": [1.5, float("nan")], "seed": 0}

    path = tmp_path / "arms" / "a.json"
    first, reused = resumable(path, Setup(), compute)
    assert (reused, len(calls)) == (False, 1) and first["returns"][0] == 1.5
    assert json.loads(path.read_text()) == {"setup": {"steps": 3, "sizes": [1, 2]},
                                            "result": {"returns": [1.5, None], "seed": 0}}
    again, reused = resumable(path, Setup(), compute, log=calls.append)
    assert reused and again == {"returns": [1.5, None], "seed": 0} and calls[1:] == [f"  read back from {path}"]
    other, reused = resumable(path, Setup(steps=4), compute)  # another setup: computed again and saved over it
    assert not reused and len([c for c in calls if c == 1]) == 2
    assert json.loads(path.read_text())["setup"]["steps"] == 4
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]  # no temporary file left


def test_block_means_by_hand():
    from longhorizon.repro.report import block_means

    steps, means = block_means([[4.0, 2.0, 3.0, 1.0, 9.0], [0.0, 2.0, 4.0, 6.0, 8.0]], points=2)  # blocks of 2; 5th dropped
    assert steps == [2, 4] and means.tolist() == [[3.0, 2.0], [1.0, 5.0]]
    steps, means = block_means([1.0, 2.0, 3.0], points=10)  # fewer values than points: blocks of one
    assert steps == [1, 2, 3] and means.tolist() == [1.0, 2.0, 3.0]
