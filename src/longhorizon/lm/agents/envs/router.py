"""Router (Router-R1): answer a question by routing sub-queries to priced models of uneven skill.

A pool of scripted "models", each with a price per call and an error rate per domain: asked a
query it recognises, a model returns the correct answer with probability ``1 - error[domain]`` and
otherwise a plausible wrong one (a nearby number, a misspelled word, another city), deterministic
given the task's seed, the model, the query and how many times this episode has called that model.
Questions come from three domains: ``arithmetic`` ("What is 37 * 4?"), ``facts`` about an invented
world ("What is the capital of Veloria?") and ``strings`` ("What is 'kalumo' reversed?").

Tools: ``route(model, query)``, ``answer(answer)``. Reward (Router-R1's format + outcome - cost):

    reward = format + outcome - cost_weight * cost

with ``format`` = 1 if the episode ended with an answer (else 0), ``outcome`` = exact match,
``cost`` = the sum of the prices of the calls made; ``cost_weight`` is a row column (0 ... 1 is the
meaningful range with these prices). The scripted :class:`Expert` routes to the cheapest model
whose accuracy in the question's domain is at least ``threshold``: sweeping the threshold traces an
accuracy-cost frontier.
"""

from __future__ import annotations

import re
import zlib
from typing import NamedTuple

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.agents.envs.common import (ScriptedExpert, check_positive_int, exact_match, invented_names,
                                              normalize, text_argument)

DOMAINS = ("arithmetic", "facts", "strings")


class Model(NamedTuple):
    name: str
    price: float  # per call
    error: dict  # domain -> probability of a wrong answer


MODELS = (
    Model("nano", 0.02, {"arithmetic": 0.5, "facts": 0.7, "strings": 0.3}),
    Model("small", 0.1, {"arithmetic": 0.25, "facts": 0.4, "strings": 0.1}),
    Model("medium", 0.3, {"arithmetic": 0.1, "facts": 0.15, "strings": 0.05}),
    Model("large", 0.8, {"arithmetic": 0.02, "facts": 0.03, "strings": 0.01}),
)
_ARITHMETIC = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)")
_STRINGS = re.compile(r"'([A-Za-z]+)' reversed")
_FACTS = re.compile(r"capital of ([A-Za-z]+)")
PROMPT = ("Answer the question. You cannot know the answer yourself, but you can ask models: route(model, query) "
          "sends a query to a model and returns its reply (each call costs the model's price; models make mistakes); "
          "answer(answer) submits your final answer and ends the episode. Models: {models}. Question: {question}")


def world(world_seed: int = 0, countries: int = 40) -> dict[str, str]:
    """The facts domain's invented world: ``capital[country]``."""
    rng = np.random.default_rng([world_seed, 18])
    names = invented_names(2 * countries, rng)
    return dict(zip(names[:countries], names[countries:]))


_WORLD = world()
_CAPITALS = {c.lower(): v for c, v in _WORLD.items()}


def solve(query: str) -> tuple[str, str] | None:
    """``(domain, correct answer)`` of a query a model recognises, or None."""
    if m := _ARITHMETIC.search(query):
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        return "arithmetic", str(a + b if op == "+" else a - b if op == "-" else a * b)
    if m := _STRINGS.search(query):
        return "strings", m.group(1)[::-1]
    if m := _FACTS.search(query):
        capital = _CAPITALS.get(m.group(1).lower())
        return ("facts", capital) if capital else None
    return None


def _wrong(domain: str, correct: str, rng: np.random.Generator) -> str:
    """A plausible wrong answer of the domain (never the correct one)."""
    if domain == "arithmetic":
        return str(int(correct) + int(rng.choice([-1, 1])) * int(rng.integers(1, 11)))
    if domain == "strings":
        letters = list(correct)
        if len(set(letters)) > 1:
            while "".join(letters) == correct:
                i, j = rng.choice(len(letters), size=2, replace=False)
                letters[i], letters[j] = letters[j], letters[i]
            return "".join(letters)
        return correct + correct[-1]
    others = [v for v in _WORLD.values() if v != correct]
    return others[rng.integers(len(others))]


def describe_models(models=MODELS) -> str:
    return "; ".join(f"{m.name} costs {m.price:g} per call (accuracy: "
                     + ", ".join(f"{d} {round(100 * (1 - m.error[d]))}%" for d in DOMAINS) + ")" for m in models)


