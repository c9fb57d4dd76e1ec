"""SEQUOIA: the Q-network MILP against brute force, its bounds, failures and fallbacks; the restless bandits."""

import itertools

import jax
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.structured import milp_q, sequoia
from longhorizon.structured.restless import FAMILIES, RestlessBandit, RestlessConfig

HIDDEN = (8, 8)


def random_net(seed, d_in, hidden=HIDDEN):
    params = milp_q.QNet(hidden).init(jax.random.PRNGKey(seed), np.zeros((1, d_in), np.float32))
    return milp_q.layers(params, hidden)


def all_actions(n):
    return np.array(list(itertools.product([0.0, 1.0], repeat=n)))


@pytest.mark.parametrize("family", ["budget", "path", "capacity"])
def test_milp_optimum_equals_brute_force_and_bounds_hold(family):
    n_arms = 3 if family == "budget" else 6  # budget has 2 bits per arm: 6 action bits either way
    env = RestlessBandit(RestlessConfig(family=family, n_arms=n_arms, budget=3, seed=1))
    actions = all_actions(env.n_actions)
    cons = env.constraints(env.reset(np.random.default_rng(0)))
    feasible = actions[[cons.feasible(a) for a in actions]]
    assert 1 < len(feasible) < len(actions)  # the constraints bind
    for seed in range(3):
        obs = env.reset(np.random.default_rng(seed))
        net = random_net(seed, env.obs_dim + env.n_actions)
        solution = milp_q.solve_q(net, obs, cons)
        q, _ = milp_q.forward(net, obs, feasible)
        assert solution.status == "optimal"
        np.testing.assert_allclose(solution.value, q.max(), atol=1e-6)
        assert any(np.array_equal(solution.action, a) for a in feasible)
        np.testing.assert_allclose(milp_q.forward(net, obs, solution.action[None])[0][0], q.max(), atol=1e-6)
        # every pre-activation over the whole box {0,1}^n lies inside its interval bound
        _, pre = milp_q.forward(net, obs, actions)
        for p, (low, high) in zip(pre, milp_q.interval_bounds(net, obs, np.zeros(env.n_actions), np.ones(env.n_actions))):
            assert np.all(p >= low - 1e-9) and np.all(p <= high + 1e-9)


def test_interval_bounds_by_hand():
    net = [(np.array([[1.0, -2.0], [3.0, 1.0]]), np.array([0.5, -1.0])), (np.array([[1.0], [1.0]]), np.array([0.0]))]
    (low, high), = milp_q.interval_bounds(net, np.array([2.0]), np.zeros(1), np.ones(1))
    # unit 0: 2*1 + 0.5 + 3 a in [2.5, 5.5]; unit 1: 2*(-2) - 1 + a in [-5, -4]
    np.testing.assert_allclose(low, [2.5, -5.0])
    np.testing.assert_allclose(high, [5.5, -4.0])


def test_schedule_cooldown_fixes_bits_and_milp_respects_it():
    env = RestlessBandit(RestlessConfig(family="schedule", n_arms=5, budget=2, window=3))
    rng = np.random.default_rng(0)
    obs = env.reset(rng)
    obs, _, _ = env.step(rng, np.array([1.0, 1.0, 0, 0, 0]))
    np.testing.assert_allclose(obs[5:], [2 / 3, 2 / 3, 0, 0, 0])  # cool-downs of W - 1 = 2 steps
    cons = env.constraints(obs)
    np.testing.assert_array_equal(cons.action_upper(), [0, 0, 1, 1, 1])
    net = random_net(3, env.obs_dim + env.n_actions)
    feasible = [a for a in all_actions(5) if sequoia._feasible(cons, a)]
    solution = milp_q.solve_q(net, obs, cons)
    np.testing.assert_allclose(solution.value, milp_q.forward(net, obs, np.array(feasible))[0].max(), atol=1e-6)
    assert solution.action[:2].sum() == 0


