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
