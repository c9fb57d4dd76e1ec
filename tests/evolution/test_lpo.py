"""LPO / TA-LPO drift constraints, the zero-drift objective, antithetic ES on a quadratic, inner loop, repro."""

import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.evolution import lpo, meta

RATIOS = jnp.concatenate([jnp.linspace(0.01, 5.0, 41), jnp.array([1.0, 20.0, 1e-4])])
ADVS = jnp.linspace(-4.0, 4.0, 17)


@pytest.mark.slow
@pytest.mark.parametrize("temporal", [False, True])
def test_drift_is_nonnegative_and_zero_with_zero_slope_at_ratio_one(temporal):
    config = lpo.DriftConfig(temporal=temporal)
    for seed in range(2):
        params = lpo.init_drift(config, jax.random.PRNGKey(seed))
        params = jax.tree_util.tree_map(lambda p: 5.0 * p, params)  # large weights: constraints hold by construction
        r, a = jnp.meshgrid(RATIOS, ADVS)
        extra = dict(progress=0.3, horizon=64.0) if temporal else {}
        f = lpo.drift(config, params, r, a, **extra)
        assert f.shape == r.shape and bool(jnp.all(f >= 0)) and bool(jnp.all(jnp.isfinite(f)))
        at_one = lpo.drift(config, params, jnp.ones_like(ADVS), ADVS, **extra)
        np.testing.assert_array_equal(np.asarray(at_one), 0.0)
        slope = jax.vmap(jax.grad(lambda rr, aa: lpo.drift(config, params, rr, aa, **extra)), (None, 0))(1.0, ADVS)
        np.testing.assert_array_equal(np.asarray(slope), 0.0)


def test_temporal_drift_sees_the_lifetime_and_needs_it():
    config = lpo.DriftConfig(temporal=True)
    params = lpo.init_drift(config, jax.random.PRNGKey(0))
    early = lpo.drift(config, params, 1.5, 1.0, progress=0.0, horizon=64.0)
    late = lpo.drift(config, params, 1.5, 1.0, progress=1.0, horizon=64.0)
    assert float(early) != float(late)
    with pytest.raises(ValueError, match="progress"):
        lpo.drift(config, params, 1.5, 1.0)
    with pytest.raises(ValueError, match="hidden"):
        lpo.DriftConfig(hidden=0)
    with pytest.raises(UsageError, match="even"):
        meta.ESConfig(population=7)
    with pytest.raises(UsageError, match="bandit"):
        meta.BanditConfig(arms=1)


def test_zero_drift_objective_is_ppo_unclipped_surrogate():
    key = jax.random.PRNGKey(0)
    logp, old, adv = jax.random.normal(key, (3, 32)) * jnp.array([[0.3], [0.3], [1.0]])
    by_hand = np.mean(np.exp(np.asarray(logp) - np.asarray(old)) * np.asarray(adv))
    np.testing.assert_allclose(float(lpo.lpo_objective(lpo.DriftConfig(), None, logp, old, adv)), by_hand, rtol=1e-5)
    # a drift only ever lowers the objective, and not at all where the ratio is one
    params = lpo.init_drift(lpo.DriftConfig(), key)
    assert float(lpo.lpo_objective(lpo.DriftConfig(), params, logp, old, adv)) <= by_hand + 1e-6
    np.testing.assert_allclose(float(lpo.lpo_objective(lpo.DriftConfig(), params, old, old, adv)),
                               float(jnp.mean(adv)), rtol=1e-5)


