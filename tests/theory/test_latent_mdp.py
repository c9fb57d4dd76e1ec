"""Latent MDPs (issue 20, part 2): the Bayes update, the belief-grid planner against exact enumeration,
the bonuses, regret accounting, the reproduction's claim rules and its --quick run."""

import json

import jax
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.theory import latent_mdp as lm
from longhorizon.theory import lmdp_learning as ll


def test_bayes_update_by_hand():
    with jax.enable_x64(True):
        # b = (0.6, 0.4), P_0(s') = 0.5, P_1(s') = 0.25: b' = 0.3 / (0.3 + 0.1) = 0.75
        np.testing.assert_allclose(lm.bayes_update(np.array([0.6, 0.4]), np.array([0.5, 0.25])), [0.75, 0.25])
        # a transition only context 1 allows reveals it; one no context allows keeps the belief
        np.testing.assert_allclose(lm.bayes_update(np.array([0.6, 0.4]), np.array([0.0, 0.3])), [0.0, 1.0])
        np.testing.assert_allclose(lm.bayes_update(np.array([0.6, 0.4]), np.array([0.0, 0.0])), [0.6, 0.4])
        # on the grid G = 4, from b = 0.5: s' = 0 gives b' = 0.45 / 0.7 = 0.64 -> 0.75, s' = 1 gives 0.05 / 0.3 = 0.17 -> 0.25
        P = np.zeros((2, 1, 1, 2))
        P[0, 0, 0], P[1, 0, 0] = (0.9, 0.1), (0.5, 0.5)
        index = np.asarray(lm.belief_transitions(P, 4))
        assert index[0, 0, 0, 2] == 3
        assert index[0, 0, 1, 2] == 1
        assert index[0, 0, 0, 4] == 4 and index[0, 0, 1, 0] == 0  # certain beliefs stay certain


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_belief_grid_planner_against_enumeration(seed):
    lmdp = lm.random_lmdp(states=2, actions=2, horizon=4, seed=seed)
    optimum = lm.optimal_value_by_enumeration(lmdp)  # over every history-dependent policy
    for grid in (8, 64):
        result, value = lm.plan_true(lmdp, grid)
        # the controller's alpha vectors are its exact value as a history-dependent policy ...
        by_histories = lm.history_policy_value(lmdp, lm.controller_as_history_policy(result))
        np.testing.assert_allclose(result.alpha[0, :, 0, result.start], by_histories, atol=1e-12)
        with jax.enable_x64(True):
            fixed = lm.controller_value(lmdp.transitions, lmdp.rewards, result, lmdp.horizon)
        np.testing.assert_allclose(fixed, by_histories, atol=1e-12)
        # ... which no policy beats, and which is within the documented grid error H / G of the optimum
        assert value == pytest.approx(by_histories @ lmdp.weights, abs=1e-12)
        assert optimum - lmdp.horizon / grid <= value <= optimum + 1e-12


def test_enumeration_beats_every_memoryless_policy_when_the_context_matters():
    # context 0 pays action 0, context 1 pays action 1 at step 2; step 1's transition reveals the context
    P = np.zeros((2, 3, 2, 3))
    P[0, 0, :, 1], P[1, 0, :, 2] = 1.0, 1.0
    P[:, 1:, :, 0] = 1.0
    R = np.zeros((2, 3, 2))
    R[0, 1:, 0], R[1, 1:, 1] = 0.5, 0.5
    lmdp = lm.LMDP(P, R, np.array([0.5, 0.5]), horizon=2)
    assert lm.optimal_value_by_enumeration(lmdp) == pytest.approx(0.5)
    result, value = lm.plan_true(lmdp, grid=2)
    assert value == pytest.approx(0.5)
    # the policy that ignores the history (always action 0) earns half of it
    assert lm.history_policy_value(lmdp, lambda history: 0) @ lmdp.weights == pytest.approx(0.25)


def test_bonus_monotone_in_counts_and_variance():
    with jax.enable_x64(True):
        counts = np.array([[0.0, 1.0, 4.0, 100.0]])  # [S=1, A=4]
        variance = np.full((1, 4, 1), 0.05)
        for bonus in (ll.bernstein_bonus, ll.hoeffding_bonus):
            b = np.asarray(bonus(counts, variance, 10.0))[0, :, 0]
            assert b[0] == b[1] and np.all(np.diff(b[1:]) < 0)  # N = max(count, 1)
        low = np.asarray(ll.bernstein_bonus(counts, variance, 10.0))
        high = np.asarray(ll.bernstein_bonus(counts, 4 * variance, 10.0))
        assert np.all(high > low)
        # zero variance leaves c2 iota / N: with c2 = 1, 10, 10, 2.5, 0.1
        np.testing.assert_allclose(np.asarray(ll.bernstein_bonus(counts, 0 * variance, 10.0, 1.0, 1.0))[0, :, 0],
                                   [10, 10, 2.5, 0.1])
        # MVP's constants at N = 4, iota = 8, Var = 0.05: 460/9 sqrt(0.05 * 8 / 4) + 544/9 * 8 / 4 = 16.163 + 120.889
        np.testing.assert_allclose(np.asarray(ll.bernstein_bonus(counts, variance, 8.0))[0, 2, 0], 137.0516, atol=1e-3)
        # the baseline is the Bernstein bonus at Var = 1/4: c1 sqrt(iota / (4N)) = sqrt(8 / 16) with c1 = 1, c2 = 0
        np.testing.assert_allclose(np.asarray(ll.hoeffding_bonus(counts, variance, 8.0, 1.0, 0.0))[0, 2, 0], 0.5**0.5)


