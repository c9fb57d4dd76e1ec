"""Reward-free exploration in linear mixture MDPs (issue 20, section 1): exact planning, the regression, the
bonus, the claim rule and the --quick reproduction."""

from __future__ import annotations

import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.theory import linear_mixture as lm
from longhorizon.theory import reward_free as rf


def brute_force_value(transition, reward, policy, initial):
    """V^pi_1(s_1) by pushing the state distribution forward (independent of the backward DP)."""
    dist = np.eye(transition.shape[0])[initial]
    total = 0.0
    for h, acts in enumerate(policy):
        rows = np.arange(len(acts))
        total += dist @ reward[h][rows, acts]
        dist = dist @ transition[rows, acts]
    return total


def test_planner_matches_brute_force_over_every_deterministic_policy():
    mdp = lm.random_mixture(states=2, actions=2, dim=3, seed=1)
    horizon, transition = 3, mdp.transition()
    reward = np.random.default_rng(0).uniform(size=(horizon, 2, 2)) / horizon
    values, greedy = lm.plan(transition, reward, horizon)
    best = max(brute_force_value(transition, reward, np.array(p).reshape(horizon, 2), 0)
               for p in itertools.product(range(2), repeat=2 * horizon))
    assert values[0, 0] == pytest.approx(best, abs=1e-12)
    assert lm.evaluate(transition, reward, greedy)[0, 0] == pytest.approx(best, abs=1e-12)
    assert brute_force_value(transition, reward, greedy, 0) == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize("mdp", [lm.hard_instance(4, 16, seed=3), lm.random_mixture(5, 3, 4, seed=2)],
                         ids=["hard", "random"])
def test_mixture_rows_are_distributions_and_psi_is_the_expected_next_value(mdp):
    rows = mdp.transition()
    assert rows.min() >= 0 and np.allclose(rows.sum(-1), 1.0)
    value = np.random.default_rng(0).uniform(size=mdp.num_states)
    assert np.allclose(mdp.psi(value) @ mdp.theta, rows @ value)


def test_hard_instance_reaches_the_rewarding_state_with_delta_plus_mu_dot_a():
    mdp = lm.hard_instance(dim=3, horizon=10, gap=0.5, seed=0)
    actions = np.array(list(itertools.product([-1.0, 1.0], repeat=2)))
    assert np.allclose(mdp.transition()[0, :, 1], 0.1 + actions @ mdp.theta[1:])
    assert np.allclose(np.abs(mdp.theta[1:]), 0.5 * 0.1 / 2)
    assert np.allclose(mdp.transition()[1, :, 1], 1.0)  # x1 absorbing


def test_weighted_ridge_matches_the_normal_equations_and_the_incremental_update():
    rng = np.random.default_rng(0)
    x, y, w = rng.normal(size=(12, 3)), rng.normal(size=12), rng.uniform(0.2, 3.0, size=12)
    theta, inverse = rf.ridge_regression(x, y, w, ridge=0.5)
    # closed form as least squares on the sqrt-weighted rows augmented with sqrt(lambda) I
    design = np.vstack([x * np.sqrt(w)[:, None], np.sqrt(0.5) * np.eye(3)])
    target = np.concatenate([y * np.sqrt(w), np.zeros(3)])
    assert np.allclose(theta, np.linalg.lstsq(design, target, rcond=None)[0])
    with jax.enable_x64(True):
        running = jnp.eye(3) / 0.5
        for row, weight in zip(x, w):
            running = rf.sherman_morrison(running, jnp.asarray(row * np.sqrt(weight)))
        assert np.allclose(np.asarray(running), inverse, atol=1e-12)


def test_bonus_shrinks_as_data_grows_along_a_direction_and_not_across_it():
    direction, across = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])
    norms, norms_across = [], []
    for n in (0, 1, 10, 100):
        _, inverse = rf.ridge_regression(np.tile(direction, (n, 1)), np.zeros(n), np.ones(n), ridge=1.0)
        norms.append(rf.ellipsoid_norm(direction, inverse))
        norms_across.append(rf.ellipsoid_norm(across, inverse))
    assert all(a > b for a, b in zip(norms, norms[1:]))
    assert np.allclose(norms, 1 / np.sqrt(1 + np.array([0, 1, 10, 100])))  # ||x||^2 / (lambda + n ||x||^2)
    assert np.allclose(norms_across, 1.0)


def test_exploration_learns_theta_and_the_weighted_ellipsoid_is_tighter():
    # the quick reproduction's shapes (d = 4, K = 120, max H = 16, 2 seeds), so one compiled program serves both
    mdp = lm.hard_instance(4, 16, seed=0)
    configs = [rf.Config(a, episodes=120, beta_scale=0.1) for a in rf.ALGORITHMS]
    runs = dict(zip(rf.ALGORITHMS, rf.explore_all(mdp, 16, configs, seeds=[0, 1], max_horizon=16)))
    for run in runs.values():
        assert run.theta.shape == (2, 120, 4) and run.inverse.shape == (2, 120, 4, 4)
        assert abs(run.theta[:, -1, 0] - 1.0).max() < 0.05  # the well-sampled mass direction
    direction = mdp.psi(np.array([0.0, 1.0]))[0, 0]  # (delta, a): the mu directions
    weighted, plain = (rf.ellipsoid_norm(direction, runs[a].inverse[0, -1]) for a in rf.ALGORITHMS)
    assert weighted < plain


