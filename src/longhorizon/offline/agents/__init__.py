"""Offline goal-conditioned agents. Each module follows one protocol:

``NAME``, a frozen ``Config`` (validated on construction), ``init(key, obs_dim, action_dim, config) ->
TrainState``, ``sample(key, data, config) -> batch`` (from a :class:`~longhorizon.offline.samplers.GoalData`
on device), ``learn(state, batch, config) -> (state, metrics)`` and ``act(params, obs [B, D], goals
[B, D], config) -> actions [B, A]`` (deterministic: the policy's mean, clipped to [-1, 1]).
Value-based agents also define ``values(params, obs, goals, config) -> [B]`` (the value the high-level
or only policy is trained against).

:func:`update` is one sample -> learn step, the body that :mod:`longhorizon.offline.train` scans.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from types import ModuleType

import jax

from longhorizon.config import AlgoConfig
from longhorizon.errors import UsageError
from longhorizon.offline.samplers import GoalMixture

AGENTS = {
    "gcbc": "longhorizon.offline.agents.gcbc",
    "gcivl": "longhorizon.offline.agents.gcivl",
    "hiql": "longhorizon.offline.agents.hiql",
    "ota": "longhorizon.offline.agents.ota",
}

# The reference networks and batch of HIQL/OGBench (for a GPU); the defaults are sized for 2 CPU cores.
PRESETS = {"cpu": {}, "paper": {"hidden": "512,512,512", "batch_size": "1024"}}


def get(name: str) -> ModuleType:
    if name not in AGENTS:
        close = difflib.get_close_matches(name, list(AGENTS), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"choose one of: {', '.join(sorted(AGENTS))}."
        raise UsageError(f"unknown offline agent '{name}'; {hint}")
    return importlib.import_module(AGENTS[name])


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """Fields every goal-conditioned agent has (OGBench's defaults except ``hidden`` and ``batch_size``)."""

    batch_size: int = 256
    learning_rate: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    discount: float = 0.99
    actor_p_current: float = 0.0
    actor_p_trajectory: float = 1.0
    actor_p_random: float = 0.0
    actor_geometric: bool = False

    # the project's one set of validation helpers, each raising one clear sentence
    _fail = AlgoConfig._fail
    _check_positive = AlgoConfig._check_positive
    _check_unit_interval = AlgoConfig._check_unit_interval
    to_dict = AlgoConfig.to_dict

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        self._check_positive("batch_size", "learning_rate")
        if not self.hidden or min(self.hidden) < 1:
            self._fail("hidden", "must list positive layer widths", "pass e.g. --hidden 256,256")
        if not 0.0 < self.discount < 1.0:
            self._fail("discount", "must lie strictly between 0 and 1", "pass e.g. --discount 0.99")
        self._check_unit_interval("actor_p_current", "actor_p_trajectory", "actor_p_random")
        self.actor_goals()

    def actor_goals(self) -> GoalMixture:
        return GoalMixture(self.actor_p_current, self.actor_p_trajectory, self.actor_p_random, self.actor_geometric)


@dataclasses.dataclass(frozen=True)
class ValueAgentConfig(AgentConfig):
    """Fields of the agents that learn a goal-conditioned value with an expectile loss."""

    expectile: float = 0.7
    tau: float = 0.005  # target-network Polyak rate
    layer_norm: bool = True  # in the value network
    value_p_current: float = 0.2
    value_p_trajectory: float = 0.5
    value_p_random: float = 0.3
    value_geometric: bool = True

    def validate(self) -> None:
        super().validate()
        self._check_unit_interval("expectile", "tau", "value_p_current", "value_p_trajectory", "value_p_random")
        self.value_goals()

    def value_goals(self) -> GoalMixture:
        return GoalMixture(self.value_p_current, self.value_p_trajectory, self.value_p_random, self.value_geometric)


def update(agent: ModuleType, config, state, data):
    """One update: draw a batch from ``data`` with the state's key, then ``agent.learn``."""
    key, sample_key = jax.random.split(state.key)
    batch = agent.sample(sample_key, data, config)
    return agent.learn(state._replace(key=key), batch, config)
