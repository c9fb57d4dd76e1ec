"""Character-level tokenizer over a fixed task alphabet.

Ids 0, 1, 2 are the special tokens PAD, BOS and EOS; every other id is one character of the
alphabet. Prompts are *left*-padded (so the last column of a batch is always the last prompt
token, where generation starts) and completions are *right*-padded.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from longhorizon.errors import UsageError

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")
DEFAULT_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz=+-*;()?|# "


class Tokenizer:
    """Maps characters of ``alphabet`` to ids ``3..`` and back."""

    pad_id, bos_id, eos_id = PAD, BOS, EOS
    eos_ids = (EOS,)  # stop ids of generation (a pretrained tokenizer may have several)

    def __init__(self, alphabet: str = DEFAULT_ALPHABET):
        if len(set(alphabet)) != len(alphabet) or not alphabet:
            raise UsageError(
                f"tokenizer alphabet {alphabet!r} must be non-empty with no repeated characters; "
                "remove the duplicates."
            )
        self.alphabet = alphabet
        self._to_id = {c: i + len(SPECIALS) for i, c in enumerate(alphabet)}
        self._to_char = {i: c for c, i in self._to_id.items()}

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + len(self.alphabet)

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        ids = []
        for c in text:
            if c not in self._to_id:
                raise UsageError(
                    f"character {c!r} is not in the tokenizer alphabet {self.alphabet!r}; "
                    "remove it from the text or extend the alphabet."
                )
            ids.append(self._to_id[c])
        return ([BOS] if bos else []) + ids + ([EOS] if eos else [])

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Characters up to the first EOS; PAD and BOS are skipped, unknown ids too."""
        out = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if i == EOS:
                break
            ch = self._to_char.get(int(i))
            if ch is not None:
                out.append(ch)
        return "".join(out)

    def decode_batch(self, ids: np.ndarray) -> list[str]:
        return [self.decode(row) for row in np.asarray(ids)]

    def encode_prompts(self, texts: Sequence[str], length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """BOS + text, left-padded to ``length``: ``(tokens [B, length] int32, valid [B, length] bool)``."""
        rows = [self.encode(t, bos=True) for t in texts]
        length = max(map(len, rows)) if length is None else length
        if rows and max(map(len, rows)) > length:
            raise UsageError(
                f"a prompt has {max(map(len, rows))} tokens but the prompt length is {length}; "
                "raise the maximum prompt length or shorten the task."
            )
        tokens = np.full((len(rows), length), PAD, np.int32)
        for b, row in enumerate(rows):
            if row:
                tokens[b, length - len(row):] = row
        return tokens, tokens != PAD

    def encode_completions(self, texts: Sequence[str], length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """text + EOS, right-padded to ``length``: ``(tokens [B, length] int32, valid [B, length] bool)``."""
        rows = [self.encode(t, eos=True) for t in texts]
        length = max(map(len, rows)) if length is None else length
        if rows and max(map(len, rows)) > length:
            raise UsageError(
                f"a completion has {max(map(len, rows))} tokens but the completion length is {length}; "
                "raise max_completion_length or shorten the task."
            )
        tokens = np.full((len(rows), length), PAD, np.int32)
        for b, row in enumerate(rows):
            tokens[b, : len(row)] = row
        return tokens, tokens != PAD
