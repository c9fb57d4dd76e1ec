"""Research workspace (IterResearch): a question that needs many rounds of lookups and note-taking.

"Answer the question about these 6 cities: Mardun, Veloria, ... Which of them has the largest
population?" (or the smallest, or their total population). One fact per call: ``lookup(name)``
returns one city's population; ``answer(answer)`` ends the episode with reward = exact match. The
number of cities (``items``, 2..16) sets the horizon: ``items`` lookups and one answer. The policy must
keep notes of what it found (IterResearch's evolving report when the context is reconstructed each
round; the whole history otherwise). Milestones: one per city, 1.0 once it was looked up.
"""

from __future__ import annotations

import re

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.agents.envs.common import (ScriptedExpert, check_positive_int, invented_names, listing, normalize,
                                              submit_answer, text_argument)

MAX_ITEMS = 16
QUESTIONS = {"max": "Which of them has the largest population?", "min": "Which of them has the smallest population?",
             "sum": "What is their total population?"}
PROMPT = ("Answer the question about these {n} cities: {names}. Tools: lookup(name) returns one city's population; "
          "answer(answer) submits your final answer (one try). Question: {question}")


def solve(kind: str, values: dict) -> str:
    """The answer to question ``kind`` over ``values`` (city -> population)."""
    if kind == "sum":
        return str(sum(values.values()))
    return (max if kind == "max" else min)(values, key=values.get)


class ResearchEnv:
    """The lookup-and-aggregate environment (module docstring)."""

    reward, done = 0.0, False  # until reset (read by the rollout after the episode)

    def reset(self, answer: str = "", values: dict | None = None, **_columns) -> str | None:
        if not isinstance(values, dict) or not values:
            raise UsageError("the research environment's row needs a 'values' column mapping each city to its "
                             "population; build rows with research.make_tasks.")
        self._gold = str(answer)
        self._values = {normalize(k): (k, v) for k, v in values.items()}
        self._order = [normalize(k) for k in values]
        self.reward, self.done = 0.0, False
        self.milestones = [0.0] * len(self._order)
        self.reward_terms = {"outcome": 0.0}
        self.metrics = {"lookups": 0, "repeated_lookups": 0, "tool_errors": 0}
        return None

    def lookup(self, name: str) -> str:
        """Look up one city's population.

        Args:
            name: the city's name.
        """
        key = None if text_argument(name, "name") else normalize(name)
        error = text_argument(name, "name") or ("Error: the episode is over." if self.done else None) \
            or (None if key in self._values else f"Error: {name!r} is not one of the cities; they are "
                f"{listing([self._values[k][0] for k in self._order])}.")
        if error:
            self.metrics["tool_errors"] += 1
            return error
        i = self._order.index(key)
        self.metrics["lookups"] += 1
        self.metrics["repeated_lookups"] += int(self.milestones[i] == 1.0)
        self.milestones[i] = 1.0
        city, population = self._values[key]
        return f"The population of {city} is {population}."

    def answer(self, answer: str) -> str:
        """Submit the final answer; this ends the episode.

        Args:
            answer: a city's name or a number.
        """
        return submit_answer(self, answer)


def make_tasks(n: int, *, seed: int, items: int = 6, question: str = "max") -> list[dict]:
    """``n`` tasks over ``items`` cities each; ``question`` is max, min, sum or mixed (one of them per task).

    Every row: ``prompt``, ``answer``, ``question`` and ``values`` (city -> population, the hidden facts)."""
    n, items = check_positive_int(n, "n"), check_positive_int(items, "items", 2, MAX_ITEMS)
    if question not in (*QUESTIONS, "mixed"):
        raise UsageError(f"question={question!r} is unknown; use max, min, sum or mixed.")
    rng = np.random.default_rng([seed, items, 1616])
    rows = []
    for _ in range(n):
        kind = list(QUESTIONS)[rng.integers(len(QUESTIONS))] if question == "mixed" else question
        names = invented_names(items, rng, max_len=7)
        values = dict(zip(names, (int(v) for v in rng.choice(np.arange(100, 10000), size=items, replace=False))))
        rows.append({"prompt": PROMPT.format(n=items, names=listing(names), question=QUESTIONS[kind]),
                     "answer": solve(kind, values), "question": kind, "values": values})
    return rows


class Expert(ScriptedExpert):
    """Looks every city up once, notes each population, answers by the question's rule."""

    def __init__(self, row: dict):
        prompt = row["prompt"]
        names = re.search(r"cities: (.*?)\. Tools:", prompt).group(1)
        self.names = re.split(r", | and ", names)
        question = prompt.split("Question:", 1)[1].strip()
        self.kind = next(k for k, q in QUESTIONS.items() if q == question)
        self.notes: dict[str, int] = {}

    def act(self, observation: str | None) -> tuple[str, dict]:
        if observation and (m := re.match(r"The population of (\w+) is (\d+)\.", observation)):
            self.notes[m.group(1)] = int(m.group(2))
        todo = [c for c in self.names if c not in self.notes]
        if todo:
            return "lookup", {"name": todo[0]}
        return "answer", {"answer": solve(self.kind, self.notes)}

    def report(self) -> str:
        """IterResearch's evolving report, synthesised rather than copied: the answer so far and how many
        cities were looked up (cities are looked up in the listed order), so its length does not grow."""
        if not self.notes:
            return "none looked up yet"
        if self.kind == "sum":
            return f"total so far {solve('sum', self.notes)}; looked up {len(self.notes)}"
        best = solve(self.kind, self.notes)
        return f"{self.kind} so far {best} {self.notes[best]}; looked up {len(self.notes)}"
