"""games/preference: the reference solver, the closed-form updates against their variational definitions,
Nash-MP's (1 + 2 beta)^(-N/2) bound, MWU's cycling, and `longhorizon repro nash-mp --quick`."""

import json

import jax
import numpy as np
import pytest
from scipy.optimize import minimize

from longhorizon.errors import UsageError
from longhorizon.games import preference as pref
from longhorizon.repro import nash_mp


def _reference(n, seed):
    logits = np.random.default_rng(seed).normal(size=n)
    return np.exp(logits) / np.exp(logits).sum()


def _kl(p, q):
    return float(np.sum(p * np.log(p / q)))


def test_random_skew_game_is_a_preference_matrix():
    P = pref.random_skew_game(7, 3)
    np.testing.assert_allclose(P + P.T, 1.0, atol=1e-15)
    assert np.all(np.diag(P) == 0.5) and np.abs(P - 0.5).max() <= 0.5 and P.dtype == np.float64
    assert not np.allclose(P, pref.random_skew_game(7, 4))
    np.testing.assert_array_equal(pref.random_skew_game(7, jax.random.key(3)), P)  # a key or its int seed


@pytest.mark.slow
@pytest.mark.parametrize("n, beta", [(3, 0.1), (10, 1.0), (100, 0.05)])
def test_reference_solver_residual_and_duality_gap(n, beta):
    P = pref.intransitive_3x3() if n == 3 else pref.random_skew_game(n, n)
    pi_ref = np.full(n, 1 / n) if n == 3 else _reference(n, n)
    star = pref.regularised_nash(P, beta, pi_ref)
    assert pref.fixed_point_residual(star, P, beta, pi_ref) < 1e-12
    assert abs(pref.duality_gap(star, P, beta, pi_ref)) < 1e-13
    # the fixed point pi* ∝ pi_ref exp(P pi* / beta), written out in numpy
    direct = pi_ref * np.exp(P @ star / beta)
    np.testing.assert_allclose(star, direct / direct.sum(), rtol=1e-11, atol=1e-15)
    # a perturbed policy is measurably off by both measures
    moved = 0.99 * star + 0.01 / n
    assert pref.fixed_point_residual(moved, P, beta, pi_ref) > 1e-4 and pref.duality_gap(moved, P, beta, pi_ref) > 1e-8
    # pi* is a fixed point of the unbiased updates
    for step in (pref.nash_mp_step, pref.omd_update, pref.extragradient_step):
        np.testing.assert_allclose(step(star, P, beta, 0.5, pi_ref), star, rtol=1e-10, atol=1e-15)


def test_unregularised_nash_of_the_intransitive_game_by_hand():
    P = pref.intransitive_3x3()
    # (P pi)_i = 1/2 for all i: 0.4 pi_1 - 0.3 pi_2 = 0 and -0.4 pi_0 + 0.2 pi_2 = 0 give (2, 3, 4) / 9
    np.testing.assert_allclose(pref.unregularised_nash(P), np.array([2, 3, 4]) / 9, atol=1e-9)


def _argmax_simplex(objective, n):
    """The maximiser of ``objective(pi)`` over the simplex, by BFGS over softmax logits."""
    def negative(logits):
        pi = np.exp(logits - logits.max())
        return -objective(pi / pi.sum())

    logits = minimize(negative, np.zeros(n), method="BFGS", options={"gtol": 1e-11}).x
    pi = np.exp(logits - logits.max())
    return pi / pi.sum()


