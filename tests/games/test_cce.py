"""CCE LP, Markov CCE, exact best responses (against brute force), independent Hedge (games/cce.py,
markov_games.py), and `longhorizon repro cce --quick` (its files, its claims decided by its rules)."""

import itertools
import json

import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.games import cce
from longhorizon.games import markov_games as mg
from longhorizon.repro import cce as repro_cce

# Chicken, actions (Dare, Chicken): u1 = [[0, 7], [2, 6]], u2 its transpose
CHICKEN = np.array([[[0.0, 7.0], [2.0, 6.0]], [[0.0, 2.0], [7.0, 6.0]]])
# Prisoner's dilemma, actions (Cooperate, Defect): Defect strictly dominates, (D, D) the unique CCE
DILEMMA = np.array([[[3.0, 0.0], [5.0, 1.0]], [[3.0, 5.0], [0.0, 1.0]]])


def test_chicken_max_welfare_cce_by_hand():
    # By hand (p = sigma over DD, DC, CD, CC): the CCE constraints are p1 >= 2 p0, 2 p2 >= p3 (player 1) and
    # p2 >= 2 p0, 2 p1 >= p3 (player 2); welfare 9 (p1 + p2) + 12 p3 = 9 + 3 p3 - 9 p0 is largest, uniquely,
    # at p0 = 0, p3 = 1/2, p1 = p2 = 1/4.
    sigma = cce.solve_cce(CHICKEN)
    np.testing.assert_allclose(sigma, [[0.0, 0.25], [0.25, 0.5]], atol=1e-9)
    np.testing.assert_allclose(cce.deviation_gains(sigma, CHICKEN), [0.0, -0.25, 0.0, -0.25], atol=1e-9)


def test_dominant_strategies_give_the_unique_pure_cce():
    np.testing.assert_allclose(cce.solve_cce(DILEMMA), [[0.0, 0.0], [0.0, 1.0]], atol=1e-9)
    np.testing.assert_allclose(cce.solve_cce(DILEMMA, objective="none"), [[0.0, 0.0], [0.0, 1.0]], atol=1e-9)


def test_gap_by_hand():
    # uniform play in chicken: E u1 = 15/4; always Dare 7/2 (gain -1/4), always Chicken 4 (gain +1/4)
    uniform = np.full((2, 2), 0.25)
    np.testing.assert_allclose(cce.deviation_gains(uniform, CHICKEN), [-0.25, 0.25, -0.25, 0.25])
    assert cce.cce_gap(uniform, CHICKEN) == pytest.approx(0.25)
    assert cce.cce_gap(cce.solve_cce(CHICKEN), CHICKEN) == 0.0


@pytest.mark.parametrize("shape", [(2, 4, 3), (3, 3, 2, 2), (3, 2, 2, 2)])
@pytest.mark.parametrize("objective", cce.OBJECTIVES)
def test_lp_solution_satisfies_every_cce_constraint(shape, objective):
    payoffs = np.random.default_rng(sum(shape)).normal(size=shape)
    sigma = cce.solve_cce(payoffs, objective)
    assert sigma.shape == shape[1:] and sigma.min() >= 0.0 and sigma.sum() == pytest.approx(1.0, abs=1e-12)
    assert cce.deviation_gains(sigma, payoffs).max() <= 1e-9
    if objective == "welfare":  # at least the welfare of every pure Nash equilibrium (each one is a CCE)
        for profile in itertools.product(*map(range, shape[1:])):
            pure = np.zeros(shape[1:])
            pure[profile] = 1.0
            if cce.cce_gap(pure, payoffs) == 0.0:
                assert (sigma * payoffs.sum(0)).sum() >= payoffs.sum(0)[profile] - 1e-9


