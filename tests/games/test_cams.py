"""CAMS (games/cams.py, games/cfr.py): belief splitting on Hexner's game and CFR+ against exact values."""

import json

import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.games import cams, cfr
from longhorizon.repro import cams as repro

GRID = cams.GridConfig(beliefs=21, positions=201, controls=201)


def test_lower_convex_hull_by_hand():
    p = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    f = np.array([0.0, 1.0, 0.5, -0.5, 1.0])
    vex, left, right = cams.lower_convex_hull(p, f)
    # hull vertices 0, 3, 4: the chord 0 -> 3 is f = -2/3 p
    np.testing.assert_allclose(vex, [0.0, -1 / 6, -1 / 3, -0.5, 1.0])
    assert left.tolist() == [0, 0, 0, 3, 4] and right.tolist() == [0, 3, 3, 3, 4]


def test_simplex_vex_by_hand():
    lattice = cams.belief_lattice(3, 3)  # the corners, the edge midpoints
    assert lattice.shape == (6, 3) and np.allclose(lattice.sum(1), 1.0)
    corner = (lattice == 1.0).any(1)
    f = np.where(corner, 0.0, 1.0)  # zero at the corners: Vex f = 0, each midpoint split between its two corners
    vex, vertices, weights = cams.simplex_vex(lattice, f)
    np.testing.assert_allclose(vex, 0.0, atol=1e-12)
    np.testing.assert_allclose(np.einsum("pi,pij->pj", weights, lattice[vertices]), lattice, atol=1e-12)
    assert np.all(weights[~corner].max(1) == pytest.approx(0.5))
    # an affine f is its own hull (qhull's flat case)
    vex, _, _ = cams.simplex_vex(lattice, lattice @ np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(vex, lattice @ np.array([1.0, 2.0, 3.0]))


def test_one_step_value_is_the_closed_form_full_revelation():
    # off-centre starts and a skewed prior exercise the player-2 term -alpha_0 (y2 - m)^2
    game = cams.HexnerGame(steps=1, prior=(0.3, 0.7), start1=(0.0, 0.2, 0.0, 0.4), start2=(0.0, -0.3, 0.0, 0.2))
    solution = cams.solve(game, GRID)
    # linear interpolation of the quadratic U_K overestimates by at most h^2 q1 / 4
    assert solution["value"] == pytest.approx(cams.one_step_closed_form(game), abs=2e-4)
    (root,), = cams.equilibrium_tree(game, solution)
    # player 2 cannot react within the step, so player 1 reveals its goal completely
    assert sorted(pc[0] for _, pc, _ in root["children"]) == [0.0, 1.0]


THREE_GOALS = dict(goals=((0.0, 1.0), (0.0, 0.0), (0.0, -1.0)), prior=(0.2, 0.5, 0.3))


def test_three_goals_one_step_closed_form():
    game = cams.HexnerGame(steps=1, **THREE_GOALS, start2=(0.0, 0.1, 0.0, 0.0))
    solution = cams.solve(game, cams.GridConfig(beliefs=11, positions=201))
    assert solution["value"] == pytest.approx(cams.one_step_closed_form(game), abs=2e-4)
    (root,), = cams.equilibrium_tree(game, solution)
    assert len(root["children"]) == 3  # one prototype per goal: full revelation


@pytest.mark.parametrize("setup", [dict(), THREE_GOALS], ids=["two goals", "three goals"])
def test_splits_are_martingales_and_the_tree_reproduces_the_value(setup):
    game = cams.HexnerGame(steps=4, **setup)
    solution = cams.solve(game, GRID if not setup else cams.GridConfig(beliefs=11, positions=201))
    levels = cams.equilibrium_tree(game, solution)
    for nodes in levels:
        for node in nodes:
            lam = np.array([c[0] for c in node["children"]])
            beliefs = np.array([c[1] for c in node["children"]])
            assert len(lam) <= game.types and lam.sum() == pytest.approx(1.0)
            np.testing.assert_allclose(lam @ beliefs, node["p"], atol=1e-12)
        assert sum(n["prob"] for n in nodes) == pytest.approx(1.0)
    assert cams.tree_value(game, levels) == pytest.approx(solution["value"], abs=2e-3)
    if not setup:  # Hexner's structure: the informed player hides its goal at first and reveals it later
        assert cams.revelation(levels)[0] < 0.05 and max(cams.revelation(levels)) > 0.4


def test_cfr_plus_matches_the_lp_value_of_a_one_stage_game():
    rng = np.random.default_rng(0)
    payoff, prior = rng.normal(size=(2, 3, 4)), np.array([0.3, 0.7])
    result = cfr.solve(payoff.reshape(2, -1), prior, cfr.TreeShape(2, 3, 4, 1), iterations=500)
    exact = cfr.one_stage_lp_value(payoff, prior)
    assert result.lower - 1e-9 <= exact <= result.upper + 1e-9
    assert result.value == pytest.approx(exact, abs=1e-3) and 0 <= result.exploitability < 1e-3


def test_support_sizes_of_a_one_stage_profile_by_hand():
    """Types equally likely; type 0 plays action 0, type 1 splits over actions 1 and 2: the marginal [.5, .25, .25]
    uses 3 actions, its 2 (= types) most likely hold .75 (excess .25); player 2's 0.01 is below the threshold."""
    sigma1 = [np.array([[[1.0, 0.0, 0.0]], [[0.0, 0.5, 0.5]]])]
    sigma2 = [np.array([[0.99, 0.01, 0.0]])]
    result = cfr.CFRResult(0.0, 0.0, 0.0, 0.0, 1, 0.0, 0.0, sigma1, sigma2)
    support = cfr.support_sizes(result, np.array([0.5, 0.5]))
    assert support["player1"] == 3 and support["player2"] == 1 and support["excess1"] == pytest.approx(0.25)


@pytest.mark.slow
def test_cfr_plus_agrees_with_the_structured_solver_when_the_actions_contain_its_controls():
    # a restricted game keeps any equilibrium of the full game whose controls it contains, so on the
    # structured equilibrium's own controls CFR+ must find the structured value (up to its grid error)
    game = cams.HexnerGame(steps=2)
    solution = cams.solve(game, GRID)
    levels = cams.equilibrium_tree(game, solution)
    controls = {round(u, 9) for nodes in levels for n in nodes for _, _, u in n["children"]}
    controls |= {round(n["v"], 9) for nodes in levels for n in nodes}
    actions = np.array(sorted(controls | {0.0}))
    shape = cfr.TreeShape(2, len(actions), len(actions), 2)
    result = cfr.solve(cams.discretised_payoffs(game, actions), np.array([0.5, 0.5]), shape, iterations=300)
    assert result.exploitability < 1e-3
    assert result.value == pytest.approx(cams.tree_value(game, levels), abs=2e-3)
    assert result.value == pytest.approx(solution["value"], abs=3e-3)


def test_claim_rules_by_hand():
    from longhorizon.repro import claims as C

    row = {"U": 3, "value": -0.20, "exploitability": 0.0, "seconds": 10.0,
           "support": {"player1": 2, "player2": 1, "excess1": 0.0}}
    summary = {"comparisons": [{"steps": 4, "types": 2, "iterations": 100, "structured": {"value": -0.21, "seconds": 1.0, "grid_error": 1e-4},
                                "cfr": [row, {**row, "U": 5, "value": -0.209}]}],
               "complexity": {"cfr": [{"K": 4, "U": 3, "seconds_per_iteration": t} for t in (1e-4, 1e-2, 1.0)],
                              "structured": [{"K": K, "seconds": t, "prototype_nodes": n, "bound_nodes": 2 ** (K + 1) - 1}
                                             for K, t, n in ((2, 1.0, 5), (3, 2.0, 7), (4, 3.0, 8))]}}
    support, value, nodes, cost = [c.verdict for c in repro.judge(summary)[0]]
    assert (support, value, nodes) == (C.HOLDS,) * 3
    assert cost == C.INCONCLUSIVE  # single timings decide nothing
    summary["comparisons"][0]["cfr"][1] = {**row, "U": 5, "value": -0.15,  # |error| 0.06 > 5% of 0.21
                                           "support": {"player1": 3, "player2": 1, "excess1": 0.1}}
    support, value, *_ = [c.verdict for c in repro.judge(summary)[0]]
    # an existence claim is not contradicted by one wider equilibrium
    assert support == C.INCONCLUSIVE and value == C.CONTRADICTED
    summary["comparisons"][0]["cfr"][1]["exploitability"] = 0.5  # CFR+ did not converge: its value says nothing
    claims, arms = repro.judge(summary)
    assert claims[1].verdict == C.NO_SIGNAL and not arms["CFR+ (I=2, K=4)"]["signal"]["moved"]
    # the tolerance is 5% of |V| = 0.0105; a reference coarser than that cannot decide an agreement within it
    summary["comparisons"][0]["cfr"][1].update(exploitability=0.0, value=-0.209)
    assert repro.judge(summary)[0][1].verdict == C.HOLDS
    assert repro.judge(summary)[0][1].evidence["tolerance"] == pytest.approx(0.0105)
    summary["comparisons"][0]["structured"]["grid_error"] = 0.02
    ruled = repro.judge(summary)[0][1]
    assert ruled.verdict == C.NO_SIGNAL and "grid error" in ruled.evidence["did_not_move"][0]
    assert {c.verdict for c in repro.judge(summary, quick=True)[0]} == {C.QUICK}


def test_usage_errors():
    for bad in (dict(steps=0), dict(r1=0.0), dict(prior=(1.5, -0.5)), dict(prior=(1.0,)), dict(goals=((0, 1), (0, 1))),
                dict(goals=((0, 1), (1, 0), (0, -1)), prior=(0.3, 0.3, 0.4))):
        with pytest.raises(UsageError):
            cams.HexnerGame(**bad)
    with pytest.raises(UsageError):
        cams.GridConfig(beliefs=2)
    with pytest.raises(UsageError):  # a uniform prior over three goals needs n = beliefs - 1 divisible by 3
        cams.solve(cams.HexnerGame(steps=1, goals=THREE_GOALS["goals"], prior=(1 / 3,) * 3), cams.GridConfig(beliefs=11))
    with pytest.raises(UsageError):
        cams.one_step_closed_form(cams.HexnerGame(steps=2))
    with pytest.raises(UsageError):
        cams.discretised_payoffs(cams.HexnerGame(steps=1, start1=(1.0, 0.0, 0.0, 0.0)), np.zeros(3))
    with pytest.raises(UsageError):
        cfr.solve(np.zeros((2, 5)), np.array([0.5, 0.5]), cfr.TreeShape(2, 2, 2, 1), 100)
    with pytest.raises(UsageError):
        cfr.solve(np.zeros((2, 4)), np.array([0.5, 0.5]), cfr.TreeShape(2, 2, 2, 1), 150)


@pytest.mark.slow
def test_quick_run_writes_files_and_is_not_judged(tmp_path):
    result = repro.run(str(tmp_path), quick=True)
    for name in ("README.md", "summary.json", "cams.png"):
        assert (tmp_path / name).stat().st_size > 0
    from longhorizon.repro import claims as C

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(summary) == [] and summary["quick"] is True
    assert {c["verdict"] for c in summary["claims"]} == {C.QUICK} and summary["claims"] == result["claims"]
    assert [c.to_dict() for c in repro.judge(summary, quick=True)[0]] == summary["claims"]
    assert "--quick" in (tmp_path / "README.md").read_text()