def test_each_update_is_the_argmax_of_its_variational_definition():
    P, beta, eta = pref.random_skew_game(3, 0), 0.3, 0.7
    pi_ref, pi = _reference(3, 1), _reference(3, 2)

    def g(x):  # the linearised regularised objective's gradient, P x - beta log(x / ref)
        return P @ x - beta * np.log(x / pi_ref)

    half = _argmax_simplex(lambda u: eta * u @ P @ pi - eta * beta * _kl(u, pi_ref) - _kl(u, pi), 3)
    full = _argmax_simplex(lambda u: eta * u @ P @ half - eta * beta * _kl(u, pi_ref) - _kl(u, pi), 3)
    np.testing.assert_allclose(pref.nash_mp_step(pi, P, beta, eta, pi_ref), full, atol=1e-6)

    mixture = _argmax_simplex(lambda u: -eta * beta * _kl(u, pi_ref) - (1 - eta * beta) * _kl(u, pi), 3)
    md = _argmax_simplex(lambda u: eta * u @ P @ mixture - _kl(u, mixture), 3)
    np.testing.assert_allclose(pref.nash_md_step(pi, P, beta, eta, pi_ref), md, atol=1e-6)

    omd = _argmax_simplex(lambda u: eta * u @ g(pi) - _kl(u, pi), 3)
    np.testing.assert_allclose(pref.omd_update(pi, P, beta, eta, pi_ref), omd, atol=1e-6)

    eg_half = _argmax_simplex(lambda u: eta * u @ g(pi) - _kl(u, pi), 3)
    eg = _argmax_simplex(lambda u: eta * u @ g(eg_half) - _kl(u, pi), 3)
    np.testing.assert_allclose(pref.extragradient_step(pi, P, beta, eta, pi_ref), eg, atol=1e-6)

    mwu = _argmax_simplex(lambda u: eta * u @ P @ pi - _kl(u, pi), 3)
    np.testing.assert_allclose(pref.mwu_step(pi, P, eta), mwu, atol=1e-6)
    assert not np.allclose(full, omd, atol=1e-3)  # the methods differ on this case


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, 10, 40])
@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_nash_mp_bound_holds_at_every_query(n, beta):
    for seed in range(3):
        P = pref.intransitive_3x3() if (n, seed) == (3, 0) else pref.random_skew_game(n, seed)
        pi_ref = _reference(n, 100 + seed)
        star = pref.regularised_nash(P, beta, pi_ref)
        run = pref.trajectory("nash-mp", P, beta, pi_ref, pref.NASH_MP_ETA, 60, star)
        bound = run["kl_last"][0] * (1 + 2 * beta) ** (-run["queries"] / 2)
        assert run["kl_last"][0] > 1e-3 and np.all(run["kl_last"] <= bound * (1 + 1e-9) + 1e-15)
        assert nash_mp.bound_holds(run["kl_last"], beta)


def test_trajectory_equals_the_plain_steps():
    P, beta = pref.random_skew_game(5, 1), 0.2
    pi_ref = _reference(5, 1)
    star = pref.regularised_nash(P, beta, pi_ref)
    for method, step in (("nash-mp", pref.nash_mp_step), ("omd", pref.omd_update), ("nash-md", pref.nash_md_step)):
        run = pref.trajectory(method, P, beta, pi_ref, 1.5, 5, star)
        pi, plain, mean = pi_ref, [], np.zeros(5)
        for k in range(5):
            pi = step(pi, P, beta, 1.5, pi_ref)
            mean += pi
            plain.append((_kl(star, pi), _kl(star, mean / (k + 1))))
        np.testing.assert_allclose(run["kl_last"][1:], [a for a, _ in plain], rtol=1e-9)
        np.testing.assert_allclose(run["kl_average"][1:], [b for _, b in plain], rtol=1e-9)
        assert run["kl_last"][0] == pytest.approx(_kl(star, pi_ref))
        assert run["queries"][-1] == 5 * pref.QUERIES_PER_STEP[method]


def test_mwu_last_iterate_cycles_on_the_intransitive_game_while_its_average_converges():
    cycle = nash_mp.mwu_cycle(pref.intransitive_3x3(), steps=1000, eta=0.1)
    assert cycle["kl_last_min"] >= cycle["kl_start"] * (1 - 1e-9)  # never closer than the start
    assert cycle["kl_last_end"] > 1.2 * cycle["kl_start"]  # spirals outward
    assert cycle["kl_average_end"] < 0.05 * cycle["kl_start"]


