"""The real-model reproductions (`repro h1-smollm2`, `sgpo-smollm2`, `rhorizon-smollm2`): their verdict rules
by hand, the pool source they sample from, and each `--quick` run end to end on `tiny-random`."""

import json
import signal

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from longhorizon.cli import main  # noqa: E402
from longhorizon.lm import samplers  # noqa: E402
from longhorizon.lm.policy import load_pretrained, tiny_random  # noqa: E402
from longhorizon.repro import real_model  # noqa: E402
from longhorizon.repro.real_model import ARMS  # noqa: E402


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


def _h1(long_acc: list[dict], rise=0.2, long_signal=0.05, start_h1=0.9):
    """h1's recorded numbers: per seed each arm's accuracy at the long horizons (h = 3, 4; h = 1, 2 at 0.5), a
    training-reward curve rising by ``rise`` (only-long's flat) and only-long's share of groups with signal."""
    setup = {"eval_horizons": [1, 2, 3, 4], "train_horizons": [1, 2, 3], "steps": 10}
    start = {"by_h": {"1": start_h1, "2": 0.4, "3": 0.1, "4": 0.05}}
    curve = list(np.linspace(0.3, 0.3 + rise, 10))

    def row(arm, acc):
        flat = arm == "only-long"
        return {"by_h": {"1": 0.5, "2": 0.5, "3": acc, "4": acc}, "rewards": [0.0] * 10 if flat else curve,
                "groups_with_signal": long_signal if flat else 0.6}

    return {"setup": setup, "start": start, "base": start,
            "results": {arm: [row(arm, seed[arm]) for seed in long_acc] for arm in ARMS}}


def test_h1_verdict_rule_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro.h1_smollm2 import judge

    def verdicts(*long_accs, **kw):
        return [c.verdict for c in judge(_h1(list(long_accs), **kw))[0]]

    wins = [{"curriculum": 0.5 + d, "only-short": 0.3, "only-long": 0.075, "uniform": 0.2} for d in (0.0, 0.02, 0.04)]
    # the paper's point: the curriculum learned long chains while only-long had (almost) no signal -> holds, the
    # flat only-long arm does not turn it into no signal
    assert verdicts(*wins) == [C.HOLDS, C.HOLDS]
    assert verdicts(*wins[:2]) == [C.INCONCLUSIVE, C.INCONCLUSIVE]  # two seeds never judge
    close = [{"curriculum": c, "only-short": 0.3, "only-long": 0.35, "uniform": 0.2} for c in (0.42, 0.3, 0.36)]
    assert verdicts(*close)[0] == C.INCONCLUSIVE
    # nothing learned: the curriculum's curve flat and its long-chain accuracy at the start's -> no signal
    flat = [{arm: 0.075 for arm in ARMS}] * 3
    assert verdicts(*flat, rise=0.0)[0] == C.NO_SIGNAL
    # a format phase below its floor (the atomic step unreliable): no signal for both claims
    assert verdicts(*wins, start_h1=0.5) == [C.NO_SIGNAL, C.NO_SIGNAL]


# one quick run of the family in the fast tier (R-HORIZON's, the cheapest); the others, 40-85 s each, in the full suite
@pytest.mark.parametrize("name, plot", [pytest.param("h1-smollm2", "accuracy_by_horizon.png", marks=pytest.mark.slow),
                                        pytest.param("sgpo-smollm2", "accuracy_vs_tokens.png", marks=pytest.mark.slow),
                                        ("rhorizon-smollm2", "accuracy_vs_composed.png"),
                                        pytest.param("scaler-smollm2", "accuracy_by_horizon.png", marks=pytest.mark.slow),
                                        pytest.param("es-smollm2", "es_vs_grpo.png", marks=pytest.mark.slow)])
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
    assert [p for p in out.rglob("checkpoints") if p.parent.name != "format"] == []  # only the format phase keeps weights
    assert summary["setup"]["model"] == "tiny-random"


