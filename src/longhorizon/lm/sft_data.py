"""TRL's SFT dataset formats, tokenized with a loss mask on the completion tokens only.

A row is one of (other columns are ignored)::

    {"messages": [{"role": "user", "content": ...}, {"role": "assistant", "content": ...}, ...]}
    {"prompt": "text", "completion": "text"}                                   (standard)
    {"prompt": [messages], "completion": [messages]}                           (conversational)

The loss covers (TRL's ``assistant_only_loss=True`` for ``messages``, its default
``completion_only_loss=True`` for prompt + completion):

- ``messages``: every assistant turn, i.e. its content and the end-of-turn token that ends it (the
  turn's header, e.g. ``<|im_start|>assistant\\n``, is prompt: generation writes it before sampling);
- a conversational prompt + completion: the completion's messages, likewise;
- a standard prompt + completion: the completion's tokens and an EOS (TRL appends ``eos_token``).

Conversations are rendered with the model's chat template: a trained turn ``i`` spans the text
between ``render(messages[:i], add_generation_prompt=True)`` and ``render(messages[:i + 1])``. Each
stretch of text (prompt, trained turn, ...) is tokenized on its own and the ids concatenated, so a
prompt has the same ids as when ``lm rl`` or ``lm eval`` renders it for generation. Sequences longer
than ``max_length`` keep their first ``max_length`` tokens (TRL's ``truncation_mode="keep_start"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from longhorizon.errors import UsageError

ROLES = ("system", "user", "assistant", "tool")
_FORMATS = ('write {"messages": [{"role": ..., "content": ...}, ...]} or {"prompt": ..., "completion": ...} '
            "(TRL's SFT formats)")


@dataclasses.dataclass(frozen=True, eq=False)
class SFTExample:
    """One tokenized row: ``ids`` and, per token, whether it is a target of the loss (``trained``)."""

    ids: tuple[int, ...]
    trained: tuple[bool, ...]
    index: int  # the row's position in the file (0-based)
    truncated: bool = False

    @property
    def loss_tokens(self) -> int:
        return int(sum(self.trained[1:]))  # the first token is never predicted

    @property
    def prompt(self) -> str:  # what samplers fingerprint an item by
        return f"row {self.index}"


# ----------------------------------------------------------------------------- checking rows


def _check_conversation(messages, where: str, column: str) -> None:
    if not isinstance(messages, list) or not messages:
        raise UsageError(f"{where} has a {column!r} that is not a non-empty list of {{\"role\", \"content\"}} "
                         "messages; fix that row.")
    for message in messages:
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise UsageError(f"{where} has a message {message!r} without 'role' and 'content'; write "
                             "{\"role\": \"user\", \"content\": \"...\"}.")
        if message["role"] not in ROLES:
            raise UsageError(f"{where} has a message with role {message['role']!r}; use one of {', '.join(ROLES)}.")
        if not isinstance(message["content"], str):
            raise UsageError(f"{where} has a message whose content is a {type(message['content']).__name__}, not "
                             "text; write the content as a string.")
        if message["role"] == "assistant" and "<tool_call>" in message["content"]:
            from longhorizon.lm.agents.protocol import parse_tool_calls

            parsed = parse_tool_calls(message["content"], "hermes")
            if parsed.error is not None:  # a demonstration would teach the policy calls its rollout cannot parse
                raise UsageError(f"{where} has an assistant tool call that does not parse ({parsed.message}); write "
                                 '<tool_call>{"name": ..., "arguments": {...}}</tool_call> or remove the row.')


def check_sft_row(row, where: str) -> None:
    """Refuse a row that is in none of the formats, has an unknown role, or nothing to learn from."""
    if not isinstance(row, dict):
        raise UsageError(f"{where} is a {type(row).__name__}, not an object; {_FORMATS}.")
    if "messages" in row:
        _check_conversation(row["messages"], where, "messages")
        if not any(m["role"] == "assistant" for m in row["messages"]):
            raise UsageError(f"{where} has no assistant message, so nothing to learn from (the loss covers "
                             "assistant turns); add the assistant's answer or remove the row.")
        return
    if "prompt" not in row or "completion" not in row:
        raise UsageError(f"{where} has neither a 'messages' column nor 'prompt' and 'completion' columns; {_FORMATS}.")
    prompt, completion = row["prompt"], row["completion"]
    if isinstance(prompt, str) and isinstance(completion, str):
        if not completion:
            raise UsageError(f"{where} has an empty completion, so nothing to learn from; write one or remove the row.")
        return
    if isinstance(prompt, list) and isinstance(completion, list):
        _check_conversation(prompt, where, "prompt")
        _check_conversation(completion, where, "completion")
        return
    raise UsageError(f"{where} mixes formats (prompt is a {type(prompt).__name__}, completion a "
                     f"{type(completion).__name__}); write both as text or both as lists of messages.")


# ----------------------------------------------------------------------------- tokenizing


def _pieces(row: dict, tokenizer) -> list[tuple[str, bool]]:
    """The row as consecutive stretches of text, each marked trained or not (module docstring)."""
    if "messages" in row:
        messages, trained = row["messages"], [m["role"] == "assistant" for m in row["messages"]]
    elif isinstance(row["prompt"], str):
        return [(row["prompt"], False), (row["completion"], True)]
    else:
        messages = row["prompt"] + row["completion"]
        trained = [i >= len(row["prompt"]) for i in range(len(messages))]
    if not hasattr(tokenizer, "apply_chat_template"):
        raise UsageError("conversations need a model with a chat template; start from a pretrained --model or write "
                         "the rows as text prompt + completion.")
    full = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
    pieces, cursor = [], 0
    for i, message in enumerate(messages):
        if not trained[i]:
            continue
        before = tokenizer.apply_chat_template(messages[:i], add_generation_prompt=message["role"] == "assistant")
        through = tokenizer.apply_chat_template(messages[:i + 1], add_generation_prompt=False)
        if not (full.startswith(before) and full.startswith(through) and cursor <= len(before) <= len(through)):
            raise UsageError("the model's chat template does not render this conversation turn by turn (the text "
                             f"before message {i + 1} changes once it is added), so its completion tokens cannot be "
                             "told apart; write the rows as text prompt + completion instead.")
        pieces += [(full[cursor:len(before)], False), (full[len(before):len(through)], True)]
        cursor = len(through)
    return [p for p in pieces + [(full[cursor:], False)] if p[0]]


def encode_sft_row(row: dict, tokenizer, max_length: int, index: int = 0) -> SFTExample:
    """The :class:`SFTExample` of one checked row (see :func:`check_sft_row`)."""
    ids: list[int] = []
    trained: list[bool] = []
    eos = tuple(tokenizer.eos_ids)
    conversational = "messages" in row or not isinstance(row["prompt"], str)
    for text, on in _pieces(row, tokenizer):
        piece = tokenizer.encode(text, bos=not ids)
        mask = [on] * len(piece)
        if on and conversational:
            # a trained turn ends at its end-of-turn token; what the template writes after it (a newline) is not
            # generated, so it is not trained
            last = max((j for j, t in enumerate(piece) if t in eos), default=None)
            if last is not None:
                mask = [j <= last for j in range(len(piece))]
        ids += piece
        trained += mask
    if not conversational and (not ids or ids[-1] not in eos):
        ids.append(eos[0])  # TRL appends eos_token to a standard completion
        trained.append(True)
    truncated = len(ids) > max_length
    return SFTExample(tuple(ids[:max_length]), tuple(trained[:max_length]), index, truncated)


def encode_sft_rows(rows: Sequence[dict], tokenizer, max_length: int) -> list[SFTExample]:
    return [encode_sft_row(row, tokenizer, max_length, i) for i, row in enumerate(rows)]


def batch_arrays(examples: Sequence[SFTExample], seq_len: int, pad_id: int, rows: int | None = None):
    """``(tokens [R, seq_len] int32, valid [R, seq_len] bool, loss_mask [R, seq_len - 1] float32)``, right-padded;
    ``loss_mask[b, t]`` marks the target ``tokens[b, t + 1]``. ``rows`` (default: one per example) pads the batch
    with empty rows (one valid token, no loss) so that its shape stays fixed."""
    n = len(examples) if rows is None else rows
    tokens = np.full((n, seq_len), pad_id, np.int32)
    valid = np.zeros((n, seq_len), bool)
    loss_mask = np.zeros((n, seq_len - 1), np.float32)
    valid[len(examples):, 0] = True
    for b, ex in enumerate(examples):
        tokens[b, :len(ex.ids)] = ex.ids
        valid[b, :len(ex.ids)] = True
        loss_mask[b, :len(ex.ids) - 1] = ex.trained[1:]
    return tokens, valid, loss_mask