@pytest.mark.slow
def test_evosax_open_es_step_is_the_antithetic_gradient_on_a_quadratic():
    # F(x) = -1/2 (x-c)^T H (x-c). Told -F with identity shaping and SGD at rate 1, evosax's OpenES moves its mean
    # by exactly g_hat = 1/(2 sigma P') sum (F+ - F-) eps = mean(eps eps^T) grad F at theta = 0: the analytic H c
    # in the large-population limit.
    import optax

    dim, sigma = 8, 0.1
    rng = np.random.default_rng(0)
    c, h = jnp.asarray(rng.normal(size=dim)), jnp.asarray(np.diag(rng.uniform(0.5, 2.0, dim)))
    fitness_fn = lambda x: -0.5 * (x - c) @ h @ (x - c)
    analytic = h @ c
    errors = {}
    for population in (64, 65536):
        strategy = meta.open_es(population, sigma, jnp.zeros(dim), optax.sgd(1.0), centered_ranks=False)
        state = strategy.init(jax.random.PRNGKey(0), jnp.zeros(dim), strategy.default_params)
        members, state = strategy.ask(jax.random.PRNGKey(1), state, strategy.default_params)
        np.testing.assert_allclose(np.asarray(members[: population // 2] + members[population // 2:]), 0.0, atol=1e-6)
        state, _ = strategy.tell(jax.random.PRNGKey(2), members, -jax.vmap(fitness_fn)(members), state,
                                 strategy.default_params)
        estimate = strategy.get_mean(state)
        errors[population] = float(jnp.linalg.norm(estimate - analytic) / jnp.linalg.norm(analytic))
        assert errors[population] < 4.0 * np.sqrt(2 * dim / population)  # Monte-Carlo rate, generous constant
    assert errors[65536] < errors[64] and errors[65536] < 0.03


@pytest.mark.slow
def test_bandit_advantages_and_score_by_hand():
    adv = meta.bandit_advantages(jnp.array([1.0, 3.0]))
    np.testing.assert_allclose(np.asarray(adv), [-1.0, 1.0], rtol=1e-5)
    means = jnp.array([0.0, 1.0, 2.0])
    assert float(meta.normalised_score(jnp.array([0.0, 0.0, 50.0]), means)) == pytest.approx(1.0)
    assert float(meta.normalised_score(jnp.zeros(3), means)) == pytest.approx(0.0, abs=1e-6)
    # a lifetime of zero updates leaves the uniform policy; the masked long scan equals the short one
    bandit = meta.BanditConfig(arms=4, batch=4, epochs=1)
    objective = meta.drift_objective(lpo.DriftConfig(), None)
    key = jax.random.PRNGKey(3)
    inner = jax.jit(meta.inner_lifetime, static_argnums=(0, 1, 4))
    assert float(inner(objective, bandit, key, 0, 3)) == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(float(inner(objective, bandit, key, 2, 5)), float(inner(objective, bandit, key, 2, 2)),
                               rtol=1e-6)


def test_drift_grid_reads_the_drift_and_lifetime_change_sees_only_the_temporal_one():
    ratios = np.linspace(0.5, 2.0, 7)
    for temporal in (False, True):
        config = lpo.DriftConfig(temporal=temporal)
        params = lpo.init_drift(config, jax.random.PRNGKey(1))
        early, late = (lpo.drift_grid(config, params, ratios, p, 64.0) for p in (0.05, 0.95))
        extra = dict(progress=0.05, horizon=64.0) if temporal else {}
        assert early.shape == (2, 7)
        np.testing.assert_allclose(early[0], lpo.drift(config, params, jnp.asarray(ratios), -jnp.ones(7), **extra), rtol=1e-6)
        np.testing.assert_allclose(early[1], lpo.drift(config, params, jnp.asarray(ratios), jnp.ones(7), **extra), rtol=1e-6)
        assert (lpo.lifetime_change(early, late) > 0) == temporal


def _recorded(rise=0.1, runs=3, flat_run=None, gap=0.1):
    """Recorded numbers over ``runs`` meta-training runs: five drifts' meta-fitness curves (rising by ``rise``; run
    ``flat_run`` of every drift does not rise), bandit scores, PPO returns and drift grids in which TA-LPO's drifts
    beat LPO's by ``gap`` in every run (the runs differ a little; their paired differences do not)."""
    arms = ("LPO", "TA-LPO", "TA-LPO (meta-gradient)", "LPO (CartPole-v1)", "TA-LPO (CartPole-v1)")
    wobble = [0.01 * k for k in range(runs)]
    curve = lambda k: list(np.linspace(0.5, 0.5 + (0.0 if k == flat_run else rise), 8))  # noqa: E731
    envs = {"Acrobot-v1": {"8": {**{a: [[0.5 + gap * ("TA" in a) + w] * 3 for w in wobble] for a in
                                    ("LPO (bandit)", "TA-LPO (bandit)", "LPO (CartPole-v1)", "TA-LPO (CartPole-v1)")},
                                 "PPO-clip 0.2": [[0.5] * 3]}}}
    grid = np.ones((2, 5))
    return {"meta_fitness": {a: [curve(k) for k in range(runs)] for a in arms},
            "scores": {a: {"4": [[0.6 + gap * ("TA" in a) - gap / 2 * ("meta-gradient" in a) + w, 0.01] for w in wobble],
                           "8": [[0.7 + w, 0.01] for w in wobble]} for a in arms[:3]},
            "held_out_lifetimes": [4], "held_out_envs": envs,
            "drift_grid": {"ta_early": [grid.tolist()] * runs,
                           "ta_late": [((1.5 + w) * grid).tolist() for w in wobble],
                           "ta_control_early": [grid.tolist()] * runs, "ta_control_late": [grid.tolist()] * runs},
            "setup": {"control": {"env": "CartPole-v1", "lifetimes": [8, 32]}}}


def test_claim_rules_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro import ta_lpo

    assert lpo.lifetime_change(np.ones((2, 5)), 1.5 * np.ones((2, 5))) == pytest.approx(0.4)
    # three meta-training runs, every one on the claim's side: the bandit and transfer gaps and the bandit drift's
    # change hold; the control drift does not change (0 < 0.1 in every run): contradicted; ES beats the meta-gradient
    claims, arms = ta_lpo.judge(_recorded())
    assert [c.verdict for c in claims] == [C.HOLDS, C.HOLDS, C.HOLDS, C.HOLDS, C.CONTRADICTED, C.HOLDS]
    assert claims[0].evidence["a"] == pytest.approx([0.7, 0.71, 0.72]) and claims[0].evidence["seeds"] == 3
    assert claims[0].evidence["difference"] == pytest.approx(0.1) and claims[0].evidence["meta_runs"] == 3
    assert claims[1].evidence["a"] == pytest.approx([0.4, 0.51 / 1.255, 0.52 / 1.26])  # one change per run
    assert claims[1].evidence["b"] == [0.1] and "the unit is the meta-training run" in claims[1].rule
    assert np.shape(claims[2].evidence["ppo_seed_differences"]) == (3, 3)
    assert all(a["seeds"] == 3 and a["signal"]["moved"] and len(a["signal"]["tests"]) == 3 for a in arms.values())
    # the TA-LPO drifts beaten by LPO's in every run: contradicted
    against = [c.verdict for c in ta_lpo.judge(_recorded(gap=-0.1))[0]]
    assert against[0] == against[2] == against[3] == C.CONTRADICTED
    # one meta-training run: nothing about what meta-training finds is decided, however large the gap
    one = ta_lpo.judge(_recorded(runs=1))
    assert [c.verdict for c in one[0]] == [C.INCONCLUSIVE] * 6 and all(a["seeds"] == 1 for a in one[1].values())
    assert "1 meta-training run(s): holds or contradicted need at least 3" in one[0][0].evidence["reason"]
    # a single run whose fitness did not rise takes the signal from every claim on that drift
    stalled, stalled_arms = ta_lpo.judge(_recorded(flat_run=1))
    assert [c.verdict for c in stalled] == [C.NO_SIGNAL] * 6
    assert any("LPO run 2" in w for w in stalled[0].evidence["did_not_move"])
    assert not any(a["signal"]["moved"] for a in stalled_arms.values())
    assert [c.verdict for c in ta_lpo.judge(_recorded(rise=0.0))[0]] == [C.NO_SIGNAL] * 6
    assert {c.verdict for c in ta_lpo.judge(_recorded(), quick=True)[0]} == {C.QUICK}


@pytest.mark.slow
def test_quick_repro_writes_files_and_is_not_judged(tmp_path):
    from longhorizon.repro import claims as C
    from longhorizon.repro import ta_lpo

    result = ta_lpo.run(str(tmp_path), quick=True)
    runs = ta_lpo.QUICK.meta_runs
    for name in ("README.md", "summary.json", "ta_lpo.png", "curves/TA-LPO.csv", "ta_lpo_bandit_drift.npz",
                 f"ta_lpo_bandit_run{runs}_drift.npz"):
        assert (tmp_path / name).stat().st_size > 0
    assert not (tmp_path / ta_lpo.PARTIAL).exists()  # the finished runs live in summary.json
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(summary) == [] and summary["quick"] is True and summary["claims"] == result["claims"]
    assert {c["verdict"] for c in summary["claims"]} == {C.QUICK}
    grid = summary["drift_grid"]
    change = [lpo.lifetime_change(e, late) for e, late in zip(grid["ta_early"], grid["ta_late"])]
    assert summary["claims"][1]["evidence"]["a"] == pytest.approx(change) and len(change) == runs
    assert summary["meta_seeds"] == [0, ta_lpo.RUN_SEED]
    assert all(len(c) == runs for c in summary["meta_fitness"].values())
    assert all(r["inner_steps_per_s"] > 0 for rs in summary["throughput"].values() for r in rs)
    assert {r["run"] for r in csv.DictReader((tmp_path / "curves" / "TA-LPO.csv").open())} == {"1", "2"}
    readme = (tmp_path / "README.md").read_text()
    assert "longhorizon repro ta-lpo --quick" in readme and f"{runs} meta-training runs per drift" in summary["scale"]


def test_meta_training_runs_are_saved_and_read_back(tmp_path, monkeypatch):
    """A finished meta-training run is saved as it finishes; a rerun of the same setup reads it back, and runs with
    different seeds start from different drifts."""
    from longhorizon.repro import ta_lpo

    setup = ta_lpo.QUICK
    drift = ta_lpo.drifts(setup)["TA-LPO"]
    path = tmp_path / "meta.json"
    first = ta_lpo.finished(path, setup, lambda: ta_lpo.meta_run(drift, 0))
    assert path.exists() and len(first["fitness"]) == setup.generations
    monkeypatch.setattr(ta_lpo, "meta_run", lambda *a: pytest.fail("a finished run was run again"))
    assert ta_lpo.finished(path, setup, lambda: ta_lpo.meta_run(drift, 0)) == first
    init = lambda seed: lpo.init_drift(lpo.DriftConfig(temporal=True), jax.random.PRNGKey(seed))  # noqa: E731
    assert not np.allclose(init(0)["w1"], init(ta_lpo.RUN_SEED)["w1"])
    w1 = np.asarray(ta_lpo.params_of(first)["w1"])
    assert w1.dtype == np.float32 and w1.shape == np.shape(first["params"]["w1"])


def test_ppo_inner_loop_pieces_by_hand():
    from longhorizon.algos import ppo
    from longhorizon.errors import UsageError
    from longhorizon.evolution import meta_ppo

    # returns summed per update, episodes counted per update; lifetime 8 -> the last 2 updates: (30 + 0) / (2 + 0)
    metrics = {"episode_return_sum": jnp.array([1.0, 2, 3, 4, 5, 6, 30, 0]), "episodes": jnp.array([1.0, 1, 1, 1, 1, 1, 2, 0])}
    assert float(meta_ppo.tail_return(metrics, 8)) == pytest.approx(15.0)
    assert float(meta_ppo.tail_return({k: jnp.zeros(3) for k in metrics}, 3)) == 0.0  # no episode ended: 0, not NaN
    inner = meta_ppo.InnerPPO(lifetimes=(5,), overrides=(("num_envs", 2), ("num_steps", 16)))
    config = meta_ppo.lifetime_config(inner, 5)
    assert (config.num_envs, config.num_steps, ppo.num_updates(config)) == (2, 16, 5)  # n/N counts the lifetime
    with pytest.raises(UsageError, match="no return range is known"):
        meta_ppo.InnerPPO(env="Pendulum-v1")


def test_evolve_drift_refuses_a_folder_that_holds_a_drift(tmp_path, capsys):
    from longhorizon.cli import main

    (tmp_path / "drift.npz").write_bytes(b"")
    assert main(["evolve", "drift", "--out", str(tmp_path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "already holds a drift" in err and err.strip().count("\n") == 0



def test_a_damaged_drift_file_is_one_sentence(tmp_path):
    """A drift is saved atomically; one with a flipped byte fails its zip CRC and is refused in one sentence."""
    import jax
    import numpy as np

    from longhorizon.evolution import lpo

    path = tmp_path / "drift.npz"
    lpo.save_drift(path, lpo.init_drift(lpo.DriftConfig(temporal=True), jax.random.PRNGKey(0)))
    assert not (tmp_path / "drift.npz.tmp").exists()
    lpo.load_drift(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="not a drift file"):
        lpo.load_drift(path)