def test_path_constraints_accept_paths_from_the_depot_only():
    env = RestlessBandit(RestlessConfig(family="path", n_arms=6, budget=3, seed=0))
    cons = env.constraints(env.reset(np.random.default_rng(0)))
    arcs = set(env.edges)
    start = next(w for u, w in env.edges if u == 6)
    step = next(w for u, w in env.edges if u == start and w != 6)
    path = np.zeros(6)
    path[[start, step]] = 1.0
    assert cons.feasible(path) and cons.feasible(np.zeros(6))
    assert not cons.feasible(np.ones(6))  # six arms do not fit on a path of at most B = 3 edges
    # an edge between two arms that the depot does not reach is not a path from the depot
    far = [(u, w) for u, w in arcs if u < 6 and w < 6 and (6, u) not in arcs and (6, w) not in arcs]
    if far:
        detached = np.zeros(6)
        detached[list(far[0])] = 1.0
        assert not cons.feasible(detached)


@pytest.mark.parametrize("family", FAMILIES)
def test_sampled_actions_are_feasible_and_dynamics_follow_the_chain(family):
    env = RestlessBandit(RestlessConfig(family=family, n_arms=5, seed=2))
    rng = np.random.default_rng(0)
    obs = env.reset(rng)
    for _ in range(15):
        action = env.sample_feasible(rng, obs)
        assert sequoia._feasible(env.constraints(obs), action)
        obs, reward, _ = env.step(rng, action)
        assert reward == obs[:5].sum()
    # the myopic gain is P(good | acted) - P(good | passive) from the current state
    state = obs[:5].astype(int)
    gain = env.expected_gain(obs).reshape(5, env.n_interventions)
    expected = env.transition[np.arange(5), 1, state] - env.transition[np.arange(5), 0, state]
    np.testing.assert_allclose(gain[:, 0], expected)


def test_step_uses_the_transition_probabilities():
    env = RestlessBandit(RestlessConfig(family="schedule", n_arms=2, window=1))
    env.transition = np.array([[[0.0, 0.0], [1.0, 1.0]], [[1.0, 1.0], [0.0, 0.0]]])  # deterministic chains
    env.reset(np.random.default_rng(0))
    obs, reward, done = env.step(np.random.default_rng(0), np.array([1.0, 1.0]))
    assert obs[:2].tolist() == [1.0, 0.0] and reward == 1.0 and not done


def test_infeasible_constraint_set_raises_usage_error():
    cons = milp_q.LinearConstraints("at-least-seven", 6, np.ones((1, 6)), np.array([7.0]), np.array([np.inf]))
    with pytest.raises(UsageError, match="at-least-seven.*admits no action"):
        milp_q.solve_q(random_net(0, 12), np.zeros(6), cons)
    with pytest.raises(UsageError, match="admits no action"):
        milp_q.solve_linear(cons, np.ones(6))
    assert not cons.feasible(np.ones(6))
    with pytest.raises(UsageError, match="columns"):
        milp_q.LinearConstraints("bad", 6, np.ones((1, 5)), np.zeros(1), np.ones(1))


def test_time_limit_returns_best_feasible_action_with_a_warning():
    n, hidden = 12, (64, 64)
    net = random_net(5, 2 * n, hidden)
    cons = milp_q.LinearConstraints("budget", n, np.ones((1, n)), np.array([-np.inf]), np.array([4.0]))
    state = np.ones(n)
    warm = milp_q.solve_linear(cons, np.arange(n, dtype=float))
    warm_q = milp_q.forward(net, state, warm.action[None])[0][0]
    with pytest.warns(milp_q.TimeLimitWarning, match="time limit"):
        solution = milp_q.solve_q(net, state, cons, time_limit=1e-4, warm=warm)
    assert solution.status in ("time_limit", "fallback")
    assert solution.action.sum() <= 4 and set(np.unique(solution.action)) <= {0.0, 1.0}
    np.testing.assert_allclose(solution.value, milp_q.forward(net, state, solution.action[None])[0][0], atol=1e-6)
    assert solution.value >= warm_q - 1e-6  # never worse than the warm start


