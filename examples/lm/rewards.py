"""Reward functions in TRL's format for `longhorizon lm rl --reward-funcs examples/lm/rewards.py:NAME`.

Each one receives the batch's prompts and completions (chat completions arrive as
[{"role": "assistant", "content": "..."}]) and the dataset's other columns by name, and returns one
float per completion (or None where it does not apply). Nothing here imports longhorizon: a file
written for TRL's GRPOTrainer works unchanged.
"""

import re

_ANSWER = re.compile(r"answer\s*(?:is)?\s*[:=]?\s*\**\s*(-?\d+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+")


def _text(completion):
    return completion[-1]["content"] if isinstance(completion, list) else completion


def final_number(text):
    """The number after the last 'Answer:' (or 'the answer is'), else the last number in the text."""
    labelled = _ANSWER.findall(text)
    if labelled:
        return labelled[-1]
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def correct_answer(prompts, completions, answer, **kwargs):
    """1.0 when the completion's final number equals the row's `answer` column, else 0.0."""
    return [1.0 if final_number(_text(c)) == str(a) else 0.0 for c, a in zip(completions, answer)]


def uses_answer_format(prompts, completions, **kwargs):
    """0.1 when the completion states its result as 'Answer: N' (as the prompts ask), else 0.0."""
    return [0.1 if re.search(r"Answer:\s*-?\d+", _text(c)) else 0.0 for c in completions]
