"""Demonstration files for agent warm starts: `lm demos` writes the scripted expert's episodes as TRL SFT rows
that `lm sft --dataset` tokenizes exactly as `lm agent`'s rollout lays the same episode out."""

import json

import pytest

from longhorizon.cli import main
from longhorizon.lm.agents import envs
from longhorizon.lm.agents.demos import demonstration_rows, demonstrations
from longhorizon.lm.agents.protocol import parse_tool_calls
from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.policy import tiny_random
from longhorizon.lm.sft_data import encode_sft_rows


def test_demonstration_rows_are_the_tokens_and_loss_mask_of_the_rollouts_episode():
    policy = tiny_random()
    spec = envs.get("search")
    rows = spec.make_tasks(2, seed=0, hops=2)
    agent = AgentConfig(max_turns=6, max_action_tokens=64, max_context_tokens=2048)
    episodes = demonstrations(policy.cfg, policy.tokenizer, spec.cls, spec.expert, rows, agent)
    examples = encode_sft_rows(demonstration_rows("search", rows), policy.tokenizer, 4096)
    for episode, example in zip(episodes, examples):
        sequence = episode.sequences[0]
        n = len(sequence.tokens)
        assert list(example.ids[:n]) == list(sequence.tokens)  # the template then closes the last message
        assert list(example.trained[:n]) == [bool(x) for x in sequence.action_mask]
        assert not any(example.trained[n:])


def test_demonstration_rows_by_hand():
    rows = envs.get("search").make_tasks(3, seed=1, hops=2)
    for row, demo in zip(rows, demonstration_rows("search", rows)):
        messages = demo["messages"]
        assert [m["role"] for m in messages[:2]] == ["system", "user"] and row["prompt"] in messages[1]["content"]
        assert "search(query)" in messages[0]["content"]
        roles = [m["role"] for m in messages[2:]]
        assert roles == ["assistant", "tool"] * (demo["turns"] - 1) + ["assistant"]  # nothing after the last call
        calls = [parse_tool_calls(m["content"], "hermes").calls[0] for m in messages[2:] if m["role"] == "assistant"]
        assert [c.name for c in calls] == ["search", "search", "answer"]
        assert calls[-1].arguments["answer"] == row["answer"] and demo["reward"] == 1.0


def test_lm_demos_writes_rows_lm_sft_reads(tmp_path, capsys):
    out = tmp_path / "demos.jsonl"
    assert main(["lm", "demos", "--env", "search", "--env-arg", "hops=2", "--episodes", "3", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 and all(r["reward"] == 1.0 for r in rows)
    assert "lm sft --dataset" in capsys.readouterr().out
    assert main(["lm", "sft", "--dataset", str(out), "--model", "tiny-random", "--max-steps", "1",
                 "--out", str(tmp_path / "warm"), "--dry-run"]) == 0


def test_a_demonstration_whose_tool_call_does_not_parse_is_refused_before_training(tmp_path, capsys):
    rows = demonstration_rows("search", envs.get("search").make_tasks(2, seed=0, hops=2))
    rows[1]["messages"][2]["content"] = '<tool_call>{"name": "search", "arguments": {"query": "x"}</tool_call>'
    data = tmp_path / "demos.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "warm"
    assert main(["lm", "sft", "--dataset", str(data), "--model", "tiny-random", "--max-steps", "1",
                 "--out", str(out)]) == 2
    assert not out.exists()
    assert "line 2 of" in (err := capsys.readouterr().err) and "tool call that does not parse" in err


@pytest.mark.parametrize("argv, needle", [
    (["--env", "x.py:Cls"], "no scripted expert"),
    (["--env", "serch"], "unknown agent environment"),
    (["--episodes", "0"], "at least 1"),
    (["--tool-format", "xml"], "is unknown"),
    (["--env-arg", "bogus=1"], "does not fit"),
])
def test_lm_demos_refuses_bad_options_in_one_sentence(tmp_path, capsys, argv, needle):
    out = tmp_path / "d.jsonl"
    assert main(["lm", "demos", *argv, "--out", str(out)]) == 2
    assert needle in capsys.readouterr().err and not out.exists()
