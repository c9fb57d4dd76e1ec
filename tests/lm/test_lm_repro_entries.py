"""The `longhorizon repro` entries of the LM reproductions resolve to the intended setups."""

import json

import pytest

from longhorizon.lm.chain_base import base_label, cached_base
from longhorizon.lm.policy_cache import params_digest
from longhorizon.repro import h1


def test_h1_setups_name_the_chain_base_recipe():
    from longhorizon.lm.chain_base import BaseRecipe

    assert h1.H1Setup().recipe == BaseRecipe()  # the protocol's base is the recipe's default
    assert h1.CHAIN_BASE.recipe == BaseRecipe(sft_steps=2000, sft_chain_fraction=0.25)


def test_h1_chain_base_runs_the_protocol_from_the_labelled_deviation(monkeypatch, tmp_path):
    from longhorizon.cli import main

    seen = {}
    monkeypatch.setattr(h1, "run", lambda out, quick=False, setup=None: seen.update(out=out, quick=quick, setup=setup) or {})
    assert main(["repro", "h1-chain-base", "--out", str(tmp_path / "r")]) == 0
    assert seen["setup"] == h1.CHAIN_BASE and seen["setup"].sft_chain_fraction == 0.25 and not seen["quick"]
    assert main(["repro", "h1-chain-base", "--quick", "--out", str(tmp_path / "q")]) == 0
    assert seen["quick"] and seen["setup"].rl_steps == h1.QUICK.rl_steps and seen["setup"].sft_chain_fraction == 0.25
    assert h1.H1Setup().sft_chain_fraction == 0.0  # the protocol itself stays on single problems


def test_sgpo_chain_base_runs_from_the_chain_base(monkeypatch, tmp_path):
    from longhorizon.cli import main
    from longhorizon.repro import sgpo

    seen = {}
    monkeypatch.setattr(sgpo, "run", lambda out, quick=False, setup=None: seen.update(setup=setup) or {})
    assert main(["repro", "sgpo-chain-base", "--out", str(tmp_path / "r")]) == 0
    assert seen["setup"].base.sft_chain_fraction == h1.CHAIN_BASE.sft_chain_fraction
    assert seen["setup"].base.sft_steps == h1.CHAIN_BASE.sft_steps  # the same cached base as h1-chain-base


def test_sgpo_defaults_use_a_base_grpo_can_improve():
    from longhorizon.repro import sgpo

    s = sgpo.SGPOSetup()
    assert s.base.sft_steps < h1.H1Setup().sft_steps and s.base.sft_chain_fraction == 0.0  # h1's recipe, stopped early
    assert s.seeds >= 2 and s.min_improvement > s.tolerance
    assert sgpo.CHAIN_BASE.horizons == (1, 2, 3) and sgpo.CHAIN_BASE.steps == 40  # the deviation keeps its recorded setup


def _curve(accs, tokens_per_eval):
    return [{"step": 10 * i, "tokens": tokens_per_eval * i, "accuracy": a} for i, a in enumerate(accs)]


def test_sgpo_compare_and_rule_need_grpo_to_improve_and_sgpo_to_stay_matched():
    from longhorizon.repro import claims as C
    from longhorizon.repro import sgpo

    grpo = _curve([0.30, 0.35, 0.40, 0.45], 100)
    comparison = sgpo.compare(grpo, _curve([0.30, 0.44, 0.45, 0.46], 50), 0.02)
    assert comparison["token_ratio"] == 300 / 50 and comparison["sgpo_final_within_tolerance"]
    # a transient peak that falls back below GRPO's final accuracy is not within tolerance at the end
    assert not sgpo.compare(grpo, _curve([0.30, 0.44, 0.38, 0.36], 50), 0.02)["sgpo_final_within_tolerance"]
    assert sgpo.compare(grpo, _curve([0.30, 0.32, 0.33, 0.34], 50), 0.02)["token_ratio"] is None  # never reached

    def verdict(grpo_accs, sgpo_accs, seeds=3):
        runs = []
        for i in range(seeds):
            g, s = _curve([a + 0.01 * i for a in grpo_accs], 100), _curve([a + 0.01 * i for a in sgpo_accs], 50)
            runs.append({"grpo": {"curve": g}, "sgpo": {"curve": s}, "comparison": sgpo.compare(g, s, 0.02)})
        return sgpo.judge(runs, 0.02)[0][0].verdict

    assert verdict([0.30, 0.35, 0.40, 0.45], [0.30, 0.44, 0.45, 0.46]) == C.HOLDS
    assert verdict([0.30, 0.35, 0.40, 0.45], [0.30, 0.34, 0.33, 0.34]) == C.CONTRADICTED  # sGPO ends 0.11 lower
    # GRPO never left the base: matching it is trivial, whatever sGPO does
    assert verdict([0.30, 0.30, 0.30, 0.30], [0.30, 0.40, 0.40, 0.40]) == C.NO_SIGNAL
    assert verdict([0.30, 0.35, 0.40, 0.45], [0.30, 0.44, 0.45, 0.46], seeds=2) == C.INCONCLUSIVE


