"""The agent trainer's rollouts on Ray workers (:mod:`longhorizon.lm.agents.async_rollout`), as its ``rollout=``.

:class:`AgentSource` is the picklable rollout source: each worker builds one
:class:`~longhorizon.lm.agents.rollout.MultiTurnRollout` of the environment and plays whole groups
with the parameters the learner published. :class:`WorkerRollout` is what
:class:`~longhorizon.lm.agents.trainer.AgentTrainer` calls each step in place of the in-process rollout:

* ``sync``: the step's task rows become one request per row (``num_generations`` episodes, one
  group) with seeds drawn from the trainer's key exactly as the in-process rollout draws its key,
  and the batch is generated with the current parameters: the same trajectories as the in-process
  rollout given the same request split, so a training run is bit-identical to ``actors = 0``
  (tested against the in-process loop);
* ``async``: the workers generate ahead with the newest published parameters; the learner takes
  batches at most ``max_staleness`` versions old and corrects them (the trainer's decoupled PPO
  correction). The task rows then come from the run's sampler ahead of the step that trains on them
  (``pull``), so an asynchronous run does not resume bit-exactly (its sampler has run ahead).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Any

import jax
import numpy as np

from longhorizon.lm.agents.async_rollout import Config, Rollouts
from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.protocols import AgentRollout


@dataclasses.dataclass(frozen=True)
class AgentSource:
    """Picklable: what a worker needs to build the rollout (the parameters arrive per request)."""

    model_cfg: Any
    tokenizer: Any
    env: str  # a registered environment or an import path (longhorizon.lm.agents.envs.environment_class)
    agent: AgentConfig
    latency_s: float = 0.0

    def build(self):
        from longhorizon.lm.agents.rollout import MultiTurnRollout
        from longhorizon.lm.agents.envs import environment_class

        rollout = MultiTurnRollout(self.model_cfg, self.tokenizer, environment_class(self.env, self.latency_s), self.agent)

        def fn(params, tasks, seed, version):
            # a request is one group: num_generations copies of one row
            return rollout.run(params, tasks[:1], len(tasks), request_key(seed), version=version)

        return fn


def request_key(seed: int):
    """The PRNG key of a request's seed (seeds are 31-bit integers drawn from the trainer's key)."""
    return jax.random.PRNGKey(int(seed))


class WorkerRollout(AgentRollout):
    """``run(params, rows, group_size, key, version)`` on Ray workers (module docstring)."""

    def __init__(self, source: AgentSource, config: Config, group_size: int, pull=None):
        self.group_size, self.pull, self.config = group_size, pull, config
        self._queue: collections.deque = collections.deque()
        self._counter = itertools.count()
        self.rollouts = Rollouts(source, self._stream(), config)
        self.last_info: dict = {}

    def _stream(self):
        while True:
            if not self._queue:
                if self.pull is None:  # sync admits exactly the step's requests, so this cannot happen
                    raise RuntimeError("sync worker rollouts asked for more requests than the step gave.")
                rows, seeds = self.pull()
                self._queue.extend(zip(rows, seeds))
            row, seed = self._queue.popleft()
            yield [row] * self.group_size, seed

    def run(self, params, rows, group_size: int, key, version: int = 0, uid_prefix: str = ""):
        if group_size != self.group_size:
            raise ValueError(f"worker rollouts were built for groups of {self.group_size}, not {group_size}.")
        if self.pull is None:  # sync: exactly this step's rows, seeds from this step's key
            seeds = np.asarray(jax.random.randint(key, (len(rows),), 0, 2**31 - 1)).tolist()
            self._queue.extend(zip(rows, seeds))
        self.rollouts.publish(params, version)
        trajectories, self.last_info = self.rollouts.next()
        return trajectories

    @property
    def samples_itself(self) -> bool:
        """True in async mode: the rows come from ``pull`` ahead of the steps, not from the step's caller."""
        return self.pull is not None

    def close(self) -> None:
        self.rollouts.close()


def in_process_equivalent(source: AgentSource, params, rows, group_size: int, key, version: int = 0):
    """What sync workers return for one step, computed here (the reference of the equality test)."""
    fn = source.build()
    seeds = np.asarray(jax.random.randint(key, (len(rows),), 0, 2**31 - 1)).tolist()
    out = []
    for request, (row, seed) in enumerate(zip(rows, seeds)):
        trajectories = fn(params, [row] * group_size, seed, version)
        for index, t in enumerate(trajectories):
            t.group, t.uid = request, f"{request}-{index}"
        out.extend(trajectories)
    return out