def test_bad_input_is_refused():
    with pytest.raises(UsageError, match="objective"):
        cce.solve_cce(CHICKEN, objective="entropy")
    with pytest.raises(UsageError, match=r"\[m, n_1"):
        cce.solve_cce(np.zeros((3, 2, 2)))
    with pytest.raises(UsageError, match="rounds"):
        cce.HedgeConfig(rounds=0)
    with pytest.raises(UsageError, match="learning_rate"):
        cce.HedgeConfig(learning_rate=-1.0)
    with pytest.raises(UsageError, match="schedule"):
        cce.HedgeConfig(schedule="harmonic")
    game = mg.random_game(2, 2, 2, seed=0)
    with pytest.raises(UsageError, match="transition"):
        mg.MarkovGame(game.transition[..., :1], game.reward, game.initial)
    with pytest.raises(UsageError, match="reward"):
        mg.MarkovGame(game.transition, game.reward[:1], game.initial)
    with pytest.raises(UsageError, match="initial"):
        mg.MarkovGame(game.transition, game.reward, np.ones(3) / 3)
    with pytest.raises(UsageError, match="probability"):
        mg.MarkovGame(game.transition * 2, game.reward, game.initial)
    with pytest.raises(UsageError, match="joint must be"):
        mg.CorrelatedPolicy(np.full((2, 2, 2, 2), 0.5))
    with pytest.raises(UsageError, match="weights must be"):
        mg.ProductMixture(np.full((2, 2, 2, 2), 0.5), np.full((2, 2, 2, 2), 0.5), np.ones(2))
    with pytest.raises(UsageError, match="disagree"):
        mg.ProductMixture(np.full((2, 2, 2, 2), 0.5), np.full((3, 2, 2, 2), 0.5), np.full(2, 0.5))
    with pytest.raises(UsageError, match="players are 0 and 1"):
        game.seen_by(2)
    with pytest.raises(UsageError, match="horizon"):
        mg.pennies_game(horizon=0)
    big = mg.random_game(7, 4, 2, seed=0)  # 2^(4 x 6) deterministic choices before the last step
    with pytest.raises(UsageError, match="smaller game"):
        mg.markov_best_response(big, 0, np.full(2, 0.5), np.full((2, 7, 4, 2), 0.5))
    with pytest.raises(UsageError, match="smaller game"):
        mg.history_best_response(mg.random_game(10, 4, 2, seed=0), 0, np.full(4, 0.25), np.full((4, 10, 4, 2), 0.5))


def test_values_by_hand():
    # one state, two rounds of the pennies stage game under uniform play: per round u1 = (1 + 0.5)/4, u2 = 2/4
    game = mg.pennies_game(horizon=2)
    uniform = mg.CorrelatedPolicy(np.full((2, 1, 2, 2), 0.25))
    np.testing.assert_allclose(mg.expected_returns(game, uniform), [0.75, 1.0])
    # a product mixture: always (0, 0) [u = (1, 0)] or always (1, 0) [u = (0, 0.75)], half each
    pure = np.eye(2)[None, None]  # [H=1, S=1, A] one-hot rows
    first = np.stack([np.broadcast_to(pure[..., 0, :], (2, 1, 2)), np.broadcast_to(pure[..., 1, :], (2, 1, 2))])
    second = np.broadcast_to(pure[..., 0, :], (2, 2, 1, 2))
    np.testing.assert_allclose(mg.expected_returns(game, mg.ProductMixture.uniform(first, second)), [1.0, 0.75])


def _random_mixture(game, components, seed):
    rng = np.random.default_rng(seed)
    H, S = game.horizon, game.num_states
    A1, A2 = game.num_actions
    return mg.ProductMixture(rng.dirichlet(np.ones(A1), size=(components, H, S)),
                             rng.dirichlet(np.ones(A2), size=(components, H, S)), rng.dirichlet(np.ones(components)))


def _brute_force_markov(game, player, weights, opponent):
    """max over all A^(H S) deterministic Markov policies of sum_k w_k V(pi', pi^k), each evaluated by joint_values."""
    H, S, A = game.horizon, game.num_states, game.num_actions[player]
    best = -np.inf
    for actions in itertools.product(range(A), repeat=H * S):
        own = np.eye(A)[np.reshape(actions, (H, S))]  # [H, S, A]
        joints = (np.einsum("hsa,khsb->khsab", own, opponent) if player == 0
                  else np.einsum("khsa,hsb->khsab", opponent, own))
        best = max(best, weights @ (mg.joint_values(game, joints)[:, player, 0] @ game.initial))
    return best


@pytest.mark.parametrize("components", [1, 3])
def test_markov_best_response_equals_brute_force(components):
    game = mg.random_game(3, 2, 2, seed=1)
    play = _random_mixture(game, components, seed=2)
    for player in (0, 1):
        weights, opponent = play.opponents(player)
        value, policy = mg.markov_best_response(game, player, weights, opponent)
        assert value == pytest.approx(_brute_force_markov(game, player, weights, opponent), abs=1e-12)
        assert policy.shape == (3, 2)


