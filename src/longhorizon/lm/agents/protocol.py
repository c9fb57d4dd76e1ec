"""The multi-turn environment protocol: tools from a TRL-style environment class, tool calls parsed from text.

An environment follows TRL's ``environment_factory`` convention, so a user's TRL environment runs
unchanged: ``env = factory()``; ``env.reset(**row)`` gets a dataset row's columns (other than
``prompt``) and returns an optional string appended to the first user message; every public method
other than ``reset`` is a tool, described by its signature and docstring. After the episode the
outcome is read from the environment: ``env.reward`` (float), and optionally ``env.done`` (True ends
the episode), ``env.reward_terms`` (named components), ``env.milestones`` (1.0 per milestone reached)
and ``env.metrics``.

A model turn is parsed for tool calls in one of two :data:`TOOL_FORMATS`:

* ``hermes`` (real chat models; Qwen/Hermes convention):
  ``<tool_call>{"name": "search", "arguments": {"query": "Veloria"}}</tool_call>``
* ``tags`` (small character-level models): ``<search>Veloria</search>``, arguments in the order of
  the tool's signature separated by ``|`` (``<route>cheap|2+3</route>``).

A turn without a tool call is the model's final turn. Nothing the model writes can crash a rollout:
a malformed call, an unknown tool, arguments that do not fit the signature, a tool that raises or
one that exceeds ``timeout_s`` each become an error observation returned to the model (the episode
goes on) and are counted in :class:`longhorizon.lm.agents.trajectory.Turn`'s ``error``. An
environment class that does not follow the convention is refused before any rollout, in one sentence.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import inspect
import json
import re
from collections.abc import Callable
from typing import Any

from longhorizon.errors import UsageError

TOOL_FORMATS = ("hermes", "tags")
ERRORS = ("malformed", "unknown_tool", "bad_arguments", "tool_raised", "timeout")
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_TAG = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>(.*?)</\1>", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict


@dataclasses.dataclass(frozen=True)
class ParsedTurn:
    """The calls found in a turn, or the reason it could not be parsed (``error = "malformed"``)."""

    calls: tuple[ToolCall, ...] = ()
    error: str | None = None
    message: str = ""


# ----------------------------------------------------------------------------- tools of an environment


def tool_methods(env_or_cls) -> dict[str, Callable]:
    """The tools of an environment (instance or class): its public methods other than ``reset``."""
    names = [n for n in dir(env_or_cls) if not n.startswith("_") and n != "reset"]
    return {n: getattr(env_or_cls, n) for n in names if inspect.isroutine(getattr(env_or_cls, n))}


def check_environment(cls) -> None:
    """Refuse a class that does not follow the convention (module docstring), in one sentence."""
    name = getattr(cls, "__name__", repr(cls))
    if not callable(cls):
        raise UsageError(f"{name} is not an environment class; pass a class (or factory) whose instances have reset() "
                         "and public tool methods.")
    if not callable(getattr(cls, "reset", None)):
        raise UsageError(f"environment {name} has no reset() method; add reset(self, **row) returning an optional "
                         "first observation (TRL's environment_factory convention).")
    tools = tool_methods(cls)
    if not tools:
        raise UsageError(f"environment {name} exposes no tools; add at least one public method with a docstring "
                         "(every public method other than reset is a tool).")
    for tool, fn in tools.items():
        if not inspect.getdoc(fn):
            raise UsageError(f"tool {name}.{tool} has no docstring; write one (its first line tells the model what "
                             "the tool does).")


def tool_schema(name: str, fn: Callable) -> dict:
    """An OpenAI-style function schema from a tool's signature and Google-style docstring."""
    doc = inspect.getdoc(fn) or ""
    summary = doc.strip().splitlines()[0] if doc.strip() else name
    arg_docs = dict(re.findall(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$", doc.split("Args:", 1)[1], re.M)) \
        if "Args:" in doc else {}
    types = {int: "integer", float: "number", str: "string", bool: "boolean"}
    props, required = {}, []
    for p in _parameters(fn):
        ann = p.annotation if p.annotation is not inspect.Parameter.empty else str
        ann = {"int": int, "float": float, "str": str, "bool": bool}.get(ann, ann) if isinstance(ann, str) else ann
        props[p.name] = {"type": types.get(ann, "string"), **({"description": arg_docs[p.name]} if p.name in arg_docs else {})}
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    return {"name": name, "description": summary,
            "parameters": {"type": "object", "properties": props, "required": required}}


def _parameters(fn: Callable) -> list[inspect.Parameter]:
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name == "self":  # an unbound method of the class
        params = params[1:]
    return [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def describe_tools(env_or_cls, tool_format: str) -> str:
    """Plain-text instructions listing the tools and how to call them (goes into the first message)."""
    lines = []
    for name, fn in tool_methods(env_or_cls).items():
        schema = tool_schema(name, fn)
        args = ", ".join(schema["parameters"]["properties"])
        lines.append(f"- {name}({args}): {schema['description']}")
    if tool_format == "hermes":
        how = ('Call a tool by writing <tool_call>{"name": NAME, "arguments": {...}}</tool_call>. '
               "Answer without a tool call when you are done.")
    else:
        how = "Call a tool by writing <NAME>arg1|arg2</NAME>. Reply without a tool call when you are done."
    return "Tools:\n" + "\n".join(lines) + "\n" + how


# ----------------------------------------------------------------------------- parsing


def parse_tool_calls(text: str, tool_format: str, tools: dict[str, Callable] | None = None) -> ParsedTurn:
    """The tool calls of one model turn (module docstring); ``tools`` gives the ``tags`` format its argument names."""
    if tool_format == "hermes":
        calls = []
        for body in _HERMES.findall(text):
            try:
                call = json.loads(body)
            except json.JSONDecodeError as e:
                return ParsedTurn(error="malformed", message=f"the tool call is not valid JSON ({e.msg})")
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                return ParsedTurn(error="malformed", message='a tool call needs a "name" string')
            arguments = call.get("arguments", {})
            if isinstance(arguments, str):  # some models write the arguments as a JSON string
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    return ParsedTurn(error="malformed", message='"arguments" is not a JSON object')
            if not isinstance(arguments, dict):
                return ParsedTurn(error="malformed", message='"arguments" must be a JSON object')
            calls.append(ToolCall(call["name"], arguments))
        if not calls and "<tool_call>" in text:
            return ParsedTurn(error="malformed", message="a <tool_call> is not closed by </tool_call>")
        return ParsedTurn(tuple(calls))
    if tool_format == "tags":
        calls = []
        for name, body in _TAG.findall(text):
            fn = (tools or {}).get(name)
            names = [p.name for p in _parameters(fn)] if fn is not None else []
            values = body.split("|") if len(names) > 1 else [body]
            if fn is not None and len(values) > len(names):
                return ParsedTurn(error="malformed", message=f"<{name}> takes {len(names)} arguments separated by |")
            calls.append(ToolCall(name, dict(zip(names, (v.strip() for v in values))) if fn is not None else {"_": body}))
        return ParsedTurn(tuple(calls))
    raise UsageError(f"tool_format={tool_format!r} is unknown; use one of {TOOL_FORMATS}.")


def format_tool_call(name: str, arguments: dict, tool_format: str, tools: dict[str, Callable] | None = None) -> str:
    """The text of one call in ``tool_format`` (what :func:`parse_tool_calls` reads back)."""
    if tool_format == "hermes":
        return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
    if tool_format == "tags":
        fn = (tools or {}).get(name)
        order = [p.name for p in _parameters(fn)] if fn is not None else list(arguments)
        return f"<{name}>" + "|".join(str(arguments[k]) for k in order if k in arguments) + f"</{name}>"
    raise UsageError(f"tool_format={tool_format!r} is unknown; use one of {TOOL_FORMATS}.")


# ----------------------------------------------------------------------------- executing


def call_tool(env, call: ToolCall, timeout_s: float | None = None) -> tuple[str, str | None]:
    """``(observation, error)`` of one call; every failure is an error observation (module docstring).

    A call that exceeds ``timeout_s`` is abandoned (Python cannot stop a thread: it finishes in the
    background and its result is dropped)."""
    tools = tool_methods(env)
    if call.name not in tools:
        return f"Error: unknown tool {call.name!r}; the tools are {', '.join(sorted(tools))}.", "unknown_tool"
    fn = tools[call.name]
    try:
        bound = inspect.signature(fn).bind(**call.arguments)
    except TypeError as e:
        return f"Error: {call.name} cannot take these arguments ({e}).", "bad_arguments"
    if timeout_s is None:
        try:
            return str(fn(*bound.args, **bound.kwargs)), None
        except Exception as e:  # noqa: BLE001 - the model sees what went wrong, the rollout goes on
            return f"Error: {call.name} raised {type(e).__name__}: {e}", "tool_raised"
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = pool.submit(fn, *bound.args, **bound.kwargs)
    try:
        return str(future.result(timeout=timeout_s)), None
    except concurrent.futures.TimeoutError:
        return f"Error: {call.name} timed out after {timeout_s:g} s.", "timeout"
    except Exception as e:  # noqa: BLE001
        return f"Error: {call.name} raised {type(e).__name__}: {e}", "tool_raised"
    finally:
        pool.shutdown(wait=False)


def cut_observation(text: str, max_chars: int) -> str:
    """An observation as the policy sees it: cut at ``max_chars`` characters, saying so."""
    return text if len(text) <= max_chars else text[:max_chars] + " ...(cut)"


def outcome(env) -> tuple[float, dict, list[float], dict]:
    """``(reward, reward_terms, milestones, metrics)`` read from an environment after (or during) an episode."""
    reward = getattr(env, "reward", 0.0)
    reward = float(reward() if callable(reward) else reward)
    terms = dict(getattr(env, "reward_terms", None) or {})
    milestones = [float(m) for m in (getattr(env, "milestones", None) or [])]
    metrics = dict(getattr(env, "metrics", None) or {})
    return reward, terms, milestones, metrics


def is_done(env) -> bool:
    return bool(getattr(env, "done", False))


def row_mismatch(env_or_cls, row: dict) -> str | None:
    """Why ``reset`` cannot take ``row``'s columns (other than ``prompt``), in words; None when it can.

    Read from ``reset``'s signature: a parameter without a default that the row lacks, or a column that
    ``reset`` does not name and no ``**kwargs`` takes."""
    cls = env_or_cls if inspect.isclass(env_or_cls) else type(env_or_cls)
    name = getattr(cls, "__name__", repr(cls))
    try:
        parameters = list(inspect.signature(cls.reset).parameters.values())[1:]  # after self
    except (TypeError, ValueError, AttributeError):
        return None  # a factory or a builtin: nothing to read, reset itself will say
    columns = {k for k in row if k != "prompt"}
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [p.name for p in parameters if p.name in named and p.default is p.empty and p.name not in columns]
    if missing:
        return (f"lacks the column{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)} that "
                f"{name}.reset() needs; add {'them' if len(missing) > 1 else 'it'} to every row or give the parameter "
                "a default")
    if not any(p.kind == p.VAR_KEYWORD for p in parameters):
        extra = sorted(columns - named)
        if extra:
            return (f"has the column{'s' if len(extra) > 1 else ''} {', '.join(repr(c) for c in extra)} that "
                    f"{name}.reset() does not take; add **kwargs to reset() or drop the column")
    return None


def check_rows(env_or_cls, rows, source: str = "task rows") -> None:
    """Refuse, before anything runs, the first row whose columns ``reset`` cannot take (:func:`row_mismatch`)."""
    for number, row in enumerate(rows, 1):
        why = row_mismatch(env_or_cls, row)
        if why is not None:
            raise UsageError(f"row {number} of {source} {why}.")


def reset(env, row: dict) -> str | None:
    """``env.reset(**columns)`` with a row's columns other than ``prompt``; a clear error if it refuses them."""
    why = row_mismatch(env, row)
    if why is not None:
        raise UsageError(f"a task row {why}.")
    columns = {k: v for k, v in row.items() if k != "prompt"}
    try:
        first = env.reset(**columns)
    except TypeError as e:
        raise UsageError(f"{type(env).__name__}.reset() does not accept the dataset columns {sorted(columns)} ({e}); "
                         "give reset(self, **kwargs) or name the columns as parameters.") from e
    return None if first is None else str(first)


def make_factory(env: Any) -> Callable[[], Any]:
    """A factory from an environment class or a zero-argument callable returning an environment."""
    check_environment(env if inspect.isclass(env) else type(env()))
    return env