def test_memoised_argmax_reuses_solves_per_version():
    env = RestlessBandit(RestlessConfig(family="budget", n_arms=3))
    obs = env.reset(np.random.default_rng(0))
    net = random_net(0, env.obs_dim + env.n_actions)
    argmax = milp_q.MilpArgmax()
    first = argmax(net, 0, obs, env.constraints(obs), env.expected_gain(obs))
    again = argmax(net, 0, obs, env.constraints(obs), env.expected_gain(obs))
    assert again is first and (argmax.solves, argmax.hits) == (1, 1)
    argmax(net, 1, obs, env.constraints(obs), env.expected_gain(obs))
    assert argmax.solves == 2


def test_invalid_configs_raise_one_sentence():
    with pytest.raises(UsageError, match="unknown restless-bandit family"):
        RestlessConfig(family="knapsack")
    with pytest.raises(UsageError, match="n_arms must be >= 1"):
        RestlessConfig(n_arms=0)
    with pytest.raises(UsageError, match="unknown maximizer"):
        sequoia.SequoiaConfig(maximizer="greedy")
    with pytest.raises(UsageError, match="gamma"):
        sequoia.SequoiaConfig(gamma=1.0)


def _recorded(gains_by_seed, random=5.0, dqn_rise=2.0):
    """Recorded numbers with one family whose best baseline (myopic) returns 10 and SEQUOIA 10 (1 + gain); both
    learners' training returns rise by 3 (SEQUOIA) and ``dqn_rise`` (the sampled-max DQN) over 8 episodes."""
    rise = lambda d, i: list(5.0 + d * np.linspace(0, 1, 8) + 0.1 * np.sin(i + np.arange(8)))  # noqa: E731
    rows = [{"seed": i, "sequoia": 10.0 * (1 + g), "sampling": 8.0, "myopic": 10.0, "iterative": 9.0, "random": random,
             "train_returns": {"sequoia": rise(3.0, i), "sampling": rise(dqn_rise, i)}}
            for i, g in enumerate(gains_by_seed)]
    return {"setup": {"families": ["budget"], "seeds": len(rows), "total_steps": 800}, "per_seed": {"budget": rows},
            "best_baseline": {"budget": "myopic"}}


@pytest.mark.parametrize("family", FAMILIES)
def test_enumerated_argmax_equals_the_milp(family):
    """The exact argmax by enumeration (the reproduction's maximizer at N = 5) is the MILP's, in every family."""
    env = RestlessBandit(RestlessConfig(family=family, n_arms=4, budget=2, seed=2))
    rng = np.random.default_rng(0)
    config = sequoia.SequoiaConfig(maximizer="enumerate")
    enumerate_ = sequoia.Maximizer(env, config, rng)
    obs = env.reset(rng)
    for seed in range(3):
        net = random_net(seed, env.obs_dim + env.n_actions)
        action, value = enumerate_(net, seed, obs)
        solution = milp_q.solve_q(net, obs, env.constraints(obs))
        np.testing.assert_allclose(value, solution.value, atol=1e-6)
        assert env.constraints(obs).feasible(action)
        obs, _, _ = env.step(rng, env.sample_feasible(rng, obs))  # a new state (and cool-downs for schedule)


def test_enumerated_feasible_sets_follow_the_whole_constraint_set():
    """Two constraint sets with the same fixed bits but another budget get their own feasible sets (by hand: 2 arms,
    one bit each; budget 1 allows 3 actions, budget 2 all 4)."""
    env = RestlessBandit(RestlessConfig(family="budget", n_arms=2, budget=2, seed=0))
    maximize = sequoia.Maximizer(env, sequoia.SequoiaConfig(maximizer="enumerate"), np.random.default_rng(0))
    row = np.ones((1, 2))
    tight = milp_q.LinearConstraints("b1", 2, row, np.array([-np.inf]), np.array([1.0]))
    loose = milp_q.LinearConstraints("b2", 2, row, np.array([-np.inf]), np.array([2.0]))
    assert sorted(map(tuple, maximize.feasible_set(tight))) == [(0, 0), (0, 1), (1, 0)]
    assert sorted(map(tuple, maximize.feasible_set(loose))) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert maximize.feasible_set(tight) is maximize.feasible_set(tight)  # enumerated once per set


