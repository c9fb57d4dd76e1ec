"""`longhorizon lm sft --model M --dataset D`: SFT of a pretrained Llama-family policy (the tiny GGUF of
tests/tiny_gguf.py) on TRL's SFT formats through the LM spine's one loop: the loss on completion tokens
only (checked against a hand-computed masked mean), the results folder of `lm rl`, exact resume after a
real Ctrl-C, the folder accepted by `lm rl --init` and `lm eval`, and the bad rows refused in one sentence."""

from __future__ import annotations

import json
import signal

import jax
import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from longhorizon.cli import main  # noqa: E402
from longhorizon.lm import sft  # noqa: E402
from longhorizon.lm.hf_tokenizer import from_gguf  # noqa: E402
from longhorizon.lm.model import forward  # noqa: E402
from longhorizon.lm.sft_data import batch_arrays, encode_sft_row, encode_sft_rows  # noqa: E402

from tiny_gguf import write_gguf  # noqa: E402  (tests/tiny_gguf.py)

ROWS = [
    {"prompt": "hello ", "completion": "world"},
    {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"},
                  {"role": "assistant", "content": "hello"}, {"role": "user", "content": "12"},
                  {"role": "assistant", "content": "12"}]},
    {"prompt": [{"role": "user", "content": "12"}], "completion": [{"role": "assistant", "content": "12 hello"}]},
    {"prompt": "he", "completion": "llo", "other": 1},  # other columns are ignored
]
REWARDS = '''
def has_hello(prompts, completions, **kwargs):
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if "hello" in t else 0.0 for t in texts]
'''


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft-dataset")
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (root / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS[:2]))
    (root / "prompts.jsonl").write_text(json.dumps({"prompt": [{"role": "user", "content": "hi"}]}) + "\n")
    (root / "rewards.py").write_text(REWARDS)
    gguf = write_gguf(root / "tiny.gguf")
    return {"gguf": str(gguf), "root": root, "train": str(root / "train.jsonl"), "eval": str(root / "eval.jsonl"),
            "prompts": str(root / "prompts.jsonl"), "rewards": str(root / "rewards.py"), "tok": from_gguf(gguf)}


def trained_text(tok, example) -> list[str]:
    """The trained stretches of an example, decoded (consecutive trained tokens joined)."""
    out, run = [], []
    for i, on in zip(example.ids, example.trained):
        if on:
            run.append(i)
        elif run:
            out, run = out + [tok.decode(run)], []
    return out + ([tok.decode(run)] if run else [])


def test_only_completion_tokens_are_trained(files):
    tok = files["tok"]
    plain, chat, conv, _ = encode_sft_rows(ROWS, tok, 1024)
    # standard prompt + completion: the completion and the EOS TRL appends
    assert trained_text(tok, plain) == ["world<|im_end|>"] and tok.decode(plain.ids) == "hello world<|im_end|>"
    # messages: each assistant turn's content and its end-of-turn token; system, user and headers are prompt
    assert trained_text(tok, chat) == ["hello<|im_end|>", "12<|im_end|>"]
    assert tok.decode(chat.ids) == tok.apply_chat_template(ROWS[1]["messages"], add_generation_prompt=False)
    # conversational prompt + completion: the prompt's ids are those generation renders (add_generation_prompt)
    prompt_ids = tok.encode(tok.apply_chat_template(ROWS[2]["prompt"], add_generation_prompt=True))
    assert conv.ids[:len(prompt_ids)] == tuple(prompt_ids) and not any(conv.trained[:len(prompt_ids)])
    assert trained_text(tok, conv) == ["12 hello<|im_end|>"]
    # max_length keeps the start
    cut = encode_sft_row(ROWS[0], tok, 3)
    assert cut.truncated and cut.ids == plain.ids[:3] and cut.trained == plain.trained[:3]