def _rhorizon(composed_n2, single_n2, rise=0.2, base_n1=0.6, base_n2=0.1):
    """R-HORIZON's recorded numbers: a base of 100 queries per n, then per seed each arm's accuracy by n and a
    training-reward curve rising by ``rise``."""
    setup = {"eval_n": [1, 2], "steps": 10, "seeds": len(composed_n2)}
    outcomes = {"1": [1.0] * int(base_n1 * 100) + [0.0] * (100 - int(base_n1 * 100)),
                "2": [1.0] * int(base_n2 * 100) + [0.0] * (100 - int(base_n2 * 100))}
    base = {"by_n": {"1": base_n1, "2": base_n2}, "outcomes": outcomes}
    start = {"by_n": {"1": base_n1, "2": base_n2}}  # the format phase's policy, here equal to the base
    curve = list(np.linspace(0.3, 0.3 + rise, 10))
    arm = lambda accs: [{"by_n": {"1": base_n1, "2": a}, "rewards": curve} for a in accs]  # noqa: E731
    return {"setup": setup, "base": base, "start": start,
            "results": {"composed": arm(composed_n2), "single": arm(single_n2)}}


def test_rhorizon_verdict_rules_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro.rhorizon_smollm2 import judge

    verdicts = lambda L: [c.verdict for c in judge(L)[0]]  # noqa: E731
    # decay 0.6 -> 0.1 over 100 queries each: Welch interval far above 0; composed arm above the base (0.1) and the
    # single arm on every seed
    assert verdicts(_rhorizon([0.3, 0.32, 0.35], [0.15, 0.16, 0.14])) == [C.HOLDS, C.HOLDS, C.HOLDS]
    # the single arm better on composed queries than the composed arm: the paper's claim contradicted
    assert verdicts(_rhorizon([0.2, 0.22, 0.21], [0.4, 0.41, 0.43]))[2] == C.CONTRADICTED
    assert verdicts(_rhorizon([0.3, 0.32], [0.15, 0.16]))[1:] == [C.INCONCLUSIVE, C.INCONCLUSIVE]  # two seeds
    # nothing moved: flat training reward and held-out accuracy at the base's -> no signal, never contradicted
    flat = _rhorizon([0.1, 0.1, 0.1], [0.1, 0.1, 0.1], rise=0.0)
    assert verdicts(flat)[1:] == [C.NO_SIGNAL, C.NO_SIGNAL]
    # a single arm that stays flat (its n = 1 problems already solved) is no reason for no signal when the
    # composed arm learned
    L = _rhorizon([0.3, 0.32, 0.35], [0.1, 0.1, 0.1])
    L["results"]["single"] = [{**r, "rewards": [1.0] * 10} for r in L["results"]["single"]]
    assert verdicts(L)[2] == C.HOLDS
    # a base that cannot do single problems (below the task floor): its decay says nothing
    assert verdicts(_rhorizon([0.3, 0.3, 0.3], [0.1, 0.1, 0.1], base_n1=0.05, base_n2=0.0))[0] == C.NO_SIGNAL


def test_rhorizon_reads_finished_arms_back(tmp_path, capsys):
    from longhorizon.repro import rhorizon_smollm2 as RH

    first = RH.run(str(tmp_path), quick=True)
    assert sorted(p.name for p in (tmp_path / RH.PARTIAL).iterdir()) == ["base.json", "composed-seed0.json",
                                                                          "format.json", "single-seed0.json"]
    capsys.readouterr()
    again = RH.run(str(tmp_path), quick=True)  # every arm read back: no training, the same numbers
    assert capsys.readouterr().out.count("read back from") == 4
    assert again["results"] == first["results"] and again["base"] == first["base"]


