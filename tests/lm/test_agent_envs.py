"""The local tool environments of LM agents (lm/agents/envs): rewards, feedback, milestones, experts, refusals."""

import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longhorizon.errors import UsageError
from longhorizon.lm.agents import envs
from longhorizon.lm.agents.envs import environment_from_path, fees, research, router, search, with_latency
from longhorizon.lm.agents.envs.common import exact_match, normalize


def start(cls, row):
    env = cls()
    assert env.reset(**{k: v for k, v in row.items() if k != "prompt"}) is None
    return env


def play(cls, row, expert, max_calls=60):
    """Run a scripted expert against an environment; returns (env, [(tool, kwargs), ...])."""
    env, observation, calls = start(cls, row), None, []
    while not getattr(env, "done", False) and len(calls) < max_calls:
        tool, kwargs = expert.act(observation)
        calls.append((tool, kwargs))
        observation = getattr(env, tool)(**kwargs)
    return env, calls


# ----------------------------------------------------------------------------- shared pieces


def test_exact_match_normalisation_by_hand():
    assert normalize("  The  Mardun. ") == "mardun"
    assert normalize("An old-town, a CITY!") == "oldtown city"
    assert exact_match("the Korvo", "Korvo") == 1.0 and exact_match("Korvo Inc", "Korvo") == 0.0
    assert exact_match("6603", "6603.") == 1.0 and exact_match("66 03", "6603") == 0.0


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=30))
def test_normalize_is_idempotent(text):
    assert normalize(normalize(text)) == normalize(text)


def test_registry_and_unknown_name():
    assert set(envs.ENVIRONMENTS) == {"search", "router", "fees", "research"}
    with pytest.raises(UsageError, match="unknown agent environment 'nope'"):
        envs.get("nope")


@pytest.mark.parametrize("name", ["search", "router", "fees", "research"])
def test_every_environment_follows_the_convention_and_its_expert_solves_it(name):
    from longhorizon.lm.agents.protocol import check_environment, tool_methods

    spec = envs.get(name)
    check_environment(spec.cls)
    assert all(tool_methods(spec.cls)[t].__doc__ for t in tool_methods(spec.cls))
    rows = spec.make_tasks(20, seed=3)
    assert rows == spec.make_tasks(20, seed=3) and rows != spec.make_tasks(20, seed=4)
    assert all(isinstance(r["prompt"], str) and "answer" in r for r in rows)
    episodes = [envs.expert_episode(name, r) for r in rows]
    rewards = [env.reward for env, _ in episodes]
    assert sum(rewards) / len(rewards) >= (0.85 if name == "router" else 1.0)  # router: its models err
    assert all(isinstance(obs, str) for _, steps in episodes for _, _, obs in steps)


ARGUMENTS = st.one_of(st.text(max_size=40), st.integers(), st.none(), st.floats(), st.lists(st.text(max_size=5)))


@pytest.mark.parametrize("name", ["search", "router", "fees", "research"])
def test_tools_return_strings_whatever_the_arguments(name):
    import inspect

    from longhorizon.lm.agents.protocol import tool_methods

    spec = envs.get(name)
    row = spec.make_tasks(1, seed=0)[0]

    @settings(max_examples=40, deadline=None)
    @given(st.data())
    def check(data):
        env = start(spec.cls, row)
        for _ in range(3):
            tool, fn = data.draw(st.sampled_from(sorted(tool_methods(env).items())))
            kwargs = {p: data.draw(ARGUMENTS) for p in inspect.signature(fn).parameters}
            assert isinstance(fn(**kwargs), str)
        assert isinstance(env.reward, float)

    check()


def test_tool_calls_parsed_by_the_protocol_reach_the_tools():
    from longhorizon.lm.agents.protocol import call_tool, parse_tool_calls, tool_methods

    row = research.make_tasks(1, seed=0, items=2, question="sum")[0]
    env = start(research.ResearchEnv, row)
    first, second = research.Expert(row).names
    parsed = parse_tool_calls(f"<lookup>{first}</lookup> <lookup>{second}</lookup>", "tags", tool_methods(env))
    observations = [call_tool(env, call) for call in parsed.calls]
    assert [error for _, error in observations] == [None, None] and env.milestones == [1.0, 1.0]
    hermes = parse_tool_calls('<tool_call>{"name": "answer", "arguments": {"answer": "%s"}}</tool_call>'
                              % row["answer"], "hermes")
    assert call_tool(env, hermes.calls[0]) == ("Correct.", None) and env.reward == 1.0


# ----------------------------------------------------------------------------- search (ASearcher)