def test_doubling_trigger_by_hand():
    planned = np.zeros((2, 1, 2))  # [M, S, A]
    visits = np.zeros((2, 1, 2))
    assert not bool(ll.triggered(visits, planned))  # no data yet: keep the first plan
    visits[0, 0, 1] = 1
    assert bool(ll.triggered(visits, planned))  # 0 -> 1
    planned = visits.copy()
    visits[0, 0, 1] = 1.0
    visits[1, 0, 0] = 0.0
    assert not bool(ll.triggered(visits, planned))
    planned[:] = 4
    visits[:] = 7
    assert not bool(ll.triggered(visits, planned))  # 4 -> 7: not doubled
    visits[1, 0, 0] = 8
    assert bool(ll.triggered(visits, planned))  # 4 -> 8 in one pair suffices
    many = np.stack([visits, np.full_like(visits, 7)])  # two learners
    np.testing.assert_array_equal(np.asarray(ll.triggered(many, np.stack([planned, planned]))), [True, False])


@pytest.mark.slow
def test_regret_accounting_by_hand():
    np.testing.assert_allclose(ll.cumulative_regret(0.5, [0.2, 0.5, 0.4]), [0.3, 0.3, 0.4])
    # a one-step LMDP: context 0 pays action 0, context 1 action 1, w = (0.6, 0.4): V(a=0) = 0.6, V(a=1) = 0.4
    from longhorizon.repro import latent_mdp as repro

    S, A = repro.QUICK.states, repro.QUICK.actions
    R = np.zeros((2, S, A))
    R[0, :, 0], R[1, :, 1] = 1.0, 1.0
    P = np.broadcast_to(np.eye(S)[None, None, :1], (2, S, A, S)).copy()
    lmdp = lm.LMDP(P, R, np.array([0.6, 0.4]), horizon=1)
    out = ll.learn(lmdp, repro.QUICK.learner(), kinds=ll.BONUSES)
    assert out["reference"] == pytest.approx(0.6)
    for kind in ll.BONUSES:
        values = out[kind]["values"]
        assert np.all(np.isclose(values, 0.6) | np.isclose(values, 0.4))
        np.testing.assert_allclose(out[kind]["regret"], np.cumsum(0.6 - values, -1))
        # the policy changes only when a count doubles: at most M S A log2(K H) + 1 plans per learner
        changes = (np.diff(values, axis=-1) != 0).sum(-1)
        assert np.all(changes <= 2 * S * A * np.log2(repro.QUICK.episodes) + 1)
    # several instances in one program: one reference each, arrays [instances, seeds, K]
    both = ll.learn([lmdp, lm.LMDP(P, R[::-1].copy(), np.array([0.6, 0.4]), horizon=1)], repro.QUICK.learner(),
                    kinds=ll.BONUSES)
    assert both["reference"] == pytest.approx([0.6, 0.6])
    assert both["bernstein"]["regret"].shape == (2, repro.QUICK.seeds, repro.QUICK.episodes)


def test_bad_input_is_a_usage_error():
    lmdp = lm.random_lmdp(2, 2, 3, seed=0)
    with pytest.raises(UsageError, match="bonus"):
        ll.Config(bonus="ucb")
    with pytest.raises(UsageError, match="delta"):
        ll.Config(delta=1.5)
    with pytest.raises(UsageError, match="1/H"):
        lm.LMDP(lmdp.transitions, lmdp.rewards * 3, lmdp.weights, lmdp.horizon)
    with pytest.raises(UsageError, match="probability"):
        lm.LMDP(lmdp.transitions * 2, lmdp.rewards, lmdp.weights, lmdp.horizon)
    with pytest.raises(UsageError, match="two contexts"):
        lm.plan(np.ones((3, 2, 2, 2)) / 2, np.zeros((3, 2, 2)), np.ones(3) / 3, 2, 4, 2)
    with pytest.raises(UsageError, match="max_horizon"):
        ll.learn(lm.random_lmdp(2, 2, 50, seed=0), ll.Config(max_horizon=40))


