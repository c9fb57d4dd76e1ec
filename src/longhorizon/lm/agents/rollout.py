"""Multi-turn rollouts: a batch of episodes, each alternating model turns and environment turns.

Per round, every live episode's context is left-padded into one batch and sampled with the jitted
KV-cache generator (:func:`longhorizon.lm.generate.generate`, exact behaviour log-probabilities);
each turn is parsed for tool calls (:mod:`longhorizon.lm.agents.protocol`), the calls run (the
batch's calls concurrently, ``tool_concurrency`` threads), and the observations are appended::

    for t in 0 .. max_turns-1:
        contexts = [context(e) for e in live episodes]        # full history, or a rebuilt workspace
        actions, logprobs = generate(params, contexts)        # stop at the turn's stop token
        for e: calls = parse(action); if none or env.done: e ends
               else: observation = run(calls); append observation tokens (masked out of the loss)

Token ids are appended as sampled and never re-tokenised, so the learner's teacher-forced pass
sees exactly what the sampler conditioned on. Context strategies (``context``):

* ``full``: the whole history ``prompt, a_1, o_1, a_2, ...`` is one sequence;
* ``workspace`` (IterResearch): each round's context is rebuilt from the question, the latest report
  the model wrote in ``<report>...</report>`` and the last action and observation, so its length is
  bounded by the report size, not by the number of rounds; every round is its own sequence.

An episode that would exceed ``max_context_tokens`` ends unfinished (``Trajectory.finished = False``),
as does one still running after ``max_turns`` rounds.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.agents import protocol
from longhorizon.lm.agents.trajectory import TokenSequence, Trajectory, Turn
from longhorizon.lm.protocols import AgentRollout

CONTEXTS = ("full", "workspace")
_REPORT = re.compile(r"<report>(.*?)</report>", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    max_turns: int = 4
    max_action_tokens: int = 64  # per model turn
    max_context_tokens: int = 1024  # the longest sequence an episode may grow to
    context: str = "full"  # "full" | "workspace"
    tool_format: str = "hermes"  # "hermes" | "tags" (protocol.TOOL_FORMATS)
    observation_role: str = "tool"  # the chat role observations are rendered with
    max_observation_chars: int = 800  # longer observations are cut (and say so)
    tool_timeout_s: float | None = 30.0
    tool_concurrency: int = 8  # threads running one round's tool calls
    temperature: float = 1.0  # 0: greedy (evaluation); training samples at the GRPO config's temperature
    top_p: float = 1.0
    describe_tools: bool = True  # list the tools and the call format in the first message
    length_bucket: int = 32  # contexts are padded to a multiple of this (few compiled shapes)
    batch_multiple: int = 8

    def __post_init__(self):
        if self.context not in CONTEXTS:
            raise UsageError(f"context={self.context!r} is unknown; use one of {CONTEXTS}.")
        if self.tool_format not in protocol.TOOL_FORMATS:
            raise UsageError(f"tool_format={self.tool_format!r} is unknown; use one of {protocol.TOOL_FORMATS}.")
        for name in ("max_turns", "max_action_tokens", "max_context_tokens", "tool_concurrency", "length_bucket",
                     "batch_multiple", "max_observation_chars"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name}={getattr(self, name)} must be a positive integer.")
        if self.max_action_tokens >= self.max_context_tokens:
            raise UsageError(f"max_action_tokens={self.max_action_tokens} leaves no room for a prompt within "
                             f"max_context_tokens={self.max_context_tokens}; raise max_context_tokens.")
        if self.temperature < 0:
            raise UsageError(f"temperature={self.temperature} must be 0 (greedy) or positive.")


# ----------------------------------------------------------------------------- text of turns


class ChatFormat:
    """Renders first messages and observations as text, with the tokenizer's chat template when it has one.

    Without a template (the character-level tokenizer) the prompt is ``prompt + "\\n"`` and an
    observation is ``observation + "\\n"`` after the model's stop token."""

    def __init__(self, tokenizer, cfg: AgentConfig):
        self.tok, self.cfg = tokenizer, cfg
        self.chat = bool(getattr(tokenizer, "chat_template", None))
        if self.chat:
            user = [{"role": "user", "content": "q"}]
            before = tokenizer.apply_chat_template(user + [{"role": "assistant", "content": "A"}], add_generation_prompt=False)
            after = tokenizer.apply_chat_template(user + [{"role": "assistant", "content": "A"},
                                                          {"role": cfg.observation_role, "content": "\x00"}],
                                                  add_generation_prompt=True)
            if not after.startswith(before) or "\x00" not in after:
                raise UsageError("the chat template renders a conversation differently when a message is appended, so "
                                 "observations cannot be appended token by token; use a ChatML-style template.")
            stop = tokenizer.decode([tokenizer.eos_ids[0]])
            trailer = before[before.rindex("A") + 1:]
            self._after_stop = trailer[len(stop):] if trailer.startswith(stop) else trailer
            self._stop_text = stop
            self._observation = after[len(before):]

    def first_prompt(self, prompt: str, tools_text: str | None) -> str:
        if not self.chat:
            return (f"{tools_text}\n" if tools_text else "") + prompt + "\n"
        messages = ([{"role": "system", "content": tools_text}] if tools_text else []) + [{"role": "user", "content": prompt}]
        return self.tok.apply_chat_template(messages, add_generation_prompt=True)

    def observation(self, text: str, stopped: bool) -> str:
        """What follows a model turn: the end of its message (the stop token if it did not stop), the observation."""
        if not self.chat:
            return ("" if stopped else "\n") + text + "\n"
        head = "" if stopped else self._stop_text
        before, after = self._observation.split("\x00")
        return head + self._after_stop + before + text + after

    def workspace(self, prompt: str, report: str, last_action: str | None, last_observation: str | None) -> str:
        block = f"{prompt}\n\nReport so far: {report or '(empty)'}"
        if last_action is not None:
            block += f"\nLast action: {last_action}\nLast result: {last_observation}"
        return block + "\nUpdate the report in <report>...</report>, then act."


