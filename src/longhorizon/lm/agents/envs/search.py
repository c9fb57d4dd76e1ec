"""Search agent (ASearcher): multi-hop questions over a local corpus searched with BM25 (``bm25s``).

The synthetic knowledge base (deterministic given ``kb_seed``) holds invented people, cities,
countries, companies and products and nine functional relations between them, each written as a
one-fact document ("Zent is made by Korvo."), plus distractor documents that mention an entity
without a relation. A question composes ``k`` relations starting from one entity,

    "Who is the founder of the maker of Zent?"   (k = 2: maker(Zent) = Korvo, founder(Korvo) = Talem)

so its answer needs ``k`` lookups, one per hop, each query naming the entity found by the previous
one (``k`` is the horizon). Tools: ``search(query)`` returns the ``top_k`` documents by BM25
(the index is built once per corpus and cached, not per episode), ``answer(answer)`` ends the
episode with reward = exact match after normalisation (:func:`common.normalize`).

Milestones (MiRA): one per hop, 1.0 once a search returned a document containing that hop's
evidence. For the synthetic KB the evidence of hop i is its fact document, which names both the
hop's subject and its bridge entity; for a user's corpus it is the row's optional ``evidence`` list
(e.g. the bridge entities). ``search_env(path)`` builds the environment over any text file of
documents (one per line, or blank-line-separated paragraphs) for the user's own
``{"prompt", "answer"[, "evidence"]}`` rows.
"""

from __future__ import annotations

import os
import re
import threading
from typing import NamedTuple

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.agents.envs.common import (ScriptedExpert, check_positive_int, invented_names, normalize,
                                              submit_answer, text_argument)

MAX_HOPS = 8


class Relation(NamedTuple):
    subject: str  # entity type of the subject
    object: str  # entity type of the value
    fact: str  # the document: "{s} is made by {o}."
    phrase: str  # the question's wording: "the maker of {x}"
    query: str  # what the expert searches for: "{s} made by"


RELATIONS = {
    "maker": Relation("product", "company", "{s} is made by {o}.", "the maker of {x}", "{s} made by"),
    "founder": Relation("company", "person", "{s} was founded by {o}.", "the founder of {x}", "{s} founded by"),
    "birthplace": Relation("person", "city", "{s} was born in {o}.", "the birthplace of {x}", "{s} born in"),
    "employer": Relation("person", "company", "{s} works at {o}.", "the employer of {x}", "{s} works at"),
    "home": Relation("company", "city", "{s} is based in {o}.", "the home city of {x}", "{s} based in"),
    "country": Relation("city", "country", "{s} is a city in {o}.", "the country of {x}", "{s} city in"),
    "mayor": Relation("city", "person", "The mayor of {s} is {o}.", "the mayor of {x}", "mayor of {s}"),
    "capital": Relation("country", "city", "The capital of {s} is {o}.", "the capital of {x}", "capital of {s}"),
    "leader": Relation("country", "person", "The leader of {s} is {o}.", "the leader of {x}", "leader of {s}"),
}
SIZES = {"person": 24, "city": 12, "country": 4, "company": 10, "product": 8}  # times kb_scale
_DISTRACTORS = ("{s} is often in the news.", "{s} has a long history.", "Many stories are told about {s}.",
                "{s} was in an old song.")
PROMPT = ("Answer the question by searching the knowledge base. Tools: search(query) returns the {top_k} documents "
          "that best match the query; answer(answer) submits your final answer (one try). Question: {question}")


# ----------------------------------------------------------------------------- the knowledge base


def knowledge_base(kb_seed: int = 0, kb_scale: int = 1, distractors: int = 1) -> tuple[list[str], dict]:
    """``(documents, facts)``: the synthetic KB's documents and ``facts[(relation, subject)] = (value, doc_index)``."""
    rng = np.random.default_rng([kb_seed, kb_scale, distractors, 15])
    taken: set = set()
    entities = {t: invented_names(n * kb_scale, rng, taken=taken) for t, n in SIZES.items()}
    value: dict[tuple[str, str], str] = {}
    cities, countries = entities["city"], entities["country"]
    for i, city in enumerate(cities):  # every country gets a city first, so every capital lies in its country
        value[("country", city)] = countries[i] if i < len(countries) else countries[rng.integers(len(countries))]
    for country in countries:
        own = [c for c in cities if value[("country", c)] == country]
        value[("capital", country)] = own[rng.integers(len(own))]
    for name, rel in RELATIONS.items():
        if name in ("country", "capital"):
            continue
        for s in entities[rel.subject]:
            pool = entities[rel.object]
            value[(name, s)] = pool[rng.integers(len(pool))]
    documents, facts = [], {}
    for (name, s), o in value.items():
        facts[(name, s)] = (o, len(documents))
        documents.append(RELATIONS[name].fact.format(s=s, o=o))
    for names in entities.values():
        for s in names:
            for j in rng.choice(len(_DISTRACTORS), size=distractors, replace=distractors > len(_DISTRACTORS)):
                documents.append(_DISTRACTORS[j].format(s=s))
    order = rng.permutation(len(documents))  # facts and distractors interleaved, so an index says nothing
    where = np.argsort(order)
    return [documents[i] for i in order], {k: (o, int(where[d])) for k, (o, d) in facts.items()}


