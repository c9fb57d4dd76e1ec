"""Natural-language chained arithmetic for pretrained chat models, as TRL-style dataset rows.

Every generator is deterministic in its seed (a :class:`numpy.random.Generator` inside) and
returns plain dicts, one per problem, in TRL's conversational *prompt-only* layout::

    {"prompt":  [{"role": "user", "content": "Start with 7. Add 5. Then ... Give the answer as 'Answer: N'."}],
     "answer":  "24",               # the final answer, a canonical decimal string
     "answers": ["12", "24"],       # every sub-problem's answer, in order (the last one is "answer")
     "horizon": 2,                  # number of chained sub-problems (chain) or composed problems
     "task":    "chain",            # or "composed"
     "solution": "7 + 5 = 12\n12 * 2 = 24\nAnswer: 24"}  # the worked steps and answers (for demonstrations)

Two tasks, both with the dependency structure of the library's symbolic tasks
(:mod:`longhorizon.lm.tasks`), written out in words:

* ``chain`` (h1): a start number and ``h`` operations, each applied to the result of the previous
  one; only the final number is asked for (``Answer: N``).
* ``composed`` (R-HORIZON): ``h`` atomic problems ("What is 7 + 5?"); the given number of problem
  ``i+1`` is *defined from* the answer of problem ``i`` ("Let N be the answer to Problem 1 minus 9"),
  with the offset chosen so that the number equals what the atomic problem drew on its own. Every
  answer is asked for (``Answer 1: N``, ``Answer 2: N``, ...) and scored all-or-nothing.

Numbers stay small (start values 2..9, constants 1..9, multipliers 2..3, every intermediate value
between 1 and ``MAX_VALUE``) so that a 135M-parameter instruct model has some success at ``h = 1..2``.

Wordings (``style=``), with the greedy accuracy of SmolLM2-135M-Instruct (fp32, its chat template,
48 new tokens, 32 problems, seed 0) at h = 1 / h = 2:

* chain: ``word`` (default; "Tom has 7 apples. He gives away 4 apples. Then ...") 0.50 / 0.16,
  ``steps`` ("Start with 7. Subtract 4. Then ...") 0.19 / 0.09, ``result`` ("Subtract 4 from it.
  Then add 2 to the result.") 0.19 / 0.25, ``nested`` ("What is (6 * 2) - 4?") 0.47 / 0.09 (78% cut
  off at 48 tokens), ``equations`` ("x = 7. x = x - 4.") 0.00 / 0.06, ``example`` (``steps`` after
  one solved example) 0.03 / 0.06 (it copies the example's answer).
* composed: ``plain`` (default; "Problem 2: Let N be the answer to Problem 1 minus 7. What is N + 3?")
  0.62 at h = 1, ``word`` (the same as word problems) 0.16; both 0.00 at h = 2 (64 tokens, before
  "Problem i:" sections were read as answers).

Reward functions have TRL's signature ``f(prompts, completions, **columns) -> list[float]``:
dataset columns arrive as keyword lists, one entry per completion, and a completion is either a
string or a conversational list ``[{"role": "assistant", "content": "..."}]``. Parsing never raises:
anything unreadable scores 0.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from longhorizon.errors import UsageError

TASKS = ("chain", "composed")
MAX_HORIZON = {"chain": 32, "composed": 12}
MAX_VALUE = 50  # every intermediate value lies in 1..MAX_VALUE
_SALT = {"chain": 11, "composed": 23}  # keeps the two tasks' random streams apart for one seed

# --------------------------------------------------------------------------------------------
# Wordings. Each chain style maps an operation to a sentence; the default is the one measured
# best on SmolLM2-135M-Instruct at h = 1 (the word problem).

_CHAIN_STYLES = {
    # "Start with 7. Add 5. Then multiply by 2. What is the final number? ..."
    "steps": {
        "start": "Start with {x}.",
        "+": "Add {c}.", "-": "Subtract {c}.", "*": "Multiply by {c}.",
        "then": "Then {op}",
        "ask": "What is the final number? Give the answer as 'Answer: N'.",
    },
    # "Start with 7. Add 5 to it. Then multiply the result by 2. ..."
    "result": {
        "start": "Start with {x}.",
        "+": "Add {c} to it.", "-": "Subtract {c} from it.", "*": "Multiply it by {c}.",
        "then": "Then {op}",
        "ask": "What is the final number? Give the answer as 'Answer: N'.",
        "later": {"+": "add {c} to the result.", "-": "subtract {c} from the result.", "*": "multiply the result by {c}."},
    },
    # "Tom has 7 apples. He gets 5 more apples. Then he gives away 3 apples. ..."
    "word": {
        "start": "{name} has {x} {item}.",
        "+": "{pron} gets {c} more {item}.", "-": "{pron} gives away {c} {item}.",
        "*": "{pron} ends up with {c} times as many {item}.",
        "then": "Then {op}",
        "ask": "How many {item} does {name} have now? Give the answer as 'Answer: N'.",
    },
    # "x = 7. x = x + 5. x = x * 2. What is x? ..."
    "equations": {
        "start": "x = {x}.",
        "+": "x = x + {c}.", "-": "x = x - {c}.", "*": "x = x * {c}.",
        "then": "{op}",
        "ask": "What is the final value of x? Give the answer as 'Answer: N'.",
    },
    # "What is ((7 - 4) * 2) + 3? ..." -- the chain as one left-nested expression
    "nested": {"ask": "Give the answer as 'Answer: N'."},
}
# "steps" after one solved example (a different, fixed chain of two operations, worked step by step)
_CHAIN_STYLES["example"] = dict(_CHAIN_STYLES["steps"], prefix=(
    "Example: Start with 4. Add 3. Then multiply by 2. What is the final number?\n"
    "Solution: 4 + 3 = 7. 7 * 2 = 14. Answer: 14\n\nNow solve this one: "))
_COMPOSED_STYLES = ("plain", "word")
DEFAULT_CHAIN_STYLE = "word"
DEFAULT_COMPOSED_STYLE = "plain"
_NAMES = (("Tom", "He"), ("Anna", "She"), ("Ben", "He"), ("Mia", "She"), ("Sam", "He"), ("Lily", "She"))
_ITEMS = ("apples", "marbles", "stickers", "books", "coins", "pencils")


def _check(task: str, horizon: Any, style: str | None = None) -> None:
    if task not in TASKS:
        raise UsageError(f"task {task!r} is unknown; use one of {', '.join(TASKS)}.")
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)):
        raise UsageError(f"horizon {horizon!r} is not an integer; give a whole number from 1 to {MAX_HORIZON[task]}.")
    if not 1 <= int(horizon) <= MAX_HORIZON[task]:
        raise UsageError(f"horizon {horizon} is out of range for {task}; use 1 to {MAX_HORIZON[task]}.")
    styles = tuple(_CHAIN_STYLES) if task == "chain" else _COMPOSED_STYLES
    if style is not None and style not in styles:
        raise UsageError(f"style {style!r} is unknown for {task}; use one of {', '.join(styles)}.")


def _apply(op: str, x: int, c: int) -> int:
    return x + c if op == "+" else x - c if op == "-" else x * c


def _operation(rng: np.random.Generator, x: int) -> tuple[str, int]:
    """One operation on ``x`` that keeps the result in ``1..MAX_VALUE`` (uniform over allowed ops)."""
    ops = []
    if x + 1 <= MAX_VALUE:
        ops.append("+")
    if x >= 2:
        ops.append("-")
    if 2 * x <= MAX_VALUE:
        ops.append("*")
    op = ops[int(rng.integers(len(ops)))]
    if op == "+":
        c = int(rng.integers(1, min(9, MAX_VALUE - x) + 1))
    elif op == "-":
        c = int(rng.integers(1, min(9, x - 1) + 1))
    else:
        c = int(rng.integers(2, min(3, MAX_VALUE // x) + 1))
    return op, c


def _row(task: str, content: str, answers: Sequence[int], horizon: int, **extra) -> dict[str, Any]:
    answers = [str(int(a)) for a in answers]
    return {"prompt": [{"role": "user", "content": content}], "answer": answers[-1], "answers": answers,
            "horizon": int(horizon), "task": task, **extra}


def chain_row(rng: np.random.Generator, horizon: int, style: str = DEFAULT_CHAIN_STYLE) -> dict[str, Any]:
    """One h1 chain of ``horizon`` operations, each applied to the previous result, in words.

    ``answers[i]`` is the value after operation ``i + 1``; ``answer`` is the last of them.
    """
    _check("chain", horizon, style)
    words = _CHAIN_STYLES[style]
    name, pron = _NAMES[int(rng.integers(len(_NAMES)))]
    item = _ITEMS[int(rng.integers(len(_ITEMS)))]
    x = int(rng.integers(2, 10))
    fill = {"name": name, "pron": pron, "item": item}
    sentences = [words["start"].format(x=x, **fill)] if "start" in words else []
    expression = str(x)
    answers, work = [], []
    for i in range(int(horizon)):
        op, c = _operation(rng, x)
        work.append(f"{x} {op} {c} = {_apply(op, x, c)}")
        x = _apply(op, x, c)
        answers.append(x)
        expression = f"{expression} {op} {c}" if i == 0 else f"({expression}) {op} {c}"
        if style == "nested":
            continue
        if i == 0:
            sentences.append(words[op].format(c=c, **fill))
        else:
            text = words.get("later", {}).get(op, words[op]).format(c=c, **fill)
            if words["then"] != "{op}":  # "Then add 5." -- lower-case the sentence after "Then"
                text = text[0].lower() + text[1:]
            sentences.append(words["then"].format(op=text))
    if style == "nested":
        sentences.append(f"What is {expression}?")
    sentences.append(words["ask"].format(**fill))
    return _row("chain", words.get("prefix", "") + " ".join(sentences), answers, horizon, solution=worked_solution(work))


def worked_solution(work: Sequence[str]) -> str:
    """A chain's solution written out, one operation a line, then the answer line the reward reads:
    ``"7 - 4 = 3\n3 * 2 = 6\nAnswer: 6"`` (the demonstrations of the h1 format phase)."""
    return "\n".join(work) + "\nAnswer: " + work[-1].rsplit("= ", 1)[1]


def _atomic_text(style: str, n_text: str, op: str, c: int, item: str, name: str, pron: str) -> str:
    if style == "plain":
        return f"What is {n_text} {op} {c}?"
    verb = {"+": f"{pron} gets {c} more.", "-": f"{pron} gives away {c}.", "*": f"{pron} ends up with {c} times as many."}[op]
    return f"{name} has {n_text} {item}. {verb} How many {item} does {name} have now?"


def composed_row(rng: np.random.Generator, horizon: int, style: str = DEFAULT_COMPOSED_STYLE) -> dict[str, Any]:
    """R-HORIZON composition of ``horizon`` atomic problems ``n op c``, in words.

    Problem 1 states its number; problem ``i + 1`` defines it as "the answer to Problem i plus/minus k"
    (``k = n - answer_i``, so the number is the one the atomic problem drew). ``answers[i]`` is the
    answer of problem ``i + 1``; all of them are asked for.
    """
    _check("composed", horizon, style)
    h = int(horizon)
    parts, answers, work = [], [], []
    prev = None
    for i in range(h):
        name, pron = _NAMES[int(rng.integers(len(_NAMES)))]
        item = _ITEMS[int(rng.integers(len(_ITEMS)))]
        n = int(rng.integers(2, 10))
        op, c = _operation(rng, n)
        ans = _apply(op, n, c)
        if prev is None:
            text = _atomic_text(style, str(n), op, c, item, name, pron)
            work.append(f"Problem 1: {n} {op} {c} = {ans}")
        else:
            k = n - prev
            link = f"the answer to Problem {i}" + ("" if k == 0 else f" plus {k}" if k > 0 else f" minus {-k}")
            text = f"Let N be {link}. " + _atomic_text(style, "N", op, c, item, name, pron)
            given = f"N = {prev}" if k == 0 else f"N = {prev} {'+' if k > 0 else '-'} {abs(k)} = {n}"
            work.append(f"Problem {i + 1}: {given}. {n} {op} {c} = {ans}")
        parts.append(f"Problem {i + 1}: {text}")
        answers.append(ans)
        prev = ans
    labels = ", ".join(f"'Answer {i + 1}: N'" for i in range(h))
    head = "Solve the problem." if h == 1 else f"Solve these {h} problems in order."
    content = head + "\n" + "\n".join(parts) + f"\nGive the answer{'s' if h > 1 else ''} as {labels}."
    solution = "\n".join(work + [f"Answer {i + 1}: {a}" for i, a in enumerate(answers)])
    return _row("composed", content, answers, h, solution=solution)


_ROW = {"chain": chain_row, "composed": composed_row}


def make_rows(task: str, horizons: int | Iterable[int], n: int, seed: int, style: str | None = None) -> list[dict]:
    """``n`` rows of ``task`` for *each* horizon in ``horizons`` (an int or a sequence), in that order.

    Deterministic in ``(task, horizon, n, seed, style)``; the rows of one horizon do not depend on
    which other horizons are asked for. ``style=None`` is the task's default wording.
    """
    if task not in TASKS:
        raise UsageError(f"task {task!r} is unknown; use one of {', '.join(TASKS)}.")
    if isinstance(horizons, (str, bytes)) or not isinstance(horizons, Iterable):
        horizons = [horizons]  # one horizon; _check refuses a non-integer
    hs = list(horizons)
    if not hs:
        raise UsageError("no horizons were given; pass at least one, for example horizons=[1, 2].")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise UsageError(f"n={n!r} is not a positive integer; ask for at least one row per horizon.")
    style = style or (DEFAULT_CHAIN_STYLE if task == "chain" else DEFAULT_COMPOSED_STYLE)
    for h in hs:
        _check(task, h, style)
    rows = []
    for h in hs:
        rng = np.random.default_rng([int(seed), _SALT[task], int(h)])
        rows.extend(_ROW[task](rng, int(h), style) for _ in range(int(n)))
    return rows


def write_jsonl(rows: Iterable[dict], path: str | os.PathLike) -> Path:
    """Write ``rows`` as JSON lines (one row per line, UTF-8) atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The rows of a file written by :func:`write_jsonl`."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --------------------------------------------------------------------------------------------