def test_bm25_returns_the_document_of_the_queried_entity_first(tmp_path):
    corpus = tmp_path / "kb.txt"
    corpus.write_text("Mardun is the capital of Veloria.\nZent is made by Korvo.\nKorvo was founded by Talem.\n"
                      "Talem was born in Mardun.\nVeloria has a long history.\n")
    env = start(search.search_env(str(corpus), top_k=2), {"answer": "Mardun", "evidence": ["Talem was born"]})
    assert env.search("Korvo founded").splitlines()[0] == "1. Korvo was founded by Talem."
    assert env.search("capital Veloria").splitlines()[0] == "1. Mardun is the capital of Veloria."
    assert env.milestones == [0.0]
    assert env.search("Talem born").startswith("1. Talem was born in Mardun.") and env.milestones == [1.0]
    assert env.search("xyzzy") == "No document matches the query."
    assert env.answer("the mardun") == "Correct." and env.reward == 1.0 and env.done


def test_corpus_paragraphs_and_bad_corpus_files(tmp_path):
    paragraphs = tmp_path / "p.txt"
    paragraphs.write_text("Zent is made\nby Korvo.\n\nKorvo was founded by Talem.\n")
    assert search.read_corpus(str(paragraphs)) == ["Zent is made by Korvo.", "Korvo was founded by Talem."]
    with pytest.raises(UsageError, match="does not exist"):
        search.search_env(str(tmp_path / "missing.txt"))
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(UsageError, match="has no documents"):
        search.search_env(str(tmp_path / "empty.txt"))


@pytest.mark.parametrize("hops", [1, 2, 3, 4, 6])
def test_search_expert_needs_exactly_k_searches(hops):
    rows = search.make_tasks(50 if hops <= 4 else 20, seed=hops, hops=hops)
    successes = 0
    for row in rows:
        env, calls = play(search.SearchEnv, row, search.Expert(row))
        successes += env.reward
        assert [t for t, _ in calls] == ["search"] * hops + ["answer"]
        assert env.milestones == [1.0] * hops and env.metrics["searches"] == hops
    assert successes >= 0.95 * len(rows)


def test_search_question_composition_and_milestones_per_hop():
    row = search.make_tasks(1, seed=0, hops=3)[0]
    start_entity, relations = search.parse_question(row["prompt"].split("Question:")[1])
    assert len(relations) == 3 and start_entity in row["evidence"][0]
    # the hop documents chain: each one's value is the next one's subject, the last one's is the answer
    assert row["evidence"][-1].rstrip(".").endswith(row["answer"])
    env, expert, observation = start(search.SearchEnv, row), search.Expert(row), None
    for hop in range(3):
        tool, kwargs = expert.act(observation)
        observation = env.search(**kwargs)
        assert env.milestones == [1.0] * (hop + 1) + [0.0] * (2 - hop)
    assert expert.act(observation) == ("answer", {"answer": row["answer"]})


def test_search_bad_arguments_return_error_strings():
    row = search.make_tasks(1, seed=0, hops=1)[0]
    env = start(search.SearchEnv, row)
    assert env.search("").startswith("Error:") and env.search(3).startswith("Error:")
    assert env.answer(None).startswith("Error:") and not env.done
    assert env.answer("nobody") == "Incorrect." and env.reward == 0.0 and env.done
    assert env.search("anything") == "Error: the episode is over." and env.metrics["tool_errors"] == 4
    with pytest.raises(UsageError, match="hops=0 is invalid"):
        search.make_tasks(3, seed=0, hops=0)


# ----------------------------------------------------------------------------- router (Router-R1)


def test_router_reward_arithmetic_on_a_hand_made_episode():
    row = {"answer": "6603", "task_seed": 7, "cost_weight": 0.5}
    env = start(router.RouterEnv, row)
    assert env.reward == 0.0
    assert env.route("nano", "What is 93 * 71?").startswith("nano: ")
    assert env.route("huge", "What is 93 * 71?").startswith("Error: there is no model 'huge'")  # costs nothing
    assert env.route("large", "").startswith("Error:")
    env.route("large", "What is 93 * 71?")
    assert env.reward_terms == {"format": 0.0, "outcome": 0.0, "cost": 0.82}
    assert env.reward == pytest.approx(-0.41)  # no answer yet: 0 + 0 - 0.5 * 0.82
    assert env.answer("6603") == "Correct."
    assert env.reward_terms == {"format": 1.0, "outcome": 1.0, "cost": 0.82}
    assert env.reward == pytest.approx(1.59)  # 1 + 1 - 0.5 * (0.02 + 0.8)
    wrong = start(router.RouterEnv, row)
    wrong.route("small", "What is 93 * 71?"), wrong.answer("6600")
    assert wrong.reward == pytest.approx(0.95) and wrong.metrics == {"route_calls": 1, "tool_errors": 0}
    with pytest.raises(UsageError, match="cost_weight=-1 is invalid"):
        start(router.RouterEnv, {"answer": "1", "cost_weight": -1})
    with pytest.raises(UsageError, match="cost_weight='high' is invalid"):
        router.make_tasks(2, seed=0, cost_weight="high")
    with pytest.raises(UsageError, match="domains=.*is invalid"):
        router.make_tasks(2, seed=0, domains=("poetry",))