class _Index:
    """A BM25 index over a list of documents (bm25s, English stopwords removed)."""

    def __init__(self, documents: list[str]):
        import bm25s

        self._bm25s = bm25s
        self.documents = documents
        self.retriever = bm25s.BM25()
        self.retriever.index(self._tokens(documents), show_progress=False)

    def _tokens(self, texts: list[str]) -> list[list[str]]:
        return self._bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)

    def top(self, query: str, k: int) -> list[int]:
        """Indices of the (at most) ``k`` best documents with a positive BM25 score, best first."""
        ids, scores = self.retriever.retrieve(self._tokens([query]), k=min(k, len(self.documents)),
                                              show_progress=False, n_threads=1)
        return [int(i) for i, s in zip(ids[0], scores[0]) if s > 0]


_INDEXES: dict = {}
_LOCK = threading.Lock()  # rollouts reset environments from several threads


def _synthetic_index(kb_seed: int, kb_scale: int, distractors: int) -> _Index:
    key = ("synthetic", kb_seed, kb_scale, distractors)
    with _LOCK:
        if key not in _INDEXES:
            _INDEXES[key] = _Index(knowledge_base(kb_seed, kb_scale, distractors)[0])
        return _INDEXES[key]


def read_corpus(path: str) -> list[str]:
    """Documents of a text file: blank-line-separated paragraphs if it has blank lines, else one per line."""
    if not os.path.isfile(path):
        raise UsageError(f"corpus file {path!r} does not exist; give a text file with one document per line "
                         "or blank-line-separated paragraphs.")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise UsageError(f"corpus file {path!r} is not UTF-8 text ({e.reason}); save it as UTF-8.") from e
    parts = re.split(r"\n\s*\n", text) if re.search(r"\n\s*\n", text.strip()) else text.splitlines()
    documents = [" ".join(p.split()) for p in parts if p.strip()]
    if not documents:
        raise UsageError(f"corpus file {path!r} has no documents; write one document per line or "
                         "blank-line-separated paragraphs.")
    return documents


def _corpus_index(path: str) -> _Index:
    if not os.path.isfile(path):
        read_corpus(path)  # raises the UsageError naming the missing file
    key = ("file", os.path.abspath(path), os.path.getmtime(path))  # an edited file is indexed anew
    with _LOCK:
        if key not in _INDEXES:
            _INDEXES[key] = _Index(read_corpus(path))
        return _INDEXES[key]


# ----------------------------------------------------------------------------- the environment


class SearchEnv:
    """The search environment over the synthetic KB of a row's ``kb_seed`` (module docstring)."""

    reward, done = 0.0, False  # until reset (read by the rollout after the episode)

    _corpus: str | None = None  # set by search_env(path): search that file instead of the synthetic KB
    _top_k: int = 3

    def reset(self, answer: str = "", kb_seed: int = 0, kb_scale: int = 1, distractors: int = 1,
              evidence: list | None = None, top_k: int | None = None, **_columns) -> str | None:
        self.reward, self.done = 0.0, False
        self._gold = str(answer)
        self._k = int(top_k if top_k is not None else self._top_k)
        self._index = _corpus_index(self._corpus) if self._corpus else _synthetic_index(kb_seed, kb_scale, distractors)
        self._evidence = [normalize(e) for e in (evidence or [])]
        self.milestones = [0.0] * len(self._evidence)
        self.reward_terms = {"outcome": 0.0}
        self.metrics = {"searches": 0, "tool_errors": 0}
        return None

    def search(self, query: str) -> str:
        """Search the knowledge base and return the best-matching documents.

        Args:
            query: words to look for, e.g. an entity's name and a relation.
        """
        error = text_argument(query, "query") or ("Error: the episode is over." if self.done else None)
        if error:
            self.metrics["tool_errors"] += 1
            return error
        self.metrics["searches"] += 1
        hits = [self._index.documents[i] for i in self._index.top(query, self._k)]
        for j, evidence in enumerate(self._evidence):
            if any(evidence in normalize(doc) for doc in hits):
                self.milestones[j] = 1.0
        return "\n".join(f"{n}. {doc}" for n, doc in enumerate(hits, 1)) if hits else "No document matches the query."

    def answer(self, answer: str) -> str:
        """Submit the final answer; this ends the episode.

        Args:
            answer: the answer, e.g. a name.
        """
        return submit_answer(self, answer)


