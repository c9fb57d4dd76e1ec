"""Warm-started agent policies kept on disk, so RL arms, seeds and later runs start from the same one.

A warm start is the ``tiny-random`` policy (:func:`longhorizon.lm.policy.tiny_random`) taught by teacher forcing
(:func:`longhorizon.lm.agents.demos.warm_start`) on a scripted expert's episodes of an environment, a share ``noise``
of the expert's calls replaced by random calls (:func:`longhorizon.lm.agents.demos.demonstrations`), so it succeeds
only sometimes and RL has something to improve. :func:`cached_warm_start` keeps it in ``$LONGHORIZON_CACHE/agents``
(:mod:`longhorizon.lm.policy_cache`), named by everything that makes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from longhorizon.lm.agents.rollout import AgentConfig


def cached_warm_start(env: str, rows: Callable[[int, int], list[dict]], agent: AgentConfig, *, tasks: dict[str, Any],
                      demos: int, noise: float, steps: int, learning_rate: float, batch_size: int = 16, seed: int = 0,
                      progress: Callable[[str], Any] = print):
    """The warm-started :class:`~longhorizon.lm.run.Policy` of ``env`` (module docstring), from the cache when it was
    made before: ``demos`` expert episodes on ``rows(demos, seed + 500)`` (``rows(n, seed)``: task rows of ``env``;
    ``tasks`` describes how they are drawn and enters the cache key), then ``steps`` teacher-forcing steps of
    ``batch_size`` sequences at ``learning_rate``, all from ``seed``."""
    from longhorizon.lm.agents import envs
    from longhorizon.lm.agents.demos import WarmStart, demonstrations, warm_start
    from longhorizon.lm.policy import tiny_random
    from longhorizon.lm.policy_cache import cache_path, load_or_train
    from longhorizon.lm.run import Policy

    base = tiny_random(seed=seed)
    settings = {"env": env, **tasks, "agent": dataclasses.replace(agent, length_bucket=1), "demos": demos,
                "noise": noise, "steps": steps, "lr": learning_rate, "seed": seed,
                **({"batch": batch_size} if batch_size != 16 else {})}
    path = cache_path("agents", f"{env}-", settings)

    def train():
        spec = envs.get(env)
        progress(f"warm start: {demos} expert episodes of {env}, {steps} teacher-forcing steps")
        episodes = demonstrations(base.cfg, base.tokenizer, spec.cls, spec.expert, rows(demos, seed + 500), agent,
                                  noise=noise, seed=seed)
        return warm_start(base.params, base.cfg, base.tokenizer, episodes,
                          WarmStart(steps=steps, batch_size=batch_size, learning_rate=learning_rate), seed=seed)[0]

    return Policy(load_or_train(path, base.params, train), base.cfg, base.tokenizer, f"warm start {path.name}")
