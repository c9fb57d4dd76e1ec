"""Spearman's rho on samples small enough to rank by hand."""

import math

import numpy as np
import pytest

from longhorizon.core.stats import ranks, spearman


def test_ranks_share_the_mean_rank_of_a_tie():
    assert ranks([5, 7, 5]).tolist() == [1.5, 3.0, 1.5]
    assert ranks([3.0, 1.0, 2.0]).tolist() == [3.0, 1.0, 2.0]
    assert ranks([2, 2, 2, 1]).tolist() == [3.0, 3.0, 3.0, 1.0]


def test_spearman_without_ties_is_one_minus_six_sum_d_squared():
    # ranks [1, 2, 3, 4] and [1, 3, 2, 4]: d = (0, 1, 1, 0), 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [9, 5, 1]) == pytest.approx(-1.0)


def test_spearman_with_a_tie_is_the_pearson_correlation_of_mean_ranks():
    # x ranks (1, 2.5, 2.5, 4), y ranks (1, 2, 3, 4): sum dx dy = 4.5, sum dx^2 = 4.5, sum dy^2 = 5 -> sqrt(0.9)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(math.sqrt(0.9))


def test_spearman_is_nan_without_a_ranking_and_refuses_unpaired_samples():
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(spearman([1], [2]))
    with pytest.raises(ValueError, match="paired"):
        spearman([1, 2, 3], [1, 2])
    assert spearman(np.array([2.0, 1.0]), np.array([0.0, 1.0])) == pytest.approx(-1.0)
