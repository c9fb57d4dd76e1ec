"""The Appendix-C bound: GORP's failure probability, the choice-probability bounds and the HiGHS LP."""

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
    np.testing.assert_allclose(gb.max_failure_lp(f, lo, hi), gb.max_failure_greedy(f, lo, hi), atol=1e-7)


def _simulate(p, m, draws=20000, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.binomial(m, p, size=(draws, p.size))
    top = x.max(axis=1, keepdims=True)
    ties = (x == top).sum(axis=1, keepdims=True)
    strict = ((x == top) & (ties == 1)).mean(axis=0)
    win_or_tie = (x == top).mean(axis=0)
    return strict, win_or_tie


@pytest.mark.parametrize("p, m", [([0.5, 0.3, 0.1], 7), ([0.02, 0.05, 0.0, 0.01], 40), ([0.9, 0.88], 50)])
def test_choice_probability_bounds_hold(p, m):
    p = np.array(p)
    strict, win_or_tie = _simulate(p, m)
    tol = 0.02
    lower, upper = gb.bounds_binomial_exact(p[None], m)
    assert np.all(lower[0] <= strict + tol) and np.all(upper[0] >= win_or_tie - tol)
    np.testing.assert_allclose(lower[0], strict, atol=tol)  # exact, up to sampling noise
    lower, _ = gb.bounds_binomial_bins(p[None], m)
    assert np.all(lower[0] <= strict + tol)
    opt, worst = np.ones_like(p), np.zeros_like(p)
    lower, upper = gb.bounds_bernstein(p[None], opt[None], worst[None], float(m))
    assert np.all(lower[0] <= strict + tol) and np.all(upper[0] >= win_or_tie - tol)
    lower, upper = gb.bounds_bennett(p[None], opt[None], worst[None], float(m))
    assert np.all(lower[0] == 0) and np.all(upper[0] >= win_or_tie - tol)
