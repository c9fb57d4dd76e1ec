"""`longhorizon lm rl --model M --dataset D --reward-funcs F`: a pretrained Llama-family policy (the tiny GGUF of
tests/tiny_gguf.py) trained on a JSONL prompt dataset with TRL-style reward functions, end to end through the
CLI and the one RL loop: results folder, per-function reward metrics, held-out rewards, exact resume after a
real Ctrl-C, `--init` from that run, and the bad inputs refused in one sentence before anything is written."""

from __future__ import annotations

import json
import signal

import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from longhorizon.cli import main  # noqa: E402
from longhorizon.lm import grpo  # noqa: E402

from tiny_gguf import write_gguf  # noqa: E402  (tests/tiny_gguf.py)

REWARDS = '''
def has_hello(prompts, completions, answer, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if a in t else 0.0 for t, a in zip(texts, answer)]


def shorter(prompts, completions, completion_ids, **kwargs):
    return [-0.1 * len(ids) for ids in completion_ids]


def broken(prompts, completions, **kwargs):
    return [1.0]
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("rl-dataset")
    rows = [{"prompt": [{"role": "user", "content": "hello " * (i % 3 + 1)}], "answer": "hell", "horizon": i % 2 + 1}
            for i in range(6)]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    (root / "rewards.py").write_text(REWARDS)
    return {"gguf": str(write_gguf(root / "tiny.gguf")), "root": root, "train": str(root / "train.jsonl"),
            "eval": str(root / "eval.jsonl"), "rewards": str(root / "rewards.py")}


def argv(files, out, *extra):
    return ["lm", "rl", "--model", files["gguf"], "--dataset", files["train"], "--eval-dataset", files["eval"],
            "--reward-funcs", f"{files['rewards']}:has_hello,{files['rewards']}:shorter", "--reward-weights", "1,0.5",
            "--out", str(out), "--steps", "3", "--prompts-per-step", "2", "--num-generations", "2",
            "--max-completion-length", "4", "--learning-rate", "1e-3", "--eval-every", "2", "--checkpoint-every", "10",
            *extra]


def rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def comparable(row):
    return {k: v for k, v in row.items() if not k.endswith("_s") and k not in ("tokens_per_s", "wall_seconds", "time")}


@pytest.mark.slow
def test_dataset_run_resume_and_init(files, tmp_path, monkeypatch, capsys):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert main(argv(files, straight)) == 0
    for name in ("config.json", "metrics.jsonl", "summary.json", "curve.png", "checkpoints"):
        assert (straight / name).exists(), name
    config = json.loads((straight / "config.json").read_text())
    assert config["pretrained"] == {"model": files["gguf"], "dtype": "float32"}
    assert config["sampler"]["sampler"] == "DatasetSpec" and len(config["sampler"]["train_sha256"]) == 16
    assert config["sampler"]["rewards"]["weights"] == [1.0, 0.5]
    got = rows(straight)
    # step 0: the base policy's held-out evaluation, before any training (every curve starts at the base)
    assert [r["step"] for r in got] == [0, 1, 2, 3] and all("rewards/has_hello/mean" in r for r in got[1:])
    assert all(r["horizon"] in (1, 2) for r in got[1:])  # the rows' horizon column
    # the weighted sum of the two functions is the step's reward (NaN-free here: both always apply)
    for r in got[1:]:
        assert r["reward"] == pytest.approx(r["rewards/has_hello/mean"] + 0.5 * r["rewards/shorter/mean"], abs=1e-9)
    assert all("eval_reward" in got[i] for i in (0, 2, 3)) and "eval_reward" not in got[1]
    assert "loss" not in got[0] and json.loads((straight / "summary.json").read_text())["eval_start"]["examples"] == 3
    summary = json.loads((straight / "summary.json").read_text())
    assert summary["eval"]["examples"] == 3 and set(summary["eval"]["by_horizon"]) == {"1", "2"}
    assert summary["eval"]["samples"][0]["prompt"].startswith("<|im_start|>user\nhello")

    original, calls = grpo.GRPOTrainer.step, {"n": 0}

    def step(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 2:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C during step 2
        return out

    with monkeypatch.context() as m:
        m.setattr(grpo.GRPOTrainer, "step", step)
        assert main(argv(files, resumed)) == 130
    assert len(rows(resumed)) == 3  # steps 0, 1, 2
    assert main(["lm", "rl", "--resume", str(resumed)]) == 0
    assert [comparable(r) for r in rows(resumed)] == [comparable(r) for r in got]  # resumed equals uninterrupted

    # a later run starts from this one's parameters, with the pretrained model's tokenizer and config
    follow = tmp_path / "follow"
    assert main(["lm", "rl", "--init", str(straight), "--dataset", files["train"], "--reward-funcs",
                 f"{files['rewards']}:has_hello", "--out", str(follow), "--steps", "1", "--prompts-per-step", "2",
                 "--num-generations", "2", "--max-completion-length", "4"]) == 0
    assert json.loads((follow / "config.json").read_text())["pretrained"]["model"] == files["gguf"]


@pytest.mark.parametrize("change, message", [
    (["--reward-funcs", "REWARDS:broken"], "reward function broken returned 1 values for 3 completions"),  # step 0
    (["--max-prompt-length", "3"], "more than --max-prompt-length 3"),
    (["--max-completion-length", "60"], "exceed the model's context of 64"),
])
def test_bad_inputs_at_run_start_keep_nothing_half_written(files, tmp_path, capsys, change, message):
    out = tmp_path / "run"
    args = argv(files, out)
    if change[0] == "--reward-funcs":
        change = [change[0], change[1].replace("REWARDS", files["rewards"])]
        args[args.index("--reward-funcs") + 1] = change[1]
        args[args.index("--reward-weights"):args.index("--reward-weights") + 2] = []
    else:
        args += change
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0, err


@pytest.mark.parametrize("extra, message", [
    (["--horizons", "1-3"], "--horizons belongs to the built-in tasks"),
    (["--model", "MODEL"], "give only one of them"),
    (["--reward-funcs", "no_such_module_q:f"], "importing no_such_module_q failed"),
    (["--dataset", "MISSING"], "does not exist"),
])
def test_dataset_options_refused_in_a_dry_run(files, tmp_path, capsys, extra, message):
    args = argv(files, tmp_path / "r")
    if extra[0] == "--model":
        args += ["--init", str(tmp_path)]
    elif extra[0] in ("--reward-funcs", "--dataset"):
        i = args.index(extra[0])
        args[i + 1] = extra[1] if extra[1] != "MISSING" else str(tmp_path / "missing.jsonl")
    else:
        args += extra
    assert main([*args, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0, err
    assert not (tmp_path / "r").exists()


def test_reward_funcs_needs_a_dataset_and_a_dataset_needs_reward_funcs(files, capsys):
    assert main(["lm", "rl", "--model", files["gguf"], "--reward-funcs", "math:sqrt", "--out", "x", "--dry-run"]) == 2
    assert "applies to --dataset runs only" in capsys.readouterr().err
    assert main(["lm", "rl", "--model", files["gguf"], "--dataset", files["train"], "--out", "x", "--dry-run"]) == 2
    assert "--dataset needs --reward-funcs" in capsys.readouterr().err
