"""The Appendix-C bound: GORP's failure probability, the choice-probability bounds and the worst-case LP."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longhorizon.tabular import dp
from longhorizon.tabular import gorp_bounds as gb
from longhorizon.tabular.mdp import TabularMDP


@pytest.fixture
def bandit() -> TabularMDP:
    """s0: a0 -> s1, a1 -> s2 (r 0). s1: a0 ends with 1, a1 ends with 0. s2: both end with 0."""
    return TabularMDP.deterministic(np.array([[1, 2], [-1, -1], [-1, -1]]), np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]), horizon=2)


@pytest.mark.parametrize("ties", ["bridge", "worst_case"])
def test_gorp_failure_probability_by_hand(bandit, ties):
    # GORP fails at s0 only when all m rollouts after a0 return 0 and the tie goes to a1: 2^-m.
    ctx = gb._TightContext(bandit, dp.evaluate(bandit), k=1, ties=ties)
    for m in (1, 2, 3, 4):
        assert ctx.failure_probability(m, {}) == pytest.approx(0.5**m, abs=1e-9)
    result = gb.tight_effective_horizon(bandit, ties=ties)
    assert result.effective_horizon == 1.0 and result.k_results[1]["m"] == 1.0


def test_worst_case_ties_are_never_below_bridge_convention():
    # A 3-step corridor with distractors: the rigorous bound can only be larger.
    trans = np.array([[1, 3, 3], [2, 3, 3], [-1, 3, 3], [3, 3, 3]])
    rew = np.zeros((4, 3))
    rew[2, 0] = 1.0
    mdp = TabularMDP.deterministic(trans, rew, horizon=4)
    bridge = gb.tight_effective_horizon(mdp, max_k=1).effective_horizon
    worst = gb.tight_effective_horizon(mdp, max_k=1, ties="worst_case").effective_horizon
    assert 1.0 <= bridge <= worst + 1e-9


@st.composite
def lp_boxes(draw):
    n = draw(st.integers(2, 6))
    f = np.array(draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)))
    base = np.array(draw(st.lists(st.floats(0.01, 1), min_size=n, max_size=n)))
    p = base / base.sum()
    lo = p * np.array(draw(st.lists(st.floats(0, 1), min_size=n, max_size=n)))
    hi = np.minimum(1, p + np.array(draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))))
    return f, lo, hi


@settings(max_examples=40, deadline=None)
@given(st.lists(lp_boxes(), min_size=1, max_size=4).filter(lambda b: len({len(x[0]) for x in b}) == 1))
def test_highs_lp_matches_closed_form(boxes):
    f = np.stack([b[0] for b in boxes])
    lo = np.stack([b[1] for b in boxes])
    hi = np.stack([b[2] for b in boxes])
    np.testing.assert_allclose(gb.max_failure_lp(f, lo, hi), gb.max_failure(f, lo, hi), atol=1e-7)


def test_closed_form_lp_by_hand():
    # Everyone gets L = (0.1, 0.2, 0.1); the 0.6 left fills f = 0.9 up to U = 0.5 (+0.4), then f = 0.5 (+0.2).
    f = np.array([[0.5, 0.2, 0.9]])
    lo, hi = np.array([[0.1, 0.2, 0.1]]), np.array([[0.6, 0.6, 0.5]])
    assert gb.max_failure(f, lo, hi)[0] == pytest.approx(0.1 * 0.5 + 0.2 * 0.2 + 0.1 * 0.9 + 0.4 * 0.9 + 0.2 * 0.5)
    # Bounds that cannot sum to 1 leave the row at max f.
    assert gb.max_failure(f, lo, np.array([[0.2, 0.2, 0.2]]))[0] == 0.9


def _bernstein_by_hand(mu, opt, worst, m, res=0.01):
    """Bernstein's bins for one row, scalar by scalar, straight from the definitions."""
    n = len(mu)
    b = [opt[i] - worst[i] for i in range(n)]
    v = [max((opt[i] - mu[i]) * (mu[i] - worst[i]), 0.0) for i in range(n)]

    def deviation(i, delta):
        if delta <= 0:
            return math.inf
        if b[i] == 0 or v[i] == 0:
            return 0.0
        L = -math.log(delta)
        return (b[i] * L / m + math.sqrt(18 * v[i] / m * L + (b[i] * L / m) ** 2)) / 3

    def exponent(j, t):
        if t <= 0:
            return 0.0
        den = v[j] + b[j] * t / 3
        return t * t * m / 2 / den if den > 0 else math.inf

    qs = [(k + 1) * res for k in range(round(1 / res))]
    qs[-1] = 1.0
    lower, upper = [], []
    for i in range(n):
        up = lo = 0.0
        for q in qs:
            hi_q = mu[i] + deviation(i, max(1 - q, 0.0))
            up += math.exp(-sum(exponent(j, mu[j] - hi_q) for j in range(n) if j != i))
            lo_q = mu[i] - deviation(i, max(q - res, 0.0))
            lo += math.prod(1 - math.exp(-exponent(j, lo_q - mu[j])) for j in range(n) if j != i)
        lower.append(res * lo)
        upper.append(min(res * up, 1.0))
    return lower, upper


