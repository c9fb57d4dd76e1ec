"""The multi-turn protocol: tool-call parsing, tool execution errors, the environment convention, rollouts' masks."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.agents import protocol
from longhorizon.lm.agents.protocol import ToolCall, call_tool, parse_tool_calls
from longhorizon.lm.agents.rollout import AgentConfig, MultiTurnRollout
from longhorizon.lm.policy import tiny_random


class Counter:
    """A TRL-style environment: the model adds numbers until the total is the target, then answers."""

    def reset(self, target=3, **_):
        self.total, self.target, self.reward, self.done = 0, int(target), 0.0, False
        self.milestones = [0.0]
        return f"target {self.target}"

    def add(self, amount: int) -> str:
        """Add to the running total.

        Args:
            amount: how much to add.
        """
        self.total += int(amount)
        if self.total >= self.target:
            self.milestones = [1.0]
        return f"total {self.total}"

    def answer(self, value: str) -> str:
        """Give the final answer.

        Args:
            value: the answer.
        """
        self.reward = float(str(value).strip() == str(self.target))
        self.done = True
        return "ok"

    def explode(self) -> str:
        """A tool that raises."""
        raise RuntimeError("boom")

    def slow(self) -> str:
        """A tool that takes too long."""
        # blocked until the test releases it, so "too long" does not depend on the machine's load
        self.__dict__.setdefault("release", threading.Event()).wait(60)
        return "late"


def test_hermes_calls_are_parsed_and_malformed_ones_named():
    text = 'think <tool_call>{"name": "add", "arguments": {"amount": 2}}</tool_call> and ' \
           '<tool_call>{"name": "answer", "arguments": "{\\"value\\": \\"3\\"}"}</tool_call>'
    parsed = parse_tool_calls(text, "hermes")
    assert parsed.error is None
    assert parsed.calls == (ToolCall("add", {"amount": 2}), ToolCall("answer", {"value": "3"}))
    assert parse_tool_calls("no call here", "hermes").calls == ()
    assert parse_tool_calls("<tool_call>{not json}</tool_call>", "hermes").error == "malformed"
    assert parse_tool_calls('<tool_call>{"name": "add"', "hermes").error == "malformed"
    assert parse_tool_calls('<tool_call>{"arguments": {}}</tool_call>', "hermes").error == "malformed"
    assert parse_tool_calls('<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "hermes").error == "malformed"


def test_tag_calls_take_positional_arguments_in_signature_order():
    class Router:
        def reset(self, **_):
            pass

        def route(self, model: str, query: str) -> str:
            """Ask a model."""
            return model + query

    tools = protocol.tool_methods(Router())
    parsed = parse_tool_calls("x <route>cheap|2+3</route> y", "tags", tools)
    assert parsed.calls == (ToolCall("route", {"model": "cheap", "query": "2+3"}),)
    assert parse_tool_calls("<route>a|b|c</route>", "tags", tools).error == "malformed"
    # an unknown tag is still a call: executing it yields the unknown-tool observation
    unknown = parse_tool_calls("<fly>high</fly>", "tags", tools).calls[0]
    assert call_tool(Router(), unknown)[1] == "unknown_tool"


def test_every_tool_failure_is_an_error_observation():
    env = Counter()
    env.reset()
    assert call_tool(env, ToolCall("add", {"amount": 2})) == ("total 2", None)
    text, error = call_tool(env, ToolCall("fly", {}))
    assert error == "unknown_tool" and "add" in text and "answer" in text
    assert call_tool(env, ToolCall("add", {"wrong": 1}))[1] == "bad_arguments"
    text, error = call_tool(env, ToolCall("explode", {}))
    assert error == "tool_raised" and "RuntimeError: boom" in text
    env.release = threading.Event()  # the tool cannot finish before the call gives up (had it waited: "late")
    text, error = call_tool(env, ToolCall("slow", {}), timeout_s=0.05)
    env.release.set()  # let the abandoned thread end
    assert (text, error) == ("Error: slow timed out after 0.05 s.", "timeout")


def test_tool_schema_reads_signature_and_docstring():
    schema = protocol.tool_schema("add", Counter.add)
    assert schema["description"] == "Add to the running total."
    assert schema["parameters"]["properties"] == {"amount": {"type": "integer", "description": "how much to add."}}
    assert schema["parameters"]["required"] == ["amount"]
    assert "add(amount)" in protocol.describe_tools(Counter, "hermes")


def test_environments_that_break_the_convention_are_refused():
    class NoReset:
        def tool(self):
            """x"""

    class NoTools:
        def reset(self):
            pass

    class Undocumented:
        def reset(self):
            pass

        def tool(self):
            pass

    for cls, words in ((NoReset, "no reset()"), (NoTools, "exposes no tools"), (Undocumented, "no docstring")):
        with pytest.raises(UsageError, match=words):
            protocol.check_environment(cls)


class NeedsAnswer:
    """reset needs an `answer` column and takes no other."""

    def reset(self, answer, hint=""):
        self.answer_key = answer

    def check(self, value: str) -> str:
        """Check a value.

        Args:
            value: the guess.
        """
        return str(value == self.answer_key)


def test_task_rows_reset_cannot_take_are_named_with_the_fix():
    assert protocol.row_mismatch(NeedsAnswer, {"prompt": "p", "answer": "4"}) is None
    assert protocol.row_mismatch(NeedsAnswer, {"prompt": "p", "answer": "4", "hint": "h"}) is None
    assert protocol.row_mismatch(Counter, {"prompt": "p", "anything": 1}) is None  # **kwargs takes any column
    with pytest.raises(UsageError, match=r"row 2 of task rows lacks the column 'answer' that NeedsAnswer.reset\(\) "
                                         "needs; add it to every row or give the parameter a default"):
        protocol.check_rows(NeedsAnswer, [{"prompt": "a", "answer": "1"}, {"prompt": "b"}])
    with pytest.raises(UsageError, match=r"has the column 'level' that NeedsAnswer.reset\(\) does not take; add "
                                         r"\*\*kwargs to reset\(\) or drop the column"):
        protocol.check_rows(NeedsAnswer, [{"prompt": "a", "answer": "1", "level": 3}])
    with pytest.raises(UsageError, match="a task row lacks the column 'answer'"):
        protocol.reset(NeedsAnswer(), {"prompt": "b"})


def test_lm_agent_refuses_a_task_file_reset_cannot_take_before_loading(tmp_path, capsys):
    from longhorizon.cli import main

    env_file = tmp_path / "needs.py"
    env_file.write_text("class NeedsAnswer:\n    def reset(self, answer):\n        self.reward = 0.0\n\n"
                        "    def guess(self, value: str) -> str:\n        \"\"\"Guess.\"\"\"\n        return value\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"prompt": "a", "answer": "1"}\n{"prompt": "b"}\n')
    out = tmp_path / "run"
    code = main(["lm", "agent", "--env", f"{env_file}:NeedsAnswer", "--tasks", str(tasks), "--model", "tiny-random",
                 "--eval-tasks", "0", "--out", str(out), "--dry-run"])
    assert code == 2 and not out.exists()
    assert f"row 2 of --tasks {tasks} lacks the column 'answer'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- rollouts


@pytest.fixture(scope="module")
def tiny():
    return tiny_random()


class Scripted(MultiTurnRollout):
    """The model's turns are given as text (episode i follows ``script[i]``); the rest is the real rollout."""

    def __init__(self, *args, script, **kwargs):
        super().__init__(*args, **kwargs)
        self.script, self.seen = script, []

    def sample(self, params, contexts, key, episodes):
        self.seen.append([len(c) for c in contexts])
        out = []
        for e in episodes:
            ids = self.tok.encode(self.script[e.index][len(e.turns)]) + [self.tok.eos_ids[0]]
            out.append((ids, [-0.5] * len(ids)))
        return out


