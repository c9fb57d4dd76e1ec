"""Sample complexity from a hand-made metrics.jsonl: first-success steps (env steps and SQIRL's samples) and the
seed summary with censoring."""

import json

import pytest

from longhorizon.errors import UsageError
from longhorizon.runner.results import read_metrics
from longhorizon.tabular import sample_complexity as sc


def write_metrics(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_first_success_steps_from_a_hand_made_metrics_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_metrics(path, [
        {"chunk": 1, "env_steps": 100, "sample_steps": 10.0, "eval_return_per_seed": [0.0, 0.5, 0.0]},
        {"chunk": 2, "env_steps": 200, "sample_steps": 20.0},  # no evaluation in this chunk
        {"chunk": 3, "env_steps": 300, "sample_steps": 30.0, "eval_return_per_seed": [0.99995, 0.0, 0.0]},
        {"chunk": 4, "env_steps": 400, "sample_steps": 40.0, "eval_return_per_seed": [0.0, 1.0, 0.9]},
    ])
    rows = read_metrics(tmp_path)
    # Seed 0 is within the 1e-4 tolerance at chunk 3 (and losing it later does not matter); seed 1 at
    # chunk 4 (0.5 at chunk 1 is not optimal); seed 2 never.
    result = sc.first_success_steps(rows, 1.0, 3)
    assert result == {"first_success": [300.0, 400.0, None], "steps_used": 400.0}
    # SQIRL counts samples: per-update means times 2 updates per chunk, summed: 20, 60, 120, 200.
    result = sc.first_success_steps(rows, 1.0, 3, count="sample_steps", updates_per_chunk=2)
    assert result == {"first_success": [120.0, 200.0, None], "steps_used": 200.0}
    # A stricter tolerance rejects 0.99995.
    assert sc.first_success_steps(rows, 1.0, 3, tolerance=1e-6)["first_success"] == [None, 400.0, None]
    with pytest.raises(UsageError, match="expected 2"):
        sc.first_success_steps(rows, 1.0, 2)


def test_seed_summary_counts_failures_as_above_the_budget():
    s = sc.summarise_seeds([300.0, 400.0, None], 400.0)
    assert (s["median"], s["min"], s["max"], s["found"], s["censored"]) == (400.0, 300.0, None, 2, False)
    assert sc.format_complexity(s) == "400 [300, >400] (2/3)"
    s = sc.summarise_seeds([300.0, None, None], 1000.0)
    assert s["censored"] and s["median"] is None and s["min"] == 300.0
    assert sc.format_complexity(s) == ">1,000 [300, >1,000] (1/3)"
    s = sc.summarise_seeds([5.0, 1.0, 3.0], 10.0)
    assert (s["median"], s["min"], s["max"]) == (3.0, 1.0, 5.0)


def test_complexity_correlation_ranks_censored_medians_last():
    found = [sc.summarise_seeds([v, v, v], 100.0) for v in (10.0, 30.0, 20.0)]
    never = sc.summarise_seeds([None, None, None], 100.0)
    result = sc.complexity_correlation([1.0, 3.0, 2.0, 4.0], found + [never])
    assert result["rho"] == pytest.approx(1.0) and result["censored"] == 1
    assert sc.complexity_correlation([1.0, 2.0], found[:2])["rho"] is None  # too few points


def test_log_slope_fits_found_medians_only():
    """Medians 10, 100, 1000 at x = 1, 2, 3: slope 1 in log10; a censored median is left out."""
    found = [sc.summarise_seeds([v] * 3, 1e4) for v in (10.0, 100.0, 1000.0)]
    fit = sc.log_slope([1.0, 2.0, 3.0, 4.0], found + [sc.summarise_seeds([None] * 3, 1e4)])
    assert fit["n"] == 3 and fit["slope"] == pytest.approx(1.0) and fit["intercept"] == pytest.approx(0.0)
    assert sc.log_slope([1.0, 2.0], found[:2]) == {"slope": None, "n": 2}
