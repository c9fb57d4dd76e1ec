"""E-AMoD: the LPs' feasibility and exactness, the dynamics by hand, the Dirichlet density, the upper bound."""

from __future__ import annotations

import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from longhorizon.errors import UsageError
from longhorizon.structured import amod
from longhorizon.structured import amod_policy as ap

TINY = amod.City(regions=3, charge_levels=2, edges=((0, 1), (1, 2), (2, 0)), stations=(0,), fleet=6, steps=4,
                 demand_scale=1.0, seed=3)


def test_unreachable_region_is_refused_by_name():
    with pytest.raises(UsageError, match="region 3 is unreachable"):
        amod.City(regions=4, charge_levels=3, edges=((0, 1), (1, 2)), stations=(0,))
    with pytest.raises(UsageError, match="charge levels"):
        amod.City(regions=5, charge_levels=2)  # the ring's diameter 2 needs 3 levels


def test_matching_lp_equals_brute_force_on_two_regions():
    net = amod.Network(amod.City(regions=2, charge_levels=3, edges=((0, 1),), stations=(0,), fleet=4, seed=1))
    x = np.array([[1.0, 1.0, 1.0], [0.0, 2.0, 0.0]])  # (region, charge); charge 0 cannot serve a trip
    d = np.array([[1.0, 2.0], [1.0, 1.0]])
    flows = amod.match(net, x, d)
    lp = float(np.sum(flows * net.trip_profit[:, None, :]))
    best = 0.0
    for m in itertools.product(range(3), repeat=8):  # m[i, c, j] for c in (1, 2)
        m = np.array(m, float).reshape(2, 2, 2)
        if np.all(m.sum(2) <= x[:, 1:]) and np.all(m.sum(1) <= d):
            best = max(best, float(np.sum(m * net.trip_profit[:, None, :])))
    assert lp == pytest.approx(best)
    assert flows[:, 0].sum() == 0 and np.all(flows.sum(2) <= x) and np.all(flows.sum(1) <= d)


def test_lp_flows_are_feasible():
    net = amod.Network(amod.City(seed=2))
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, (net.R, net.C)).astype(float)
    d = net.demand(0)[0]
    m = amod.match(net, x, d)
    i, c, j = np.nonzero(m)
    assert np.all(m >= 0) and np.all(c >= net.energy[i, j]) and np.all(m == np.rint(m))
    assert np.all(m.sum(2) <= x) and np.all(m.sum(1) <= d)
    idle = x - m.sum(2)
    target = amod.integer_target(rng.dirichlet(np.ones(net.nodes)).reshape(net.R, net.C), idle.sum())
    assert target.sum() == idle.sum() and np.all(target >= 0)
    f = amod.rebalance(net, idle, target)
    out = np.zeros((net.R, net.C))
    np.add.at(out, (net.moves[:, 0], net.moves[:, 1]), f)
    assert np.all(f >= 0) and np.all(f == np.rint(f)) and np.allclose(out, idle)  # every idle vehicle moves once
    used = net.moves[f > 0]
    charging = (used[:, 0] == used[:, 2]) & (used[:, 3] == used[:, 1] + 1)
    assert np.all(net.station[used[charging, 0]])
    assert np.all(used[~charging, 3] == used[~charging, 1] - net.hops[used[~charging, 0], used[~charging, 2]])
    nxt, _ = amod.advance(net, m, f)
    assert nxt.sum() == x.sum() and np.all(nxt >= 0)  # vehicles are conserved, never negative


def test_dynamics_by_hand():
    net = amod.Network(amod.City(regions=2, charge_levels=2, edges=((0, 1),), stations=(0,), fleet=2, seed=0))
    x = np.array([[0.0, 1.0], [0.0, 1.0]])
    d = np.array([[0.0, 1.0], [0.0, 0.0]])  # one request 0 -> 1
    weights = np.array([[1.0, 0.0], [0.0, 0.0]])  # everything idle to (region 0, charge 0)
    out = amod.step(net, x, d, lambda idle: weights)
    assert out.idle.tolist() == [[0, 0], [0, 1]]  # (0, 1) served the trip
    # the trip arrives at (1, 0); the idle (1, 1) moves one hop to (0, 0)
    assert out.vehicles.tolist() == [[1, 0], [1, 0]]
    assert out.profit == pytest.approx(net.trip_profit[0, 1] - net.city.move_cost)
    # a target at an unreachable node (charge 1 in region 0 after a hop): the vehicle stays, paying nothing
    out = amod.step(net, x, d, lambda idle: np.array([[0.0, 1.0], [0.0, 0.0]]))
    assert out.vehicles.tolist() == [[0, 0], [1, 1]] and out.profit == pytest.approx(net.trip_profit[0, 1])