def _scripted(tiny, script, **cfg):
    agent = AgentConfig(max_action_tokens=48, max_context_tokens=1024, **cfg)
    return Scripted(tiny.cfg, tiny.tokenizer, Counter, agent, script=script)


def test_observation_tokens_are_masked_out_and_turns_recorded(tiny):
    call = '<tool_call>{{"name": "{}", "arguments": {}}}</tool_call>'
    script = [[call.format("add", '{"amount": 2}'), call.format("add", '{"amount": 1}'),
               call.format("answer", '{"value": "3"}')]]
    ro = _scripted(tiny, script)
    (traj,) = ro.run(tiny.params, [{"prompt": "reach the target", "target": 3}], 1, jax.random.PRNGKey(0))
    assert traj.finished and traj.reward == 1.0 and traj.n_turns == 3
    assert [t.observation for t in traj.turns] == ["total 2", "total 3", "ok"]
    assert traj.turns[1].info["milestones"] == [1.0] and traj.turns[0].info["milestones"] == [0.0]
    (seq,) = traj.sequences
    tok = tiny.tokenizer
    # the action tokens are exactly the scripted texts with their stop token, in order, one turn each
    for t, text in enumerate(script[0]):
        ids = np.asarray(tok.encode(text) + [tok.eos_ids[0]])
        positions = np.flatnonzero(seq.action_mask & (seq.turn == t))
        np.testing.assert_array_equal(seq.tokens[positions], ids)
        np.testing.assert_allclose(seq.logprobs[positions], -0.5)
    assert seq.logprobs[~seq.action_mask].sum() == 0
    # observation tokens carry their turn's index, are not in the loss, and decode to the rendered observation
    obs0 = seq.tokens[(~seq.action_mask) & (seq.turn == 0)]
    assert "total 2" in tok.decode(obs0) and "<|im_start|>tool" in tok.decode(obs0)
    assert tok.decode(seq.tokens[seq.turn == -1]).endswith("<|im_start|>assistant\n")
    # the whole sequence re-renders as one chat: the next turn starts right after the observation
    assert "<|im_end|>\n<|im_start|>tool\ntotal 2<|im_end|>\n<|im_start|>assistant\n" in tok.decode(seq.tokens)


