"""Slow environments: every tool call first sleeps (the setting of the asynchronous rollout benchmark).

``with_latency(SearchEnv, 0.2)`` sleeps 200 ms before each tool call; ``with_latency(SearchEnv, (0.05, 0.5))``
sleeps a uniform draw from [50, 500] ms, each instance drawing from its own generator seeded by
``(seed, instance number)``. ``reset`` is not delayed. The wrapped tools keep their names, signatures
and docstrings, so their schemas are unchanged.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import time

import numpy as np

from longhorizon.errors import UsageError


def _tools(cls) -> list[str]:
    # the convention's tools: public routines other than reset (lm.agents.protocol.tool_methods)
    return [n for n in dir(cls) if not n.startswith("_") and n != "reset" and inspect.isroutine(getattr(cls, n))]


def with_latency(cls: type, seconds: float | tuple[float, float], seed: int = 0) -> type:
    """A subclass of ``cls`` whose every tool call first sleeps ``seconds`` (fixed or uniform in a range)."""
    low, high = (seconds, seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) \
        else tuple(seconds) if isinstance(seconds, (tuple, list)) and len(seconds) == 2 else (None, None)
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (low, high)) or not 0 <= low <= high:
        raise UsageError(f"latency seconds={seconds!r} is invalid; give a number >= 0 or a range (low, high) "
                         "with 0 <= low <= high.")
    counter = itertools.count()

    def delay(self) -> float:
        if "_latency_rng" not in self.__dict__:
            self._latency_rng = np.random.default_rng([seed, next(counter)])
        return low if low == high else float(self._latency_rng.uniform(low, high))

    def slow(name: str):
        tool = getattr(cls, name)

        @functools.wraps(tool)
        def call(self, *args, **kwargs):
            time.sleep(delay(self))
            return tool(self, *args, **kwargs)

        return call

    body = {name: slow(name) for name in _tools(cls)}
    body["__doc__"] = f"{cls.__name__} with {low:g}-{high:g} s of latency per tool call. {cls.__doc__ or ''}".strip()
    return type(f"Slow{cls.__name__}", (cls,), body)