def test_infeasible_rebalancing_falls_back_to_no_rebalancing():
    net = amod.Network(TINY)
    idle = np.array([[1.0, -1.0], [0.0, 2.0], [0.0, 0.0]])  # a negative count: no flow can conserve it
    with pytest.warns(amod.RebalanceWarning, match="no rebalancing"):
        f = amod.rebalance(net, idle, np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    stay = (net.moves[:, 0] == net.moves[:, 2]) & (net.moves[:, 1] == net.moves[:, 3])
    assert np.all(f[~stay] == 0) and f.sum() == 3


def test_dirichlet_log_prob_and_entropy_by_hand():
    # Beta(2, 3) at 0.4: x (1 - x)^2 / B(2, 3) with B(2, 3) = 1! 2! / 4! = 1/12
    assert float(ap.dirichlet_log_prob(jnp.array([2.0, 3.0]), jnp.array([0.4, 0.6]))) == pytest.approx(
        math.log(12 * 0.4 * 0.36), rel=1e-5)
    alpha = np.array([0.5, 1.5, 3.0])
    assert float(ap.dirichlet_entropy(jnp.array(alpha))) == pytest.approx(scipy.stats.dirichlet(alpha).entropy(), rel=1e-4)


def test_full_information_lp_bounds_every_policy():
    net = amod.Network(TINY)
    rng = np.random.default_rng(0)
    policies = {"none": amod.no_rebalancing(net), "equal": amod.equal_distribution(net),
                "random": lambda t, idle: rng.dirichlet(np.ones(net.nodes)).reshape(net.R, net.C)}
    for seed in range(3):
        demand = net.demand(seed)
        bound = amod.full_information_optimum(net, demand)["profit"]
        for name, desired in policies.items():
            assert amod.run_episode(net, demand, desired)["profit"] <= bound + 1e-6, name
    # one step: the bound is the matching LP's profit (idle vehicles stay for free)
    demand = net.demand(0)[:1]
    m = amod.match(net, net.initial_vehicles(), demand[0])
    assert amod.full_information_optimum(net, demand)["profit"] == pytest.approx(np.sum(m * net.trip_profit[:, None, :]))


def test_score_days_scores_each_method_under_the_days_optimum():
    net = amod.Network(TINY)
    scored = amod.score_days(net, 2, {"none": lambda: amod.no_rebalancing(net), "equal": lambda: amod.equal_distribution(net)})
    for name, make in (("none", amod.no_rebalancing), ("equal", amod.equal_distribution)):
        assert scored[name] == [amod.run_episode(net, net.demand(d), make(net))["profit"] for d in range(2)]
        assert all(p <= o + 1e-6 for p, o in zip(scored[name], scored["optimum"])) and scored[f"{name}_seconds_rebalance"] >= 0
    assert len(scored["optimum_seconds"]) == 2 and scored["optimum_variables"] > 0


def test_config_refuses_bad_values():
    with pytest.raises(UsageError, match="alpha_init"):
        ap.Config(alpha_init=0.05)
    with pytest.raises(UsageError, match="gamma"):
        ap.Config(gamma=0.0)


def _measured(profits_a, gaps_b, seconds_lp, seconds_step):
    """A fake measurement: one held-out day of optimum 100 (so a profit is a % of it), heuristics at 50
    (no rebalancing) and 40 (equal); city B's profits are 50 + gap."""
    heur = {c: {"optimum": [100.0], "optimum_seconds": np.atleast_1d(seconds_lp), "optimum_variables": 10,
                "no rebalancing": [50.0], "equal distribution": [40.0]} for c in "AB"}
    seeds = [{"A": {"profit": [p], "seconds_forward": seconds_step / 2, "seconds_rebalance": seconds_step / 2},
              "B": {"profit": [50.0 + g]}, "curve": [10.0, 20.0 + i, 40.0, 45.0 + i]} for i, (p, g) in enumerate(zip(profits_a, gaps_b))]
    return {"measured": {"heuristics": heur, "seeds": seeds}, "setup": {"config": {"updates": 4}}}


def test_claim_rules_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro import eamod

    verdicts = lambda *a: [c.verdict for c in eamod.judge(_measured(*a))[0]]  # noqa: E731
    # 86% of the optimum; +36 over no rebalancing on A; -6 on B; 1000x faster
    assert verdicts([85.0, 86.0, 87.0], [-5.0, -6.0, -7.0], 1.0, 0.001) == [C.HOLDS, C.HOLDS, C.CONTRADICTED, C.HOLDS]
    fraction, _, beats_b, speed = verdicts([70.0, 90.0, 80.0], [1.0, -1.0, 0.0], 0.05, 0.001)
    assert fraction == beats_b == C.INCONCLUSIVE and speed == C.CONTRADICTED  # 50x
    assert verdicts([85.0, 86.0], [1.0, 2.0], 1.0, 0.001) == [C.INCONCLUSIVE] * 4  # two seeds never judge
    flat = _measured([85.0, 86.0, 87.0], [-5.0, -6.0, -7.0], 1.0, 0.001)
    for seed in flat["measured"]["seeds"]:
        seed["curve"] = [10.0, 10.0, 10.0, 10.0]
    assert [c.verdict for c in eamod.judge(flat)[0]] == [C.NO_SIGNAL] * 3 + [C.HOLDS]  # the timing needs no learning
    # a seed's own horizon-LP times (those of the invocation that timed its decisions) replace the heuristics'
    own = _measured([85.0, 86.0, 87.0], [-5.0, -6.0, -7.0], 1.0, 0.001)
    for seed in own["measured"]["seeds"]:
        seed["A"]["lp_seconds"] = [0.01]  # 10x, not 1000x
    assert eamod.judge(own)[0][3].verdict == C.CONTRADICTED
    # a policy that learned but earns less than no rebalancing (50), which it can represent, is under-trained
    under = eamod.judge(_measured([45.0, 46.0, 47.0], [-5.0, -6.0, -7.0], 1.0, 0.001))[0]
    assert [c.verdict for c in under] == [C.NO_SIGNAL] * 3 + [C.HOLDS]
    assert "no rebalancing" in under[1].evidence["did_not_move"][0]
    # a flat training return with a greedy validation profit that rose from its start still counts as learning
    greedy = _measured([85.0, 86.0, 87.0], [-5.0, -6.0, -7.0], 1.0, 0.001)
    for seed in greedy["measured"]["seeds"]:
        seed["curve"], seed["eval_curve"] = [10.0, 10.0, 10.0, 10.0], [[0, 30.0], [2, 40.0], [4, 45.0]]
    assert eamod.judge(greedy)[0][0].verdict == C.HOLDS


def test_quick_repro_writes_its_report_under_the_bound(tmp_path):
    from longhorizon.repro import eamod

    summary = eamod.run(str(tmp_path), quick=True)
    assert {p.name for p in tmp_path.iterdir()} >= {"README.md", "summary.json", "eamod.png"}
    from longhorizon.repro import claims as C

    assert "## Verdict" in (tmp_path / "README.md").read_text() and summary["quick"] is True
    assert C.validate_summary(summary) == [] and [c["verdict"] for c in summary["claims"]] == [C.QUICK] * 4
    m = summary["measured"]
    for city in "AB":
        bound = np.array(m["heuristics"][city]["optimum"])
        for s in m["seeds"]:
            assert np.all(np.array(s[city]["profit"]) <= bound + 1e-6)  # the trained policy too


def test_gymnasium_env_steps_the_same_days_as_the_simulator():
    # Equal logits are the equal-distribution heuristic: the env's day equals amod.run_episode's on the same demand,
    # step by step; a one-hot logit vector sends the idle fleet towards one node (a different day).
    import gymnasium
    from gymnasium.utils.env_checker import check_env

    from longhorizon.errors import UsageError
    from longhorizon.structured.amod_gym import AMoDEnv

    env = AMoDEnv(city="A")
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=3)
    assert obs.shape == env.observation_space.shape == (5 * (4 + 5),) and env.action_space.shape == (20,)
    reference = amod.run_episode(env.net, env.demand, amod.equal_distribution(env.net))
    profits, done, steps = [], False, 0
    while not done:
        obs, reward, done, truncated, info = env.step(np.zeros(20, np.float32))
        profits.append(info["profit"])
        assert reward == pytest.approx(info["profit"] / (env.net.city.fleet * env.net.city.base_fare))
        assert not truncated
        steps += 1
    assert steps == env.net.city.steps and env.lp_seconds > 0
    np.testing.assert_allclose(profits, reference["profits"], rtol=1e-9)
    env.reset(seed=3)
    skewed = np.full(20, -5.0, np.float32)
    skewed[0] = 5.0
    other = [env.step(skewed)[4]["profit"] for _ in range(env.net.city.steps)]
    assert not np.allclose(other, reference["profits"])
    with pytest.raises(UsageError, match="unknown E-AMoD city"):
        AMoDEnv(city="Z")
    assert isinstance(env, gymnasium.Env)