def test_enumeration_refuses_large_action_spaces():
    env = RestlessBandit(RestlessConfig(family="budget", n_arms=7))  # 14 action bits
    with pytest.raises(UsageError, match="at most 12 action bits"):
        sequoia.Maximizer(env, sequoia.SequoiaConfig(maximizer="enumerate"), np.random.default_rng(0))


def test_plateau_by_hand():
    from longhorizon.repro import sequoia as repro

    # quarters of 2 episodes: third quarter means 2 and 3, last quarter means 4 and 3 -> differences 2, 0
    curve = np.array([[0, 0, 0, 0, 2, 2, 4, 4], [0, 0, 0, 0, 3, 3, 3, 3]], float)
    out = repro.plateau(curve)
    assert out["last_minus_third_quarter"] == pytest.approx(1.0)
    half = 12.706 * 1.0 / np.sqrt(2) * np.sqrt(2)  # t_{0.975, 1} * sd(2, 0) / sqrt(2), sd = sqrt(2)
    np.testing.assert_allclose(out["interval"], [1.0 - half, 1.0 + half], atol=1e-2)


def test_claim_rule_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro import sequoia as repro

    pytest.importorskip("scipy")
    verdict = lambda gains, **kw: repro.judge(_recorded(gains, **kw))[0][0].verdict  # noqa: E731
    assert verdict([0.20, 0.25, 0.30]) == C.HOLDS
    assert verdict([-0.20, -0.25, -0.30]) == C.CONTRADICTED
    assert verdict([-0.5, 0.6, 0.1]) == C.INCONCLUSIVE
    assert verdict([-0.2, -0.25]) == C.INCONCLUSIVE  # 2 seeds never judge
    assert verdict([-0.20, -0.25, -0.30], random=20.0) == C.NO_SIGNAL  # baselines no better than random
    flat = repro.judge(_recorded([0.20, 0.25, 0.30], dqn_rise=0.0))[0][0]  # the DQN baseline did not learn
    assert flat.verdict == C.NO_SIGNAL and flat.evidence["did_not_move"][0].startswith("DQN (sampled max)")
    claims, _ = repro.judge(_recorded([-0.20, -0.25, -0.30]), quick=True)
    assert claims[0].verdict == C.QUICK
    rows = {"budget": [{"sequoia": 12.0, "sampling": 8.0, "myopic": 10.0, "iterative": 9.0, "random": 5.0},
                       {"sequoia": 9.0, "sampling": 8.0, "myopic": 10.0, "iterative": 9.0, "random": 5.0}]}
    gains, best = repro.relative_gains(rows)
    assert best == {"budget": "myopic"}
    np.testing.assert_allclose(gains, [0.2, -0.1])


@pytest.mark.slow
def test_quick_reproduction_writes_files_and_is_not_judged(tmp_path):
    from longhorizon.repro import claims as C
    from longhorizon.repro import sequoia as repro

    pytest.importorskip("scipy")
    result = repro.run(str(tmp_path), quick=True)
    for name in ("README.md", "summary.json", "sequoia.png", "curves/SEQUOIA.csv"):
        assert (tmp_path / name).stat().st_size > 0
    import json

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(summary) == [] and summary["quick"] is True
    assert [c["verdict"] for c in summary["claims"]] == [C.QUICK] and summary["claims"] == result["claims"]
    assert summary["claims"][0]["evidence"]["seeds"] == 2  # the per-seed gains are kept
    assert all(r["milp_solves"] > 0 for rows in summary["per_seed"].values() for r in rows)
    readme = (tmp_path / "README.md").read_text()
    assert "longhorizon repro sequoia --quick" in readme and "## Verdict" in readme and C.QUICK in readme