def test_bernstein_bounds_by_hand():
    rng = np.random.default_rng(3)
    mu = rng.uniform(0.2, 0.8, (6, 4))
    mu[1, 2] = mu[1, 0]  # tied sequences: one class
    mu[2] = [0.5, 0.5, 0.3, 0.1]  # a tied maximum has no lower bound
    mu[4, 1] = mu[4].max() + 0.1  # a strict maximum
    opt, worst = np.ones_like(mu), np.zeros_like(mu)
    opt[3, 0] = worst[3, 0] = mu[3, 0]  # a constant return
    opt[5, 1] = 0.95  # equal means, different ranges: two classes
    mu[5, 1] = mu[5, 3]
    bounds = gb.BernsteinBounds(mu, opt, worst)
    for m in (7.0, 300.0):
        lower, upper = bounds.at(m)
        for r in range(mu.shape[0]):
            want_lower, want_upper = _bernstein_by_hand(mu[r], opt[r], worst[r], m)
            np.testing.assert_allclose(lower[r], want_lower, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(upper[r], want_upper, rtol=1e-12, atol=1e-15)
        assert np.all(lower[2] == 0) and np.all(lower[4][np.arange(4) != 1] == 0) and lower[4, 1] > 0
        some = np.array([1, 4, 5])
        sub_lower, sub_upper = bounds.at(m, some)
        np.testing.assert_array_equal(sub_lower, lower[some])
        np.testing.assert_array_equal(sub_upper, upper[some])


def test_bennett_alone_is_a_looser_bound():
    # Rewards in {0, 0.1, 0.2, 1}: no binomial bins, so Bernstein's and Bennett's boxes both apply.
    # Bennett alone never beats the full set of boxes; where it passes, the bisection skips the rest.
    trans = np.array([[1, 2], [-1, -1], [-1, -1]])
    mdp = TabularMDP.deterministic(trans, np.array([[0.0, 0.2], [1.0, 0.0], [0.1, 0.1]]), horizon=2)
    ctx = gb._TightContext(mdp, dp.evaluate(mdp), k=1)
    full = {m: ctx.failure_probability(m, {}) for m in (3, 30, 300)}
    alone = {m: ctx.failure_probability(m, {}, bennett_only=True) for m in (3, 30, 300)}
    assert full[30] == pytest.approx(0.1589, abs=1e-4) and alone[30] == pytest.approx(0.5869, abs=1e-4)
    assert all(full[m] <= alone[m] + 1e-12 for m in full)
    stats: dict = {}
    assert ctx.suffices(300, stats) and stats == {"screened": 1}  # Bennett alone: 0.0048
    assert ctx.suffices(30, stats) and stats["screened"] == 1  # needed the full computation
    assert not ctx.suffices(3, stats)
