"""Adversarial linear-Q MDPs (theory/adversarial_mdp.py, theory/ftrl.py): exact evaluation against Monte Carlo
and brute force, the estimator's unbiasedness, log-barrier FTRL's normaliser against closed forms, the claim
rules by hand, and `longhorizon repro adversarial-linear --quick`."""

import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.repro import adversarial_linear as repro
from longhorizon.theory import adversarial_mdp as amdp
from longhorizon.theory import ftrl

CONFIG = amdp.LinearMDPConfig(layers=3, states=3, actions=3, dim=3, seed=4)
SAMPLES = 20_000


pytestmark = pytest.mark.xdist_group("adversarial-mdp")  # the sampled instance (module fixture) is built once, on one xdist worker


@pytest.fixture(scope="module")
def instance():
    """An MDP, a random full-support policy, losses and SAMPLES trajectories with their estimates (float64)."""
    with jax.enable_x64(True):
        mdp = amdp.make_linear_mdp(CONFIG)
        rng = np.random.default_rng(0)
        policy = jnp.asarray(rng.dirichlet(np.ones(CONFIG.actions), size=(CONFIG.layers, CONFIG.states)))
        theta = jnp.asarray(rng.uniform(size=(CONFIG.layers, CONFIG.dim)))
        sigma = ftrl.covariance(mdp, amdp.occupancy(mdp, policy))

        @jax.jit
        def sample(keys):
            def one(key):
                states, actions, step_losses = amdp.sample_trajectory(key, mdp, policy, theta)
                return step_losses.sum(), ftrl.linear_q_estimate(mdp, sigma, states, actions, step_losses)

            return jax.vmap(one)(keys)

        returns, q_hat = sample(jax.random.split(jax.random.PRNGKey(1), SAMPLES))
        Q, V, value = amdp.evaluate_policy(mdp, policy, theta)
        return {"mdp": mdp, "policy": policy, "theta": theta, "returns": np.asarray(returns), "q_hat": np.asarray(q_hat),
                "Q": np.asarray(Q), "V": np.asarray(V), "value": float(value), "sigma": np.asarray(sigma)}


def test_policy_evaluation_matches_monte_carlo_rollouts(instance):
    returns = instance["returns"]
    se = returns.std() / np.sqrt(len(returns))
    assert abs(returns.mean() - instance["value"]) < 4 * se
    assert instance["returns"].dtype == np.float64


def test_q_is_linear_in_the_features(instance):
    # Q_h = phi_h^T (theta_h + mu_h V_{h+1}): the linear-Q assumption, exactly
    mdp, Q, V = instance["mdp"], instance["Q"], instance["V"]
    v_next = np.concatenate([V[1:], np.zeros((1, CONFIG.states))])
    weights = np.asarray(instance["theta"]) + np.einsum("hit,ht->hi", np.asarray(mdp.mu), v_next)
    np.testing.assert_allclose(Q, np.einsum("hsai,hi->hsa", np.asarray(mdp.phi), weights), atol=1e-12)


def test_occupancy_is_a_distribution_and_gives_the_value(instance):
    with jax.enable_x64(True):
        mdp, policy, theta = instance["mdp"], instance["policy"], instance["theta"]
        q = np.asarray(amdp.occupancy(mdp, policy))
        np.testing.assert_allclose(q.sum(axis=(1, 2)), 1.0, atol=1e-12)
        np.testing.assert_allclose((q * np.asarray(amdp.losses(mdp, theta))).sum(), instance["value"], atol=1e-12)


def test_linear_q_estimator_is_unbiased(instance):
    q_hat, Q = instance["q_hat"], instance["Q"]
    se = q_hat.std(0) / np.sqrt(len(q_hat))
    z = np.abs(q_hat.mean(0) - Q) / se
    assert z.max() < 4.5, z.max()  # 27 entries, each within 4.5 standard errors
    assert q_hat.min() < 0  # off-diagonal terms of Sigma^-1 make single estimates negative, though Q >= 0


