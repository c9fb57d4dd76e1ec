"""Pieces the tool environments share: answer normalisation, invented names, argument checks, the
scripted expert's protocol.

Every environment's answer check is exact match after SQuAD-style normalisation:
``normalize(s)`` lower-cases, drops punctuation and the articles a/an/the, and collapses whitespace,
so ``"The  Mardun."`` and ``"mardun"`` match.
"""

from __future__ import annotations

import re
import string

import numpy as np

from longhorizon.errors import UsageError

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)

# consonant-vowel syllables: names read as words (a CPU-sized model's byte tokenizer handles them) and are short
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "st", "th")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "th")


class ScriptedExpert:
    """A scripted player of one task row, for demonstrations (:mod:`longhorizon.lm.agents.demos`).

    ``act(last observation, None on the first turn) -> (tool name, arguments)``. :meth:`report` is what
    it knows so far in IterResearch's workspace context; None by default (the demonstration then joins
    the observations so far)."""

    def act(self, observation: str | None) -> tuple[str, dict]:
        raise NotImplementedError

    def report(self) -> str | None:
        return None


def normalize(text: str) -> str:
    """The normalised form of an answer (module docstring)."""
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised prediction equals the normalised gold answer, else 0.0."""
    return float(normalize(prediction) == normalize(gold))


def invented_names(n: int, rng: np.random.Generator, *, taken: set | None = None, max_len: int = 8) -> list[str]:
    """``n`` distinct capitalised names of 3..``max_len`` letters from a syllable generator (none in ``taken``)."""
    taken = set() if taken is None else taken
    names: list[str] = []
    while len(names) < n:
        syllables = int(rng.integers(2, 4))
        word = "".join(_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))]
                       for _ in range(syllables)) + _CODAS[rng.integers(len(_CODAS))]
        if 3 <= len(word) <= max_len and word not in taken:
            taken.add(word)
            names.append(word.capitalize())
    return names


def text_argument(value, name: str) -> str | None:
    """An error string when a tool's text argument is not a non-empty string, else None."""
    if not isinstance(value, str) or not value.strip():
        return f"Error: {name} must be a non-empty string."
    return None


def listing(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def check_positive_int(value, name: str, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``, or a UsageError naming the field (task-generator arguments)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise UsageError(f"{name}={value!r} is invalid; give an integer {bound}.")
    return int(value)


def submit_answer(env, answer) -> str:
    """The one-try ``answer`` tool of the search and research environments: an exact-match outcome in
    ``env.reward`` (and ``reward_terms["outcome"]``), ``env.done``; a bad or late answer is an error string."""
    error = text_argument(answer, "answer") or ("Error: the episode is over." if env.done else None)
    if error:
        env.metrics["tool_errors"] += 1
        return error
    env.done = True
    env.reward = exact_match(answer, env._gold)
    env.reward_terms = {"outcome": env.reward}
    return "Correct." if env.reward else "Incorrect."