def test_scaler_verdict_rule_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro.scaler_smollm2 import judge

    def L(scaler, fixed, rise=0.2):
        curve = list(np.linspace(0.3, 0.3 + rise, 10))
        row = lambda acc: {"by_h": {"1": acc + 0.2, "2": acc - 0.2}, "rewards": curve}  # noqa: E731  (mean over h: acc)
        return {"setup": {"horizons": [1, 2], "target": 0.5, "steps": 10}, "start": {"by_h": {"1": 0.5, "2": 0.2}},
                "results": {"scaler": [row(a) for a in scaler], "fixed-mix": [row(a) for a in fixed]}}

    verdict = lambda *a, **k: judge(L(*a, **k))[0][0].verdict  # noqa: E731
    assert verdict([0.5, 0.52, 0.55], [0.4, 0.41, 0.42]) == C.HOLDS  # start mean 0.35; both arms rose
    assert verdict([0.4, 0.41, 0.42], [0.5, 0.52, 0.55]) == C.CONTRADICTED
    assert verdict([0.5, 0.4, 0.45], [0.45, 0.5, 0.4]) == C.INCONCLUSIVE
    assert verdict([0.35] * 3, [0.35] * 3, rise=0.0) == C.NO_SIGNAL  # nothing moved from the start


def test_sgpo_verdict_rule_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro.sgpo_smollm2 import _to_reach, judge

    curve = [{"step": 10, "accuracy": 0.4, "tokens": 1000}, {"step": 20, "accuracy": 0.6, "tokens": 2000}]
    assert _to_reach(curve, 0.55) == 2000 and _to_reach(curve, 0.3) == 1000
    assert _to_reach(curve, 0.7) == 3000  # never reached: its total plus one interval, a lower bound

    def L(sgpo, grpo, rise=0.2):
        """Per seed, each arm's eval curve as (accuracy, tokens) points."""
        rewards = list(np.linspace(0.3, 0.3 + rise, 10))
        arm = lambda seeds: [{"eval_curve": [{"step": 10 * (i + 1), "accuracy": a, "tokens": t}  # noqa: E731
                                             for i, (a, t) in enumerate(points)], "rewards": rewards} for points in seeds]
        return {"setup": {"horizons": [1, 2], "steps": 20}, "start": {"by_h": {"1": 0.3, "2": 0.1}},
                "results": {"sgpo": arm(sgpo), "grpo": arm(grpo)}}

    verdict = lambda *a, **k: judge(L(*a, **k))[0][0].verdict  # noqa: E731
    grpo = [[(0.4, 1000), (0.6, 2000)], [(0.45, 1100), (0.62, 2100)], [(0.42, 1050), (0.58, 2050)]]
    fast = [[(0.6, 900), (0.62, 1800)], [(0.63, 950), (0.64, 1900)], [(0.59, 1000), (0.6, 1950)]]
    assert verdict(fast, grpo) == C.HOLDS  # GRPO's final accuracy reached at ~950 tokens instead of ~2050
    slow = [[(0.3, 1500), (0.45, 3000)], [(0.35, 1600), (0.5, 3100)], [(0.3, 1550), (0.44, 3050)]]
    assert verdict(slow, grpo) == C.CONTRADICTED  # less accurate and never reaches it
    assert verdict(fast[:2], grpo[:2]) == C.INCONCLUSIVE  # two seeds
    flat = [[(0.2, 1000), (0.2, 2000)]] * 3  # nothing above the start (mean 0.2) and a flat training reward
    assert verdict(flat, flat, rise=0.0) == C.NO_SIGNAL


def test_es_verdict_rules_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro.es_smollm2 import judge

    def L(es, grpo, rise=0.2, memory=(100, 50, 300)):
        """Per seed, each arm's accuracy on the training horizons (h = 1, 2; the held-out mean is the same)."""
        curve = list(np.linspace(0.3, 0.3 + rise, 10))
        row = lambda acc: {"by_h": {"1": acc + 0.1, "2": acc - 0.1}, "rewards": curve}  # noqa: E731
        return {"setup": {"train_horizons": [1, 2], "steps": 10}, "start": {"by_h": {"1": 0.4, "2": 0.2}},
                "memory_bytes": dict(zip(("population_generate", "es_update", "grpo_update"), memory)),
                "results": {"es": [row(a) for a in es], "grpo": [row(a) for a in grpo]}}

    verdicts = lambda *a, **k: [c.verdict for c in judge(L(*a, **k))[0]]  # noqa: E731
    # start mean 0.3: ES 0.40 +- 0.01 above it; memory 100 < 300; ES - GRPO = +0.02 +- small, above -0.02
    assert verdicts([0.39, 0.40, 0.41], [0.37, 0.38, 0.39]) == [C.HOLDS, C.HOLDS, C.HOLDS]
    # GRPO far better than ES: the non-inferiority claim contradicted (both moved)
    assert verdicts([0.35, 0.36, 0.37], [0.5, 0.52, 0.51])[2] == C.CONTRADICTED
    # ES's generation needs more than GRPO's update: contradicted, an exact comparison
    assert verdicts([0.39, 0.40, 0.41], [0.37, 0.38, 0.39], memory=(400, 50, 300))[1] == C.CONTRADICTED
    # ES flat at the start and its training reward flat: no signal for the claims that need ES to learn
    assert verdicts([0.3] * 3, [0.37, 0.38, 0.39], rise=0.0)[::2] == [C.NO_SIGNAL, C.NO_SIGNAL]
    # GRPO no better than the start: the comparison has no baseline that moved
    assert verdicts([0.39, 0.40, 0.41], [0.3] * 3)[2] == C.NO_SIGNAL
    assert verdicts([0.39, 0.40], [0.37, 0.38])[0] == C.INCONCLUSIVE  # two seeds never judge


