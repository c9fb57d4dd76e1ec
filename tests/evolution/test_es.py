"""Antithetic ES (longhorizon.evolution.es): gradient estimate, seeded noise, sigma schedule, fp32 master."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.evolution import es

C = jnp.array([0.5, -1.0, 2.0, 0.25], jnp.float32)


def quadratic_fitness(params):
    """f(x) = -|x - c|^2, gradient -2 (x - c)."""
    return -jnp.sum((params["x"] - C) ** 2)


@functools.partial(jax.jit, static_argnames=("mask",))
def population_fitness(master, seeds, scale, mask):
    return jax.vmap(lambda s: quadratic_fitness(es.perturbed(master, s, scale, mask)))(seeds)


def estimate(pairs: int, seed: int = 0):
    cfg = es.ESConfig(pairs=pairs, sigma=0.1, sigma_final=0.1, fitness_shaping="none", seed=seed)
    master = {"x": jnp.zeros(4, jnp.float32)}
    mask = es.selected(master, ())
    seeds = es.member_seeds(cfg, 0)
    f_plus = np.asarray(population_fitness(master, jnp.asarray(seeds), cfg.sigma, mask))
    f_minus = np.asarray(population_fitness(master, jnp.asarray(seeds), -cfg.sigma, mask))
    return np.asarray(es.gradient_estimate(master, seeds, f_plus, f_minus, cfg.sigma, mask)["x"])


def test_gradient_estimate_matches_analytic_gradient_and_error_falls_with_population():
    analytic = 2 * np.asarray(C)  # -2 (x - c) at x = 0
    errors = {n: np.mean([np.linalg.norm(estimate(n, seed) - analytic) for seed in range(3)]) for n in (4, 64, 1024)}
    assert errors[1024] < errors[64] < errors[4]
    assert errors[1024] < 0.15 * np.linalg.norm(analytic)


def test_antithetic_pair_regenerates_the_same_noise_from_its_seed():
    master = {"a": jnp.ones((3, 2)), "b": jnp.zeros(5)}
    mask = es.selected(master, ())
    plus, minus = es.perturbed(master, 7, 0.5, mask), es.perturbed(master, 7, -0.5, mask)
    eps_again = es.noise(7, master, mask)
    for k in master:
        np.testing.assert_allclose((plus[k] - minus[k]) / 1.0, eps_again[k], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(es.noise(7, master, mask)[k], eps_again[k])
    assert not np.allclose(es.noise(8, master, mask)["a"], eps_again["a"])


def test_subset_moves_only_the_chosen_leaves():
    master = {"block_0": jnp.zeros(3), "block_1": jnp.zeros(3)}
    mask = es.selected(master, ("block_1",))
    eps = es.noise(1, master, mask)
    assert np.all(eps["block_0"] == 0) and np.any(eps["block_1"] != 0)
    with pytest.raises(UsageError):
        es.selected(master, ("nowhere",))


def test_cosine_sigma_schedule_by_hand():
    cfg = es.ESConfig(sigma=0.1, sigma_final=0.02, steps=10)
    assert es.sigma_at(0, cfg) == pytest.approx(0.1)
    assert es.sigma_at(5, cfg) == pytest.approx(0.06)  # half way: the mean of the two
    assert es.sigma_at(10, cfg) == pytest.approx(0.02)
    assert es.sigma_at(20, cfg) == pytest.approx(0.02)  # held after T
    assert es.sigma_at(2, cfg) == pytest.approx(0.02 + 0.08 * (1 + math.cos(math.pi * 0.2)) / 2)


def test_fp32_master_moves_where_a_bf16_copy_would_not():
    # Adam's first step is lr * sign(g): every weight moves by ~1e-5.
    cfg = es.ESConfig(pairs=2, sigma=1e-3, sigma_final=1e-3, learning_rate=1e-5, optimizer="adam",
                      fitness_shaping="none")
    params = {"w": jnp.ones(8, jnp.bfloat16)}
    state = es.es_init(params, cfg)
    assert state.master["w"].dtype == jnp.float32
    mask = es.selected(state.master, ())
    grad = es.gradient_estimate(state.master, es.member_seeds(cfg, 0), [1.0, 0.0], [0.0, 1.0], cfg.sigma, mask)
    state, _ = es.es_update(state, [1.0, 0.0], [0.0, 1.0], cfg, mask)
    step = np.asarray(state.master["w"]) - 1.0
    np.testing.assert_allclose(step, 1e-5 * np.sign(np.asarray(grad["w"])), rtol=2e-2)
    bf16 = (params["w"] + jnp.asarray(step).astype(jnp.bfloat16)).astype(jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(bf16, np.float32), np.ones(8))  # 1 + ~1e-5 rounds back to 1 in bf16


def test_centered_ranks_and_config_validation():
    np.testing.assert_allclose(es.centered_ranks([3.0, 1.0, 2.0]), [0.5, -0.5, 0.0])
    np.testing.assert_allclose(es.centered_ranks([1.0, 1.0, 0.0]), [0.25, 0.25, -0.5])
    for bad in (dict(pairs=0), dict(sigma=0.01, sigma_final=0.1), dict(optimizer="lbfgs"), dict(fitness_shaping="x"),
                dict(learning_rate=0.0)):
        with pytest.raises(UsageError):
            es.ESConfig(**bad)


def _es_recorded(es, grpo, base=(0.5, 0.1), memory=None):
    """Recorded numbers: per-seed held-out accuracy at h = 1 (training) and h = 2, the base's, compiled bytes."""
    row = lambda a: {"1": a[0], "2": a[1]}  # noqa: E731
    return {"accuracy_by_horizon": {"base": row(base)}, "seeds": len(es),
            "accuracy_by_horizon_per_seed": {"es": [row(a) for a in es], "grpo": [row(a) for a in grpo]},
            "memory_bytes": memory or {"population_generate": 2e6, "es_update": 1e6, "grpo_update": 5e6},
            "setup": {"steps": 2, "train_horizons": [1], "eval_horizons": [1, 2]}}