def _recorded(hoeffding_final, det_ratio=0.1, rate=0.5, instances=3, seeds=2):
    """Recorded regrets at H = 5, 10, 20 per [instance][seed]: Bernstein flat in H, Hoeffding ``hoeffding_final(H)``."""
    hs = (5, 10, 20)
    rows = {}
    for kind in ("stochastic", "deterministic"):
        for h in hs:
            scale = det_ratio if kind == "deterministic" else 1.0
            grid = lambda f: [[f(i) + 0.1 * j for j in range(seeds)] for i in range(instances)]  # noqa: E731
            bern = grid(lambda i: scale * (10.0 + i))
            hoef = grid(lambda i: hoeffding_final(h) * (1 + 0.01 * i))
            slope = [[rate + 0.01 * i + 0.001 * j for j in range(seeds)] for i in range(instances)]
            rows[f"{kind} H={h}"] = {"bernstein": {"final": bern, "late": bern, "rate": slope},
                                     "hoeffding": {"final": hoef, "late": hoef, "rate": slope}}
    return {"setup": {"horizons": list(hs), "episodes": 100, "seeds": seeds, "instances": list(range(instances))},
            "rows": rows}


def test_claim_rules_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro import latent_mdp as repro

    verdicts = lambda *a, **kw: [c.verdict for c in repro.judge(_recorded(*a, **kw))[0]]  # noqa: E731
    # Bernstein flat, Hoeffding growing like H, deterministic 10x smaller, sqrt(K) rate; the log(K) rate is not
    # observed at this K: inconclusive, never contradicted
    assert verdicts(lambda h: 2.0 * h) == [C.HOLDS, C.HOLDS, C.HOLDS, C.HOLDS, C.INCONCLUSIVE]
    assert verdicts(lambda h: 2.0 * h, det_ratio=2.0)[2] == C.INCONCLUSIVE  # not much smaller at this K
    assert verdicts(lambda h: 10.0)[1] == C.INCONCLUSIVE  # Hoeffding as flat as Bernstein: equal slopes
    assert verdicts(lambda h: 200.0 / h)[1] == C.INCONCLUSIVE  # an upper bound is not contradicted by a shape
    ruled = repro.judge(_recorded(lambda h: 200.0 / h))[0][1]
    assert ruled.evidence["rule_verdict"] == C.CONTRADICTED  # what the bare rule said is kept
    assert C.CONTRADICTED not in verdicts(lambda h: 2.0 * h, rate=0.9, det_ratio=2.0)
    assert set(verdicts(lambda h: 2.0 * h, rate=1.2)) == {C.NO_SIGNAL}  # linear regret at K: nothing learned
    assert set(verdicts(lambda h: 2.0 * h, instances=2)) == {C.INCONCLUSIVE}  # two instances never judge
    # the fits themselves: y = 3 x^0.5 exactly has slope 0.5 and a zero-width interval
    exact = ll.log_log_fit([1, 2, 4, 8], [3, 3 * 2**0.5, 6, 3 * 8**0.5])
    assert exact["slope"] == pytest.approx(0.5) and exact["hi"] - exact["lo"] == pytest.approx(0, abs=1e-9)
    regret = np.cumsum(np.ones((2, 3, 100)), -1)  # Regret(k) = k: slope 1 for every learner
    assert ll.regret_rates(regret) == pytest.approx([1.0] * 6)
    # per-instance means over seeds, and the H-slope fits over instances
    rec = _recorded(lambda h: 2.0 * h)
    np.testing.assert_allclose(repro.per_instance(rec["rows"], "stochastic", [5, 10], "bernstein", "final"),
                               [[10.05, 10.05], [11.05, 11.05], [12.05, 12.05]])
    fits = repro.fits_of(rec["setup"], rec["rows"])
    assert fits["horizon"]["stochastic hoeffding"]["slope"] == pytest.approx(1.0, abs=0.01)  # 2H (+ 0.1 per seed)
    assert fits["horizon"]["stochastic bernstein"]["slope"] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.slow
def test_quick_repro_writes_its_files(tmp_path):
    from longhorizon.repro import claims as C
    from longhorizon.repro import latent_mdp as repro

    summary = repro.run(str(tmp_path), quick=True, log=lambda *_, **__: None)
    assert {p.name for p in tmp_path.iterdir()} >= {"README.md", "summary.json", "latent_mdp.png"}
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(saved) == [] and saved["quick"] is True and saved["claims"] == summary["claims"]
    assert [c["verdict"] for c in saved["claims"]] == [C.QUICK] * 5
    readme = (tmp_path / "README.md").read_text()
    assert "## Verdict" in readme and "longhorizon repro latent-mdp --quick" in readme and "latent_mdp.png" in readme
    assert (tmp_path / "curves" / "bernstein_stochastic_H_5.csv").exists()
