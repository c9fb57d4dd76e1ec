"""The reproductions' shared statistics and writer."""

import json
import math

import pytest

from longhorizon.repro.report import mean_se, write


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