def test_router_models_are_deterministic_and_err_at_their_rates():
    q = "What is 'kalumo' reversed?"
    assert router.solve(q) == ("strings", "omulak") and router.solve("What is 12 - 30?") == ("arithmetic", "-18")
    replies = {}
    for model in ("nano", "large"):
        right = 0
        for seed in range(400):
            env = start(router.RouterEnv, {"answer": "x", "task_seed": seed})
            reply = env.route(model, "What is 12 + 30?")
            assert reply == start(router.RouterEnv, {"answer": "x", "task_seed": seed}).route(model, "What is 12 + 30?")
            right += reply == f"{model}: 42"
        replies[model] = right / 400
    assert abs(replies["nano"] - 0.5) < 0.08 and replies["large"] > 0.95
    assert start(router.RouterEnv, {"answer": "x"}).route("nano", "hello") == "nano: I cannot answer that."


def test_router_expert_threshold_traces_a_monotone_frontier():
    rows = router.make_tasks(150, seed=0)
    frontier = []
    for threshold in (0.0, 0.7, 0.9, 0.99):
        envs_ = [play(router.RouterEnv, r, router.Expert(r, threshold=threshold))[0] for r in rows]
        frontier.append((sum(e.reward_terms["outcome"] for e in envs_) / len(rows),
                         sum(e.reward_terms["cost"] for e in envs_) / len(rows)))
    accuracy, cost = zip(*frontier)
    assert all(b >= a - 0.02 for a, b in zip(accuracy, accuracy[1:])) and accuracy[-1] - accuracy[0] > 0.3
    assert all(b > a for a, b in zip(cost, cost[1:])) and cost[0] == pytest.approx(0.02)


# ----------------------------------------------------------------------------- feedback-enriched scaffolds (FEEs)


def test_fees_feedback_strings_for_a_known_wrong_sub_answer():
    row = {"answer": "a=18, b=45, c=63", "max_attempts": 3}
    structured = start(fees.FeedbackEnv, {**row, "feedback": "structured"})
    assert structured.submit("a=18, b=40, c=63") == "Incorrect: b is wrong; a and c are right. 2 attempts left."
    assert structured.milestones == [1.0, 0.0, 1.0]
    assert structured.submit("a=1, c=63") == "Incorrect: a is wrong; b is missing; c is right. 1 attempt left."
    plain = start(fees.FeedbackEnv, {**row, "feedback": "plain"})
    assert plain.submit("a=18, b=40, c=63") == "Incorrect. 2 attempts left."
    assert plain.submit("nothing here").startswith("Error: no answer found") and plain.attempts == 1
    assert plain.submit("a=18, d=2").startswith("Error: there is no part d") and plain.attempts == 1
    assert plain.submit("a=0, b=0, c=0") == "Incorrect. 1 attempt left." and not plain.done
    assert plain.submit("a=0, b=0, c=0") == "Incorrect. No attempts left." and plain.done and plain.reward == 0.0
    assert plain.submit("a=18, b=45, c=63") == "Error: the episode is over."


def test_fees_reward_is_discounted_per_attempt():
    env = start(fees.FeedbackEnv, {"answer": "a=18, b=45, c=63", "attempt_discount": 0.5})
    env.submit("a=18, b=45, c=60")
    assert env.submit("c: 63, a=18, b=45") == "Correct." and env.done and env.reward == 0.5  # 0.5 ** (2 - 1)
    with pytest.raises(UsageError, match="feedback='none' is unknown"):
        start(fees.FeedbackEnv, {"answer": "a=1", "feedback": "none"})
    with pytest.raises(UsageError, match="max_attempts=0 is invalid"):
        fees.make_tasks(2, seed=0, max_attempts=0)
    with pytest.raises(UsageError, match="attempt_discount=1.5 is invalid"):
        fees.make_tasks(2, seed=0, attempt_discount=1.5)


def test_fees_structured_feedback_helps_a_slipping_expert():
    success = {}
    for feedback in fees.FEEDBACK:
        rows = fees.make_tasks(150, seed=1, items=3, feedback=feedback)
        assert rows[0]["answer"].count("=") == 4
        success[feedback] = sum(play(fees.FeedbackEnv, r, fees.Expert(r, slip=0.3, seed=i))[0].reward
                                for i, r in enumerate(rows)) / len(rows)
    assert success["structured"] > success["plain"] + 0.15


