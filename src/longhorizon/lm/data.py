"""TRL-compatible training inputs: prompt datasets and reward functions.

Datasets are JSONL (one JSON object per line), JSON (a list of objects) or Parquet files whose rows
have a ``prompt`` column, either plain text or a conversation ``[{"role": ..., "content": ...}, ...]``
(TRL's "standard" and "conversational" formats). A conversation is rendered with the model's chat
template and ``add_generation_prompt=True``; plain text is continued as written. Every other column
reaches the reward functions by name, as in TRL. The RL loop draws rows in shuffled epochs
(:class:`longhorizon.lm.samplers.ShuffledPool`).

A reward function has TRL's signature::

    f(prompts, completions, completion_ids, **columns) -> list[float | None]

``prompts`` are the dataset's prompts as written (strings or conversations), ``completions`` the
generated texts (strings, or ``[{"role": "assistant", "content": text}]`` when the prompt is a
conversation), ``completion_ids`` the generated token ids, and ``columns`` one list per other
column. With functions ``f_1..f_k`` and ``reward_weights`` ``w`` the reward of completion ``i`` is
(TRL's NaN-sum; ``None`` means "does not apply" and contributes nothing)::

    r_i = sum_{j : f_j(i) is not None} w_j f_j(i)
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from longhorizon.errors import UsageError

DATASET_SUFFIXES = (".jsonl", ".json", ".parquet")


@dataclasses.dataclass(frozen=True, eq=False)
class Example:
    """One dataset row ready for the trainer: ``prompt`` is the text the model continues."""

    prompt: str
    raw_prompt: Any  # the row's prompt as reward functions see it (text or conversation)
    columns: Mapping[str, Any]  # the row's other columns
    index: int  # the row's position in the file (0-based)

    @property
    def conversational(self) -> bool:
        return not isinstance(self.raw_prompt, str)

    @property
    def horizon(self) -> int | None:
        """The row's ``horizon`` column when it has one (metrics and evaluations are then split by it)."""
        h = self.columns.get("horizon")
        return int(h) if isinstance(h, (int, np.integer)) else None


# ----------------------------------------------------------------------------- datasets


def read_rows(path: str | Path, check: Callable[[Any, str], None] | None = None) -> list[dict]:
    """The rows of a JSONL, JSON or Parquet file, each checked by ``check(row, where)`` (default
    :func:`check_row`: an object with a ``prompt``)."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"dataset {path} does not exist; pass --dataset a .jsonl, .json or .parquet file.")
    if path.suffix not in DATASET_SUFFIXES:
        raise UsageError(f"dataset {path} is not a {', '.join(DATASET_SUFFIXES)} file; convert it to JSONL "
                         "(one {\"prompt\": ...} object per line).")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UsageError("reading Parquet needs pyarrow; `pip install 'longhorizon[lm]'` or convert the file to JSONL.") from None
        rows = pq.read_table(path).to_pylist()
        where = [f"row {i + 1}" for i in range(len(rows))]
    elif path.suffix == ".json":
        try:
            rows = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise UsageError(f"dataset {path} is not valid JSON ({err.msg} at line {err.lineno}); fix the file.") from None
        if not isinstance(rows, list):
            raise UsageError(f"dataset {path} holds a JSON {type(rows).__name__}, not a list of rows; write "
                             "[{\"prompt\": ...}, ...] or use JSONL.")
        where = [f"row {i + 1}" for i in range(len(rows))]
    else:
        rows, where = [], []
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise UsageError(f"line {number} of {path} is not valid JSON ({err.msg}); fix or remove it.") from None
            where.append(f"line {number}")
    if not rows:
        raise UsageError(f"dataset {path} has no rows; give a file with at least one {{\"prompt\": ...}} row.")
    for row, at in zip(rows, where):
        (check or check_row)(row, f"{at} of {path}")
    return rows


def check_row(row, where: str) -> None:
    """Refuse a row that is no object, lacks ``prompt``, or whose prompt is neither text nor a conversation."""
    if not isinstance(row, dict):
        raise UsageError(f"{where} is a {type(row).__name__}, not an object; write {{\"prompt\": ...}}.")
    if "prompt" not in row:
        raise UsageError(f"{where} has no 'prompt' column; every row needs one (text, or a list of "
                         "{\"role\", \"content\"} messages).")
    prompt = row["prompt"]
    if isinstance(prompt, str):
        if not prompt:
            raise UsageError(f"{where} has an empty prompt; remove the row or write a prompt.")
        return
    if (not isinstance(prompt, list) or not prompt
            or any(not isinstance(m, dict) or "role" not in m or "content" not in m for m in prompt)):
        raise UsageError(f"{where} has a prompt that is neither text nor a list of {{\"role\", \"content\"}} "
                         "messages; fix that row.")


def prepare(rows: Sequence[dict], tokenizer) -> list[Example]:
    """:class:`Example` s of ``rows``: conversations rendered by the tokenizer's chat template."""
    examples = []
    for i, row in enumerate(rows):
        check_row(row, f"row {i + 1}")
        raw = row["prompt"]
        if isinstance(raw, str):
            text = raw
        else:
            if not hasattr(tokenizer, "apply_chat_template"):
                raise UsageError("conversational prompts need a model with a chat template; use a pretrained "
                                 "--model or write the prompts as plain text.")
            text = tokenizer.apply_chat_template(raw, add_generation_prompt=True)
        examples.append(Example(text, raw, {k: v for k, v in row.items() if k != "prompt"}, i))
    return examples