@pytest.mark.slow
def test_es_through_the_lm_spine_resumes_exactly(tmp_path, monkeypatch):
    """ES fine-tuning through the one LM loop: interrupted after 2 of 3 steps and resumed, the weights, the
    optimiser state and the metrics equal an uninterrupted run's (the noise seeds follow the restored step)."""
    import jax

    from longhorizon.evolution import es, es_lm
    from longhorizon.lm import samplers
    from longhorizon.lm.run import EvalSpec, run_rl
    from longhorizon.lm.run_checkpoint import RunCheckpoints
    from longhorizon.lm.run import Interrupted
    from longhorizon.repro import real_model as R

    policy = R._policy(R.Common(model="tiny-random"))
    pool = R._pools(policy.tokenizer, "chain", (1,), 4, R.TRAIN_SEED)
    cfg = es_lm.ESLMConfig(es=es.ESConfig(pairs=2, sigma=0.05, sigma_final=0.01, learning_rate=1e-2, seed=3),
                           problems_per_member=2, max_prompt_length=R._prompt_length(policy.tokenizer, pool),
                           max_completion_length=6, evaluation="loop")

    def spec(out, steps):
        return es_lm.ESSpec(out=str(out), init=policy, es=cfg, steps=steps, rewards=R._rewards("chain"),
                            sampler=samplers.FixedMix(samplers.PoolSource(pool, seed=0), (1,)), checkpoint_every=1,
                            evaluation=EvalSpec(R._flat(pool), cfg.max_prompt_length, 6, rewards=R._rewards("chain"),
                                                at_start=False))

    straight = run_rl(spec(tmp_path / "straight", 3), quiet=True)
    assert straight["counters"]["es_steps"] == 3 and straight["counters"]["generations"] == 3 * 2 * 2 * 2
    original, calls = es_lm.ESLMTrainer.step, []

    def ctrl_c_after_two(self, *args, **kwargs):  # a real Ctrl-C after the second step
        out = original(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            signal.raise_signal(signal.SIGINT)
        return out

    with monkeypatch.context() as patch:
        patch.setattr(es_lm.ESLMTrainer, "step", ctrl_c_after_two)
        with pytest.raises(Interrupted):
            run_rl(spec(tmp_path / "resumed", 3), quiet=True)
    resumed = run_rl(spec(tmp_path / "resumed", 3), resume=True, quiet=True)
    assert resumed["counters"] == straight["counters"]
    rows = [[json.loads(line) for line in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
            for d in ("straight", "resumed")]
    keep = ("step", "reward", "sigma", "grad_norm")
    assert [{k: r.get(k) for k in keep} for r in rows[0]] == [{k: r.get(k) for k in keep} for r in rows[1]]
    trees = []
    for d in ("straight", "resumed"):
        store = RunCheckpoints(tmp_path / d / "checkpoints")
        trees.append(store.restore()[:2])  # as saved: numpy arrays
        store.close()
    for a, b in zip(jax.tree_util.tree_leaves(trees[0]), jax.tree_util.tree_leaves(trees[1])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