# ----------------------------------------------------------------------------- research workspace (IterResearch)


def test_research_milestones_and_aggregates():
    values = {"Mardun": 300, "Zent": 1200, "Korvo": 50}
    assert research.solve("max", values) == "Zent" and research.solve("min", values) == "Korvo"
    assert research.solve("sum", values) == "1550"
    env = start(research.ResearchEnv, {"answer": "1550", "values": values})
    assert env.lookup("zent") == "The population of Zent is 1200." and env.milestones == [0.0, 1.0, 0.0]
    assert env.lookup("Talem").startswith("Error: 'Talem' is not one of the cities")
    env.lookup("Zent"), env.lookup("Korvo")
    assert env.milestones == [0.0, 1.0, 1.0] and env.metrics == {"lookups": 3, "repeated_lookups": 1, "tool_errors": 1}
    assert env.answer("1550") == "Correct." and env.reward == 1.0
    with pytest.raises(UsageError, match="needs a 'values' column"):
        start(research.ResearchEnv, {"answer": "x"})


@pytest.mark.parametrize("items", [2, 9, 16])
def test_research_expert_uses_one_lookup_per_item(items):
    for row in research.make_tasks(10, seed=items, items=items, question="mixed"):
        env, calls = play(research.ResearchEnv, row, research.Expert(row))
        assert env.reward == 1.0 and len(calls) == items + 1 and env.milestones == [1.0] * items
    with pytest.raises(UsageError, match="items=17 is invalid"):
        research.make_tasks(1, seed=0, items=17)


# ----------------------------------------------------------------------------- latency


def test_latency_wrapper_sleeps_before_each_tool_call(monkeypatch):
    """The wrapper's sleeps are recorded, not timed (a loaded machine stretches wall-clock time, never these)."""
    slept = []
    monkeypatch.setattr(sys.modules[with_latency.__module__], "time", types.SimpleNamespace(sleep=slept.append))
    row = research.make_tasks(1, seed=0, items=2)[0]
    slow_cls = with_latency(research.ResearchEnv, 0.1)
    assert slow_cls.lookup.__doc__ == research.ResearchEnv.lookup.__doc__
    env = start(slow_cls, row)
    assert slept == []  # reset is not delayed
    env.lookup("nowhere"), env.answer("x")
    assert slept == [0.1, 0.1] and env.done
    slept.clear()
    ranged = start(with_latency(research.ResearchEnv, (0.02, 0.06), seed=1), row)
    for _ in range(3):
        ranged.lookup("nowhere")
    assert len(slept) == 3 and all(0.02 <= s <= 0.06 for s in slept) and len(set(slept)) == 3  # a draw per call
    for bad in (-1, (0.5, 0.1), "fast", True):
        with pytest.raises(UsageError, match="latency seconds="):
            with_latency(research.ResearchEnv, bad)


# ----------------------------------------------------------------------------- environment_from_path


GOOD = '''
class Env:
    def reset(self, **row):
        self.reward = 0.0

    def ping(self, text: str) -> str:
        """Echo the text.

        Args:
            text: what to echo.
        """
        return text
'''


def test_environment_from_path_imports_a_user_class(tmp_path):
    (tmp_path / "good_env.py").write_text(GOOD)
    cls = environment_from_path(f"{tmp_path / 'good_env.py'}:Env")
    assert cls().ping("hi") == "hi"
    assert environment_from_path("longhorizon.lm.agents.envs.search:SearchEnv") is search.SearchEnv


@pytest.mark.parametrize("source, path, message", [
    (None, "no_colon_here", "is not an import path"),
    (None, "longhorizon.no_such_module:Env", "cannot import 'longhorizon.no_such_module'"),
    (None, "missing.py:Env", "does not exist"),
    (GOOD, "{file}:Other", "has no 'Other'"),
    ("Env = 3\n", "{file}:Env", "is not a class"),
    ("class Env:\n    def ping(self):\n        'Ping.'\n", "{file}:Env", "has no reset"),
    ("class Env:\n    def reset(self):\n        pass\n", "{file}:Env", "exposes no tools"),
    ("class Env:\n    def reset(self):\n        pass\n    def ping(self):\n        pass\n", "{file}:Env", "has no docstring"),
    ("raise RuntimeError('boom')\n", "{file}:Env", "RuntimeError: boom"),
])
def test_environment_from_path_refusals(tmp_path, source, path, message):
    file = tmp_path / "user_env.py"
    if source is not None:
        file.write_text(source)
    with pytest.raises(UsageError, match=message):
        environment_from_path(path.format(file=file))
