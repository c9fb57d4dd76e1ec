"""What the run spine needs to train an agent: the environment, the rollout and credit settings, evaluation.

:class:`AgentSpec` goes into :class:`longhorizon.lm.run.RLSpec` (``agent=``); the spine then builds
an :class:`~longhorizon.lm.agents.trainer.AgentTrainer` instead of the single-turn GRPO trainer and
runs it with the same results folder, checkpoints, resume and progress. The sampler hands out task
rows (``make_tasks`` of a registered environment, or a user's rows).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.agents.envs import environment_class
from longhorizon.lm.agents.rollout import AgentConfig, MultiTurnRollout
from longhorizon.lm.agents.trainer import CreditConfig


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    env: str  # a registered environment (search, router, fees, research) or an import path
    agent: AgentConfig = AgentConfig()
    credit: CreditConfig = CreditConfig()
    latency_s: float = 0.0  # every tool call sleeps this long (the slow-environment setting)
    # rollout(trainer) -> a rollout replacing trainer.rollout (e.g. lm.agents.branching.BranchingRollout)
    rollout: Any = dataclasses.field(default=None, compare=False)
    # token_advantages(trajectories, trainer) -> per-token advantages replacing the credit rules (lm.agents.opd)
    token_advantages: Any = dataclasses.field(default=None, compare=False)
    # rollouts on Ray workers (lm.agents.async_rollout.Config; requests_per_batch = tasks per step), None: here
    workers: Any = None

    def check(self) -> None:
        if self.latency_s < 0:
            raise UsageError(f"latency_s={self.latency_s} must be 0 or positive.")
        environment_class(self.env, self.latency_s)

    def describe(self) -> dict:
        from longhorizon.runner.results import to_jsonable

        return {"env": self.env, "agent": to_jsonable(self.agent), "credit": to_jsonable(self.credit),
                "latency_s": self.latency_s, "workers": to_jsonable(self.workers),
                **{k: repr(getattr(self, k)) for k in ("rollout", "token_advantages") if getattr(self, k) is not None}}

    def trainer(self, policy, grpo_cfg, seed: int, sampler=None, updater=None):
        """The trainer; with ``workers`` in async mode it pulls its task rows from ``sampler`` ahead of the steps;
        ``updater`` runs its optimiser steps (e.g. sharded on a mesh, :class:`longhorizon.lm.sharding.ShardedUpdate`)."""
        from longhorizon.lm.agents.trainer import AgentTrainer

        trainer = AgentTrainer(policy.model_cfg, policy.params, policy.tokenizer, grpo_cfg, self.agent,
                               environment_class(self.env, self.latency_s), self.credit, seed=seed,
                               token_advantages=self.token_advantages, updater=updater)
        if self.rollout is not None:  # built from the trainer: its agent settings and its in-process rollout
            trainer.rollout = self.rollout(trainer)
        if self.workers is not None:
            from longhorizon.lm.agents.workers import AgentSource, WorkerRollout

            source = AgentSource(policy.model_cfg, policy.tokenizer, self.env, trainer.agent, self.latency_s)
            pull = None
            if self.workers.mode == "async":
                seeds = iter(range(10**9))  # one seed per request, in the order the sampler hands rows out

                def pull():
                    rows, _ = sampler.sample(self.workers.requests_per_batch)
                    return rows, [seed * 7919 + next(seeds) for _ in rows]

            trainer.rollout = WorkerRollout(source, self.workers, grpo_cfg.num_generations, pull=pull)
        return trainer


@dataclasses.dataclass(frozen=True)
class AgentEval:
    """Greedy episodes on held-out task rows, every ``every`` steps (0: after the last step only)."""

    problems: tuple = dataclasses.field(compare=False, repr=False)  # the held-out rows
    env: str = ""
    agent: AgentConfig = AgentConfig()
    every: int = 0
    latency_s: float = 0.0
    at_start: bool = False  # True: also play the held-out rows with the starting policy (a metrics row at step 0)

    def describe(self) -> dict:
        return {"problems": len(self.problems), "every": self.every, "greedy": True}

    def run(self, params, policy) -> dict:
        import jax

        agent = dataclasses.replace(self.agent, temperature=0.0)
        rollout = MultiTurnRollout(policy.model_cfg, policy.tokenizer, environment_class(self.env, self.latency_s), agent)
        trajs = rollout.run(params, list(self.problems), 1, jax.random.PRNGKey(0))
        return summarize(trajs)

    def row(self, evaluation: dict) -> dict:
        return {"eval_reward": evaluation["reward"], "eval_success": evaluation["success"],
                "eval_turns": evaluation["turns"], "eval_tool_errors": evaluation["tool_errors"]}


def summarize(trajectories) -> dict[str, Any]:
    """Mean reward, success (reward > 0), turns, tool errors, finished fraction and context length of episodes."""
    rewards = np.array([t.reward for t in trajectories], np.float64)
    return {"episodes": len(trajectories), "reward": float(rewards.mean()), "success": float((rewards > 0).mean()),
            "turns": float(np.mean([t.n_turns for t in trajectories])),
            "tool_errors": float(np.mean([t.tool_errors for t in trajectories])),
            "finished": float(np.mean([t.finished for t in trajectories])),
            "context_tokens_max": int(max(len(s) for t in trajectories for s in t.sequences))}
