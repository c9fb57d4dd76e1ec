"""`longhorizon repro pqn`: Baird's counterexample against hand-computed numbers, the divergence of plain
off-policy TD and the boundedness of the LayerNorm + l2 critic at small T, and the MinAtar claim rules on
constructed arm records (the quick run trains two MinAtar arms, over a minute on 2 cores: not run here)."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.repro import claims as C
from longhorizon.repro import pqn
from longhorizon.tabular import baird as B

SMALL = dataclasses.replace(pqn.QUICK, baird_updates=400, baird_inits=3, baird_seeds=3)


def test_baird_arrays_are_sutton_and_barto_example_11_1():
    mdp = B.baird()
    x = np.array([[2, 0, 0, 0, 0, 0, 0, 1],
                  [0, 2, 0, 0, 0, 0, 0, 1],
                  [0, 0, 2, 0, 0, 0, 0, 1],
                  [0, 0, 0, 2, 0, 0, 0, 1],
                  [0, 0, 0, 0, 2, 0, 0, 1],
                  [0, 0, 0, 0, 0, 2, 0, 1],
                  [0, 0, 0, 0, 0, 0, 1, 2]], float)
    np.testing.assert_array_equal(mdp.features, x)
    np.testing.assert_array_equal(mdp.p_target, np.tile([0, 0, 0, 0, 0, 0, 1.0], (7, 1)))
    # dashed (6/7) spreads over states 1..6, solid (1/7) goes to 7: the next state is uniform from anywhere
    np.testing.assert_allclose(mdp.p_behaviour, np.full((7, 7), 1 / 7), atol=1e-15)
    np.testing.assert_allclose(mdp.d_behaviour @ mdp.p_behaviour, mdp.d_behaviour)  # d_mu is stationary
    assert mdp.gamma == 0.99 and not mdp.rewards.any()


def test_one_expected_td0_update_by_hand():
    """At w0 = (1,1,1,1,1,1,10,1): v(1..6) = 3, v(7) = 12, every state bootstraps from state 7, so
    delta(1..6) = 0.99 * 12 - 3 = 8.88 and delta(7) = 11.88 - 12 = -0.12; with d = 1/7,
    dw_i = 2 * 8.88 / 7 (i <= 6), dw_7 = -0.12 / 7, dw_8 = (6 * 8.88 + 2 * (-0.12)) / 7 = 53.04 / 7."""
    mdp = B.baird()
    with jax.enable_x64(True):
        w0 = {"w": jnp.asarray(B.W0)}
        new = B.expected_step(mdp, B.linear_values(mdp), w0, alpha=0.01)["w"]
    hand = np.array([2 * 8.88 / 7] * 6 + [-0.12 / 7, 53.04 / 7])
    np.testing.assert_allclose(np.asarray(new), np.asarray(B.W0) + 0.01 * hand, rtol=1e-14)
    # the same step in matrix form: w <- w - alpha A w
    np.testing.assert_allclose(np.asarray(new), np.asarray(B.W0) - 0.01 * B.td_matrix(mdp) @ np.asarray(B.W0), rtol=1e-12)


def test_lambda_returns_on_baird_are_td0_with_a_smaller_discount():
    """P_pi^2 = P_pi, so T^lambda v = gamma (1 - lambda) / (1 - gamma lambda) P_pi v (reward 0)."""
    mdp = B.baird()
    v = jnp.asarray([0.5, -1.0, 2.0, 0.0, 3.0, 1.0, 4.0], jnp.float32)
    for lam in (0.0, 0.65, 0.95):
        discount = 0.99 * (1 - lam) / (1 - 0.99 * lam)
        np.testing.assert_allclose(B.lambda_target(mdp, v, lam), discount * 4.0 * np.ones(7), rtol=1e-5)
    assert B.min_real_eigenvalue(mdp) < 0 < B.min_real_eigenvalue(B.baird(0.8)) + 1e-12  # diverges at 0.99, not 0.8
    lam, gamma = B.critical_lambda(), B.critical_gamma()
    assert 0.65 < lam < 0.95 and 0.8 < gamma < 0.99
    assert abs(0.99 * (1 - lam) / (1 - 0.99 * lam) - gamma) < 1e-9  # the two thresholds are one


def test_sampled_update_is_unbiased_for_the_expected_one():
    mdp = B.baird()
    values = B.linear_values(mdp)
    n = 400_000
    with jax.enable_x64(True):
        w0 = {"w": jnp.asarray(B.W0)}
        keys = jax.random.split(jax.random.PRNGKey(3), n)
        states = jax.random.randint(jax.random.PRNGKey(4), (n,), 0, 7)  # s ~ d_mu (uniform)
        step = jax.jit(jax.vmap(lambda s, k: B.sampled_step(mdp, values, w0, s, k, 1.0)[0]["w"] - w0["w"]))
        increments = np.asarray(step(states, keys))
        expected = np.asarray(B.expected_step(mdp, values, w0, 1.0)["w"] - w0["w"])
    se = increments.std(0) / np.sqrt(n)
    assert np.all(np.abs(increments.mean(0) - expected) < 5 * se)


def test_trace_growth_by_hand():
    """Run 0: ||w|| 1, 2, 4, 8, 16 (log slope over t = 2..4 is log 2); run 1: 2, 1, 1, 1, 1 (slope 0)."""
    w = np.array([[1.0, 2, 4, 8, 16], [2.0, 1, 1, 1, 1]])
    v = np.array([[1.0, 3, 2, 2, 2], [4.0, 4, 2, 1, 1]])
    g = B.trace_growth(w, v)
    assert g["w0"] == [1.0, 2.0] and g["final_ratio"] == [16.0, 0.5] and g["half_to_end_ratio"] == [4.0, 1.0]
    assert g["max_w_ratio"] == [16.0, 1.0] and g["max_value_ratio"] == [3.0, 1.0] and g["final_max_value"] == [2.0, 1.0]
    np.testing.assert_allclose(g["log_norm_slope"], [np.log(2), 0.0], atol=1e-12)


def test_expected_runs_over_settings_equal_one_run_each():
    mdp = B.baird()
    with jax.enable_x64(True):
        starts = {"w": jnp.stack([jnp.asarray(B.W0), 2 * jnp.asarray(B.W0)])}
        values = B.linear_values(mdp)
        both = B.run_expected_settings(mdp, values, starts, 20, [0.0, 0.65], [0.1, 0.0])
        one = B.run_expected(mdp, values, {"w": 2 * jnp.asarray(B.W0)}, 20, B.ALPHA, 0.65, 0.0)
    assert both.w_norm.shape == (2, 2, 21)
    np.testing.assert_allclose(both.w_norm[1, 1], one.w_norm, rtol=1e-12)
    np.testing.assert_allclose(both.max_value[1, 1], one.max_value, rtol=1e-12)


@pytest.fixture(scope="module")
def measured():
    return pqn.baird_measure(SMALL)


@pytest.mark.slow
def test_plain_td_diverges_and_the_layernorm_l2_critic_stays_bounded(measured):
    t = measured["traces"]
    plain = t["baird linear TD(0)"]["w_norm"][0]
    assert plain[-1] > 5 * plain[0] and plain[-1] > plain[len(plain) // 2]  # exponential growth at rate ~2.4e-3
    sampled = t["baird linear TD(0) sampled"]["w_norm"]
    assert np.all(sampled[:, -1] > 3 * sampled[:, 0])
    for name in ("baird LayerNorm + l2", "baird LayerNorm + l2 sampled"):
        w, v = t[name]["w_norm"], t[name]["max_value"]
        assert np.all(w.max(1) <= w[:, 0] * (1 + 1e-9)) and np.all(w[:, -1] < 0.5 * w[:, 0])  # shrinks towards 0
        assert np.all(v.max(1) <= v[:, 0] * (1 + 1e-9))
    rows = {r["arm"]: r for r in pqn.baird_claims(measured, quick=False)[2]}
    assert rows["baird linear TD(0)"]["predicted_slope"] == pytest.approx(np.log(1 + 0.01 * 0.23925), rel=1e-3)


def fake_record(evals, seconds_per_chunk, steps_per_chunk=8192):
    evals = np.asarray(evals, float)
    points = [{"env_steps": (j + 1) * steps_per_chunk, "train_seconds": (j + 1) * seconds_per_chunk,
               "wall_seconds": (j + 1) * seconds_per_chunk + 5, "return_per_seed": evals[:, j].tolist(),
               "eval_per_seed": evals[:, j].tolist()} for j in range(evals.shape[1])]
    chunks = evals.shape[1]
    return {"settings": {}, "platform": "cpu", "points": points, "final_eval_per_seed": evals[:, -1].tolist(),
            "compile_seconds": 10.0, "train_seconds": chunks * seconds_per_chunk,
            "wall_seconds": chunks * seconds_per_chunk + 20, "steps_per_second": 3 * steps_per_chunk / seconds_per_chunk,
            "status": "completed"}


PQN_FAST = fake_record([[0, 5, 8, 9, 10], [1, 6, 8, 10, 11], [0, 5, 7, 9, 10]], 10)
DQN_SLOW = fake_record([[0, 1, 2, 3, 6], [0, 2, 3, 4, 5], [1, 1, 2, 4, 6]], 40)


def test_time_to_target_and_the_censoring_rule():
    claims, signals, row = pqn.game_claims("G", PQN_FAST, DQN_SLOW, quick=False)
    assert row["target"] == pytest.approx(1 / 3 + 0.5 * (31 / 3 - 1 / 3))  # lower first-eval mean, higher final mean
    assert row["pqn_seconds"] == [30.0, 20.0, 30.0] and row["pqn_reached"] == [True] * 3
    assert row["dqn_seconds"] == [200.0] * 3 and row["dqn_reached"] == [True, False, True]  # seed 1: censored
    assert signals["pqn"]["moved"] and signals["dqn"]["moved"]
    timing, final = claims
    assert timing.verdict == C.HOLDS  # a censored DQN time is a lower bound: holds stands
    assert final.verdict == C.HOLDS
    # a PQN seed that never reaches the target cannot support "holds"
    slow_seed = fake_record([[0, 5, 8, 9, 10], [1, 6, 8, 10, 11], [0, 0, 0, 1, 1]], 10)
    timing = pqn.game_claims("G", slow_seed, DQN_SLOW, quick=False)[0][0]
    assert timing.verdict == C.INCONCLUSIVE and timing.evidence["rule_verdict"] == C.HOLDS


def test_a_flat_arm_gives_no_signal_and_quick_is_never_judged():
    flat = fake_record(np.zeros((3, 5)), 40)
    claims, signals, _ = pqn.game_claims("G", PQN_FAST, flat, quick=False)
    assert not signals["dqn"]["moved"] and all(c.verdict == C.NO_SIGNAL for c in claims)
    assert all("G dqn" in c.evidence["did_not_move"][0] for c in claims)
    assert all(c.verdict == C.QUICK for c in pqn.game_claims("G", PQN_FAST, DQN_SLOW, quick=True)[0])


def test_the_gpu_claim_reads_not_run_without_gpu_arms(tmp_path):
    (claim,) = pqn.gpu_claim(tmp_path, pqn.FULL, quick=False)
    assert claim.verdict == C.INCONCLUSIVE and claim.evidence["reason"] == "not run: no GPU"
    assert claim.evidence["command"] == pqn.GPU_COMMAND


def test_gpu_arms_are_judged_against_50x(tmp_path):
    scale = dataclasses.replace(pqn.FULL, games=("G",))
    (tmp_path / "gpu" / "arms").mkdir(parents=True)
    gpu_pqn = fake_record([[0, 5, 8, 9, 10], [1, 6, 8, 10, 11], [0, 5, 7, 9, 10]], 0.1)
    (tmp_path / "gpu" / "arms" / "G-pqn.json").write_text(json.dumps({**gpu_pqn, "platform": "gpu"}))
    (tmp_path / "gpu" / "arms" / "G-dqn.json").write_text(json.dumps(DQN_SLOW))
    (claim,) = pqn.gpu_claim(tmp_path, scale, quick=False)
    assert claim.verdict == C.HOLDS and claim.evidence["speedup"] > 50  # 200 s (censored) vs 0.2-0.3 s


@pytest.mark.slow
def test_quick_report_writes_a_schema_valid_summary_that_judges_nothing(measured, tmp_path):
    records = {("Breakout-MinAtar", "pqn"): PQN_FAST, ("Breakout-MinAtar", "dqn"): DQN_SLOW}
    summary = pqn.report(tmp_path, SMALL, True, measured, records, 12.0)
    assert C.validate_summary(json.loads((tmp_path / "summary.json").read_text())) == []
    assert {c["verdict"] for c in summary["claims"]} == {C.QUICK}
    assert (tmp_path / "README.md").exists() and (tmp_path / "pqn.png").exists()
    assert {p.name for p in (tmp_path / "curves").iterdir()} >= {"Breakout-MinAtar_pqn.csv", "baird_linear_TD_0.csv"}
    full = pqn.report(tmp_path / "full", SMALL, False, measured, records, 12.0)
    verdicts = {c["claim"][:40]: c["verdict"] for c in full["claims"]}
    assert C.QUICK not in verdicts.values() and C.validate_summary(full) == []
