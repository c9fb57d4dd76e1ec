"""The local tool environments of LM agents (TRL ``environment_factory`` convention), with scripted experts.

Each environment module offers the environment class, ``make_tasks(n, *, seed, **difficulty)`` (dataset
rows, deterministic given the seed) and a scripted ``Expert(row).act(observation) -> (tool, kwargs)``
that reads only the prompt and the observations (SFT warm starts, upper bounds, tests):

=========  ===================================  =============================================
name       environment                          paper
=========  ===================================  =============================================
search     multi-hop questions over BM25        ASearcher
router     routing queries to priced models     Router-R1
fees       plain vs structured feedback         Environments as Scaffold (FEEs)
research   many lookups, one aggregate answer   IterResearch
=========  ===================================  =============================================

:func:`environment_from_path` imports a user's environment class (``"pkg.module:Class"``) and
checks that it follows the convention; :func:`latency.with_latency` slows any of them down.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import zlib
import sys
from typing import NamedTuple

from longhorizon.errors import UsageError
from longhorizon.lm.agents.envs import fees, research, router, search
from longhorizon.lm.agents.envs.latency import with_latency


class EnvironmentSpec(NamedTuple):
    cls: type
    make_tasks: object  # (n, *, seed, **difficulty) -> list[dict]
    expert: type  # a ScriptedExpert: Expert(row).act(observation) -> (tool, kwargs)


ENVIRONMENTS = {
    "search": EnvironmentSpec(search.SearchEnv, search.make_tasks, search.Expert),
    "router": EnvironmentSpec(router.RouterEnv, router.make_tasks, router.Expert),
    "fees": EnvironmentSpec(fees.FeedbackEnv, fees.make_tasks, fees.Expert),
    "research": EnvironmentSpec(research.ResearchEnv, research.make_tasks, research.Expert),
}


def get(name: str) -> EnvironmentSpec:
    """The registered environment ``name``, or a UsageError listing the names."""
    if name not in ENVIRONMENTS:
        raise UsageError(f"unknown agent environment {name!r}; use one of {', '.join(ENVIRONMENTS)} "
                         "or an import path 'pkg.module:Class'.")
    return ENVIRONMENTS[name]


def environment_class(env: str, latency_s: float = 0.0) -> type:
    """The environment class ``env`` names: a registered name or ``"pkg.module:Class"`` / ``"file.py:Class"``,
    slowed by ``latency_s`` seconds per tool call when positive."""
    cls = environment_from_path(env) if ":" in env else get(env).cls
    return with_latency(cls, latency_s) if latency_s else cls


def expert_episode(name: str, row: dict, expert=None, cls: type | None = None,
                   max_calls: int = 64) -> tuple[object, list[tuple]]:
    """Play one episode of environment ``name`` (or of ``cls``, e.g. a slowed or corpus-bound variant)
    with its scripted expert (or ``expert``, an Expert instance).

    Returns ``(env, steps)`` with ``steps = [(tool, kwargs, observation), ...]``: the transcript an SFT
    warm start formats into tool-call text, and the environment to read the outcome from."""
    from longhorizon.lm.agents.protocol import is_done

    spec = get(name)
    env = (cls or spec.cls)()
    observation = env.reset(**{k: v for k, v in row.items() if k != "prompt"})
    expert = spec.expert(row) if expert is None else expert
    steps = []
    while not is_done(env) and len(steps) < max_calls:
        tool, kwargs = expert.act(observation)
        observation = getattr(env, tool)(**kwargs)
        steps.append((tool, kwargs, observation))
    return env, steps


def environment_from_path(path: str) -> type:
    """The environment class at ``"pkg.module:Class"`` (or ``"file.py:Class"``), checked against the convention."""
    from longhorizon.lm.agents.protocol import check_environment

    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise UsageError(f"environment {path!r} is not an import path; write it as 'pkg.module:Class' "
                         "or 'path/to/file.py:Class'.")
    module_name, attr = path.split(":")
    try:
        if module_name.endswith(".py"):
            if not os.path.isfile(module_name):
                raise UsageError(f"environment file {module_name!r} does not exist; check the path before ':'.")
            spec = importlib.util.spec_from_file_location(f"_longhorizon_env_{zlib.crc32(os.path.abspath(module_name).encode())}", module_name)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module  # dataclasses and pickling look the module up by name
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - any import failure is the user's module
        raise UsageError(f"cannot import {module_name!r} ({type(e).__name__}: {e}); check the module path and that "
                         "it imports on its own.") from e
    if not hasattr(module, attr):
        raise UsageError(f"module {module_name!r} has no {attr!r}; name a class defined in it.")
    cls = getattr(module, attr)
    if not isinstance(cls, type):
        raise UsageError(f"{path!r} is not a class; environment_factory needs a class whose instances have reset() "
                         "and public tool methods.")
    check_environment(cls)
    return cls


__all__ = ["ENVIRONMENTS", "EnvironmentSpec", "environment_class", "environment_from_path", "expert_episode", "get",
           "with_latency", "fees", "research", "router", "search"]