def test_claim_rules_by_hand():
    beta = 0.5  # bound per iterate: KL_0 / 2^k
    assert nash_mp.bound_holds([1.0, 0.5, 0.25, 0.1], beta)
    assert not nash_mp.bound_holds([1.0, 0.5, 0.26], beta)
    queries = np.arange(0, 20, 2)
    assert nash_mp.per_query_factor(queries, 0.8 ** queries) == pytest.approx(0.8)
    assert nash_mp.per_query_factor([0, 2], [1.0, 1e-13]) is None  # one point above the fit floor
    assert nash_mp.queries_to_target([0, 2, 4, 6], [1.0, 1e-3, 1e-9, 1e-12]) == 4
    assert nash_mp.queries_to_target([0, 2], [1.0, 0.5]) is None
    from longhorizon.repro import claims as C

    def game(bound=True, factor=0.5, fast=100, slow=300):
        methods = {m: {"factor": factor, "queries_to_target": fast if m.startswith("nash-mp") else slow}
                   for m in ("nash-mp", "nash-mp-grid", "nash-md", "omd", "extragradient", "mwu")}
        return {"beta": 1.0, "bound_holds": bound, "methods": methods}

    def verdicts(games, cycle=None):
        cycle = cycle or {"kl_start": 1.0, "kl_last_min": 1.0, "kl_average_end": 0.01}
        L = {"setup": {"queries": 400}, "target": 1e-8, "games": games, "mwu_cycle": cycle}
        return [c.verdict for c in nash_mp.judge(L)[0]]

    three = [game(slow=s) for s in (300, 310, 290)]
    assert verdicts(three) == [C.HOLDS] * 6
    assert verdicts([game(bound=False)] + three[1:])[0] == C.CONTRADICTED
    assert verdicts([game(factor=0.6)] + three[1:])[1] == C.CONTRADICTED  # slower than (1 + 2 beta)^(-1/2) = 0.577
    assert verdicts([game(slow=s) for s in (50, 60, 40)])[2] == C.CONTRADICTED  # the baseline is faster
    closer = {"kl_start": 1.0, "kl_last_min": 0.99, "kl_average_end": 0.01}  # the last iterate got closer once
    assert verdicts(three, closer)[-1] == C.CONTRADICTED


def test_bad_input_raises_usage_errors():
    P, ref = pref.intransitive_3x3(), np.full(3, 1 / 3)
    with pytest.raises(UsageError, match="square"):
        pref.regularised_nash(np.ones((2, 3)), 0.1, ref)
    with pytest.raises(UsageError, match=r"P \+ P\^T = 1"):
        pref.regularised_nash(np.full((3, 3), 0.7), 0.1, ref)
    with pytest.raises(UsageError, match="pi_ref"):
        pref.regularised_nash(P, 0.1, np.array([0.5, 0.5, 0.0]))
    with pytest.raises(UsageError, match="beta must be > 0"):
        pref.regularised_nash(P, 0.0, ref)
    with pytest.raises(UsageError, match="unknown preference-game method"):
        pref.trajectory("sgd", P, 0.1, ref, 1.0, 3, ref)
    with pytest.raises(UsageError, match="eta \\* beta <= 1"):
        pref.trajectory("omd", P, 0.5, ref, 3.0, 3, ref)
    with pytest.raises(UsageError, match="at least 2 responses"):
        pref.random_skew_game(1, 0)
    with pytest.raises(UsageError, match="invalid nash-mp setup"):
        nash_mp.Setup(queries=7)


@pytest.mark.slow
def test_quick_repro_writes_files_and_claims_from_the_data(tmp_path):
    result = nash_mp.run(str(tmp_path), quick=True)
    for name in ("README.md", "summary.json", "nash_mp.png"):
        assert (tmp_path / name).stat().st_size > 0
    from longhorizon.repro import claims as C

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(summary) == [] and summary["quick"] is True and summary["claims"] == result["claims"]
    assert {c["verdict"] for c in summary["claims"]} == {C.QUICK}
    assert [c.to_dict() for c in nash_mp.judge(summary, quick=True)[0]] == summary["claims"]
    assert {row["n"] for row in summary["games"]} == {3, 10}
    curve = (tmp_path / "curves" / "nash-mp.csv").read_text().splitlines()
    assert curve[0] == "beta,game,step,kl_ratio_median" and curve[1].endswith(",0,1.0")  # KL / KL_0 = 1 at N = 0
    readme = (tmp_path / "README.md").read_text()
    assert "longhorizon repro nash-mp --quick" in readme and "## Verdict" in readme and "nash_mp.png" in readme