# Parsing and rewards.

# A number (ASCII digits): an optional minus sign not glued to a preceding word/number ("7-3" is 7 and 3),
# digits with optional thousands commas and an optional decimal part.
_NUM = r"(?:(?<![\w)])-)?[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?(?![0-9])"
_NUMBER = re.compile(_NUM)
_FILLER = r"[\s*$\\(\[{]*"  # markdown bold, LaTeX dollars/brackets between the label and the number
_FINAL = re.compile(r"\banswer\b\s*(?:is\b\s*[:=]?|[:=])" + _FILLER + "(" + _NUM + ")", re.IGNORECASE)
_NUMBERED = re.compile(r"\banswer\s*(?:to\s+)?(?:problem\s*)?#?([0-9]{1,3})\s*(?:is\b\s*[:=]?|[:=.)])" + _FILLER
                       + "(" + _NUM + ")", re.IGNORECASE)


_SECTION = re.compile(r"^[\W_]*problem\s*([0-9]{1,3})\s*[:.)]", re.IGNORECASE | re.MULTILINE)


def _canonical(number: str) -> str:
    """``"1,200"`` -> ``"1200"``, ``"12.0"`` -> ``"12"``, ``"-0"`` -> ``"0"``; other decimals unchanged."""
    s = number.replace(",", "")
    if "." in s:
        whole, frac = s.split(".", 1)
        if frac.strip("0"):
            return s
        s = whole
    try:
        return str(int(s))
    except ValueError:
        return s


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, a message dict, or a list of messages (assistant turns joined).

    Message content may itself be a list of parts (``{"type": "text", "text": ...}``). Anything else
    is ``""``.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        content = completion.get("content", "")
        if isinstance(content, str):
            return content
        if isinstance(content, (list, tuple)):
            return "".join(p.get("text", "") if isinstance(p, dict) and isinstance(p.get("text"), str)
                           else p if isinstance(p, str) else "" for p in content)
        return ""
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, (dict, str))]
        assistant = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
        return "\n".join(completion_text(m) for m in (assistant or messages))
    return ""