class RouterEnv:
    """The router environment (module docstring)."""

    reward, done = 0.0, False  # until reset (read by the rollout after the episode)

    models = MODELS

    def reset(self, answer: str = "", task_seed: int = 0, cost_weight: float = 0.5, **_columns) -> str | None:
        if isinstance(cost_weight, bool) or not isinstance(cost_weight, (int, float)) or not cost_weight >= 0:
            raise UsageError(f"cost_weight={cost_weight!r} is invalid; give a number >= 0 (0 to 1 is the useful range).")
        self._gold, self._seed, self._weight = str(answer), int(task_seed), float(cost_weight)
        self._calls = {m.name: 0 for m in self.models}
        self.done, self.metrics = False, {"route_calls": 0, "tool_errors": 0}
        self.reward_terms = {"format": 0.0, "outcome": 0.0, "cost": 0.0}
        self._score()
        return None

    def _score(self):
        t = self.reward_terms
        self.reward = t["format"] + t["outcome"] - self._weight * t["cost"]

    def route(self, model: str, query: str) -> str:
        """Send a query to one of the models and return its reply (costs the model's price).

        Args:
            model: the model's name.
            query: the question to ask it.
        """
        pool = {m.name: m for m in self.models}
        error = (text_argument(model, "model") or text_argument(query, "query")
                 or ("Error: the episode is over." if self.done else None)
                 or (None if model.strip() in pool else f"Error: there is no model {model!r}; the models are "
                     f"{', '.join(pool)}."))
        if error:
            self.metrics["tool_errors"] += 1
            return error
        m = pool[model.strip()]
        self._calls[m.name] += 1
        self.metrics["route_calls"] += 1
        self.reward_terms["cost"] = round(self.reward_terms["cost"] + m.price, 10)
        self._score()
        solved = solve(query)
        if solved is None:
            return f"{m.name}: I cannot answer that."
        domain, correct = solved
        rng = np.random.default_rng([self._seed, [x.name for x in self.models].index(m.name), self._calls[m.name],
                                     zlib.crc32(normalize(query).encode())])
        return f"{m.name}: {correct if rng.random() >= m.error[domain] else _wrong(domain, correct, rng)}"

    def answer(self, answer: str) -> str:
        """Submit the final answer; this ends the episode.

        Args:
            answer: the answer to the question.
        """
        error = text_argument(answer, "answer") or ("Error: the episode is over." if self.done else None)
        if error:
            self.metrics["tool_errors"] += 1
            return error
        self.done = True
        self.reward_terms["format"] = 1.0
        self.reward_terms["outcome"] = exact_match(answer, self._gold)
        self._score()
        return "Correct." if self.reward_terms["outcome"] else "Incorrect."


def _question(domain: str, rng: np.random.Generator) -> tuple[str, str]:
    if domain == "arithmetic":
        a, b, op = int(rng.integers(10, 100)), int(rng.integers(2, 100)), "+-*"[rng.integers(3)]
        q = f"What is {a} {op} {b}?"
    elif domain == "strings":
        q = f"What is '{invented_names(1, rng)[0].lower()}' reversed?"
    else:
        countries = list(_WORLD)
        q = f"What is the capital of {countries[rng.integers(len(countries))]}?"
    return q, solve(q)[1]


def make_tasks(n: int, *, seed: int, domains: tuple = DOMAINS, cost_weight: float = 0.5) -> list[dict]:
    """``n`` questions drawn evenly from ``domains`` (deterministic given ``seed``).

    Every row: ``prompt``, ``answer``, ``domain``, ``task_seed`` and ``cost_weight``."""
    n = check_positive_int(n, "n")
    domains = (domains,) if isinstance(domains, str) else tuple(domains)
    unknown = [d for d in domains if d not in DOMAINS]
    if unknown or not domains:
        raise UsageError(f"domains={domains!r} is invalid; choose among {', '.join(DOMAINS)}.")
    RouterEnv().reset(cost_weight=cost_weight)  # the reset's check, before any row is made
    rng = np.random.default_rng([seed, 1818])
    rows = []
    for i in range(n):
        domain = domains[i % len(domains)]
        question, answer = _question(domain, rng)
        rows.append({"prompt": PROMPT.format(models=describe_models(), question=question), "answer": answer,
                     "domain": domain, "task_seed": int(rng.integers(2**31)), "cost_weight": float(cost_weight)})
    return rows


class Expert(ScriptedExpert):
    """Routes the question to the cheapest model with accuracy >= ``threshold`` in its domain, answers its reply.

    Reads the models' prices and accuracies from the prompt and the domain from the question's form
    (if no model is accurate enough, the most accurate one)."""

    def __init__(self, row: dict, threshold: float = 0.9):
        head, self.question = row["prompt"].split("Question:", 1)
        self.question = self.question.strip()
        models = re.findall(r"(\w+) costs ([\d.]+) per call \(accuracy: ([^)]*)\)", head)
        domain = solve(self.question)[0] if solve(self.question) else DOMAINS[0]
        table = [(float(price), float(dict(re.findall(r"(\w+) (\d+)%", acc)).get(domain, 0)) / 100, name)
                 for name, price, acc in models]
        good = sorted(t for t in table if t[1] >= threshold)
        self.model = good[0][2] if good else max(table, key=lambda t: (t[1], -t[0]))[2]
        self.asked = False

    def act(self, observation: str | None) -> tuple[str, dict]:
        if not self.asked:
            self.asked = True
            return "route", {"model": self.model, "query": self.question}
        return "answer", {"answer": (observation or "").split(":", 1)[-1].strip() or "unknown"}
