"""router-r1, fees and canopy: their --quick modes write their folder from the data; their verdict rules by hand."""

import numpy as np
import pytest
from test_agent_repros import _check, _private_cache  # noqa: F401  (the same folder checks; warm starts in tmp)

# no xdist group: each builds its own warm start; the two workers share compiled programs through the
# persistent compilation cache (tests/conftest.py), and spreading them keeps the suite's critical path short


@pytest.mark.slow
def test_router_r1_quick(tmp_path):
    from longhorizon.repro import router_r1

    summary = router_r1.run(str(tmp_path / "r"), quick=True)
    s = _check(tmp_path / "r", "router_r1.png", router_r1.CLAIMS)
    assert set(s["by_weight"]) == {"0", "0.5", "1.5"} and summary["claims"] == s["claims"]
    assert set(s["arms"]) == {"w=0", "w=0.5", "w=1.5"}
    # the reference frontier is computed from expert episodes: a higher threshold never pays less
    costs = [v["cost"] for v in s["expert_frontier"].values()]
    assert costs == sorted(costs) and costs[-1] > costs[0]
    assert router_r1.credit(1.5).reward_weights == (("format", 1.0), ("outcome", 1.0), ("cost", -1.5))


def _router(cost, acc, warm=0.2, seeds=3):
    """Recorded router numbers: per weight, each seed's held-out cost and accuracy."""
    by_weight = {w: {"cost_per_seed": [c] * seeds if np.ndim(c) == 0 else c, "accuracy_per_seed": [a] * seeds if np.ndim(a) == 0 else a}
                 for w, c, a in zip(("0", "0.5", "1.5"), cost, acc)}
    return {"setup": {"steps": 4, "seeds": seeds}, "weights": [0.0, 0.5, 1.5], "by_weight": by_weight,
            "warm_start": {"accuracy_per_seed": [warm] * seeds}}


def test_router_trend_rule_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro.router_r1 import judge

    verdicts = lambda *a, **kw: [c.verdict for c in judge(_router(*a, **kw))[0]]  # noqa: E731
    falling = ([0.8, 0.82, 0.79], [0.4, 0.45, 0.41], [0.1, 0.12, 0.1])
    assert verdicts(falling, ([0.9, 0.88, 0.91], [0.7, 0.72, 0.69], [0.5, 0.52, 0.49])) == [C.HOLDS, C.HOLDS]
    rising = ([0.1, 0.12, 0.1], [0.4, 0.45, 0.41], [0.8, 0.82, 0.79])
    assert verdicts(rising, rising)[0] == C.CONTRADICTED
    assert verdicts(falling, (0.05, 0.05, 0.05))[0] == C.NO_SIGNAL  # routers that do not do the task
    assert verdicts(falling, (0.2, 0.2, 0.2))[1] == C.NO_SIGNAL  # accuracy never left the warm start
    assert verdicts(([0.8], [0.4], [0.1]), ([0.9], [0.7], [0.5]), seeds=1) == [C.INCONCLUSIVE] * 2  # one seed


def test_an_arm_whose_groups_carry_no_gradient_gives_no_signal():
    from longhorizon.repro import claims as C
    from longhorizon.repro import trpo_agent

    finals = {a: [0.5, 0.6, 0.55] for a in trpo_agent.ARMS}
    L = {"warm_start_success": 0.2, "final_success": finals, "setup": {"steps": 4, "seeds": 3}}
    assert trpo_agent.judge(L)[0][0].verdict == C.HOLDS  # equal success: non-inferior within 0.05
    L["training"] = {a: {"reward": [[0.1, 0.2, 0.3, 0.4]] * 3, "groups_with_signal": [0.1, 0.2, 0.1]} for a in finals}
    claim = trpo_agent.judge(L)[0][0]
    assert claim.verdict == C.NO_SIGNAL and "groups had unequal rewards" in claim.evidence["did_not_move"][0]


@pytest.mark.slow
def test_fees_quick(tmp_path):
    from longhorizon.repro import fees

    fees.run(str(tmp_path / "f"), quick=True)
    s = _check(tmp_path / "f", "fees.png", [fees.CLAIM])
    assert set(s["success_at_equal_tokens"]) == set(fees.MODES)
    # the budget is the fewest tokens any run reached, read from the runs' rollout_tokens counters
    assert s["equal_tokens"] == min(t for ts in s["final_tokens"].values() for t in ts) > 0
    for mode, curves in s["curves"].items():
        xs, ys = curves[0]
        assert xs[0] == 0 and ys[0] == s["warm_start_success"][mode] and xs == sorted(xs)


def test_fees_curve_and_interpolation_by_hand():
    from longhorizon.repro.fees import curve

    rows = [{"step": 1, "rollout_tokens": 100}, {"step": 2, "rollout_tokens": 220, "eval_success": 0.5},
            {"step": 3, "rollout_tokens": 300}, {"step": 4, "rollout_tokens": 400, "eval_success": 0.75}]
    xs, ys = curve(rows, 0.25)
    assert (xs, ys) == ([0, 220, 400], [0.25, 0.5, 0.75])
    assert np.interp(310, xs, ys) == pytest.approx(0.625)  # halfway between 220 and 400


@pytest.mark.slow
def test_canopy_quick(tmp_path):
    from longhorizon.repro import canopy

    canopy.run(str(tmp_path / "c"), quick=True)
    s = _check(tmp_path / "c", "canopy.png", canopy.CLAIMS)
    assert set(s["kl_to_start"]) == {"0", "0.05"}
    for kl, se in s["kl_to_start"].values():
        assert kl >= 0 and se >= 0  # k3 is non-negative per token
    assert s["warm_start_entropy"] > 0


def test_canopy_drift_is_zero_at_the_start_and_matches_k3_by_hand():
    from longhorizon.core.kl import kl_k3
    from longhorizon.lm.agents.policy_drift import policy_drift
    from longhorizon.lm.policy import tiny_random
    from longhorizon.lm.run import Policy
    from longhorizon.repro import canopy

    base = tiny_random(seed=0)
    policy = Policy(base.params, base.cfg, base.tokenizer, "tiny-random")
    rows = canopy.QUICK.rows(2, 3)
    same = policy_drift(policy, policy.params, canopy.QUICK.env, canopy.QUICK.agent, rows)
    assert np.allclose(same["kl"], 0.0, atol=1e-6) and all(e > 0 for e in same["entropy"])
    # k3 by hand: pi(x)=0.5, pi_0(x)=0.25 -> 0.5 - 1 - log 0.5
    assert float(kl_k3(np.log(0.5), np.log(0.25))) == pytest.approx(0.5 - 1 - np.log(0.5))
    other = tiny_random(seed=1).params
    moved = policy_drift(policy, other, canopy.QUICK.env, canopy.QUICK.agent, rows)
    assert min(moved["kl"]) > 0.0