def load_dataset(path: str | Path, tokenizer) -> list[Example]:
    return prepare(read_rows(path), tokenizer)


# ----------------------------------------------------------------------------- reward functions


def import_function(spec: str, what: str = "--reward-funcs") -> Callable:
    """``module.sub:name`` or ``path/to/file.py:name`` -> the callable it names."""
    if ":" not in spec:
        raise UsageError(f"{what} {spec!r} does not name a function; write module:function (e.g. my_rewards:correct).")
    module_name, _, attr = spec.rpartition(":")
    try:
        if module_name.endswith(".py"):
            file = Path(module_name)
            if not file.is_file():
                raise UsageError(f"{what} {spec!r}: no file {file}; give an existing .py file or an importable module.")
            loaded = importlib.util.spec_from_file_location(file.stem, file)
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except UsageError:
        raise
    except Exception as err:  # an import that fails in user code: name the module and the cause
        raise UsageError(f"{what} {spec!r}: importing {module_name} failed ({type(err).__name__}: {err}); fix the module "
                         "or the path.") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"{what} {spec!r}: {module_name} has no function {attr!r}; check the name.")
    return fn


def function_name(fn: Callable) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


class RewardFunctions:
    """Several TRL-style reward functions with weights; called by the trainer on a whole rollout.

    ``__call__(examples, texts, completion_ids) -> (rewards [n] float64, metrics)`` with
    ``metrics["rewards/NAME/mean"]`` and ``/std`` per function (over the completions it scored).
    """

    def __init__(self, funcs: Sequence[Callable], weights: Sequence[float] | None = None):
        if not funcs:
            raise UsageError("no reward function given; pass --reward-funcs module:function (one or more).")
        weights = [1.0] * len(funcs) if weights is None else [float(w) for w in weights]
        if len(weights) != len(funcs):
            raise UsageError(f"{len(weights)} reward weights for {len(funcs)} reward functions; give one weight per "
                             "function (or none).")
        self.funcs, self.weights = list(funcs), np.asarray(weights, np.float64)
        names = [function_name(f) for f in self.funcs]
        self.names = [n if names.count(n) == 1 else f"{n}_{i}" for i, n in enumerate(names)]

    @classmethod
    def from_specs(cls, specs: Sequence[str], weights: Sequence[float] | None = None) -> RewardFunctions:
        return cls([import_function(s) for s in specs], weights)

    def describe(self) -> dict:
        return {"functions": [f"{getattr(f, '__module__', '?')}:{function_name(f)}" for f in self.funcs],
                "weights": self.weights.tolist()}

    def scores(self, examples: Sequence[Example], texts: Sequence[str], completion_ids=None) -> np.ndarray:
        """``[n, k]`` float64: function ``j``'s reward of completion ``i`` (NaN where it returned None)."""
        n = len(texts)
        prompts = [e.raw_prompt for e in examples]
        completions = [[{"role": "assistant", "content": t}] if e.conversational else t for e, t in zip(examples, texts)]
        keys = sorted({k for e in examples for k in e.columns})
        columns = {k: [e.columns.get(k) for e in examples] for k in keys}
        ids = completion_ids if completion_ids is not None else [[] for _ in texts]
        out = np.full((n, len(self.funcs)), np.nan)
        for j, (fn, name) in enumerate(zip(self.funcs, self.names)):
            try:
                values = fn(prompts=prompts, completions=completions, completion_ids=ids, **columns)
            except Exception as err:
                raise UsageError(f"reward function {name} raised {type(err).__name__}: {err}; fix it (it is called as "
                                 f"{name}(prompts, completions, completion_ids, **columns) with columns {keys}).") from err
            values = list(values) if values is not None else []
            if len(values) != n:
                raise UsageError(f"reward function {name} returned {len(values)} values for {n} completions; return one "
                                 "float (or None) per completion.")
            for i, v in enumerate(values):
                if v is None:
                    continue
                try:
                    value = float(v)
                except (TypeError, ValueError):
                    raise UsageError(f"reward function {name} returned {v!r} for completion {i}; return a float or None.") from None
                if not math.isfinite(value):
                    raise UsageError(f"reward function {name} returned {value} for completion {i}; return a finite "
                                     "float (or None when it does not apply).")
                out[i, j] = value
        return out

    def __call__(self, examples, texts, completion_ids=None):
        per_fn = self.scores(examples, texts, completion_ids)
        rewards = np.nansum(per_fn * self.weights, axis=1)  # an all-None row sums to 0, as in TRL
        metrics = {}
        for j, name in enumerate(self.names):
            scored = per_fn[:, j][~np.isnan(per_fn[:, j])]
            metrics[f"rewards/{name}/mean"] = float(scored.mean()) if scored.size else None
            metrics[f"rewards/{name}/std"] = float(scored.std(ddof=1)) if scored.size > 1 else 0.0
        return rewards, metrics



