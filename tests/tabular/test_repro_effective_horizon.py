"""The effective-horizon study: the driver end to end on two tiny MDPs with one
algorithm."""

import csv
import json

import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.repro import effective_horizon as eh
from longhorizon.runner.results import read_metrics
from longhorizon.tabular import sample_complexity as sc
from longhorizon.tabular.mdp import TabularMDP, save_npz


def chain(depth: int, num_actions: int, name: str) -> TabularMDP:
    """The right action (index ``i % num_actions`` in state i) moves on, any other ends the episode;
    the last right action pays 1. Random return: num_actions ** -depth."""
    transitions = np.full((depth, num_actions), -1)
    rewards = np.zeros((depth, num_actions))
    for i in range(depth - 1):
        transitions[i, i % num_actions] = i + 1
    rewards[depth - 1, (depth - 1) % num_actions] = 1.0
    return TabularMDP.deterministic(transitions, rewards, horizon=depth, name=name)


@pytest.mark.slow
def test_driver_on_two_tiny_mdps(tmp_path):
    envs = []
    for depth in (2, 3):
        path = tmp_path / f"chain{depth}.npz"
        save_npz(chain(depth, 2, f"chain{depth}"), path)
        envs.append(eh.EnvSpec(f"chain{depth}", str(path), horizon=depth))
    config = {"num_envs": "4", "num_steps": "8", "num_minibatches": "1", "update_epochs": "1", "hidden": "8",
              "learning_rate": "3e-3", "anneal_lr": "false"}
    setup = eh.Setup(envs=tuple(envs), algos=("pqn",), seeds=2, budget=256, num_chunks=4,
                     configs=(("pqn", tuple(sorted(config.items()))),))
    out = tmp_path / "study"
    summary = eh.run(str(out), setup=setup)
    rows = json.loads((out / "table.json").read_text())["rows"]
    assert [r["env"] for r in rows] == ["chain2", "chain3"]
    for r, depth in zip(rows, (2, 3)):
        assert (r["num_states"], r["num_actions"], r["horizon"], r["min_k"]) == (depth, 2, depth, 1)
        assert r["optimal_return"] == pytest.approx(1.0) and r["random_return"] == pytest.approx(2.0 ** -depth)
        for key in ("epw", "effective_horizon_simple", "effective_horizon_tight"):
            assert r[key] is not None
        assert r["padded_states"] == 32  # both share one program: one-hot padded to 32
        s = r["sample_complexity"]["pqn"]
        # Recompute from the run's own metrics: 4 chunks of 2 updates of 32 steps.
        metrics = read_metrics(out / "runs" / "pqn" / r["env"])
        first = sc.first_success_steps(metrics, 1.0, 2)["first_success"]
        assert s["per_seed"] == first
        assert all(v is None or v % 64 == 0 for v in first)
        expected = {**sc.summarise_seeds(first, metrics[-1]["env_steps"]), "per_seed": first, "count": "env_steps",
                    "eval_every_steps": 64}
        assert {k: s[k] for k in expected} == expected
    with open(out / "table.csv") as f:
        header = next(csv.reader(f))
    assert {"effective_horizon_tight", "min_k", "pqn_median", "pqn_found"} <= set(header)
    assert (out / "sample_complexity_vs_effective_horizon.png").stat().st_size > 0
    assert "Spearman" in (out / "README.md").read_text()
    assert set(summary["correlations"]) == {"pqn"}
    from longhorizon.repro import claims as C

    assert C.validate_summary(summary) == [] and set(summary["arms"]) == {"pqn"}
    assert {c["verdict"] for c in summary["claims"]} <= {C.INCONCLUSIVE, C.NO_SIGNAL}  # 2 seeds never judge
    assert (out / "curves" / "pqn_chain2.csv").exists()
    # A second call reuses the finished runs instead of training again.
    assert eh.run(str(out), setup=setup)["correlations"] == summary["correlations"]
    with pytest.raises(UsageError, match="other settings"):
        eh.run(str(out), setup=eh.Setup(envs=setup.envs, algos=("pqn",), seeds=2, budget=512, num_chunks=4,
                                        configs=setup.configs))