def test_errors_are_observed_and_the_episode_goes_on(tiny):
    script = [['<tool_call>{"name": "add"</tool_call>', '<tool_call>{"name": "fly", "arguments": {}}</tool_call>',
               '<tool_call>{"name": "explode", "arguments": {}}</tool_call>', "I give up."]]
    ro = _scripted(tiny, script, max_turns=6)
    (traj,) = ro.run(tiny.params, [{"prompt": "p"}], 1, jax.random.PRNGKey(0))
    assert [t.error for t in traj.turns] == ["malformed", "unknown_tool", "tool_raised", None]
    assert traj.tool_errors == 3 and traj.finished and traj.reward == 0.0
    assert "write the call again" in traj.turns[0].observation


def test_max_turns_and_context_budget_end_episodes_unfinished(tiny):
    add = '<tool_call>{"name": "add", "arguments": {"amount": 0}}</tool_call>'
    ro = _scripted(tiny, [[add] * 10], max_turns=3)
    (traj,) = ro.run(tiny.params, [{"prompt": "p"}], 1, jax.random.PRNGKey(0))
    assert traj.n_turns == 3 and not traj.finished
    ro = _scripted(tiny, [[add] * 10], max_turns=10)
    ro.cfg = AgentConfig(max_action_tokens=48, max_context_tokens=400, max_turns=10)
    (traj,) = ro.run(tiny.params, [{"prompt": "p"}], 1, jax.random.PRNGKey(0))
    assert not traj.finished and len(traj.sequences[0]) + 48 > 400 and traj.n_turns < 10


def test_workspace_contexts_stay_bounded_while_full_history_grows(tiny):
    add = '<report>total so far is known</report><tool_call>{"name": "add", "arguments": {"amount": 0}}</tool_call>'
    full = _scripted(tiny, [[add] * 6], max_turns=6, context="full")
    work = _scripted(tiny, [[add] * 6], max_turns=6, context="workspace")
    key = jax.random.PRNGKey(0)
    (tf,) = full.run(tiny.params, [{"prompt": "p"}], 1, key)
    (tw,) = work.run(tiny.params, [{"prompt": "p"}], 1, key)
    f, w = [s[0] for s in full.seen], [s[0] for s in work.seen]
    assert all(b > a for a, b in zip(f, f[1:]))  # full history: the context grows every round
    assert max(w[1:]) == min(w[1:]) and max(w) < f[-1]  # workspace: bounded (same size each round here)
    assert len(tw.sequences) == 6 and len(tf.sequences) == 1
    for t, seq in enumerate(tw.sequences):
        assert set(seq.turn[seq.action_mask]) == {t} and (seq.turn[~seq.action_mask] == -1).all()
    assert "Report so far: total so far is known" in tiny.tokenizer.decode(tw.sequences[1].tokens)


def test_groups_reset_fresh_environments_with_the_row(tiny):
    answer = '<tool_call>{"name": "answer", "arguments": {"value": "%s"}}</tool_call>'
    ro = _scripted(tiny, [[answer % "2"], [answer % "5"], [answer % "4"], [answer % "4"]])
    trajs = ro.run(tiny.params, [{"prompt": "a", "target": 2}, {"prompt": "b", "target": 4}], 2, jax.random.PRNGKey(0),
                   version=7, uid_prefix="r3-")
    assert [t.group for t in trajs] == [0, 0, 1, 1]
    assert [t.reward for t in trajs] == [1.0, 0.0, 1.0, 1.0]
    assert [t.uid for t in trajs] == ["r3-0", "r3-1", "r3-2", "r3-3"] and {t.version for t in trajs} == {7}


@pytest.mark.slow
def test_behaviour_logprobs_equal_the_teacher_forced_pass_over_the_whole_episode(tiny):
    """With a real (random) model: what the sampler recorded is what the learner recomputes on the final sequence."""
    from longhorizon.lm.model import token_logprobs

    class Echo:
        def reset(self, **_):
            self.reward = 0.0

        def echo(self, text: str) -> str:
            """Repeat the text."""
            return text

    agent = AgentConfig(max_turns=3, max_action_tokens=12, max_context_tokens=512, tool_format="tags",
                        describe_tools=False)
    ro = MultiTurnRollout(tiny.cfg, tiny.tokenizer, Echo, agent)
    trajs = ro.run(tiny.params, [{"prompt": "say something"}], 4, jax.random.PRNGKey(3))
    for traj in trajs:
        (seq,) = traj.sequences
        assert seq.action_mask.sum() > 0
        logp, _ = token_logprobs(tiny.params, tiny.cfg, jnp.asarray(seq.tokens[None]), jnp.ones((1, len(seq)), bool))
        positions = np.flatnonzero(seq.action_mask)
        np.testing.assert_allclose(np.asarray(logp[0])[positions - 1], seq.logprobs[positions], atol=2e-4)


def test_observations_past_the_limit_are_cut_and_say_so():
    assert protocol.cut_observation("abcdef", 6) == "abcdef"
    assert protocol.cut_observation("abcdefg", 6) == "abcdef ...(cut)"