def test_optimal_value_matches_brute_force_over_deterministic_policies():
    config = amdp.LinearMDPConfig(layers=2, states=2, actions=2, dim=2, seed=3)
    with jax.enable_x64(True):
        mdp = amdp.make_linear_mdp(config)
        theta = jnp.asarray(np.random.default_rng(5).uniform(size=(2, 2)))
        best, greedy = amdp.optimal_value(mdp, theta)
        choices = jnp.asarray(list(itertools.product(range(2), repeat=4))).reshape(16, 2, 2)
        policies = jax.nn.one_hot(choices, 2, dtype=jnp.float64)  # all 16 deterministic policies
        values = np.asarray(jax.jit(jax.vmap(lambda policy: amdp.evaluate_policy(mdp, policy, theta)[2]))(policies))
        assert float(best) == pytest.approx(min(values), abs=1e-12)
        assert float(amdp.evaluate_policy(mdp, greedy, theta)[2]) == pytest.approx(min(values), abs=1e-12)


def test_log_barrier_two_actions_closed_form():
    # p_a = 1 / (eta (C_a + lambda)); with u = eta (C_1 + lambda), delta = eta (C_2 - C_1):
    # 1/u + 1/(u + delta) = 1  <=>  u^2 + (delta - 2) u - delta = 0  =>  u = ((2 - delta) + sqrt(delta^2 + 4)) / 2
    rng = np.random.default_rng(0)
    cum_q = np.concatenate([rng.normal(0, 50, size=(64, 2)), [[-1e6, 3e5], [0.0, 0.0]]])
    eta = np.concatenate([rng.uniform(0.01, 3, 64), [0.01, 1.0]])
    with jax.enable_x64(True):
        p = np.asarray(ftrl.log_barrier_policy(jnp.asarray(cum_q), jnp.asarray(eta)))
    delta = eta * (cum_q[:, 1] - cum_q[:, 0])
    u = ((2 - delta) + np.sqrt(delta**2 + 4)) / 2
    np.testing.assert_allclose(p[:, 0], 1 / u, rtol=1e-10)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-14)
    assert (p > 0).all()


def test_log_barrier_normaliser_matches_bisection_and_kkt():
    rng = np.random.default_rng(1)
    cum_q = rng.normal(0, 200, size=(5,))  # strongly negative entries included
    eta = 0.05
    with jax.enable_x64(True):
        p = np.asarray(ftrl.log_barrier_policy(jnp.asarray(cum_q), eta))
    # bisection for lambda on (-min C + 1/eta, -min C + A/eta): sum_a 1/(eta (C_a + lambda)) = 1 in between
    lo, hi = -cum_q.min() + 1 / eta, -cum_q.min() + len(cum_q) / eta
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.sum(1 / (eta * (cum_q + mid))) > 1 else (lo, mid)
    np.testing.assert_allclose(p, 1 / (eta * (cum_q + lo)), rtol=1e-10)
    # stationarity: C_a - 1 / (eta p_a) is the same (-lambda) for every action
    np.testing.assert_allclose(cum_q - 1 / (eta * p), -lo, rtol=1e-9)


def test_hedge_is_exponential_weights():
    cum_q = np.array([[1.0, -2.0, 0.5]])
    with jax.enable_x64(True):
        p = np.asarray(ftrl.hedge_policy(jnp.asarray(cum_q), 0.7))
    w = np.exp(-0.7 * cum_q)
    np.testing.assert_allclose(p, w / w.sum(), rtol=1e-12)


def test_adversaries_by_hand():
    with jax.enable_x64(True):
        tables = jnp.asarray(np.arange(2 * 1 * 2, dtype=float).reshape(2, 1, 2))
        np.testing.assert_array_equal(amdp.switching_theta(tables, jnp.asarray(149), 50), tables[0])  # 149 // 50 = 2
        np.testing.assert_array_equal(amdp.switching_theta(tables, jnp.asarray(50), 50), tables[1])
        mdp = amdp.LinearMDP(jnp.asarray([[[[1.0, 0.0], [0.0, 1.0]]]]), jnp.ones((1, 2, 1)), jnp.ones(1))
        occupancy = jnp.asarray([[[0.75, 0.25]]])  # expected features (0.75, 0.25)
        # clip(1/2 + 0.5 * 2 * (f - 1/2)) = (0.75, 0.25)
        np.testing.assert_allclose(amdp.adaptive_theta(mdp, occupancy, 0.5), [[0.75, 0.25]])


