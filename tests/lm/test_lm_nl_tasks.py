"""Natural-language chained arithmetic (lm.nl_tasks): answers recomputed from the prompt text, rewards, parsing."""

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longhorizon.errors import UsageError
from longhorizon.lm import nl_tasks
from longhorizon.lm.nl_tasks import (
    chain_reward,
    completion_text,
    composed_milestone_reward,
    composed_reward,
    make_rows,
    parse_final,
    parse_numbered,
    read_jsonl,
    write_jsonl,
)

CHAIN_STYLES = ("steps", "result", "word", "equations", "nested", "example")

# Independent reader of a chain prompt: every sentence after the first is one operation on the running value.
_OPS = [
    (re.compile(r"(?:add|gets) (\d+)", re.I), lambda x, c: x + c),
    (re.compile(r"(?:subtract|gives away) (\d+)", re.I), lambda x, c: x - c),
    (re.compile(r"(?:multiply (?:it |the result )?by|with) (\d+)", re.I), lambda x, c: x * c),
    (re.compile(r"^x = x \+ (\d+)$"), lambda x, c: x + c),
    (re.compile(r"^x = x - (\d+)$"), lambda x, c: x - c),
    (re.compile(r"^x = x \* (\d+)$"), lambda x, c: x * c),
]


def evaluate_chain(content: str) -> list[int]:
    content = content.split("Now solve this one: ")[-1]
    nested = re.match(r"What is ([-+*() 0-9]+)\?", content)
    if nested:  # evaluate every parenthesised prefix, innermost first
        expr, values = nested.group(1), []
        depth = expr.count("(")
        body = expr[depth:]
        pieces = re.split(r"\) ", body)
        acc = pieces[0]
        values.append(eval(acc))  # noqa: S307 -- digits, operators and parentheses only
        for piece in pieces[1:]:
            acc = f"({acc}) {piece}"
            values.append(eval(acc))  # noqa: S307
        return values
    sentences = [s.strip() for s in content.split(".") if s.strip()]
    x = int(re.search(r"\d+", sentences[0]).group())
    values = []
    for s in sentences[1:]:
        if "?" in s or s.startswith("Give") or s.startswith("N'"):
            break
        for pattern, f in _OPS:
            m = pattern.search(s)
            if m:
                x = f(x, int(m.group(1)))
                values.append(x)
                break
        else:
            raise AssertionError(f"unreadable sentence {s!r}")
    return values


def evaluate_composed(content: str) -> list[int]:
    values = []
    for line in content.splitlines():
        m = re.match(r"Problem (\d+): (.*)$", line)
        if not m:
            continue
        body = m.group(2)
        link = re.match(r"Let N be the answer to Problem (\d+)(?: (plus|minus) (\d+))?\. (.*)$", body)
        if link:
            assert int(link.group(1)) == len(values)
            k = int(link.group(3) or 0) * (-1 if link.group(2) == "minus" else 1)
            n, body = values[-1] + k, link.group(4).replace("N", "{n}", 1)
        else:
            n, body = int(re.search(r"\d+", body).group()), re.sub(r"\d+", "{n}", body, count=1)
        plain = re.match(r"What is \{n\} ([-+*]) (\d+)\?$", body)
        if plain:
            op, c = plain.group(1), int(plain.group(2))
        else:
            word = re.search(r"gets (\d+) more|gives away (\d+)|with (\d+) times", body)
            op = "+" if word.group(1) else "-" if word.group(2) else "*"
            c = int(next(g for g in word.groups() if g))
        values.append(n + c if op == "+" else n - c if op == "-" else n * c)
    return values


def test_chain_example_hand_checked():
    rows = make_rows("chain", [1, 3], 1, seed=0, style="steps")
    assert rows[0]["prompt"] == [{"role": "user", "content":
                                  "Start with 7. Subtract 4. What is the final number? Give the answer as 'Answer: N'."}]
    assert rows[0]["answer"] == "3" and rows[0]["answers"] == ["3"] and rows[0]["horizon"] == 1 and rows[0]["task"] == "chain"
    # 5 * 2 = 10, 10 - 1 = 9, 9 * 2 = 18
    assert rows[1]["prompt"][0]["content"].startswith("Start with 5. Multiply by 2. Then subtract 1. Then multiply by 2.")
    assert rows[1]["answers"] == ["10", "9", "18"] and rows[1]["answer"] == "18"