def _trajectory_value(game, player, weights, opponent, policy):
    """sum_k w_k E[return] of a deterministic history-dependent ``policy(history) -> action`` by enumerating
    every trajectory (the history is the tuple of (s, own action, other action) so far and the current s)."""
    reward, transition = game.seen_by(player)

    def value(k, h, history, s):
        if h == game.horizon:
            return 0.0
        a = policy(history, s)
        return sum(opponent[k, h, s, b] * (reward[h, s, a, b] + sum(
            transition[h, s, a, b, t] * value(k, h + 1, history + ((s, a, b),), t) for t in range(game.num_states)))
            for b in range(opponent.shape[-1]))

    return sum(w * value(k, 0, (), s) * game.initial[s] for k, w in enumerate(weights) for s in range(game.num_states))


def test_history_best_response_equals_brute_force_and_bounds_the_markov_one():
    # H = 2, S = 2, A = 2: a deterministic history policy is an action per s_1 and per (s_1, b_1, s_2)
    game = mg.random_game(2, 2, 2, seed=3)
    play = _random_mixture(game, 3, seed=4)
    for player in (0, 1):
        weights, opponent = play.opponents(player)
        best = -np.inf
        for first in itertools.product(range(2), repeat=2):
            for second in itertools.product(range(2), repeat=8):
                table = np.reshape(second, (2, 2, 2))
                policy = (lambda history, s, first=first, table=table:
                          first[s] if not history else table[history[0][0], history[0][2], s])
                best = max(best, _trajectory_value(game, player, weights, opponent, policy))
        history = mg.history_best_response(game, player, weights, opponent)
        assert history == pytest.approx(best, abs=1e-12)
        assert history >= mg.markov_best_response(game, player, weights, opponent)[0] - 1e-12


def test_history_dominates_markov_and_matches_it_against_a_markov_opponent():
    game = mg.random_game(3, 3, 2, seed=5)
    for components in (1, 6):
        weights, opponent = _random_mixture(game, components, seed=6).opponents(0)
        markov = mg.markov_best_response(game, 0, weights, opponent)[0]
        history = mg.history_best_response(game, 0, weights, opponent)
        if components == 1:  # nothing to infer from the history
            assert history == pytest.approx(markov, abs=1e-12)
        else:
            assert history >= markov - 1e-12


GAMES = [mg.pennies_game(3, 2), mg.random_game(3, 3, 2, seed=0), mg.random_game(2, 2, 3, seed=7)]


@pytest.mark.parametrize("game", GAMES, ids=lambda g: g.name)
def test_backward_induction_cce_has_zero_gap(game):
    policy = cce.markov_cce(game)
    np.testing.assert_allclose(policy.joint.sum((-1, -2)), 1.0, atol=1e-12)
    report = mg.deviation_report(game, policy)
    assert report.markov_gap <= 1e-8 and report.history_gap <= 1e-8


def test_hedge_first_rounds_by_hand_and_one_step_gap_is_the_normal_form_gap():
    # one state, one step: the Markov game is the normal-form game (payoffs CHICKEN / 7)
    game = mg.MarkovGame(np.ones((1, 1, 2, 2, 1)), CHICKEN[:, None, None] / 7.0, np.ones(1))
    mixture = cce.independent_hedge(game, cce.HedgeConfig(rounds=40, learning_rate=2.0))
    np.testing.assert_allclose(mixture.first[0], 0.5)
    # round 2: pi ∝ exp(eta_2 Q^1), eta_2 = 2 / sqrt(2), Q^1_1(a) = mean_b u1(a, b)
    logits = 2.0 / np.sqrt(2.0) * CHICKEN[0].mean(1) / 7.0
    np.testing.assert_allclose(mixture.first[1, 0, 0], np.exp(logits) / np.exp(logits).sum(), rtol=1e-12)
    joint = np.einsum("ka,kb->ab", mixture.first[:, 0, 0], mixture.second[:, 0, 0]) / 40
    report = mg.deviation_report(game, mixture)
    assert report.markov_gap == pytest.approx(cce.cce_gap(joint, CHICKEN / 7.0), abs=1e-12)
    assert report.history_gap == pytest.approx(report.markov_gap, abs=1e-12)  # one step: no history to use


