"""Feedback-enriched environments (Environments as Scaffold, FEEs): plain pass/fail vs structured feedback.

One task family with several sub-answers: a short shopping word problem

    "Mia buys 4 pens at 3 coins each and 2 cups at 7 coins each. a) How many coins do the pens cost?
     b) How many coins do the cups cost? c) How many coins does Mia pay in total?"   (a=12, b=14, c=26)

with ``items`` goods (``items + 1`` sub-answers). One tool, ``submit(answers)`` ("a=12, b=14, c=26"),
with up to ``max_attempts`` graded attempts. The two variants differ only in the reply to a wrong
submission (the prompt is the same, so they compare at equal prompt tokens):

* ``feedback="plain"``: "Incorrect. 2 attempts left."
* ``feedback="structured"``: "Incorrect: b is wrong; a and c are right. 2 attempts left."

Reward on the first correct submission, attempt ``n`` (1-based): ``attempt_discount ** (n - 1)``
(default 1.0: undiscounted); 0 if the attempts run out. The episode is done on a correct submission
or when the attempts are used up. A submission that names no part or an unknown one is an error
string and uses no attempt. Milestones: one per sub-answer, 1.0 once it was submitted right.
"""

from __future__ import annotations

import re

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.agents.envs.common import (ScriptedExpert, check_positive_int, invented_names, listing,
                                              text_argument)

FEEDBACK = ("plain", "structured")
GOODS = ("pens", "cups", "books", "hats", "bags", "lamps")
_PAIR = re.compile(r"\b([a-z])\s*[=:]\s*(-?\d+)")
PROMPT = ("Solve the word problem. {story} {questions} Tools: submit(answers) checks all your answers at once, "
          "written like 'a=1, b=2'; you have {max_attempts} attempts.")


def parse_answers(text: str) -> dict[str, int]:
    """``{"a": 12, ...}`` from "a=12, b=14" (``=`` or ``:``; later repeats win)."""
    return {k: int(v) for k, v in _PAIR.findall(text.lower())}


class FeedbackEnv:
    """The word-problem environment with plain or structured feedback (module docstring)."""

    reward, done = 0.0, False  # until reset (read by the rollout after the episode)

    def reset(self, answer: str = "", feedback: str = "structured", max_attempts: int = 3,
              attempt_discount: float = 1.0, **_columns) -> str | None:
        if feedback not in FEEDBACK:
            raise UsageError(f"feedback={feedback!r} is unknown; use 'plain' or 'structured'.")
        check_positive_int(max_attempts, "max_attempts")
        if isinstance(attempt_discount, bool) or not isinstance(attempt_discount, (int, float)) \
                or not 0 < attempt_discount <= 1:
            raise UsageError(f"attempt_discount={attempt_discount!r} is invalid; give a number in (0, 1].")
        self._gold = parse_answers(str(answer))
        if not self._gold:
            raise UsageError(f"answer={answer!r} names no sub-answer; write it like 'a=12, b=14'.")
        self._feedback, self._max, self._discount = feedback, int(max_attempts), float(attempt_discount)
        self._parts = sorted(self._gold)
        self.attempts, self.reward, self.done = 0, 0.0, False
        self.milestones = [0.0] * len(self._parts)
        self.reward_terms = {"outcome": 0.0}
        self.metrics = {"attempts": 0, "tool_errors": 0}
        return None

    def submit(self, answers: str) -> str:
        """Check all your answers at once (uses one attempt).

        Args:
            answers: every sub-answer, written like 'a=12, b=14, c=26'.
        """
        error = text_argument(answers, "answers") or ("Error: the episode is over." if self.done else None)
        given = {} if error else parse_answers(answers)
        if not error and not given:
            error = f"Error: no answer found; write them like '{', '.join(f'{p}=1' for p in self._parts)}'."
        unknown = sorted(set(given) - set(self._parts))
        if not error and unknown:
            error = f"Error: there is no part {listing(unknown)}; the parts are {listing(self._parts)}."
        if error:
            self.metrics["tool_errors"] += 1
            return error
        self.attempts += 1
        self.metrics["attempts"] = self.attempts
        right = [p for p in self._parts if given.get(p) == self._gold[p]]
        for i, p in enumerate(self._parts):
            if p in right:
                self.milestones[i] = 1.0
        if len(right) == len(self._parts):
            self.done, self.reward = True, self._discount ** (self.attempts - 1)
            self.reward_terms = {"outcome": 1.0}
            return "Correct."
        left = self._max - self.attempts
        self.done = left == 0
        tail = f"{left} attempt{'s' if left != 1 else ''} left." if left else "No attempts left."
        if self._feedback == "plain":
            return f"Incorrect. {tail}"
        return f"Incorrect: {self._explain(given, right)}. {tail}"

    def _explain(self, given: dict, right: list) -> str:
        missing = [p for p in self._parts if p not in given]
        wrong = [p for p in self._parts if p in given and p not in right]
        clauses = [f"{listing(ps)} {'is' if len(ps) == 1 else 'are'} {what}"
                   for ps, what in ((wrong, "wrong"), (missing, "missing"), (right, "right")) if ps]
        return "; ".join(clauses)