@pytest.mark.parametrize("style", CHAIN_STYLES)
def test_chain_answers_recomputed_from_text(style):
    for row in make_rows("chain", range(1, 9), 5, seed=3, style=style):
        values = evaluate_chain(row["prompt"][0]["content"])
        assert len(values) == row["horizon"]
        assert [str(v) for v in values] == row["answers"] and row["answer"] == row["answers"][-1]
        assert all(1 <= v <= nl_tasks.MAX_VALUE for v in values)


def test_composed_example_hand_checked():
    row = make_rows("composed", 3, 1, seed=0)[0]
    assert row["prompt"][0]["content"] == (
        "Solve these 3 problems in order.\n"
        "Problem 1: What is 8 * 2?\n"
        "Problem 2: Let N be the answer to Problem 1 minus 10. What is N - 2?\n"
        "Problem 3: Let N be the answer to Problem 2. What is N - 2?\n"
        "Give the answers as 'Answer 1: N', 'Answer 2: N', 'Answer 3: N'.")
    assert row["answers"] == ["16", "4", "2"] and row["answer"] == "2" and row["task"] == "composed"


@pytest.mark.parametrize("style", ("plain", "word"))
def test_composed_answers_recomputed_from_text(style):
    for row in make_rows("composed", range(1, 7), 4, seed=5, style=style):
        values = evaluate_composed(row["prompt"][0]["content"])
        assert len(values) == row["horizon"] == len(row["answers"])
        assert [str(v) for v in values] == row["answers"]


def test_deterministic_and_horizons_independent():
    assert make_rows("chain", [1, 2, 5], 4, seed=7) == make_rows("chain", [1, 2, 5], 4, seed=7)
    assert make_rows("chain", [1, 2, 5], 4, seed=7)[8:] == make_rows("chain", 5, 4, seed=7)
    assert make_rows("composed", 3, 6, seed=7) == make_rows("composed", [2, 3], 6, seed=7)[6:]
    assert make_rows("chain", 3, 6, seed=7) != make_rows("chain", 3, 6, seed=8)
    prompts = [r["prompt"][0]["content"] for r in make_rows("chain", 4, 50, seed=1)]
    assert len(set(prompts)) > 40


def test_bad_input_is_one_usage_error():
    for call in (lambda: make_rows("packed", 1, 1, 0), lambda: make_rows("chain", 0, 1, 0),
                 lambda: make_rows("composed", 13, 1, 0), lambda: make_rows("chain", [1, -2], 1, 0),
                 lambda: make_rows("chain", 1.5, 1, 0), lambda: make_rows("chain", 1, 0, 0),
                 lambda: make_rows("chain", [], 1, 0), lambda: make_rows("chain", 1, 1, 0, style="poem")):
        with pytest.raises(UsageError) as e:
            call()
        assert str(e.value).endswith(".") and "\n" not in str(e.value)
    with pytest.raises(UsageError):
        chain_reward(["p"], ["Answer: 1"])  # the answer column is missing
    with pytest.raises(UsageError):
        composed_reward(["p", "q"], ["a", "b"], answers=[["1"]])


def test_parse_final():
    assert parse_final("7 - 4 = 3.\nAnswer: 3") == "3"
    assert parse_final("Answer: 2. Wait, no. Answer: **12**") == "12"
    assert parse_final("The answer is $1,200$.") == "1200"
    assert parse_final("So we get 9, then 18.") == "18"
    assert parse_final("Final answer: 12.0") == "12"
    assert parse_final("7-3") == "3" and parse_final("result: -3") == "-3"
    assert parse_final("x is 2.5") == "2.5"
    assert parse_final("no numbers here") is None and parse_final("") is None and parse_final(None) is None


