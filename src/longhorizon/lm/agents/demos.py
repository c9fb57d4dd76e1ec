"""Demonstrations from scripted experts, and supervised warm starts on them (action tokens only).

A scripted expert (``Expert(row).act(observation) -> (tool, kwargs)``, one per environment in
:mod:`longhorizon.lm.agents.envs`) plays through the real rollout (:class:`MultiTurnRollout` with
``policy=expert_policy(...)``), so demonstrations have exactly the token layout the learner sees:
the same prompts, tool descriptions, rendered observations and context strategy. With
``noise > 0`` each of the expert's calls is, with that probability, replaced by a call of a random
tool with a random argument from the context (a weaker, exploring behaviour policy for warm starts
that leave RL something to improve).

:func:`warm_start` is teacher forcing on the demonstrations' action tokens (``lm.sft``'s step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from longhorizon.lm.agents import protocol
from longhorizon.lm.agents.envs.common import ScriptedExpert
from longhorizon.lm.agents.trajectory import Trajectory


def expert_policy(expert_cls, tool_format: str, tokenizer, *, noise: float = 0.0, seed: int = 0, report: bool = False):
    """A rollout ``policy`` (see :class:`longhorizon.lm.agents.rollout.MultiTurnRollout`) playing ``expert_cls``
    (a :class:`~longhorizon.lm.agents.envs.common.ScriptedExpert` built from a task row).

    ``report``: every turn first writes ``<report>...</report>``, the note-taking a reconstructed-workspace
    context needs (IterResearch): the expert's own ``report()`` after reading the last observation when
    it gives one (a synthesis of bounded length), else every observation so far joined by ``; ``."""
    experts: dict[int, ScriptedExpert] = {}
    rng = np.random.default_rng(seed)

    def policy(params, contexts, key, episodes):
        out = []
        for e in episodes:
            if e.index not in experts or not e.turns:
                experts[e.index] = expert_cls(e.row)
            last = e.turns[-1].observation if e.turns else None
            name, kwargs = experts[e.index].act(last)
            tools = protocol.tool_methods(e.env)
            if noise and rng.random() < noise:
                name = str(rng.choice(sorted(tools)))
                words = [w for w in (last or e.row["prompt"]).replace(".", " ").split() if w.isalnum()] or ["x"]
                kwargs = {p: str(rng.choice(words)) for p in protocol.tool_schema(name, tools[name])["parameters"]["properties"]}
            text = protocol.format_tool_call(name, kwargs, tool_format, tools)
            if report:
                notes = experts[e.index].report()
                if notes is None:
                    notes = "; ".join(t.observation for t in e.turns if t.observation and not t.error)
                text = f"<report>{notes}</report>" + text
            ids = list(tokenizer.encode(text)) + [tokenizer.eos_ids[0]]
            out.append((ids, [0.0] * len(ids)))
        return out

    return policy


def demonstrations(model_cfg, tokenizer, env_factory, expert_cls, rows: Sequence[dict], agent, *, noise: float = 0.0,
                   seed: int = 0) -> list[Trajectory]:
    """One expert episode per row, through the real rollout (module docstring); with a workspace context
    the expert also keeps the report (:func:`expert_policy`)."""
    import jax

    from longhorizon.lm.agents.rollout import MultiTurnRollout

    policy = expert_policy(expert_cls, agent.tool_format, tokenizer, noise=noise, seed=seed,
                           report=agent.context == "workspace")
    rollout = MultiTurnRollout(model_cfg, tokenizer, env_factory, agent, policy=policy)
    return rollout.run(None, list(rows), 1, jax.random.PRNGKey(seed))


@dataclasses.dataclass(frozen=True)
class WarmStart:
    steps: int = 300
    batch_size: int = 16
    learning_rate: float = 1e-3
    warmup_steps: int = 30
    length_bucket: int = 64


def warm_start(params, model_cfg, tokenizer, trajectories: Sequence[Trajectory], cfg: WarmStart = WarmStart(), *,
               seed: int = 0, on_log=None):
    """Teacher forcing on the action tokens of ``trajectories`` (their sequences, shuffled); returns ``(params, history)``."""
    import jax
    import jax.numpy as jnp

    from longhorizon.lm.sft import make_optimizer, sft_step

    sequences = [s for t in trajectories for s in t.sequences if s.action_mask.any()]
    length = -(-max(len(s) for s in sequences) // cfg.length_bucket) * cfg.length_bucket
    tokens = np.full((len(sequences), length), tokenizer.pad_id, np.int32)
    valid = np.zeros((len(sequences), length), bool)
    mask = np.zeros((len(sequences), length - 1), np.float32)
    for i, s in enumerate(sequences):
        tokens[i, : len(s)], valid[i, : len(s)] = s.tokens, True
        mask[i, : len(s) - 1] = s.action_mask[1:]
    optimizer = make_optimizer(cfg.learning_rate, cfg.steps, cfg.warmup_steps, 0.0, 1.0)
    params = jax.tree_util.tree_map(jnp.array, params)
    opt_state = optimizer.init(params)
    rng = np.random.default_rng(seed)
    history = []
    for step in range(cfg.steps):
        idx = rng.choice(len(sequences), size=cfg.batch_size, replace=len(sequences) < cfg.batch_size)
        params, opt_state, m = sft_step(params, opt_state, jnp.asarray(tokens[idx]), jnp.asarray(valid[idx]),
                                        jnp.asarray(mask[idx]), cfg=model_cfg, optimizer=optimizer)
        if step % 50 == 0 or step == cfg.steps - 1:
            row = {"step": step + 1, **{k: float(v) for k, v in jax.device_get(m).items()}}
            history.append(row)
            if on_log is not None:
                on_log(row)
    return params, history


def demonstration_rows(env: str, rows: Sequence[dict], tool_format: str = "hermes",
                       max_observation_chars: int = 800) -> list[dict]:
    """TRL SFT rows (``{"messages": [...]}``) of the scripted expert's episodes of the registered environment
    ``env``, one per task row, for warm starts by ``lm sft --dataset`` (loss on the assistant turns).

    The messages are what :class:`~longhorizon.lm.agents.rollout.MultiTurnRollout` shows a policy with the
    full-history context: a system message listing the tools (``protocol.describe_tools``), the user's prompt
    (with what ``reset`` returned), then per turn the call in ``tool_format`` as the assistant and the
    environment's answer as a ``tool`` message (cut at ``max_observation_chars`` as the rollout cuts it), up
    to the call after which the environment is done. Each row also keeps ``reward`` (the episode's outcome)
    and ``turns``, so a user can filter."""
    from longhorizon.lm.agents import envs

    spec = envs.get(env)
    tools_text = protocol.describe_tools(spec.cls, tool_format)
    out = []
    for row in rows:
        environment = spec.cls()
        first = protocol.reset(environment, row)
        prompt = str(row["prompt"]) + (f"\n{first}" if first else "")
        expert, tools = spec.expert(row), protocol.tool_methods(environment)
        messages = [{"role": "system", "content": tools_text}, {"role": "user", "content": prompt}]
        observation, turns = None, 0
        while not protocol.is_done(environment) and turns < 64:
            name, kwargs = expert.act(observation)
            messages.append({"role": "assistant", "content": protocol.format_tool_call(name, kwargs, tool_format, tools)})
            observation = str(getattr(environment, name)(**kwargs))
            turns += 1
            if not protocol.is_done(environment):
                messages.append({"role": "tool", "content": protocol.cut_observation(observation, max_observation_chars)})
        reward = protocol.outcome(environment)[0]
        out.append({"messages": messages, "reward": float(reward), "turns": turns})
    return out