def test_bad_configs_are_refused():
    with pytest.raises(UsageError, match="kind"):
        amdp.AdversaryConfig(kind="oblivious")
    with pytest.raises(UsageError, match="period"):
        amdp.AdversaryConfig(period=0)
    with pytest.raises(UsageError, match="amplitude"):
        amdp.AdversaryConfig(amplitude=2.0)
    with pytest.raises(UsageError, match="algorithm"):
        ftrl.LearnerConfig(algorithm="exp3")
    with pytest.raises(UsageError, match="eta0"):
        ftrl.LearnerConfig(eta0=0.0)
    with pytest.raises(UsageError, match="dim"):
        amdp.LinearMDPConfig(states=1, actions=2, dim=3)
    with pytest.raises(UsageError, match="layers"):
        amdp.LinearMDPConfig(layers=0)


def _recorded(ci=(0.45, 0.6), hedge=None, ftrl=None, min_prob=1e-3, skipped=0.0, seeds=5):
    ftrl = [10.0, 11.0, 12.0, 10.0, 11.0][:seeds] if ftrl is None else ftrl
    hedge = [30.0, 31.0, 29.0, 35.0, 28.0][:seeds] if hedge is None else hedge
    rows = [{"learner": a, "adversary": adv, "slope_ci": list(ci), "regret_final": ftrl if a == "log_barrier" else hedge,
             "min_prob": min_prob, "skipped_share": skipped} for a in ("log_barrier", "hedge") for adv in ("switching", "adaptive")]
    return {"setup": {"seeds": seeds, "chunk": 10, "chunks": 10}, "rows": rows}


def test_claim_rules_by_hand():
    from longhorizon.repro import claims as C

    verdicts = lambda **kw: [c.verdict for c in repro.judge(_recorded(**kw))[0]]  # noqa: E731
    assert verdicts() == [C.HOLDS] * 4  # slope interval below 0.65; no skipped update; Hedge worse on every seed
    assert verdicts(ci=(0.7, 0.9))[:2] == [C.CONTRADICTED] * 2
    assert verdicts(ci=(0.5, 0.7))[:2] == [C.INCONCLUSIVE] * 2
    assert set(verdicts(ci=(0.9, 1.1))) - {C.HOLDS} == {C.NO_SIGNAL}  # regret not sublinear: FTRL did not learn
    assert verdicts(min_prob=0.0)[2] == verdicts(skipped=0.01)[2] == C.CONTRADICTED
    assert verdicts(hedge=[10.0, 11.0, 12.0, 10.0, 11.0], ftrl=[30.0, 31.0, 29.0, 40.0, 28.0])[3] == C.CONTRADICTED
    assert verdicts(seeds=2)[0] == verdicts(seeds=2)[3] == C.INCONCLUSIVE  # two seeds never judge
    assert verdicts(hedge=[30.0, 31.0, 29.0, 900.0, 14.0])[3] == C.INCONCLUSIVE  # one wild seed widens the interval


def test_fit_slope_recovers_a_power_law():
    ks = np.array([1e3, 3e3, 1e4, 3e4, 1e5])
    regret = np.array([c * ks**0.5 for c in (1.0, 1.2, 0.8)])
    slope, lo, hi = repro.fit_slope(ks, regret, bootstrap=200)
    assert slope == pytest.approx(0.5, abs=1e-9) and lo == pytest.approx(0.5, abs=1e-9)
    assert np.isnan(repro.fit_slope(ks, -regret, bootstrap=10)[0])


def test_quick_repro_writes_its_files(tmp_path):
    summary = repro.run(str(tmp_path), quick=True, log=lambda *_: None)
    for name in ("README.md", "summary.json", "adversarial_linear.png"):
        assert (tmp_path / name).is_file()
    curve = (tmp_path / "curves" / "log_barrier_switching.csv").read_text().splitlines()
    assert curve[0].startswith("step,regret_mean,regret_seed0") and len(curve) == 1 + 20  # one row per checkpoint
    from longhorizon.repro import claims as C

    saved = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(saved) == [] and saved["quick"] is True and saved["claims"] == summary["claims"]
    assert [c["verdict"] for c in saved["claims"]] == [C.QUICK] * 4
    assert "longhorizon repro adversarial-linear --quick" in (tmp_path / "README.md").read_text()
    # FTRL's probabilities stay positive and every update is formed, whatever the estimates' sign
    ftrl_rows = [r for r in saved["rows"] if r["learner"] == "log_barrier"]
    assert all(r["min_prob"] > 0 and r["skipped_updates"] == 0 for r in ftrl_rows)
