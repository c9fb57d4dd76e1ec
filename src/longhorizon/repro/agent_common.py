"""Shared protocol of the agent reproductions (issue 15): a warm-started tiny agent, RL arms, held-out success.

Scale (2 CPU cores): the policy is ``tiny-random`` (a 2-layer, d=64 Llama over bytes with ChatML),
warm-started by teacher forcing on scripted-expert episodes of the environment
(:mod:`longhorizon.lm.agents.demos`; a share ``demo_noise`` of the expert's calls replaced by random
calls, so the warm start is imperfect and RL has something to improve). Each arm then trains from
that same warm start through the LM run spine (``lm agent``'s code path) for the same number of
steps, prompts and generations, and is scored greedily on held-out tasks. Warm starts are cached
(``$LONGHORIZON_CACHE/agents``, :mod:`longhorizon.lm.policy_cache`) by their settings, so the
arms and later runs share them.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np

from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.agents.trainer import CreditConfig
from longhorizon.repro import claims as C
from longhorizon.repro.report import mean_se, plot_curves, verdict_lines, write, write_run  # noqa: F401  (used as common.*)


@dataclasses.dataclass(frozen=True)
class AgentRepro:
    env: str
    task_args: tuple = ()  # (("hops", 2), ...) for the environment's make_tasks
    variants: tuple = ()  # ((("hops", 1),), (("hops", 2),)): rows drawn from each in turn, over task_args
    # 256-token length buckets: few compiled shapes (compilation, not compute, dominates a tiny model on CPU)
    agent: AgentConfig = AgentConfig(tool_format="tags", describe_tools=False, max_action_tokens=40, length_bucket=256)
    demos: int = 256
    demo_noise: float = 0.3
    warm_steps: int = 300
    warm_lr: float = 3e-3
    warm_batch: int = 16  # sequences per teacher-forcing step (attention over ~1k-token episodes is the cost)
    train_tasks: int = 256
    eval_tasks: int = 64
    steps: int = 30
    prompts_per_step: int = 4
    num_generations: int = 8
    learning_rate: float = 1e-4
    beta: float = 0.0
    seeds: int = 2
    shared_warm_start: bool = False  # True: one warm start (seed 0) for every RL seed (saves its cost per seed)

    def rows(self, n: int, seed: int, **extra) -> list[dict]:
        from longhorizon.lm.agents import envs

        make = envs.get(self.env).make_tasks
        if not self.variants or extra:
            return make(n, seed=seed, **{**dict(self.task_args), **extra})
        parts = [make(-(-n // len(self.variants)), seed=seed, **{**dict(self.task_args), **dict(v)}) for v in self.variants]
        return [parts[i % len(parts)][i // len(parts)] for i in range(n)]

    def scale(self) -> str:
        return (f"tiny-random (2 layers, d=64, bytes), warm start: {self.warm_steps} teacher-forcing steps of "
                f"{self.warm_batch} sequences on "
                f"{self.demos} expert episodes ({self.demo_noise:.0%} of the calls random); RL: {self.steps} steps x "
                f"{self.prompts_per_step} tasks x {self.num_generations} episodes, lr {self.learning_rate:g}, "
                f"{self.seeds} seed(s){' from one shared warm start' if self.shared_warm_start else ''}; "
                f"{self.eval_tasks} held-out tasks, greedy.")


NON_INFERIOR = -0.05  # "at least as good": the 95% interval of the success difference above -0.05 (stated before the runs)


def training(rows_per_arm: dict) -> dict:
    """Per arm (``rows_per_arm[arm]`` = each seed's metrics rows): each seed's training reward curve and share of
    GRPO groups whose rewards were not all equal (a group with equal rewards gives no gradient)."""
    out = {}
    for arm, seeds in rows_per_arm.items():
        reward = [[row["reward"] for row in rows if "reward" in row] for rows in seeds]
        n = min(len(r) for r in reward)
        mixed = [1.0 - float(np.mean(f)) for f in ([row["groups_no_signal_fraction"] for row in rows
                                                      if "groups_no_signal_fraction" in row] for rows in seeds) if f]
        out[arm] = {"reward": [r[:n] for r in reward], "groups_with_signal": mixed}
    return out


def learned(arm: str, L: dict, eval_start, eval_end, what: str = "held-out success", key: str | None = None,
            curve=None) -> list[dict]:
    """Did ``arm`` learn? Its held-out ``eval_end`` against ``eval_start`` and its curve over training: ``curve``
    (per seed) if given, else the training reward where the run kept it (``L["training"][key or arm]``,
    :func:`training`); and the share of its GRPO groups with a signal (:func:`longhorizon.repro.claims.group_signal`)."""
    t = L.get("training", {}).get(key or arm)
    if curve is None and t:
        curve, what = t["reward"], "training reward"
    signals = [C.arm_signal(arm, curve, eval_start=eval_start, eval_end=eval_end, what=what)]
    return signals + ([C.group_signal(arm, float(np.mean(t["groups_with_signal"])))] if t and t["groups_with_signal"] else [])


def curves(rows_per_arm: dict) -> dict:
    """Each arm's training curve for :func:`longhorizon.repro.claims.write_curve`: every metrics row, with its seed."""
    return {arm: [dict(row, seed=i) for i, rows in enumerate(seeds) for row in rows] for arm, seeds in rows_per_arm.items()}


def finish(out: Path, paper: str, name: str, setup: "AgentRepro", recorded: dict, judge, lines_of, quick: bool,
           rows_per_arm: dict, wall_seconds: float) -> dict:
    """Judge ``recorded`` (``judge(recorded, quick) -> (claims, arms)``), write the summary in the claims schema,
    the README (``lines_of(summary)``) and each arm's training curve; return the summary."""
    recorded = C.as_recorded(recorded)  # judged as recorded (string keys), as a re-judging sees it
    claims, arms = judge(recorded, quick)
    summary = C.summary(paper=paper, claims=claims, arms=arms, scale=setup.scale(), quick=quick,
                        command=f"longhorizon repro {name}" + (" --quick" if quick else ""), wall_seconds=wall_seconds,
                        **recorded)
    write_run(out, summary, lines_of(summary), curves(rows_per_arm))
    return summary


def warm_policy(setup: AgentRepro, seed: int = 0, agent: AgentConfig | None = None, progress=print):
    """The warm-started policy (module docstring; :func:`longhorizon.lm.agents.warm_policy.cached_warm_start`)."""
    from longhorizon.lm.agents.warm_policy import cached_warm_start

    return cached_warm_start(setup.env, setup.rows, agent or setup.agent,
                             tasks={"task_args": setup.task_args, "variants": setup.variants}, demos=setup.demos,
                             noise=setup.demo_noise, steps=setup.warm_steps, learning_rate=setup.warm_lr,
                             batch_size=setup.warm_batch, seed=0 if setup.shared_warm_start else seed, progress=progress)


def evaluate(policy, params, setup: AgentRepro, rows, agent: AgentConfig | None = None) -> dict:
    """Greedy held-out episodes: :func:`longhorizon.lm.agents.spec.summarize` of them."""
    from longhorizon.lm.agents.spec import AgentEval

    return AgentEval(tuple(rows), setup.env, agent or setup.agent).run(params, policy)


def train_arm(out: Path, policy, setup: AgentRepro, credit: CreditConfig, *, seed: int, held, agent: AgentConfig | None = None,
              eval_every: int = 0, keep_params: bool = False, spec_options: dict | None = None) -> dict:
    """One RL arm through the run spine; ``{"summary", "rows"}`` and with ``keep_params`` the final
    ``"params"`` (the checkpoints are removed, the metrics kept). ``spec_options``: further
    :class:`~longhorizon.lm.agents.spec.AgentSpec` fields (``rollout``, ``token_advantages``)."""
    from longhorizon.lm import samplers
    from longhorizon.lm.agents.spec import AgentEval, AgentSpec
    from longhorizon.lm.grpo import GRPOConfig
    from longhorizon.lm.run import RLSpec, run_rl
    from longhorizon.runner.results import read_metrics

    agent = agent or setup.agent
    grpo = GRPOConfig(num_generations=setup.num_generations, learning_rate=setup.learning_rate, beta=setup.beta,
                      max_prompt_length=1, max_completion_length=agent.max_context_tokens - 1)
    spec = RLSpec(out=str(out), init=policy, grpo=grpo,
                  sampler=samplers.ShuffledPool(tuple(setup.rows(setup.train_tasks, seed)), seed=seed),
                  steps=setup.steps, prompts_per_step=setup.prompts_per_step,
                  evaluation=AgentEval(tuple(held), setup.env, agent, every=eval_every), checkpoint_every=setup.steps,
                  seed=seed, agent=AgentSpec(setup.env, agent, credit, **(spec_options or {})))
    shutil.rmtree(out, ignore_errors=True)
    summary = run_rl(spec, quiet=True)
    params = None
    if keep_params:
        from longhorizon.lm.run_checkpoint import RunCheckpoints

        with RunCheckpoints(out / "checkpoints", read_only=True) as store:
            params = store.restore_params(policy.params)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    rows = read_metrics(out)
    return {"summary": summary, "rows": rows, "params": params}


def run_arms(out: Path, setup: AgentRepro, arms: dict[str, tuple[str, CreditConfig, dict]], eval_every: int):
    """Every arm from each seed's warm start: ``arms[label] = (folder slug, credit, spec_options)``.

    Returns ``(warm, results, held)``: the warm start's held-out evaluations (once when the warm start is
    shared: greedy decoding scores it the same every time), ``results[label]`` one :func:`train_arm`
    result per seed, and the held-out rows."""
    held = setup.rows(setup.eval_tasks, 10_000)
    results = {label: [] for label in arms}
    warm = []
    for seed in range(setup.seeds):
        policy = warm_policy(setup, seed)
        if seed == 0 or not setup.shared_warm_start:
            warm.append(evaluate(policy, policy.params, setup, held))
        for label, (slug, credit, options) in arms.items():
            results[label].append(train_arm(out / "runs" / f"{slug}-seed{seed}", policy, setup, credit, seed=seed,
                                            held=held, eval_every=eval_every, spec_options=options))
    return warm, results, held

