"""The real-model reproductions (`repro h1-smollm2`, `sgpo-smollm2`, `rhorizon-smollm2`): their verdict rules
by hand, the pool source they sample from, and each `--quick` run end to end on `tiny-random`."""

import json

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from longhorizon.cli import main  # noqa: E402
from longhorizon.lm import samplers  # noqa: E402
from longhorizon.lm.policy import load_pretrained, tiny_random  # noqa: E402
from longhorizon.repro import real_model  # noqa: E402
from longhorizon.repro.real_model import ARMS, judge_h1  # noqa: E402


def test_tiny_random_is_a_working_chat_model():
    policy = load_pretrained("tiny-random")
    tok = policy.tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": "Tom has 7 apples. Café?"}])
    assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
    ids = tok.encode(text)
    plain = text.replace("<|im_start|>", "").replace("<|im_end|>", "")
    assert tok.decode(ids) == text and len(ids) == len(plain.encode()) + 3  # one id per byte, 3 control tokens
    assert policy.cfg.n_kv_heads == 2 and tok.eos_ids == (2, 0) and tok.vocab_size == policy.cfg.vocab_size == 259
    again = tiny_random()
    assert np.array_equal(np.asarray(again.params["embed"]["embedding"]), np.asarray(policy.params["embed"]["embedding"]))


def test_pool_source_draws_by_horizon_and_resumes_exactly():
    pools = {1: tuple(f"a{i}" for i in range(5)), 3: tuple(f"c{i}" for i in range(5))}
    source = samplers.PoolSource(pools, seed=4)
    spec = samplers.Curriculum(source, (1, 3), 2, samplers.Gate("steps"))
    json.dumps(spec.describe())  # config.json: counts and digests, never the items
    assert spec.describe()["source"]["pools"][1]["items"] == 5
    sampler = spec.build()
    first, _ = sampler.sample(3)
    assert all(item.startswith("a") for item in first)  # stage 1: h = 1 only
    for _ in range(2):
        sampler.observe({"reward": 0.0}, None)
    later, _ = sampler.sample(3)
    assert all(item.startswith("c") for item in later)  # stage 2: h = 3
    saved = json.loads(json.dumps(sampler.state()))
    expected = sampler.sample(6)[0]
    resumed = spec.build()
    resumed.restore(saved)
    assert resumed.sample(6)[0] == expected
    with pytest.raises(Exception, match="no items of horizon"):
        samplers.PoolSource(pools).stream().sample([2], 1)


def _results(long_acc: dict, short=0.5):
    """One seed's by-horizon accuracies: h=1,2 at ``short``, h=3,4 at the arm's long accuracy."""
    return {arm: {"by_horizon": {"1": short, "2": short, "3": long_acc[arm], "4": long_acc[arm]}, "tokens": 1, "wall_s": 0}
            for arm in ARMS}


def test_h1_verdict_rule_by_hand():
    from longhorizon.repro import claims as C

    setup = {"eval_horizons": [1, 2, 3, 4], "train_horizons": [1, 2, 3], "steps": 4, "seeds": 3}
    base = {"1": 0.5, "2": 0.5, "3": 0.1, "4": 0.1}

    def verdict(*long_accs):
        return judge_h1({"setup": setup, "base_by_horizon": base, "results": [_results(a) for a in long_accs]})[0][0].verdict

    wins = [{"curriculum": 0.5 + d, "only-short": 0.3, "only-long": 0.35, "uniform": 0.2} for d in (0.0, 0.02, 0.04)]
    assert verdict(*wins) == C.HOLDS
    assert verdict(*wins[:2]) == C.INCONCLUSIVE  # two seeds never judge
    close = [{"curriculum": c, "only-short": 0.3, "only-long": 0.35, "uniform": 0.2} for c in (0.42, 0.3, 0.36)]
    assert verdict(*close) == C.INCONCLUSIVE
    flat = [{arm: 0.1 for arm in ARMS}] * 3  # no arm moved from the base: they cannot be told apart
    assert verdict(*flat) == C.NO_SIGNAL


@pytest.mark.parametrize("name, plot", [("h1-smollm2", "accuracy_by_horizon.png"), ("sgpo-smollm2", "accuracy_vs_tokens.png"),
                                        ("rhorizon-smollm2", "accuracy_vs_composed.png")])
def test_quick_runs_write_table_plot_and_verdict(name, plot, tmp_path, capsys):
    out = tmp_path / name
    assert main(["repro", name, "--quick", "--out", str(out)]) == 0
    from longhorizon.repro import claims as C

    summary = json.loads((out / "summary.json").read_text())
    assert C.validate_summary(summary) == [] and summary["quick"] and {c["verdict"] for c in summary["claims"]} == {C.QUICK}
    assert list((out / "curves").glob("*.csv"))
    readme = (out / "README.md").read_text()
    assert f"longhorizon repro {name} --quick" in readme and "## Verdict" in readme and "|---|" in readme
    assert (out / plot).stat().st_size > 0
    assert not list(out.rglob("checkpoints"))  # the arms' weights are not kept
    assert real_model.QUICK.model == "tiny-random" and summary["setup"]["model"] == "tiny-random"