# ----------------------------------------------------------------------------- one episode's state


@dataclasses.dataclass
class _Episode:
    index: int
    group: int
    row: dict
    env: Any
    prompt_text: str
    tools_text: str | None
    tokens: list[int]
    mask: list[bool]
    logprobs: list[float]
    turn_ids: list[int]
    sequences: list[TokenSequence] = dataclasses.field(default_factory=list)
    turns: list[Turn] = dataclasses.field(default_factory=list)
    report: str = ""
    done: bool = False
    finished: bool = False

    def context(self, fmt: ChatFormat, encode) -> list[int]:
        if fmt.cfg.context == "full":
            return self.tokens
        last = self.turns[-1] if self.turns else None
        text = fmt.workspace(self.prompt_text, self.report, _REPORT.sub("", last.action).strip() if last else None,
                             last.observation if last else None)
        return encode(fmt.first_prompt(text, self.tools_text))


class MultiTurnRollout(AgentRollout):
    """Runs episodes of an environment factory with a policy (module docstring).

    ``policy`` replaces the model's sampling (a scripted expert writing demonstrations, see
    :func:`longhorizon.lm.agents.demos.expert_policy`).
    ``run(params, rows, group_size, key, version)`` returns ``len(rows) * group_size`` trajectories,
    rows ``g*S .. g*S+S-1`` of group ``g`` (every member of a group gets a fresh environment reset
    with the same row)."""

    def __init__(self, model_cfg, tokenizer, env_factory: Callable[[], Any], cfg: AgentConfig, policy: Callable | None = None):
        self.model_cfg, self.tok, self.cfg = model_cfg, tokenizer, cfg
        self.policy = policy  # None: the model samples; else policy(params, contexts, key, episodes) like sample()
        self.factory = protocol.make_factory(env_factory)
        self.fmt = ChatFormat(tokenizer, cfg)
        context = model_cfg.context_length
        if context is not None and cfg.max_context_tokens > context:
            raise UsageError(f"max_context_tokens={cfg.max_context_tokens} exceeds the model's context of {context} "
                             "tokens; lower it.")

    def _encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text))

    def _start(self, index: int, group: int, row: dict) -> _Episode:
        if "prompt" not in row:
            raise UsageError(f"a task row has no 'prompt' column (columns: {sorted(row)}); every row needs one.")
        env = self.factory()
        first = protocol.reset(env, row)
        prompt = str(row["prompt"]) + (f"\n{first}" if first else "")
        tools_text = protocol.describe_tools(env, self.cfg.tool_format) if self.cfg.describe_tools else None
        ids = self._encode(self.fmt.first_prompt(prompt, tools_text))
        n = len(ids)
        return _Episode(index, group, row, env, prompt, tools_text, ids, [False] * n, [0.0] * n, [-1] * n)

    def run(self, params, rows: Sequence[dict], group_size: int, key, version: int = 0, uid_prefix: str = "") -> list[Trajectory]:
        cfg = self.cfg
        episodes = [self._start(g * group_size + s, g, dict(row)) for g, row in enumerate(rows) for s in range(group_size)]
        stops = tuple(self.tok.eos_ids)
        with concurrent.futures.ThreadPoolExecutor(max_workers=cfg.tool_concurrency) as pool:
            for t in range(cfg.max_turns):
                live = [e for e in episodes if not e.done]
                contexts = {}
                for e in live:
                    ids = e.context(self.fmt, self._encode)
                    if len(ids) + cfg.max_action_tokens > cfg.max_context_tokens:
                        e.done = True  # out of budget: unfinished
                    else:
                        contexts[e.index] = ids
                live = [e for e in live if not e.done]
                if not live:
                    break
                key, sub = jax.random.split(key)
                sampled = self.sample(params, [contexts[e.index] for e in live], sub, live)
                pending = []
                for e, (ids, lps) in zip(live, sampled):
                    stopped = bool(ids) and ids[-1] in stops
                    text = self.tok.decode_batch(np.asarray([ids + [stops[0]]]))[0]
                    self._append_action(e, contexts[e.index], ids, lps, t)
                    report = _REPORT.findall(text)
                    if report:
                        e.report = report[-1].strip()
                    calls_text = _REPORT.sub("", text)  # the report is notes, not a call
                    parsed = protocol.parse_tool_calls(calls_text, cfg.tool_format, protocol.tool_methods(e.env))
                    turn = Turn(action=text, tool_calls=[dataclasses.asdict(c) for c in parsed.calls], error=parsed.error)
                    e.turns.append(turn)
                    if parsed.error is not None:
                        pending.append((e, turn, stopped, None, f"Error: {parsed.message}; write the call again."))
                    elif not parsed.calls:
                        e.done = e.finished = True  # the final answer
                    else:
                        pending.append((e, turn, stopped, pool.submit(self._run_calls, e.env, parsed.calls), None))
                for e, turn, stopped, future, text in pending:
                    if future is not None:
                        text, error = future.result()
                        turn.error = turn.error or error
                    text = protocol.cut_observation(text, cfg.max_observation_chars)
                    turn.observation = text
                    turn.info["milestones"] = protocol.outcome(e.env)[2]
                    if protocol.is_done(e.env):
                        e.done = e.finished = True
                    if cfg.context == "full" and not e.done:
                        ids = self._encode(self.fmt.observation(text, stopped))
                        e.tokens += ids
                        e.mask += [False] * len(ids)
                        e.logprobs += [0.0] * len(ids)
                        e.turn_ids += [t] * len(ids)
        return [self._record(e, version, uid_prefix) for e in episodes]

    def sample(self, params, contexts: list[list[int]], key, episodes) -> list[tuple[list[int], list[float]]]:
        """One turn per context: the sampled ids (the stop token included when emitted) and their log-probabilities.

        ``episodes`` are the live episodes the contexts belong to (their ``row`` and ``turns``), for
        policies that are not the model: a scripted expert writing demonstrations, a test's script."""
        from longhorizon.lm.generate import generate

        if self.policy is not None:
            return self.policy(params, contexts, key, episodes)
        cfg = self.cfg
        tokens, valid = self._pad(contexts)
        gen = generate(params, tokens, valid, key, cfg=self.model_cfg, max_new_tokens=cfg.max_action_tokens,
                       temperature=cfg.temperature, top_p=cfg.top_p, eos_ids=tuple(self.tok.eos_ids),
                       pad_id=self.tok.pad_id)
        out_tok, out_valid, out_lp = (np.asarray(x) for x in (gen.tokens, gen.valid, gen.logprobs))
        return [(out_tok[j][out_valid[j]].tolist(), out_lp[j][out_valid[j]].tolist()) for j in range(len(contexts))]

    def _run_calls(self, env, calls) -> tuple[str, str | None]:
        texts, error = [], None
        for call in calls:
            text, err = protocol.call_tool(env, call, self.cfg.tool_timeout_s)
            texts.append(text)
            error = error or err
            if protocol.is_done(env):
                break
        return "\n".join(texts), error

    def _append_action(self, e: _Episode, context: list[int], ids: list[int], lps: list[float], t: int) -> None:
        if self.cfg.context == "full":
            e.tokens += ids
            e.mask += [True] * len(ids)
            e.logprobs += lps
            e.turn_ids += [t] * len(ids)
        else:  # every round is its own sequence: the rebuilt context, then the action
            n = len(context)
            e.sequences.append(TokenSequence(context + ids, [False] * n + [True] * len(ids), [0.0] * n + lps,
                                             [-1] * n + [t] * len(ids)))

    def _pad(self, contexts: list[list[int]]):
        cfg = self.cfg
        length = -(-max(map(len, contexts)) // cfg.length_bucket) * cfg.length_bucket
        b = -(-len(contexts) // cfg.batch_multiple) * cfg.batch_multiple
        tokens = np.full((b, length), self.tok.pad_id, np.int32)
        valid = np.zeros((b, length), bool)
        for i, ids in enumerate(contexts):
            tokens[i, length - len(ids):] = ids
            valid[i, length - len(ids):] = True
        valid[len(contexts):, -1] = True  # filler rows: one valid token
        return tokens, valid

    def _record(self, e: _Episode, version: int, uid_prefix: str) -> Trajectory:
        reward, terms, milestones, metrics = protocol.outcome(e.env)
        sequences = e.sequences if self.cfg.context == "workspace" else [
            TokenSequence(e.tokens, e.mask, e.logprobs, e.turn_ids)]
        if metrics and e.turns:
            e.turns[-1].info.setdefault("env_metrics", metrics)
        return Trajectory(group=e.group, sequences=sequences, turns=e.turns, reward=reward,
                          reward_terms={**terms, **({"milestones": float(sum(milestones))} if milestones else {})},
                          version=version, finished=e.finished, task=e.row, uid=f"{uid_prefix}{e.index}")
