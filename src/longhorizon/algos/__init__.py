"""Algorithms. Each module follows one protocol:

``NAME``, a frozen ``Config`` (validated on construction), ``default_config(env_id)``,
``steps_per_update(config)``, ``init(key, env, config) -> state``,
``collect(state) -> (state, batch)``, ``learn(state, batch) -> (state, metrics)``,
``agent_params(state)`` and ``act(params, obs, key, greedy)``.

Batches expose ``episode_return`` and ``episode_done`` (time-major) for the engine's statistics.

Optional hooks: ``check_env(env, config)`` refuses an environment before compiling (e.g. a
continuous action space for a Q-learning method); ``resolve_config(env, config) -> config`` fills in
settings that depend on the environment (e.g. its horizon); ``wrap_env(env, config) -> env`` wraps
the environment for training and evaluation alike (e.g. SQIRL adds the time step to observations); for the Ray engine's asynchronous mode,
``max_staleness(config) -> (versions, why)`` (or a constant ``MAX_STALENESS``) declares how many
parameter versions old a batch may be, and ``with_agent_params(state, params)`` lets an actor act
with parameters published by the learner.
"""

from __future__ import annotations

import importlib
import difflib
from types import ModuleType

from longhorizon.errors import UsageError

ALGORITHMS = {
    "ppo": "longhorizon.algos.ppo",
    "pqn": "longhorizon.algos.pqn",
    "dqn": "longhorizon.algos.dqn",
    "sqirl": "longhorizon.algos.sqirl",
}


def register(name: str, module_path: str) -> None:
    ALGORITHMS[name] = module_path


def get(name: str) -> ModuleType:
    if name not in ALGORITHMS:
        close = difflib.get_close_matches(name, list(ALGORITHMS), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"choose one of: {', '.join(sorted(ALGORITHMS))}."
        raise UsageError(f"unknown algorithm '{name}'; {hint}")
    return importlib.import_module(ALGORITHMS[name])