# ----------------------------------------------------------------------------- a run's prompts


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes (config.json pins the dataset a run trained on, so a resume on a changed file is refused)."""
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """A run's prompts from files: ``train`` rows in shuffled epochs, ``eval`` rows (optional) scored
    greedily every ``eval_every`` steps and after the last, both by ``rewards``.

    Conversations need the policy's chat template, so the rows become :class:`Example` s when the run
    starts (:meth:`bind`); until then only the files are checked. ``max_prompt_length`` 0 means the
    longest rendered prompt (TRL truncates prompts instead; here a prompt never loses tokens).
    """

    train: str
    rewards: Any = dataclasses.field(compare=False, repr=False)
    eval: str | None = None
    eval_every: int = 0
    max_prompt_length: int = 0
    seed: int = 0

    def check(self, steps: int, evaluation) -> None:
        read_rows(self.train)
        if self.eval is not None:
            read_rows(self.eval)
            if self.eval_every < 0 or self.eval_every > steps:
                raise UsageError(f"--eval-every {self.eval_every} must be between 0 and the run's {steps} steps.")
        elif self.eval_every:
            raise UsageError("--eval-every evaluates --eval-dataset, which is not given; add --eval-dataset FILE or "
                             "drop --eval-every.")
        if self.max_prompt_length < 0:
            raise UsageError(f"--max-prompt-length must be 0 (the longest prompt) or positive, got {self.max_prompt_length}.")

    def describe(self) -> dict:
        files = {"train": self.train, "train_sha256": file_digest(self.train)}
        if self.eval is not None:
            files.update(eval=self.eval, eval_sha256=file_digest(self.eval), eval_every=self.eval_every)
        return {"sampler": "DatasetSpec", **files, "max_prompt_length": self.max_prompt_length, "seed": self.seed,
                "rewards": self.rewards.describe()}

    def bind(self, tokenizer, grpo, context: int | None):
        """``(sampler spec, EvalSpec or None, GRPOConfig)`` for a policy with ``tokenizer`` and ``context``."""
        from longhorizon.lm.evaluate import EvalSpec
        from longhorizon.lm.samplers import ShuffledPool

        train = load_dataset(self.train, tokenizer)
        held = load_dataset(self.eval, tokenizer) if self.eval is not None else []
        longest = max(len(tokenizer.encode(e.prompt)) for e in train + held)
        length = self.max_prompt_length or longest
        if longest > length:
            raise UsageError(f"a prompt of {self.train if self.eval is None else 'the datasets'} has {longest} tokens, "
                             f"more than --max-prompt-length {length}; raise it (or 0: the longest prompt) or shorten the prompt.")
        if context is not None and length + grpo.max_completion_length > context:
            raise UsageError(f"prompts of {length} tokens + --max-completion-length {grpo.max_completion_length} exceed "
                             f"the model's context of {context}; shorten the prompts or lower --max-completion-length.")
        grpo = dataclasses.replace(grpo, max_prompt_length=length)
        evaluation = (EvalSpec(tuple(held), max_prompt_length=length, max_new_tokens=grpo.max_completion_length,
                               every=self.eval_every, rewards=self.rewards) if held else None)
        return ShuffledPool(tuple(train), seed=self.seed), evaluation, grpo
