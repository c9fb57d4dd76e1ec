"""QARL's exact side: the QRE fixed point, soft Shapley against closed forms, the exact best response
against brute force, the Gamma teacher's KL step and gate; the learners' config errors and one tiny run."""

import dataclasses
import itertools
import json

import numpy as np
import pytest
from scipy import integrate, optimize, special, stats

from longhorizon.errors import UsageError
from longhorizon.games import qarl
from longhorizon.games.qarl_learners import LearnerConfig, protagonist_policy, temperature_features, train
from longhorizon.repro import qarl as repro_qarl

PENNIES = np.array([[2.0, -1.0], [-1.0, 1.0]])  # asymmetric matching pennies (the row player's payoff)


def pennies_qre_by_hand(alpha_p, alpha_a):
    """The logit QRE of the 2x2 game by a scalar root: with y1(x1) = sigmoid(-(5 x1 - 2) / alpha_a)
    (the column player's logit response; (M^T x)_1 - (M^T x)_2 = 5 x1 - 2), x1 solves
    x1 = sigmoid((5 y1 - 2) / alpha_p); the right side falls in x1, so the root is unique."""
    y_of = lambda x1: special.expit(-(5 * x1 - 2) / alpha_a)
    x1 = optimize.brentq(lambda x1: x1 - special.expit((5 * y_of(x1) - 2) / alpha_p), 0.0, 1.0, xtol=1e-15)
    return np.array([x1, 1 - x1]), np.array([y_of(x1), 1 - y_of(x1)])


@pytest.mark.parametrize("alpha_p, alpha_a", [(0.5, 0.3), (1.0, 1.0), (0.05, 2.0)])
def test_stage_qre_matches_the_hand_solved_pennies_and_the_max_min(alpha_p, alpha_a):
    stage = qarl.stage_qre(PENNIES[None], alpha_p, alpha_a)
    x, y = pennies_qre_by_hand(alpha_p, alpha_a)
    assert stage.residual[0] < 1e-10
    np.testing.assert_allclose(stage.x[0], x, atol=1e-10)
    np.testing.assert_allclose(stage.y[0], y, atol=1e-10)
    # the value is also max_x [alpha_p H(x) - alpha_a logsumexp(-M^T x / alpha_a)] (the adversary's soft minimum)
    entropy = lambda p: -np.sum(p * np.log(p))
    g = lambda x1: -(alpha_p * entropy(np.array([x1, 1 - x1]))
                     - alpha_a * special.logsumexp(-PENNIES.T @ np.array([x1, 1 - x1]) / alpha_a))
    best = optimize.minimize_scalar(g, bounds=(1e-12, 1 - 1e-12), method="bounded", options={"xatol": 1e-12})
    assert abs(stage.value[0] - (-best.fun)) < 1e-9


def test_symmetric_pennies_is_uniform_whatever_the_temperature():
    stage = qarl.stage_qre(np.array([[[1.0, -1.0], [-1.0, 1.0]]]), 0.2, 0.2)
    np.testing.assert_allclose(stage.x[0], [0.5, 0.5], atol=1e-12)
    assert abs(stage.value[0]) < 1e-12  # x^T M y = 0 and the two entropy terms cancel


def test_stage_qre_residual_on_hard_random_games():
    rng = np.random.default_rng(0)
    M = rng.normal(size=(16, 4, 5)) * 3.0
    stage = qarl.stage_qre(M, 0.005, 0.01)  # temperatures far below the payoff scale: saturated softmaxes
    assert stage.residual.max() < 1e-10
    with pytest.raises(UsageError, match="temperatures must be > 0"):
        qarl.stage_qre(M, 0.0, 0.1)


def test_soft_shapley_on_a_one_state_game_is_the_stage_value_over_one_minus_gamma():
    """One state that always continues: Q = M + gamma V, and val(M + c) = val(M) + c, so V = val(M) / (1 - gamma)."""
    game = qarl.WindCorridor(width=3, height=2, discount=0.9)
    arrays = {"r": PENNIES[None], "P": np.ones((1, 2, 2, 1)), "terminal": np.zeros(1, bool)}
    values, init = np.zeros(1), None
    for _ in range(400):
        stage = qarl.stage_qre(qarl.stage_matrices(arrays, game.discount, values), 0.5, 0.3, init)
        values, init = stage.value, stage.logits
    assert abs(values[0] - qarl.stage_qre(PENNIES[None], 0.5, 0.3).value[0] / 0.1) < 1e-10


@pytest.fixture(scope="module")
def small_qre():
    game = qarl.WindCorridor(width=4, height=3)
    return game, qarl.soft_shapley(game, 0.05, 0.2)