def test_optimistic_planning_without_uncertainty_is_exact_planning():
    mdp = lm.random_mixture(3, 2, 2, seed=4)
    reward = lm.evaluation_rewards(mdp, 5, 2)[1]
    policy = rf.plan_optimistic(mdp, reward, mdp.theta[None], np.zeros((1, 2, 2)), np.zeros(1), 5)
    assert rf.suboptimality(mdp, reward[None], policy[None])[0, 0] == pytest.approx(0.0, abs=1e-12)


def test_batched_suboptimality_matches_per_policy_evaluation():
    mdp = lm.random_mixture(3, 2, 2, seed=5)
    rewards = lm.evaluation_rewards(mdp, 4, 2)
    policies = np.random.default_rng(1).integers(2, size=(2, 3, 4, 3))
    gaps = rf.suboptimality(mdp, rewards, policies)
    for i, reward in enumerate(rewards):
        best = lm.plan(mdp.transition(), reward, 4)[0][0, 0]
        for b in range(3):
            assert gaps[i, b] == pytest.approx(best - lm.evaluate(mdp.transition(), reward, policies[i, b])[0, 0], abs=1e-12)
    assert gaps.min() >= -1e-12


@pytest.mark.parametrize("build", [lambda: rf.Config("ucrl"), lambda: rf.Config(episodes=0), lambda: rf.Config(ridge=0.0),
                                   lambda: lm.hard_instance(dim=1), lambda: lm.LinearMixtureMDP(np.ones((1, 1, 1, 2)), np.ones(2)),
                                   lambda: lm.plan(np.ones((1, 1, 1)), np.ones((2, 1, 1)), 3),
                                   lambda: rf.explore_all(lm.hard_instance(), 8, [rf.Config(), rf.Config(episodes=5)], [0])])
def test_bad_input_is_one_usage_error(build):
    with pytest.raises(UsageError):
        build()


def test_claim_rule_on_constructed_numbers():
    from longhorizon.repro import claims as C
    from longhorizon.repro.horizon_free_rfe import fit_slope, judge
    from longhorizon.theory.reward_free import episodes_to_eps
    from longhorizon.theory.reward_free import ALGORITHMS

    # K(eps): the first checkpoint from which the gap stays <= eps (an early dip does not count); never -> censored
    gaps = np.array([[0.5, 0.05, 0.2, 0.05, 0.0], [0.5, 0.5, 0.5, 0.5, 0.2], [0.0, 0.0, 0.0, 0.0, 0.0]])
    k, censored = episodes_to_eps(gaps, np.array([1, 2, 4, 8, 16]), eps=0.1)
    assert k.tolist() == [8, 16, 1] and censored.tolist() == [False, True, False]

    horizons = np.array([8, 32, 128, 512])
    flat = np.array([[300, 310, 290, 305], [280, 300, 320, 300], [310, 290, 300, 295]])
    grows = np.array([[100, 400, 1600, 6400], [120, 380, 1700, 6000], [90, 420, 1500, 7000]])
    slope, low, high = fit_slope(horizons, np.log(grows), np.random.default_rng(0), 300)
    assert slope == pytest.approx(1.0, abs=0.05) and low < slope < high

    def verdicts(hf, ucrl, censored=False):  # [seeds, horizons] K(eps) of HF-UCRL-RFE++ and UCRL-RFE
        runs = {f"{a}@{h}": {"k_eps": list(k[:, i]), "censored": [censored is True or (censored == "some" and h == 512 and s == 0)
                                                                  for s in range(len(k))]}
                for a, k in zip(ALGORITHMS, (hf, ucrl)) for i, h in enumerate(horizons)}
        L = {"horizons": horizons.tolist(), "seeds": 3, "episodes": 2000, "flat_slope": 0.25,
             "results": {"hard": {"runs": runs}}}
        return [c.verdict for c in judge(L)[0]]

    assert verdicts(flat, grows) == [C.HOLDS, C.HOLDS]
    assert verdicts(grows, flat) == [C.CONTRADICTED, C.CONTRADICTED]
    assert verdicts(flat, grows, censored=True) == [C.NO_SIGNAL, C.NO_SIGNAL]  # K(eps) never measured
    # one censored run in 12: its K(eps) is only a lower bound, so the slopes decide nothing
    assert verdicts(flat, grows, censored="some") == verdicts(grows, flat, censored="some") == [C.INCONCLUSIVE] * 2


@pytest.mark.slow
def test_quick_repro_writes_its_files(tmp_path):
    from longhorizon.repro import claims as C
    from longhorizon.repro import horizon_free_rfe

    summary = horizon_free_rfe.run(str(tmp_path), quick=True)
    assert {"README.md", "summary.json", "rfe.png", "curves"} <= {p.name for p in tmp_path.iterdir()}
    curve = (tmp_path / "curves" / "hf-ucrl-rfe_hard_instance.csv").read_text().splitlines()
    assert curve[0] == "horizon,step,gap_mean,gap_min,gap_max" and len(curve) > 2
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(saved) == [] and saved["quick"] is True and saved["claims"] == summary["claims"]
    assert saved["claims"] and {c["verdict"] for c in saved["claims"]} == {C.QUICK}
    assert "## Verdict" in (tmp_path / "README.md").read_text()