def test_repro_rules_by_hand():
    assert repro_cce.markov_outcome(0.25, 0.02) == "holds"
    assert repro_cce.markov_outcome(0.25, 0.05) == "inconclusive"
    assert repro_cce.markov_outcome(0.25, 0.2) == "contradicted"
    assert repro_cce.history_outcome(0.25, 0.19, 0.01) == "holds"
    assert repro_cce.history_outcome(0.25, 0.02, 0.005) == "inconclusive"  # 4x the Markov gap, but < 0.1 x gap(T=1)
    assert repro_cce.history_outcome(0.25, 0.0101, 0.01) == "contradicted"
    from longhorizon.repro import claims as C

    def verdicts(*settings):  # (Markov gap at T = 1, at T_max, history gap at T_max) per Hedge rate
        hedge = {str(i): {"markov_gap": [m0, m], "history_gap": [m0, h]} for i, (m0, m, h) in enumerate(settings)}
        L = {"games": [{"game": "g", "rounds": [1, 100], "cce": {"markov_gap": 1e-12, "history_gap": 1e-12}, "hedge": hedge}]}
        return [c.verdict for c in repro_cce.judge(L)[0]]

    assert verdicts((0.25, 0.02, 0.19), (0.25, 0.01, 0.0101)) == [C.HOLDS, C.HOLDS, C.HOLDS]  # one setting shows both
    assert verdicts((0.25, 0.02, 0.19), (0.25, 0.2, 0.2))[1] == C.INCONCLUSIVE  # the settings disagree
    assert verdicts((0.25, 0.2, 0.2), (0.25, 0.3, 0.3))[1:] == [C.CONTRADICTED, C.CONTRADICTED]
    assert verdicts((0.25, 0.02, 0.02))[2] == C.CONTRADICTED
    assert repro_cce.grid(100) == [1, 2, 5, 10, 20, 50, 100] and repro_cce.grid(30) == [1, 2, 5, 10, 20, 30]


def test_repro_quick_run_writes_files_and_claims_from_the_data(tmp_path):
    result = repro_cce.run(str(tmp_path), quick=True, log=lambda *_: None)
    for name in ("README.md", "summary.json", "cce.png"):
        assert (tmp_path / name).stat().st_size > 0
    from longhorizon.repro import claims as C

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(summary) == [] and summary["quick"] and summary["claims"] == result["claims"]
    assert {c["verdict"] for c in summary["claims"]} == {C.QUICK}
    assert [c.to_dict() for c in repro_cce.judge(summary, quick=True)[0]] == summary["claims"]
    (game,) = summary["games"]
    assert game["cce"]["markov_gap"] <= 1e-8 and game["cce"]["history_gap"] <= 1e-8
    for gaps in game["hedge"].values():  # a history-dependent deviation is also allowed to be Markov
        assert all(h >= m - 1e-12 for m, h in zip(gaps["markov_gap"], gaps["history_gap"]))
    curve = (tmp_path / "curves" / "Hedge_eta_1.csv").read_text().splitlines()
    assert curve[0] == "game,step,markov_gap,history_gap" and len(curve) == 1 + len(summary["games"][0]["rounds"])
    text = (tmp_path / "README.md").read_text()
    assert "longhorizon repro cce --quick" in text and "## Verdict" in text and "does not re-prove" in text


def test_hedge_second_round_on_a_markov_game_by_hand():
    # round 1 is uniform; round 2 at every (h, s) is softmax(eta_2 Q^1), Q^1 the uniform play's Q-values
    game = mg.pennies_game(horizon=3, states=2)
    mixture = cce.independent_hedge(game, cce.HedgeConfig(rounds=2, learning_rate=3.0))
    values = mg.joint_values(game, np.full((3, 2, 2, 2), 0.25))  # [2, H+1, S]
    for h, s in itertools.product(range(3), range(2)):
        for player, policy in ((0, mixture.first), (1, mixture.second)):
            q = np.array([[game.reward[player, h, s, a, b] + game.transition[h, s, a, b] @ values[player, h + 1]
                           for b in range(2)] for a in range(2)])
            own = q.mean(1) if player == 0 else q.mean(0)  # against the other's uniform first policy
            expected = np.exp(3.0 / np.sqrt(2.0) * own) / np.exp(3.0 / np.sqrt(2.0) * own).sum()
            np.testing.assert_allclose(policy[1, h, s], expected, rtol=1e-12)