def make_tasks(n: int, *, seed: int, items: int = 2, feedback: str = "structured", max_attempts: int = 3,
               attempt_discount: float = 1.0) -> list[dict]:
    """``n`` word problems with ``items`` goods, ``items + 1`` sub-answers each (deterministic given ``seed``).

    Every row: ``prompt``, ``answer`` ("a=12, b=14, c=26"), ``feedback``, ``max_attempts``, ``attempt_discount``."""
    n, items = check_positive_int(n, "n"), check_positive_int(items, "items", 1, len(GOODS))
    FeedbackEnv().reset(answer="a=1", feedback=feedback, max_attempts=max_attempts,
                        attempt_discount=attempt_discount)  # the reset's checks, before any row is made
    rng = np.random.default_rng([seed, items, 2025])
    rows = []
    for _ in range(n):
        buyer = invented_names(1, rng, max_len=6)[0]
        goods = [GOODS[i] for i in rng.choice(len(GOODS), size=items, replace=False)]
        counts, prices = rng.integers(2, 10, size=items), rng.integers(2, 20, size=items)
        story = f"{buyer} buys " + listing([f"{c} {g} at {p} coins each" for g, c, p in zip(goods, counts, prices)]) + "."
        letters = "abcdefg"[:items + 1]
        questions = [f"{letters[i]}) How many coins do the {g} cost?" for i, g in enumerate(goods)]
        questions.append(f"{letters[items]}) How many coins does {buyer} pay in total?")
        values = [int(c * p) for c, p in zip(counts, prices)]
        values.append(sum(values))
        rows.append({"prompt": PROMPT.format(story=story, questions=" ".join(questions), max_attempts=max_attempts),
                     "answer": ", ".join(f"{k}={v}" for k, v in zip(letters, values)), "feedback": feedback,
                     "max_attempts": max_attempts, "attempt_discount": attempt_discount})
    return rows


class Expert(ScriptedExpert):
    """Solves the word problem from the prompt; with ``slip`` > 0 each value it writes is off with that probability.

    After a wrong submission it recomputes only the parts the feedback names as wrong or missing
    (structured feedback), or every part (plain feedback), so a slipping expert shows what the
    structured feedback is worth."""

    def __init__(self, row: dict, slip: float = 0.0, seed: int = 0):
        prompt = row["prompt"]
        bought = [(int(c), int(p)) for c, p in re.findall(r"(\d+) \w+ at (\d+) coins each", prompt)]
        values = [c * p for c, p in bought]
        self.correct = dict(zip("abcdefg", values + [sum(values)]))
        self.slip, self.rng = float(slip), np.random.default_rng([seed, len(prompt), sum(values)])
        self.current: dict[str, int] = {}

    def _compute(self, part: str) -> int:
        value = self.correct[part]
        return value + int(self.rng.integers(1, 6)) if self.rng.random() < self.slip else value

    def act(self, observation: str | None) -> tuple[str, dict]:
        if not self.current:
            redo = list(self.correct)
        elif observation and ":" in observation and "Incorrect" in observation:  # structured: only what it names
            named = observation.split(":", 1)[1]
            redo = [p for clause in named.split(";") if "wrong" in clause or "missing" in clause
                    for p in re.findall(r"\b([a-g])\b", clause.split(" is ")[0].split(" are ")[0])]
        else:
            redo = list(self.correct)
        for p in redo:
            self.current[p] = self._compute(p)
        return "submit", {"answers": ", ".join(f"{p}={v}" for p, v in sorted(self.current.items()))}