def parse_final(text: Any) -> str | None:
    """The final answer in ``text``: the number after the last "Answer: N" ("answer is N"), else the last number.

    Returns a canonical decimal string, or ``None`` when the text holds no number. Never raises.
    """
    text = completion_text(text)
    labelled = _FINAL.findall(text)
    if labelled:
        return _canonical(labelled[-1])
    numbers = _NUMBER.findall(text)
    return _canonical(numbers[-1]) if numbers else None


def parse_numbered(text: Any, n: int) -> list[str | None]:
    """Answers 1..n from "Answer i: N" labels (the last label of each index wins); ``None`` where missing.

    An index without a label is read from a section headed "Problem i:" at a line start (its
    :func:`parse_final`, up to the next such header). For ``n == 1`` an unnumbered final answer (:func:`parse_final`) stands in for a missing "Answer 1".
    Never raises.
    """
    text = completion_text(text)
    try:
        n = max(int(n), 0)
    except (TypeError, ValueError):
        return []
    out: list[str | None] = [None] * n
    for index, number in _NUMBERED.findall(text):
        i = int(index) - 1
        if 0 <= i < n:
            out[i] = _canonical(number)
    if any(a is None for a in out):  # sections headed "Problem i:" answer problem i ("... The answer is 12.")
        pieces = _SECTION.split(text)
        for index, section in zip(pieces[1::2], pieces[2::2]):
            i = int(index) - 1
            if 0 <= i < n and out[i] is None:
                out[i] = parse_final(section)
    if n == 1 and out[0] is None:
        out[0] = parse_final(text)
    return out