def test_parse_numbered():
    text = "Answer 1: 16\nAnswer 2: 4\n**Answer 3:** 2"
    assert parse_numbered(text, 3) == ["16", "4", "2"]
    assert parse_numbered("Answer 1: 5, Answer 3: 7, Answer 9: 1", 3) == ["5", None, "7"]
    assert parse_numbered("Answer to Problem 2 is 8. Answer 2: 9", 2) == [None, "9"]
    assert parse_numbered("Answer: 5", 1) == ["5"] and parse_numbered("Answer: 5", 2) == [None, None]
    sections = "Problem 1: 6 + 6 = 12\nThe answer is 12.\n\n**Problem 2:** 12 - 7 = 5\nThe answer is 5.\nAnswer 2: 4"
    assert parse_numbered(sections, 2) == ["12", "4"]  # a label wins over its section
    assert parse_numbered(sections, 3) == ["12", "4", None]


def test_completion_forms():
    conv = [{"role": "assistant", "content": "Answer: 18"}]
    assert completion_text(conv) == "Answer: 18"
    assert completion_text({"role": "assistant", "content": [{"type": "text", "text": "Answer: 1"}]}) == "Answer: 1"
    assert completion_text(None) == "" and completion_text(3) == "" and completion_text([]) == ""


def test_chain_reward_values():
    completions = ["10, 9, then 18.\nAnswer: 18", [{"role": "assistant", "content": "Answer: 17"}],
                   "The final number is 18", "", [{"role": "assistant", "content": "Answer: 18"}]]
    assert chain_reward(["p"] * 5, completions, answer=["18"] * 5) == [1.0, 0.0, 1.0, 0.0, 1.0]
    assert chain_reward(["p"], ["Answer: 18"], answer=[18]) == [1.0]


def test_composed_rewards_all_or_nothing_and_milestone():
    answers = [["16", "4", "2"]] * 4
    completions = ["Answer 1: 16\nAnswer 2: 4\nAnswer 3: 2", "Answer 1: 16, Answer 2: 4, Answer 3: 3",
                   [{"role": "assistant", "content": "Answer 1: 16"}], "I don't know."]
    assert composed_reward(["p"] * 4, completions, answers=answers) == [1.0, 0.0, 0.0, 0.0]
    assert composed_milestone_reward(["p"] * 4, completions, answers=answers) == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0])
    assert composed_reward(["p"], ["Answer: 5"], answers=[["5"]]) == [1.0]


def test_rewards_on_generated_reference_answers():
    chain = make_rows("chain", range(1, 6), 3, seed=2)
    assert chain_reward(None, [f"Answer: {r['answer']}" for r in chain], answer=[r["answer"] for r in chain]) == [1.0] * 15
    comp = make_rows("composed", range(1, 6), 3, seed=2)
    texts = [", ".join(f"Answer {i + 1}: {a}" for i, a in enumerate(r["answers"])) for r in comp]
    assert composed_reward(None, texts, answers=[r["answers"] for r in comp]) == [1.0] * 15


def test_write_jsonl_round_trip(tmp_path):
    rows = make_rows("composed", [1, 2], 3, seed=0)
    path = write_jsonl(rows, tmp_path / "sub" / "rows.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6 and json.loads(lines[0]) == rows[0]
    assert read_jsonl(path) == rows


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)
_mixed = st.lists(st.sampled_from(["Answer", "answer", " 1", ":", "=", " is ", "-", "**", "$", ",", ".", "0", "12",
                                   "999", "Answer 2:", "\n", "problem", " "]), max_size=30).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.one_of(_text, _mixed), st.integers(0, 6))
def test_parsing_never_raises(text, n):
    final = parse_final(text)
    assert final is None or re.fullmatch(r"-?\d+(\.\d+)?", final)
    got = parse_numbered(text, n)
    assert len(got) == n
    for completion in (text, [{"role": "assistant", "content": text}], {"content": text}):
        for r in (chain_reward(None, [completion], answer=["3"]), composed_reward(None, [completion], answers=[["1", "2"]]),
                  composed_milestone_reward(None, [completion], answers=[["1", "2"]])):
            assert len(r) == 1 and 0.0 <= r[0] <= 1.0
