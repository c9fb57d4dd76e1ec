"""Measure before and after: `longhorizon lm eval --model M --dataset D --reward-funcs R` on a pretrained model
(the tiny GGUF of tests/tiny_gguf.py), the pass@k estimator and standard errors against values computed by
hand, `lm rl`'s step-0 evaluation (the base) and `groups_no_signal_fraction`, `lm eval --init RUN` equal to the
run's own final evaluation, and the bad inputs refused in one sentence (exit 2)."""

from __future__ import annotations

import json
import math

import pytest

from longhorizon.cli import main
from longhorizon.core.stats import mean_se, pass_at_k, pass_at_k_ks, pass_at_k_mean_se

# ----------------------------------------------------------------------------- the estimators, by hand


def test_pass_at_k_by_hand():
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2) = 0.5
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2) = 0.7
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - 35 / 210)  # 1 - C(7,4)/C(10,4)
    assert pass_at_k(4, 3, 2) == 1.0  # n - c = 1 < k: every pair holds a correct sample
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert all(pass_at_k(8, c, 1) == pytest.approx(c / 8) for c in range(9))  # pass@1 is the accuracy
    assert pass_at_k(4, 1, 4) == 1.0  # k = n: solved iff any sample is correct
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    assert pass_at_k_ks(1) == [1] and pass_at_k_ks(4) == [1, 2, 4] and pass_at_k_ks(6) == [1, 2, 4, 6]
    # two prompts, 4 samples each, 1 and 2 correct: pass@2 = (0.5 + (1 - 1/6)) / 2
    value, se = pass_at_k_mean_se(4, [1, 2], 2)
    assert value == pytest.approx((0.5 + 5 / 6) / 2)
    assert se == pytest.approx(abs(5 / 6 - 0.5) / math.sqrt(2) / math.sqrt(2))  # s = |a - b| / sqrt(2) for m = 2


def test_mean_se_by_hand():
    mean, se = mean_se([1, 0, 0, 1])
    assert mean == 0.5 and se == pytest.approx(math.sqrt(1 / 3) / 2)  # s^2 = 4 * 0.25 / 3
    assert mean_se([0.25, 0.5]) == (0.375, pytest.approx(0.125))  # s = 0.25 / sqrt(2), / sqrt(2)
    assert mean_se([3.0]) == (3.0, 0.0)
    with pytest.raises(ValueError):
        mean_se([])


# ----------------------------------------------------------------------------- the command, on a tiny model