def _as_answers(value: Any) -> list[str]:
    if isinstance(value, (str, int, np.integer)):
        return [_canonical(str(value))]
    try:
        return [_canonical(str(v)) for v in value]
    except TypeError:
        return []


def _column(values: Any, count: int, name: str) -> list:
    if values is None:
        raise UsageError(f"the reward needs the dataset column {name!r}; keep it in the dataset rows.")
    values = list(values) if isinstance(values, (list, tuple, np.ndarray)) else [values] * count
    if len(values) != count:
        raise UsageError(f"{len(values)} values of {name!r} for {count} completions; pass one per completion.")
    return values


def chain_reward(prompts, completions, answer=None, **kwargs) -> list[float]:
    """1.0 where the final answer parsed from the completion (:func:`parse_final`) equals ``answer``, else 0.0."""
    targets = _column(answer, len(completions), "answer")
    out = []
    for completion, target in zip(completions, targets):
        want = _as_answers(target)
        out.append(float(bool(want) and parse_final(completion) == want[-1]))
    return out


def _flags(completion: Any, answers: Any) -> list[bool]:
    want = _as_answers(answers)
    got = parse_numbered(completion, len(want))
    return [g == w for g, w in zip(got, want)]


def composed_reward(prompts, completions, answers=None, **kwargs) -> list[float]:
    """All-or-nothing: 1.0 where every "Answer i: N" equals ``answers[i]`` (:func:`parse_numbered`), else 0.0."""
    targets = _column(answers, len(completions), "answers")
    return [float(bool(f) and all(f)) for f in (_flags(c, a) for c, a in zip(completions, targets))]


def composed_milestone_reward(prompts, completions, answers=None, **kwargs) -> list[float]:
    """Partial credit: the fraction of ``answers`` that the completion's "Answer i: N" labels get right."""
    targets = _column(answers, len(completions), "answers")
    return [float(np.mean(f)) if f else 0.0 for f in (_flags(c, a) for c, a in zip(completions, targets))]


REWARDS = {"chain": chain_reward, "composed": composed_reward}
