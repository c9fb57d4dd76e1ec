"""Single-turn GRPO with its completions sampled on Ray rollout workers (AReaL, Fu et al. 2025; MiMo's RL
infrastructure), through the request machinery of :mod:`longhorizon.lm.agents.async_rollout`.

One request is one step's whole generation batch: the step's problems, group sizes and PRNG key. A
worker samples it with the parameters the learner last published (:func:`longhorizon.lm.grpo.sample_completions`,
the same function the in-process rollout runs) and the learner scores it (the reward functions stay in
the learner's process). Per step, with ``V`` the policy version (one per step that changed the weights)::

    sync:   request (the step's problems, key split from the trainer's key) -> worker, sampled with version V
    async:  the workers keep up to max_staleness + 1 requests in flight, drawn from the sampler ahead of the
            steps with keys split from the trainer's key; the step takes the oldest, sampled with a version
            V - lag, lag <= max_staleness

``sync`` samples exactly what the in-process rollout samples (same function, parameters and key), so a run
is bit-identical to ``--actors 0`` (tested). In ``async`` mode a batch sampled by an older policy (lag > 0)
is corrected by the learner as AReaL's decoupled objective does: ``pi_old`` is recomputed with the current
weights (the proximal policy the clip is centred on) and each token's loss is weighted by the truncated
importance ratio ``min(pi_old / mu, C)`` of the current policy to the one that sampled it
(:func:`longhorizon.lm.grpo.rollout_weights`, ``rollout_is_cap``). The sampler runs ahead of the steps, so an
asynchronous run does not resume bit-exactly, and a curriculum sees its feedback up to max_staleness steps late.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np

from longhorizon.lm.agents.async_rollout import Config, Rollouts


@dataclasses.dataclass
class SampledBatch:
    """A request's result: one step's sampled completions (the Rollouts machinery stamps version, uid, group)."""

    rollout: dict
    group: int = 0
    version: int = -1
    uid: str = ""


@dataclasses.dataclass(frozen=True)
class CompletionSource:
    """Picklable: what a worker needs to sample a step's completions (the parameters arrive per request)."""

    model_cfg: Any
    tokenizer: Any
    grpo: Any  # GRPOConfig

    def build(self):
        import jax.numpy as jnp

        from longhorizon.lm.grpo import sample_completions

        def fn(params, tasks, seed, version):
            problems, sizes, key = tasks[0]
            return [SampledBatch(sample_completions(params, self.model_cfg, self.tokenizer, self.grpo, problems, sizes,
                                                    jnp.asarray(key, jnp.uint32)))]

        return fn


class GRPOWorkers:
    """A :class:`longhorizon.lm.grpo.GRPOTrainer`'s rollouts on Ray workers (module docstring): the trainer calls
    ``run(trainer, problems, sizes, key)`` in place of sampling in its own process. ``pull()`` (async) returns the
    next request's ``(problems, sizes, key)``: the run's sampler's next problems, a key split from the trainer's."""

    def __init__(self, source: CompletionSource, config: Config, pull=None):
        self.config, self.pull = config, pull
        self._queue: collections.deque = collections.deque()
        self.rollouts = Rollouts(source, self._requests(), dataclasses.replace(config, requests_per_batch=1))
        self.version = -1  # the policy version last published
        self._published = None  # the parameters object last published (a step that changed nothing keeps it)
        self.last_info: dict = {}

    @property
    def samples_itself(self) -> bool:
        return self.pull is not None

    def _requests(self):
        while True:
            if not self._queue:
                if self.pull is None:  # sync admits exactly the step's request
                    raise RuntimeError("sync rollout workers asked for a request the step did not give.")
                self._queue.append(self.pull())
            yield [self._queue.popleft()], 0

    def run(self, trainer, problems, sizes, key) -> dict:
        import jax

        if self.pull is None:  # async: the step's problems and key were drawn ahead by pull()
            self._queue.append((list(problems), None if sizes is None else [int(g) for g in sizes], np.asarray(key)))
        if trainer.params is not self._published:  # a new policy version: push the rollout copy of the weights
            params, _ = trainer.rollout_policy()
            self.version += 1
            self.rollouts.publish(jax.device_get(params), self.version)
            self._published = trainer.params
        (batch,), info = self.rollouts.next()
        self.last_info = info
        lag = self.version - batch.version
        return {**batch.rollout, "lag_max": lag,
                "worker_metrics": {"staleness": lag, "rollout_wait_s": info["wait_seconds"],
                                   "worker_retries": info["retries"], "worker_restarts": info["actor_restarts"],
                                   "dropped_stale": info["dropped_stale"]}}

    def close(self) -> None:
        self.rollouts.close()