def test_soft_shapley_is_a_fixed_point_and_contracts(small_qre):
    game, qre = small_qre
    arrays = game.arrays()
    assert qre.residual < 1e-10 and qre.error_bound < 1e-10
    live = ~arrays["terminal"]
    again = qarl.stage_qre(qarl.stage_matrices(arrays, game.discount, qre.values)[live], 0.05, 0.2)
    np.testing.assert_allclose(again.value, qre.values[live], atol=1e-10)  # V = val(r + gamma P V)
    changes = qre.sweeps[qre.sweeps > 1e-13]
    assert np.all(changes[1:] <= game.discount * changes[:-1] + 1e-15)  # sup-norm contraction, modulus gamma


def test_corridor_transitions_by_hand():
    game = qarl.WindCorridor(width=4, height=2, gust=0.5)
    arrays = game.arrays()
    np.testing.assert_allclose(arrays["P"].sum(-1), 1.0)
    # start = cell 4 (bottom-left); north -> cell 0, then a south gust pushes it back to 4 half of the time
    np.testing.assert_allclose(arrays["P"][4, 0, 3, [0, 4]], [0.5, 0.5])
    # from cell 1 (above the cliff) east -> cell 2; a south gust -> cliff cell 6 (reward -1)
    np.testing.assert_allclose(arrays["P"][1, 1, 3, [2, 6]], [0.5, 0.5])
    assert arrays["r"][1, 1, 3] == pytest.approx(0.5 * -game.step_cost + 0.5 * game.cliff_reward)
    # walking into the goal ends the step before the wind: all mass on the goal
    assert arrays["P"][3, 2, 2, 7] == 1.0 and arrays["terminal"].tolist() == [False] * 5 + [True] * 3
    with pytest.raises(UsageError, match="gust"):
        qarl.WindCorridor(gust=1.5)


def test_worst_case_value_equals_brute_force_over_deterministic_adversaries():
    game = qarl.WindCorridor(width=3, height=2, gust=0.6)  # 3 live states -> 5^3 deterministic adversaries
    arrays = game.arrays()
    live = np.flatnonzero(~arrays["terminal"])
    policy = np.random.default_rng(1).dirichlet(np.ones(4), size=game.num_states)
    values, adversary = qarl.worst_case_value(game, policy)
    r = np.einsum("sa,sab->sb", policy, arrays["r"])
    P = np.einsum("sa,sabt->sbt", policy, arrays["P"]) * (~arrays["terminal"])[None, None, :]
    brute = np.full(game.num_states, np.inf)
    for choice in itertools.product(range(len(qarl.WINDS)), repeat=len(live)):
        b = np.zeros(game.num_states, int)
        b[live] = choice
        v = np.linalg.solve(np.eye(game.num_states) - game.discount * P[np.arange(game.num_states), b],
                            r[np.arange(game.num_states), b])
        brute = np.minimum(brute, v)  # a best response is best from every state at once
    np.testing.assert_allclose(values[live], brute[live], atol=1e-12)


def test_gamma_kl_matches_numerical_integration():
    p, q = stats.gamma(2.5, scale=0.4), stats.gamma(1.5, scale=0.1)
    numeric, _ = integrate.quad(lambda t: p.pdf(t) * (p.logpdf(t) - q.logpdf(t)), 0, np.inf, limit=200)
    assert qarl.gamma_kl(2.5, 0.4, 1.5, 0.1) == pytest.approx(numeric, rel=1e-7)
    assert qarl.gamma_kl(2.0, 0.3, 2.0, 0.3) == pytest.approx(0.0, abs=1e-14)


def test_teacher_step_respects_the_kl_bound_moves_toward_the_target_and_is_gated():
    teacher = qarl.GammaTeacher(init_shape=2.0, init_scale=0.5, target_shape=2.0, target_scale=0.005, max_kl=0.5, threshold=0.3)
    shape, scale = teacher.init_shape, teacher.init_scale
    distances = [qarl.gamma_kl(shape, scale, teacher.target_shape, teacher.target_scale)]
    for _ in range(40):
        new_shape, new_scale, info = qarl.teacher_step(teacher, shape, scale, performance=0.31)
        assert not info["gated"] and qarl.gamma_kl(new_shape, new_scale, shape, scale) <= 0.5 * (1 + 1e-9)
        shape, scale = new_shape, new_scale
        distances.append(qarl.gamma_kl(shape, scale, teacher.target_shape, teacher.target_scale))
    distances = np.array(distances)
    reached = int(np.argmax(distances < 1e-12))  # the target is reached once it is within one step
    assert reached > 1 and np.all(np.diff(distances[:reached + 1]) < 0) and np.all(distances[reached:] < 1e-12)
    # the first step is a real constrained step: on the KL boundary, not at the target
    s1, th1, info = qarl.teacher_step(teacher, 2.0, 0.5, performance=1.0)
    assert info["kl_step"] == pytest.approx(0.5, rel=1e-6) and th1 < 0.5
    # below the threshold nothing moves
    assert qarl.teacher_step(teacher, 2.0, 0.5, performance=0.29) == (2.0, 0.5, {"gated": True, "kl_step": 0.0})