@pytest.mark.slow
def test_h1_gated_curriculum_advances_when_the_stage_reward_passes_and_passes_beta_on(tmp_path):
    """advance_at=0 ends every stage after its 5-step minimum; beta reaches the trainer (KL reported)."""
    import dataclasses

    import jax

    from longhorizon.lm.model import ModelConfig, init_params
    from longhorizon.lm.run import Policy
    from longhorizon.lm.tasks import make_problems, max_lengths
    from longhorizon.lm.tokenizer import Tokenizer

    setup = dataclasses.replace(h1.QUICK, rl_steps=12, prompts_per_step=2, num_generations=2, train_horizons=(1, 2),
                                eval_horizons=(1,), advance_at=0.0, beta=0.04)
    tok = Tokenizer()
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2)
    policy = Policy(init_params(jax.random.PRNGKey(0), cfg), cfg, tok)
    plen, clen = max_lengths("chain", 2, h1.task_config())
    held = make_problems("chain", [1], 2, 5, h1.task_config())
    _, curve, _ = h1.run_arm("curriculum", policy, setup, 0, held, (plen + 1, clen + 1), tmp_path / "arm")
    assert [c["horizon"] for c in curve] == [1] * 5 + [2] * 7  # the last stage never ends
    assert any(c["kl"] > 0 for c in curve)  # the reference is only scored when beta > 0
    sampler = json.loads((tmp_path / "arm" / "config.json").read_text())["sampler"]
    assert sampler["gate"] == {"on": "train_reward", "threshold": 0.0, "window": h1.GATE_WINDOW}  # the gate is explicit


def test_the_reproductions_refuse_an_empty_sgpo_plan_as_the_cli_does():
    """One sampler, one rule: a profile that keeps no query is a UsageError (sGPO used to train on pool[0])."""
    import pytest

    from longhorizon.errors import UsageError
    from longhorizon.lm.tasks import make_problems
    from longhorizon.repro import sgpo

    setup = sgpo.SGPOSetup(unsolved_keep=0.0)
    pool = make_problems("chain", [1], 3, 0, h1.task_config())
    spec = sgpo.method_spec("sgpo", None, setup, 0, pool, pool, (30, 20), "unused")

    class Solved:  # every query solved k/k: sGPO drops them all
        counters = {"rollout_tokens": 0}

        def rollout(self, problems, sizes):
            import numpy as np

            return {"group_ids": np.repeat(np.arange(len(problems)), sizes), "rewards": np.ones(sum(sizes))}

    with pytest.raises(UsageError, match="kept no query"):
        spec.sampler.build().prepare(Solved())


@pytest.mark.slow
def test_h1_and_sgpo_run_end_to_end_through_the_spine(tmp_path, monkeypatch):
    """Smoke size (a tiny base, 2-3 RL steps per arm): one results folder per arm and seed, reports and verdicts."""
    import dataclasses

    from longhorizon.repro import sgpo

    monkeypatch.setenv("LONGHORIZON_CACHE", str(tmp_path / "cache"))
    base = h1.H1Setup(seeds=1, d_model=16, n_layers=1, n_heads=2, sft_steps=4, sft_batch=8)
    setup = dataclasses.replace(base, rl_steps=5, prompts_per_step=2, num_generations=2, train_horizons=(1, 2),
                                eval_horizons=(1, 2, 4), eval_per_horizon=8)
    from longhorizon.repro import claims as C

    summary = h1.run(str(tmp_path / "h1"), setup=setup)
    assert set(summary["table"]) == {"base", *h1.ARMS} and C.validate_summary(summary) == []
    assert {c["verdict"] for c in summary["claims"]} <= {C.INCONCLUSIVE, C.NO_SIGNAL}  # one seed never judges
    assert json.loads((tmp_path / "h1" / "summary.json").read_text())["claims"] == summary["claims"]
    assert {p.stem for p in (tmp_path / "h1" / "curves").glob("*.csv")} == set(h1.ARMS)
    for arm in h1.ARMS:
        arm_dir = tmp_path / "h1" / "runs" / "seed0" / arm
        params = cached_base(setup.recipe)[0]
        assert json.loads((arm_dir / "config.json").read_text())["init"] == base_label(setup.recipe, params)
        assert params_digest(params) in base_label(setup.recipe, params)
        assert len((arm_dir / "metrics.jsonl").read_text().splitlines()) == 5
    assert (tmp_path / "h1" / "README.md").exists()
    small = sgpo.SGPOSetup(seeds=1, base=base, pool_size=6, steps=3, prompts_per_step=2, num_generations=2,
                           eval_every=2, eval_per_horizon=4, unsolved_keep=1.0)
    summary = sgpo.run(str(tmp_path / "sgpo"), setup=small)
    assert C.validate_summary(summary) == [] and summary["claims"][0]["verdict"] in (C.INCONCLUSIVE, C.NO_SIGNAL)
    runs = json.loads((tmp_path / "sgpo" / "runs.json").read_text())
    assert [c["step"] for c in runs[0]["grpo"]["curve"]] == [0, 2, 3]  # the base, every eval_every and the last step
    assert runs[0]["sgpo"]["curve"][0]["tokens"] == runs[0]["sgpo"]["stats"]["profiling_tokens"] > 0