REWARDS = '''
def has_hello(prompts, completions, answer, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if a in t else 0.0 for t, a in zip(texts, answer)]


def pattern(prompts, completions, **kwargs):
    """Completion i of the batch (prompt-major: prompt 0's samples first) is correct at i = 0, 4, 5."""
    return [1.0 if i in (0, 4, 5) else 0.25 for i in range(len(completions))]


def needs_solution(prompts, completions, solution, **kwargs):
    return [0.0 for _ in completions]
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    pytest.importorskip("gguf")  # the `lm` extra; the estimators above need none of it
    pytest.importorskip("tokenizers")
    from tiny_gguf import write_gguf  # tests/tiny_gguf.py

    root = tmp_path_factory.mktemp("lm-eval")
    rows = [{"prompt": [{"role": "user", "content": "hello " * (i % 3 + 1)}], "answer": "hell", "horizon": i % 2 + 1}
            for i in range(4)]
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "rewards.py").write_text(REWARDS)
    return {"gguf": str(write_gguf(root / "tiny.gguf")), "root": root, "rows": str(root / "rows.jsonl"),
            "rewards": str(root / "rewards.py")}


def eval_argv(files, *extra, policy=None):
    return ["lm", "eval", *(policy or ["--model", files["gguf"]]), "--dataset", files["rows"], "--reward-funcs",
            f"{files['rewards']}:has_hello", "--max-completion-length", "4", *extra]


def test_pass_at_k_and_standard_errors_of_the_command(files, capsys):
    """Rewards fixed by position give the hand-computed accuracy, SE and pass@k through the whole command."""
    args = eval_argv(files, "--num-samples", "4", "--temperature", "1.0", "--limit", "2", "--json")
    args[args.index("--reward-funcs") + 1] = f"{files['rewards']}:pattern"
    assert main(args) == 0
    ev = json.loads(capsys.readouterr().out)["eval"]
    assert ev["examples"] == 2 and ev["num_samples"] == 4 and ev["correct_threshold"] == 1.0
    # prompt 0: samples 1, .25, .25, .25 (c = 1); prompt 1: 1, 1, .25, .25 (c = 2)
    assert ev["accuracy"] == pytest.approx(3 / 8) and ev["accuracy_se"] == pytest.approx(0.125)
    assert ev["reward"] == pytest.approx((1.75 + 2.5) / 8)
    assert ev["reward_se"] == pytest.approx(abs(1.75 / 4 - 2.5 / 4) / 2)
    assert ev["pass_at_k"] == {"1": pytest.approx(3 / 8), "2": pytest.approx((0.5 + 5 / 6) / 2), "4": 1.0}
    assert ev["pass_at_k_se"]["4"] == 0.0
    assert ev["by_horizon"] == {"1": pytest.approx(1.75 / 4), "2": pytest.approx(2.5 / 4)}
    # a threshold of 0.25 makes every completion correct
    args[args.index("--json"):args.index("--json")] = ["--correct-threshold", "0.25"]
    assert main(args) == 0
    ev = json.loads(capsys.readouterr().out)["eval"]
    assert ev["accuracy"] == 1.0 and ev["accuracy_se"] == 0.0 and ev["pass_at_k"]["2"] == 1.0


def test_dry_run_checks_and_writes_nothing(files, tmp_path, capsys):
    out = tmp_path / "base"
    assert main(eval_argv(files, "--dry-run", "--out", str(out), "--limit", "3")) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["rows"] == 3 and plan["pretrained"]["model"] == files["gguf"] and plan["pass_at_k"] == [1]
    assert not out.exists()


@pytest.mark.slow
def test_rl_starts_at_the_base_and_lm_eval_measures_before_and_after(files, tmp_path, capsys):
    """`lm rl` evaluates the base at step 0 (a row, `eval_start`); `lm eval` of the base (--model) and of the run
    (--init) reproduce the run's own first and last evaluations: one definition, one code path."""
    run = tmp_path / "run"
    assert main(["lm", "rl", "--model", files["gguf"], "--dataset", files["rows"], "--eval-dataset", files["rows"],
                 "--reward-funcs", f"{files['rewards']}:has_hello", "--out", str(run), "--steps", "1",
                 "--prompts-per-step", "2", "--num-generations", "2", "--max-completion-length", "4",
                 "--learning-rate", "1e-2", "--checkpoint-every", "10"]) == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert "eval_reward" in rows[0] and "eval_accuracy" in rows[0] and "loss" not in rows[0]
    for r in rows[1:]:
        assert r["groups_no_signal_fraction"] == pytest.approx(r["groups_all_equal"] / r["groups"])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval_start"]["reward"] == rows[0]["eval_reward"]
    assert summary["eval"]["reward"] == rows[-1]["eval_reward"]

    def measured(policy):
        assert main(eval_argv(files, "--json", policy=policy)) == 0
        return json.loads(capsys.readouterr().out)["eval"]

    base = tmp_path / "base"  # the base, greedy, as text, with a results folder
    assert main(eval_argv(files, "--out", str(base))) == 0
    text = capsys.readouterr().out
    assert "accuracy" in text and "correct: reward >= 1" in text and "4 prompts x 1 completion" in text
    config, before = (json.loads((base / name).read_text()) for name in ("config.json", "summary.json"))
    assert config["command"] == "lm eval" and config["num_samples"] == 1 and config["max_prompt_length"] > 0
    before = before["eval"]
    assert before["examples"] == 4 and before["temperature"] == 0.0 and set(before["pass_at_k"]) == {"1"}
    after = measured(["--init", str(run)])
    fields = ("reward", "accuracy", "reward_se", "accuracy_se", "pass_at_k", "by_horizon", "samples")
    assert {k: before[k] for k in fields} == {k: summary["eval_start"][k] for k in fields}
    assert {k: after[k] for k in fields} == {k: summary["eval"][k] for k in fields}


@pytest.mark.parametrize("change, message", [
    ({"--reward-funcs": "REWARDS:needs_solution"}, "reward function needs_solution needs the column 'solution'"),
    ({"--num-samples": "0"}, "--num-samples must be at least 1 (got 0)."),
    ({"--dataset": "missing.jsonl"}, "dataset missing.jsonl does not exist"),
    ({"--num-samples": "2"}, "greedy decoding (--temperature 0) makes identical"),
    ({"--limit": "0"}, "--limit must be at least 1"),
    ({"--task": "chain"}, "--task belongs to the built-in tasks"),
    ({"--init": "RUN"}, "give only one of them"),
])
def test_bad_input_is_one_sentence_and_exit_2(files, tmp_path, capsys, change, message):
    args = eval_argv(files, "--out", str(tmp_path / "out"))
    for option, value in change.items():
        value = value.replace("REWARDS", files["rewards"]).replace("RUN", str(tmp_path))
        if option in args:
            args[args.index(option) + 1] = value
        else:
            args += [option, value]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_task_mode_keeps_its_options_apart(files, capsys):
    assert main(["lm", "eval", "--model", files["gguf"]]) == 2
    assert "--model applies to --dataset evaluations only" in capsys.readouterr().err
    assert main(["lm", "eval"]) == 2
    assert "needs a policy and what to measure" in capsys.readouterr().err