@pytest.mark.slow
def test_loss_is_the_mean_over_completion_tokens_by_hand(files):
    """The trainer's loss at its first step is the mean -log p over the batch's completion tokens only,
    computed here from the model's logits with the completion positions written out by hand."""
    from longhorizon.lm.run import Pretrained

    policy = Pretrained(files["gguf"]).load()
    tok = policy.tokenizer
    a = encode_sft_row({"prompt": "he", "completion": "llo"}, tok, 64)  # ids: he | l l o <|im_end|>  (ll is one merge)
    b = encode_sft_row({"prompt": "hello ", "completion": "w"}, tok, 64)  # ids: hello ' ' | w <|im_end|>
    assert [tok.decode([i]) for i in a.ids] == ["he", "ll", "o", "<|im_end|>"]
    assert [tok.decode([i]) for i in b.ids] == ["hello", " ", "w", "<|im_end|>"]
    tokens, valid, mask = batch_arrays([a, b], 4, tok.pad_id)
    logits = np.asarray(forward(policy.params, policy.model_cfg, tokens, valid), np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    # row a predicts "ll", "o", "<|im_end|>" from positions 0, 1, 2; row b predicts "w", "<|im_end|>" from 1, 2
    picks = [(0, 0, a.ids[1]), (0, 1, a.ids[2]), (0, 2, a.ids[3]), (1, 1, b.ids[2]), (1, 2, b.ids[3])]
    expected = -np.mean([logp[r, t, target] for r, t, target in picks])
    assert mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    trainer = sft.SFTTrainer(policy.model_cfg, policy.params, sft.SFTTrainingConfig(per_device_train_batch_size=2),
                             steps=2, seq_len=4, pad_id=tok.pad_id)
    metrics = trainer.step([a, b])
    assert metrics["loss"] == pytest.approx(expected, rel=1e-5)
    assert metrics["batch_loss_tokens"] == 5 and metrics["learning_rate"] == 2e-5  # linear decay: full rate at step 1
    assert trainer.learning_rate(1) == pytest.approx(1e-5)


def argv(files, out, *extra):
    return ["lm", "sft", "--model", files["gguf"], "--dataset", files["train"], "--eval-dataset", files["eval"],
            "--out", str(out), "--max-steps", "4", "--per-device-train-batch-size", "2", "--learning-rate", "1e-3",
            "--eval-steps", "2", "--checkpoint-every", "10", *extra]


def rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def comparable(row):
    return {k: v for k, v in row.items() if not k.endswith("_s") and k not in ("tokens_per_s", "wall_seconds", "time")}


@pytest.mark.slow
def test_sft_run_resume_and_use_by_rl_and_eval(files, tmp_path, monkeypatch, capsys):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert main(argv(files, straight)) == 0
    for name in ("config.json", "metrics.jsonl", "summary.json", "curve.png", "checkpoints", "tensorboard"):
        assert (straight / name).exists(), name
    config = json.loads((straight / "config.json").read_text())
    assert config["pretrained"] == {"model": files["gguf"], "dtype": "float32"} and config["command"] == "lm sft"
    assert config["sft"]["learning_rate"] == 1e-3 and config["steps"] == 4 and len(config["dataset"]["train_sha256"]) == 16
    got = rows(straight)
    assert [r["step"] for r in got] == [0, 1, 2, 3, 4]  # step 0: the base's held-out loss
    assert all("eval_loss" in got[i] for i in (0, 2, 4)) and "eval_loss" not in got[1] and "loss" not in got[0]
    assert [r["epoch"] for r in got[1:]] == [0, 0, 1, 1]  # 4 rows, 2 a step
    assert [r["learning_rate"] for r in got[1:]] == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])
    summary = json.loads((straight / "summary.json").read_text())
    assert summary["eval"]["loss"] < summary["eval_start"]["loss"]  # lr 1e-3 on two rows: the held-out loss falls
    assert summary["sampler"]["rows"] == 4 and summary["counters"]["examples"] == 8

    original, calls = sft.SFTTrainer.step, {"n": 0}

    def step(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 3:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C during step 3 (mid-epoch 1)
        return out

    with monkeypatch.context() as m:
        m.setattr(sft.SFTTrainer, "step", step)
        assert main(argv(files, resumed)) == 130
    assert "--resume" in capsys.readouterr().err and len(rows(resumed)) == 4  # steps 0..3
    assert main(["lm", "sft", "--resume", str(resumed)]) == 0
    assert [comparable(r) for r in rows(resumed)] == [comparable(r) for r in got]  # resumed equals uninterrupted

    # the folder is a policy for `lm rl --init` (checked as a run starts; its loading is `lm eval`'s, below) and
    # `lm eval --init`, which loads the fine-tuned parameters from the checkpoint
    capsys.readouterr()
    assert main(["lm", "rl", "--init", str(straight), "--dataset", files["prompts"], "--reward-funcs",
                 f"{files['rewards']}:has_hello", "--out", str(tmp_path / "follow"), "--steps", "1",
                 "--num-generations", "2", "--max-completion-length", "4", "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["init"] == str(straight) and plan["pretrained"]["model"] == files["gguf"]
    assert main(["lm", "eval", "--init", str(straight), "--dataset", files["prompts"], "--reward-funcs",
                 f"{files['rewards']}:has_hello", "--max-completion-length", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["eval"]["examples"] == 1
    from longhorizon.lm.run import Pretrained, load_policy

    tuned, base = load_policy(straight).params, Pretrained(files["gguf"]).load().params
    assert any(not np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(tuned), jax.tree_util.tree_leaves(base)))


@pytest.mark.parametrize("row, message", [
    ({"text": "hello"}, "has neither a 'messages' column nor 'prompt' and 'completion' columns"),
    ({"prompt": "hello"}, "has neither a 'messages' column nor 'prompt' and 'completion' columns"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "hello"}]},
     "has a message with role 'bot'; use one of system, user, assistant, tool"),
    ({"prompt": [{"role": "human", "content": "hi"}], "completion": [{"role": "assistant", "content": "x"}]},
     "has a message with role 'human'"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "has no assistant message"),
    ({"prompt": "hi", "completion": [{"role": "assistant", "content": "x"}]}, "mixes formats"),
])
def test_bad_rows_refused_in_one_sentence_nothing_written(files, tmp_path, capsys, row, message):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(row) + "\n")
    for dry in ([], ["--dry-run"]):
        assert main(["lm", "sft", "--model", files["gguf"], "--dataset", str(data), "--out", str(tmp_path / "r"),
                     "--max-steps", "1", *dry]) == 2
        err = capsys.readouterr().err
        assert message in err and "line 2 of" in err and err.strip().count("\n") == 0, err
        assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_bad_row_in_a_resumed_folder_keeps_the_saved_run(files, tmp_path, capsys):
    """A dataset edited after a run was saved: --resume refuses it (its digest changed), the run stays intact."""
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(ROWS[0]) + "\n")
    out = tmp_path / "r"
    assert main(["lm", "sft", "--model", files["gguf"], "--dataset", str(data), "--out", str(out), "--max-steps",
                 "1", "--per-device-train-batch-size", "1"]) == 0
    saved = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    data.write_text(json.dumps({"messages": [{"role": "robot", "content": "x"}]}) + "\n")
    assert main(["lm", "sft", "--resume", str(out)]) == 2
    assert "role 'robot'" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == saved


@pytest.mark.parametrize("extra, message", [
    (["--steps", "3"], "--steps belongs to the built-in tasks, not to --dataset runs; use --max-steps"),
    (["--init", "SOMEWHERE"], "give only one of them"),
    (["--lr-scheduler-type", "cosine"], "--lr-scheduler-type cosine is unknown"),
    (["--eval-steps", "9"], "--eval-steps 9 must be between 0"),
    (["--num-train-epochs", "2"], "overrides --num-train-epochs (as in TRL); give only one"),
])
def test_dataset_options_refused_in_a_dry_run(files, tmp_path, capsys, extra, message):
    assert main([*argv(files, tmp_path / "r"), *extra, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0, err
    assert not (tmp_path / "r").exists()


def test_dataset_options_need_a_dataset(files, capsys):
    assert main(["lm", "sft", "--model", files["gguf"], "--out", "x", "--dry-run"]) == 2
    assert "--model applies to --dataset runs only" in capsys.readouterr().err