def test_unknown_algorithm_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="unknown algorithm 'dqn2'"):
        eh.run(str(tmp_path), setup=eh.Setup(algos=("dqn2",)))


def _rows(per_seed_by_env, hs, budget=1000.0):
    """Recorded rows: ``per_seed_by_env[algo][i]`` the per-seed first-success steps (None: unsolved) on env i."""
    rows = []
    for i, h in enumerate(hs):
        complexity = {a: {**sc.summarise_seeds(v[i], budget), "per_seed": v[i]} for a, v in per_seed_by_env.items()}
        rows.append({"env": f"e{i}", "effective_horizon_tight": h, "effective_horizon_simple": h,
                     "sample_complexity": complexity})
    return rows


def test_growth_rule_fails_a_flat_and_a_linear_relation_and_passes_an_exponential_one():
    from longhorizon.repro import claims as C

    hs = [2.0, 4.0, 7.0, 10.0, 13.0]
    jitter = np.array([[1.0], [1.1], [0.9]])  # three seeds
    flat = 100.0 * jitter * np.ones(len(hs))
    linear = 10.0 * jitter * np.array(hs)  # slope of log10(c H) on H: about 0.07 here
    exponential = jitter * 10 ** (0.3 * np.array(hs))  # 2^H: 0.3 per unit
    assert eh.growth(hs, flat, censored=False).verdict == C.CONTRADICTED
    assert eh.growth(hs, linear, censored=False).verdict == C.CONTRADICTED
    assert eh.growth(hs, linear, censored=False).evidence["slope"] == pytest.approx(
        np.polyfit(hs, np.log10(hs), 1)[0], abs=1e-9)
    assert eh.growth(hs, exponential, censored=False).verdict == C.HOLDS
    assert eh.growth(hs, exponential, censored=False).evidence["slope"] == pytest.approx(0.3)
    # unsolved environments enter at the budget, a lower bound: a shallow fit is then inconclusive, not contradicted
    assert eh.growth(hs, flat, censored=True).verdict == C.INCONCLUSIVE
    assert eh.growth(hs[:2], flat[:, :2], censored=False).verdict == C.CONTRADICTED  # a 2-point fit is still a fit
    assert eh.growth(hs, flat[:2], censored=False).verdict == C.INCONCLUSIVE  # two seeds never decide


def test_sqirl_agreement_counts_only_solved_environments():
    from longhorizon.repro import claims as C

    hs = [1.0, 2.0, 3.0, 4.0, 5.0]
    ok, never = [10.0] * 3, [None] * 3
    # env 0-2 solved by all, env 3 by PPO only (SQIRL differs), env 4 by nobody (left out): 1 of 4 differs = 0.25
    table = {"ppo": [ok, ok, ok, ok, never], "sqirl": [ok, ok, ok, never, never]}
    ruled = eh.sqirl_agreement(_rows(table, hs), ["ppo", "sqirl"])
    assert ruled.verdict == C.HOLDS and ruled.evidence["value"] == pytest.approx(0.25)
    assert ruled.evidence["left_out"] == ["e4"] and ruled.evidence["differ"] == ["e3"]
    # env 2 also differs: 2 of 4 = 0.5 > 0.25
    table["sqirl"][2] = never
    assert eh.sqirl_agreement(_rows(table, hs), ["ppo", "sqirl"]).verdict == C.CONTRADICTED
    # nobody solves anything: agreement everywhere, but vacuous, so inconclusive
    nothing = {"ppo": [never] * 5, "sqirl": [never] * 5}
    assert eh.sqirl_agreement(_rows(nothing, hs), ["ppo", "sqirl"]).verdict == C.INCONCLUSIVE
    claims, _ = eh.judge(_rows(nothing, hs), 3, 1000.0)
    assert {c.verdict for c in claims} == {C.NO_SIGNAL}