def test_random_wind_value_by_hand_on_a_one_step_corridor():
    game = qarl.WindCorridor(width=3, height=2, gust=0.5, step_cost=0.1)
    values = qarl.random_wind_value(game)
    # cell 2 (above the goal): south walks straight into the goal, before any wind
    assert values[2] == pytest.approx(game.goal_reward)


def test_learner_config_errors_and_temperature_features():
    with pytest.raises(UsageError, match="unknown curriculum"):
        LearnerConfig(curriculum="annealed")
    with pytest.raises(UsageError, match="multiple of chunk"):
        LearnerConfig(steps=1000, chunk=300)
    with pytest.raises(UsageError, match="temperature_min"):
        LearnerConfig(temperature_min=1.0, temperature_max=0.5)
    for field, bad, message in (("exploration", 1.0, "exploration"), ("learning_rate", 0.0, "learning_rate"),
                                ("temperature_knots", 1, "temperature_knots"), ("linear_fraction", 0.0, "linear_fraction")):
        with pytest.raises(UsageError, match=message):
            LearnerConfig(**{field: bad})
    with pytest.raises(UsageError, match="max_kl"):
        qarl.GammaTeacher(max_kl=0.0)
    with pytest.raises(UsageError, match="discount"):
        qarl.WindCorridor(discount=1.0)
    config = LearnerConfig()
    for tau in (0.01, 0.2, 3.0, 10.0):
        h = np.asarray(temperature_features(tau, config, xp=np))
        assert h[0] == 1.0 and h[1:].sum() == pytest.approx(1.0) and np.all(h >= 0)


@pytest.mark.slow
def test_a_tiny_training_run_records_exact_worst_cases():
    # the quick reproduction's game and chunk: the compiled chunk is shared with the test below
    config = dataclasses.replace(repro_qarl.QUICK.learner, curriculum="qarl", steps=2 * repro_qarl.QUICK.learner.chunk,
                                 teacher=qarl.GammaTeacher(threshold=-10.0))  # the gate always opens
    game = repro_qarl.QUICK.game
    history = train(game, config, seeds=2)
    assert np.shape(history["worst_case"]) == (2, 2) and history["steps"] == [config.chunk, 2 * config.chunk]
    assert not np.any(history["gated"]) and np.all(np.array(history["temperature_mean"])[:, 1] < 1.0)
    policy = protagonist_policy(history["final_weights"][0], config.temperature_eval, config)
    expected = qarl.worst_case_value(game, policy)[0][game.start]
    assert history["worst_case"][0][-1] == pytest.approx(expected, abs=1e-12)


def test_the_claim_rule_by_hand():
    from longhorizon.repro import claims as C

    def recorded(qarl_final, rarl_final, rise=1.0):
        curve = lambda f: [[f_i - rise, f_i] for f_i in f]  # noqa: E731  two points per seed, rising by ``rise``
        learners = {a: {"steps": [10, 20], "worst_case": curve(f)} for a, f in
                    (("qarl", qarl_final), ("linear", qarl_final), ("rarl", rarl_final))}
        return {"exact": {"qre": [{"residual": 1e-12, "max_contraction_ratio": 0.9}]}, "learners": learners,
                "setup": {"game": {"discount": 0.97}}}

    high, low = [0.9, 1.1, 1.0], [0.4, 0.6, 0.5]
    assert [c.verdict for c in repro_qarl.judge(recorded(high, low))[0]] == [C.HOLDS] * 3
    assert repro_qarl.judge(recorded(low, high))[0][1].verdict == C.CONTRADICTED
    assert repro_qarl.judge(recorded(high, [x + 0.45 for x in low]))[0][1].verdict == C.INCONCLUSIVE  # a gap of 0.05
    assert repro_qarl.judge(recorded(high[:2], low[:2]))[0][1].verdict == C.INCONCLUSIVE  # two seeds never judge
    assert repro_qarl.judge(recorded(high, low, rise=0.0))[0][1].verdict == C.NO_SIGNAL  # flat worst-case curves
    bad = recorded(high, low)
    bad["exact"]["qre"][0]["residual"] = 1e-6
    assert repro_qarl.judge(bad)[0][0].verdict == C.CONTRADICTED


@pytest.mark.slow
def test_quick_reproduction_writes_files_and_is_not_judged(tmp_path):
    result = repro_qarl.run(str(tmp_path), quick=True)
    for name in ("README.md", "summary.json", "qarl.png"):
        assert (tmp_path / name).stat().st_size > 0
    from longhorizon.repro import claims as C

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(summary) == [] and summary["quick"] is True and summary["claims"] == result["claims"]
    assert [c["verdict"] for c in summary["claims"]] == [C.QUICK] * 3
    assert [c.to_dict() for c in repro_qarl.judge(summary, quick=True)[0]] == summary["claims"]
    assert (tmp_path / "curves" / "qarl.csv").exists()
    assert all(r["residual"] < 1e-10 for r in summary["exact"]["qre"])
    text = (tmp_path / "README.md").read_text()
    for part in ("## Verdict", "`longhorizon repro qarl --quick`", "![worst-case value vs steps](qarl.png)"):
        assert part in text
