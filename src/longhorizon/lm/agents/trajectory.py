"""The unified trajectory record of a multi-turn episode (what rollouts produce and learners consume).

One record serves every consumer: group-wise grading (``group`` names the task a group shares),
the learner (token ids, the behaviour policy's log-probabilities, the action mask, turn boundaries),
the staleness check of asynchronous rollouts (``version``) and the metrics (tool errors, turns).

An episode alternates model turns and environment turns. Its tokens live in one or more
:class:`TokenSequence` s: with the full-history context strategy the whole episode is one sequence
``prompt, action_1, observation_1, action_2, ...``; with a reconstructed workspace (IterResearch)
every turn is its own sequence ``context_t, action_t`` (the context is rebuilt each round, so it is
no prefix of the next). In both, ``action_mask`` marks the tokens the policy sampled (the only ones
in the loss) and ``turn`` the round each token belongs to (-1: the initial prompt or a rebuilt
context).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass
class TokenSequence:
    """One sequence the policy was conditioned on and acted in; all arrays have length ``L``."""

    tokens: np.ndarray  # [L] int32
    action_mask: np.ndarray  # [L] bool: sampled by the policy (trained on)
    logprobs: np.ndarray  # [L] float32: behaviour log-probabilities at action tokens, 0 elsewhere
    turn: np.ndarray  # [L] int32: round of each token, -1 for the prompt / rebuilt context

    def __post_init__(self):
        self.tokens = np.asarray(self.tokens, np.int32)
        self.action_mask = np.asarray(self.action_mask, bool)
        self.logprobs = np.asarray(self.logprobs, np.float32)
        self.turn = np.asarray(self.turn, np.int32)
        n = len(self.tokens)
        if not (len(self.action_mask) == len(self.logprobs) == len(self.turn) == n):
            raise ValueError("a TokenSequence's tokens, action_mask, logprobs and turn must have one length.")

    def __len__(self) -> int:
        return len(self.tokens)


@dataclasses.dataclass
class Turn:
    """One round at the text level: what the model wrote, what it called, what came back."""

    action: str  # the model's text of this turn (decoded, stop token dropped)
    tool_calls: list = dataclasses.field(default_factory=list)  # [{"name": ..., "arguments": {...}}]
    observation: str | None = None  # what the environment returned (None: the episode ended here)
    reward: float = 0.0  # a per-turn reward (milestones); the outcome is Trajectory.reward
    error: str | None = None  # "malformed" | "unknown_tool" | "bad_arguments" | "tool_raised" | "timeout"
    info: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Trajectory:
    """A whole episode (module docstring)."""

    group: int  # the task this trajectory's group shares (group-relative advantages are within a group)
    sequences: list[TokenSequence]
    turns: list[Turn]
    reward: float = 0.0  # the combined reward used for learning
    reward_terms: dict = dataclasses.field(default_factory=dict)  # e.g. {"outcome": 1.0, "format": 0.5, "cost": -0.2}
    version: int = 0  # the policy version that generated it
    finished: bool = True  # ended by the policy or the environment; False: cut by max_turns or the token budget
    task: Any = None  # the dataset row / task the episode was reset with
    uid: str = ""  # unique per requested episode (asynchronous rollouts deduplicate by it)

    @property
    def n_turns(self) -> int:
        return len(self.turns)

    @property
    def action_tokens(self) -> int:
        return int(sum(s.action_mask.sum() for s in self.sequences))

    @property
    def tool_errors(self) -> int:
        return sum(t.error is not None for t in self.turns)

    def turn_rewards(self) -> np.ndarray:
        """``[n_turns]`` per-turn rewards (milestones); the outcome is not included."""
        return np.array([t.reward for t in self.turns], np.float64)