def test_es_finetune_claim_rule_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro.es_finetune import judge

    verdicts = lambda *a, **kw: [c.verdict for c in judge(_es_recorded(*a, **kw))[0]]  # noqa: E731
    es = [(0.6, 0.1), (0.62, 0.1), (0.61, 0.12)]
    grpo = [(0.9, 0.2), (0.88, 0.22), (0.91, 0.2)]
    assert verdicts(es, grpo) == [C.HOLDS, C.HOLDS, C.CONTRADICTED]  # +0.1 on h=1; 2 MB < 5 MB; ES 0.35 vs GRPO 0.55
    same = [(0.5, 0.1)] * 3
    worse_memory = {"population_generate": 2e6, "es_update": 1e6, "grpo_update": 1e6}
    assert verdicts(same, grpo, memory=worse_memory)[:2] == [C.INCONCLUSIVE, C.CONTRADICTED]
    assert verdicts(same, grpo)[2] == C.NO_SIGNAL  # ES did not move off the base
    assert verdicts(es, same)[2] == C.NO_SIGNAL  # GRPO no better than the base: a crippled baseline
    assert verdicts(es[:2], grpo[:2])[0] == C.INCONCLUSIVE  # two seeds never judge
    assert {c.verdict for c in judge(_es_recorded(es, grpo), quick=True)[0]} == {C.QUICK}


def test_es_lm_config_refuses_bad_options():
    from longhorizon.evolution.es_lm import ESLMConfig
    from longhorizon.repro.es_finetune import Setup

    for bad in (dict(problems_per_member=0), dict(member_dtype="int8"), dict(evaluation="threads")):
        with pytest.raises(UsageError):
            ESLMConfig(**bad)
    with pytest.raises(UsageError):
        Setup(pairs=3)  # 2 * 3 * 8 completions != 8 * 8


@pytest.mark.slow
def test_es_finetune_quick_writes_its_files(tmp_path):
    import json

    from longhorizon.repro import es_finetune

    summary = es_finetune.run(str(tmp_path), quick=True)
    for name in ("README.md", "summary.json", "es_vs_grpo.png"):
        assert (tmp_path / name).exists()
    from longhorizon.repro import claims as C

    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(on_disk) == [] and on_disk["quick"] is True and on_disk["claims"] == summary["claims"]
    assert [c["verdict"] for c in on_disk["claims"]] == [C.QUICK] * 3 and "## Verdict" in (tmp_path / "README.md").read_text()
    assert {p.name for p in (tmp_path / "curves").glob("*.csv")} == {"es.csv", "grpo.csv"}
    assert summary["rollouts_per_arm"] == 2 * 4 * 4
    assert summary["memory_bytes"]["grpo_update"] > 0


def test_es_finetune_claims_follow_the_spread_over_seeds():
    from longhorizon.repro import claims as C
    from longhorizon.repro.es_finetune import judge

    # ES gains +0.1 on h=1 on average, but the seeds disagree: 0.8, 0.4, 0.6 -> the interval contains 0
    spread = [(0.8, 0.1), (0.4, 0.1), (0.6, 0.1)]
    assert judge(_es_recorded(spread, spread))[0][0].verdict == C.INCONCLUSIVE
    # seeds that agree: ES +0.1; ES - GRPO paired per seed about -0.1 -> contradicted
    claims = judge(_es_recorded([(0.6, 0.1), (0.61, 0.1), (0.6, 0.11)], [(0.7, 0.2), (0.72, 0.2), (0.7, 0.21)]))[0]
    assert claims[0].verdict == C.HOLDS and claims[2].verdict == C.CONTRADICTED