def search_env(corpus: str, top_k: int = 3) -> type:
    """A :class:`SearchEnv` class searching ``corpus`` (a text file, :func:`read_corpus`), indexed now."""
    top_k = check_positive_int(top_k, "top_k")
    _corpus_index(corpus)  # a bad file fails here, before any rollout
    return type(f"SearchEnv_{os.path.basename(corpus)}", (SearchEnv,), {"_corpus": corpus, "_top_k": top_k})


# ----------------------------------------------------------------------------- tasks and the expert


def make_tasks(n: int, *, seed: int, hops: int = 2, kb_seed: int = 0, kb_scale: int = 1, distractors: int = 1,
               top_k: int = 3) -> list[dict]:
    """``n`` questions needing ``hops`` lookups each over the KB of ``kb_seed`` (deterministic given ``seed``).

    Every row: ``prompt`` (task, tools, question), ``answer``, ``hops``, ``kb_seed``, ``kb_scale``,
    ``distractors``, ``top_k`` and ``evidence`` (each hop's fact document, for the milestones)."""
    n, hops = check_positive_int(n, "n"), check_positive_int(hops, "hops", 1, MAX_HOPS)
    check_positive_int(kb_scale, "kb_scale"), check_positive_int(top_k, "top_k")
    check_positive_int(distractors, "distractors", 0)
    documents, facts = knowledge_base(kb_seed, kb_scale, distractors)
    rng = np.random.default_rng([seed, hops, 151])
    kind_of = {s: RELATIONS[name].subject for (name, s) in facts}  # every entity is the subject of a relation
    by_type = {t: [s for s, k in kind_of.items() if k == t] for t in sorted(set(kind_of.values()))}
    types = list(by_type)
    rows, tries = [], 0
    while len(rows) < n:
        tries += 1
        if tries > 1000 * n:  # unreachable with the KB's sizes; a guard against an endless loop all the same
            raise UsageError(f"cannot compose {hops}-hop questions without repeating an entity in this knowledge "
                             "base; raise kb_scale or lower hops.")
        entity = by_type[types[rng.integers(len(types))]]
        entity = entity[rng.integers(len(entity))]
        path, seen, kind = [], [entity], kind_of[entity]
        phrase, evidence = entity, []
        for _ in range(hops):
            options = [r for r, rel in RELATIONS.items() if rel.subject == kind]
            name = options[rng.integers(len(options))]
            value, doc = facts[(name, seen[-1])]
            if value in seen:  # a walk back to an entity already named would make the answer guessable
                break
            path.append(name), seen.append(value), evidence.append(documents[doc])
            phrase, kind = RELATIONS[name].phrase.format(x=phrase), RELATIONS[name].object
        if len(path) < hops:
            continue
        question = f"{'Who' if kind == 'person' else 'What'} is {phrase}?"
        rows.append({"prompt": PROMPT.format(top_k=top_k, question=question), "answer": seen[-1], "hops": hops,
                     "kb_seed": kb_seed, "kb_scale": kb_scale, "distractors": distractors, "top_k": top_k,
                     "evidence": evidence})
    return rows


def parse_question(question: str) -> tuple[str, list[str]]:
    """``(start entity, relations innermost first)`` of a composed question (module docstring)."""
    text = re.sub(r"^(Who|What) is ", "", question.strip()).rstrip("?").strip()
    outer_first = []
    while True:
        for name, rel in RELATIONS.items():
            prefix = rel.phrase.format(x="")
            if text.startswith(prefix):
                outer_first.append(name)
                text = text[len(prefix):]
                break
        else:
            return text, outer_first[::-1]


class Expert(ScriptedExpert):
    """Scripted search agent: one search per hop, reads the bridge entity from the returned fact, answers.

    Uses only the question (in the prompt) and the observations."""

    def __init__(self, row: dict):
        question = row["prompt"].split("Question:", 1)[-1].strip()
        self.entity, self.relations = parse_question(question)
        self.hop, self.retried, self.last = 0, False, None

    def act(self, observation: str | None) -> tuple[str, dict]:
        if self.last == "search":
            rel = RELATIONS[self.relations[self.hop]]
            pattern = re.escape(rel.fact.format(s=self.entity, o="\0")).replace("\0", r"(\w+)")
            found = re.search(pattern, observation or "")
            if found:
                self.entity, self.hop, self.retried = found.group(1), self.hop + 1, False
            elif not self.retried:  # retry once with the whole fact's wording
                self.retried = True
                return self._call("search", query=rel.fact.format(s=self.entity, o="").rstrip(". "))
            else:
                return self._call("answer", answer=self.entity)
        if self.hop == len(self.relations):
            return self._call("answer", answer=self.entity)
        return self._call("search", query=RELATIONS[self.relations[self.hop]].query.format(s=self.entity))

    def _call(self, tool: str, **kwargs) -> tuple[str, dict]:
        self.last = tool
        return tool, kwargs
