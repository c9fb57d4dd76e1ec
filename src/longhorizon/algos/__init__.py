"""Algorithms. Each module follows one protocol:

``NAME``, a frozen ``Config`` (validated on construction), ``default_config(env_id)``,
``steps_per_update(config)``, ``init(key, env, config) -> state``,
``collect(state) -> (state, batch)``, ``learn(state, batch) -> (state, metrics)``,
``agent_params(state)`` and ``act(params, obs, key, greedy)``.

Batches expose ``episode_return`` and ``episode_done`` (time-major) for the engine's statistics, and
optionally ``episode_length`` (``info["episode_length"]``; without it a run logs no episode lengths).

Optional hooks: ``check_env(env, config)`` refuses an environment before compiling (e.g. a
continuous action space for a Q-learning method); ``resolve_config(env, config) -> config`` fills in
settings that depend on the environment (e.g. its horizon); ``wrap_env(env, config) -> env`` wraps
the environment for training and evaluation alike (e.g. SQIRL adds the time step to observations); for the Ray engine's asynchronous mode,
``max_staleness(config) -> (versions, why)`` (or a constant ``MAX_STALENESS``) declares how many
parameter versions old a batch may be, and ``with_agent_params(state, params)`` lets an actor act
with parameters published by the learner.

:func:`get` checks a module against this protocol once and returns it as an :class:`Algorithm`,
on which every optional hook is present (the module's own, or the default that does nothing), so
the runner and the engines call hooks without asking whether they exist.
"""

from __future__ import annotations

import difflib
import importlib
from types import ModuleType
from typing import Any

from longhorizon.errors import UsageError

ALGORITHMS = {
    "ppo": "longhorizon.algos.ppo",
    "pqn": "longhorizon.algos.pqn",
    "dqn": "longhorizon.algos.dqn",
    "sqirl": "longhorizon.algos.sqirl",
    "mbdpo": "longhorizon.control.mbdpo",  # a world-model algorithm; lives with the control part (docs/control.md)
}

REQUIRED = ("NAME", "Config", "default_config", "steps_per_update", "init", "collect", "learn", "agent_params", "act")


class Algorithm:
    """An algorithm module with the protocol checked and every optional hook present.

    Attributes not named here (``init``, ``collect``, ``Config``, module-level helpers) are the
    module's own. ``__name__`` is the module's import path, so a Ray actor can import it by name.
    """

    def __init__(self, module: ModuleType):
        missing = [name for name in REQUIRED if not hasattr(module, name)]
        if missing:
            raise UsageError(f"algorithm module '{module.__name__}' lacks {', '.join(missing)}; define them as "
                             f"described in longhorizon.algos (ppo.py is a complete example).")
        self.module = module
        self.__name__ = module.__name__

    def __getattr__(self, name: str) -> Any:
        if name == "module":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.module, name)

    def __repr__(self) -> str:
        return f"Algorithm({self.__name__})"

    # Equal wrappers of one module are one algorithm (compiled programs cached per algorithm are reused).
    def __eq__(self, other) -> bool:
        return isinstance(other, Algorithm) and other.module is self.module

    def __hash__(self) -> int:
        return hash(self.module)

    def has(self, hook: str) -> bool:
        """Whether the module defines the optional ``hook`` itself."""
        return hasattr(self.module, hook)

    def check_env(self, env, config) -> None:
        """Refuse an environment the algorithm cannot train on (default: accept every environment)."""
        if self.has("check_env"):
            self.module.check_env(env, config)

    def resolve_config(self, env, config):
        """Settings that depend on the environment (default: the config unchanged)."""
        return self.module.resolve_config(env, config) if self.has("resolve_config") else config

    def wrap_env(self, env, config):
        """The environment as the algorithm trains and evaluates on it (default: unchanged)."""
        return self.module.wrap_env(env, config) if self.has("wrap_env") else env

    def max_staleness(self, config) -> tuple[int, str]:
        """``(largest tolerated parameter-version lag of a batch, why)``; ``(-1, why)``: no asynchronous mode."""
        if not self.has("with_agent_params"):
            return -1, f"{self.NAME} has no with_agent_params(state, params) to hand parameters to an actor; use --mode sync"
        if self.has("max_staleness"):
            return self.module.max_staleness(config)
        if self.has("MAX_STALENESS"):
            return int(self.module.MAX_STALENESS), "(its declared MAX_STALENESS)"
        return -1, f"{self.NAME} declares no staleness tolerance (MAX_STALENESS); use --mode sync"

    def with_agent_params(self, state, params):
        """``state`` acting with the learner's ``params`` (only for algorithms with an asynchronous mode)."""
        if not self.has("with_agent_params"):
            raise UsageError(f"{self.NAME} cannot act with published parameters; use --mode sync.")
        return self.module.with_agent_params(state, params)


def as_algorithm(algo: ModuleType | Algorithm) -> Algorithm:
    """``algo`` checked against the protocol (an :class:`Algorithm` is returned as it is)."""
    return algo if isinstance(algo, Algorithm) else Algorithm(algo)


def register(name: str, module_path: str) -> None:
    ALGORITHMS[name] = module_path


def get(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        close = difflib.get_close_matches(name, list(ALGORITHMS), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"choose one of: {', '.join(sorted(ALGORITHMS))}."
        raise UsageError(f"unknown algorithm '{name}'; {hint}")
    return Algorithm(importlib.import_module(ALGORITHMS[name]))
