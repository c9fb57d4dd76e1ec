"""Tokenizers of real pretrained models, built with the `tokenizers` library, and their chat templates.

:func:`from_gguf` rebuilds a GGUF file's GPT-2-style byte-level BPE tokenizer from its metadata:
``tokenizer.ggml.tokens`` (id -> token string, over the 256-character byte alphabet of GPT-2),
``tokenizer.ggml.merges`` (``"a b"`` pairs, earliest merge first) and ``tokenizer.ggml.token_type``
(3 = control tokens such as ``<|im_start|>``, matched whole before BPE and never split). Text is split
by GPT-2's regex (SmolLM's ``pre="smollm"`` also splits every digit on its own), mapped to the byte
alphabet, merged by rank; decoding maps the byte alphabet back to UTF-8, so ``decode(encode(t)) == t``.
The chat template (``tokenizer.chat_template``, jinja2 as in HF) is rendered by
:meth:`HFTokenizer.apply_chat_template`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from longhorizon.errors import UsageError

CONTROL = 3  # llama.cpp's token type for control (special) tokens
# Byte-level BPE variants (tokenizer.ggml.model) and the pre-tokenizer flavours (tokenizer.ggml.pre) handled here.
SUPPORTED_MODELS = ("gpt2",)
DIGIT_SPLITTING = ("smollm",)


class HFTokenizer:
    """``encode``/``decode`` through a `tokenizers.Tokenizer`, with bos/eos ids and the model's chat template."""

    def __init__(self, tokenizer, bos_id: int | None, eos_ids: Sequence[int], chat_template: str | None,
                 add_bos: bool = False, pad_id: int | None = None):
        self.tokenizer = tokenizer
        self.bos_id = bos_id
        self.eos_ids = tuple(eos_ids)
        self.eos_id = self.eos_ids[0] if self.eos_ids else None
        self.chat_template = chat_template
        self.add_bos = add_bos
        # Padding never reaches the loss (masked), so without a stated pad id the first eos id serves.
        self.pad_id = pad_id if pad_id is not None else self.eos_id

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, bos: bool = True) -> list[int]:
        """Token ids of ``text`` (control tokens written in it are single ids); bos first if the model asks
        (``bos=False``: never, for text that continues a sequence)."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if bos and self.add_bos and self.bos_id is not None else ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def decode_batch(self, ids) -> list[str]:
        """The text of each row of generated ``ids [B, N]`` up to its first stop id (special tokens dropped)."""
        texts = []
        for row in np.asarray(ids).tolist():
            stop = next((i for i, t in enumerate(row) if t in self.eos_ids), len(row))
            texts.append(self.tokenizer.decode(row[:stop], skip_special_tokens=True))
        return texts

    def encode_prompts(self, texts: Sequence[str], length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Left-padded prompt ids ``(tokens [B, length] int32, valid [B, length] bool)``.

        ``valid`` comes from the lengths, never from comparing with ``pad_id`` (which may be a real
        token, e.g. EOS). An empty text is a filler row of one valid pad token (generation needs one).
        """
        rows = [self.encode(t) or [self.pad_id] for t in texts]
        longest = max(map(len, rows), default=1)
        length = longest if length is None else length
        if longest > length:
            raise UsageError(f"a prompt has {longest} tokens but the maximum prompt length is {length}; raise "
                             "max_prompt_length (--max-prompt-length) or shorten the prompt.")
        tokens = np.full((len(rows), length), self.pad_id, np.int32)
        valid = np.zeros((len(rows), length), bool)
        for b, row in enumerate(rows):
            tokens[b, length - len(row):] = row
            valid[b, length - len(row):] = True
        return tokens, valid

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def apply_chat_template(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages`` ([{"role", "content"}, ...]), rendered as HF's template renders it."""
        if not self.chat_template:
            raise UsageError("this tokenizer has no chat template; pass plain-text prompts instead of conversations.")
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise UsageError(f"the chat template refused the conversation: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)  # HF renders with these
        env.globals["raise_exception"] = raise_exception
        for message in messages:
            if not isinstance(message, dict) or "role" not in message or "content" not in message:
                raise UsageError(f"chat message {message!r} lacks 'role' or 'content'; write "
                                 "{'role': 'user', 'content': '...'}.")
        vocab = self.tokenizer.get_vocab(with_added_tokens=True)
        inverse = {i: t for t, i in vocab.items()}
        return env.from_string(self.chat_template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt,
            bos_token=inverse.get(self.bos_id, ""), eos_token=inverse.get(self.eos_id, ""))


def byte_level_bpe(tokens: Sequence[str], merges: Sequence[str], special: Sequence[str], split_digits: bool):
    """A `tokenizers.Tokenizer`: byte-level BPE over ``tokens`` (id = position) and ``merges`` ("a b", by rank)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if split_digits else byte_level)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    return tok


def from_metadata(metadata: dict, source: str = "the GGUF file") -> HFTokenizer:
    """The tokenizer described by a GGUF file's ``tokenizer.*`` metadata (see the module docstring)."""
    kind = metadata.get("tokenizer.ggml.model")
    if kind not in SUPPORTED_MODELS:
        raise UsageError(f"{source} has a '{kind}' tokenizer, which is not supported; use a model with a "
                         "GPT-2-style byte-level BPE tokenizer (tokenizer.ggml.model = gpt2).")
    tokens, merges = metadata.get("tokenizer.ggml.tokens"), metadata.get("tokenizer.ggml.merges")
    if not tokens or merges is None:
        raise UsageError(f"{source} lacks tokenizer.ggml.tokens or tokenizer.ggml.merges; re-export it with llama.cpp.")
    types = metadata.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    special = [t for t, kind_ in zip(tokens, types) if kind_ == CONTROL]
    tok = byte_level_bpe(tokens, merges, special, split_digits=metadata.get("tokenizer.ggml.pre") in DIGIT_SPLITTING)
    bos, eos = metadata.get("tokenizer.ggml.bos_token_id"), metadata.get("tokenizer.ggml.eos_token_id")
    pad = metadata.get("tokenizer.ggml.padding_token_id")
    eos_ids = [int(eos)] if eos is not None else []
    # An instruct model ends its turn with <|im_end|> (or <|eot_id|>): a stop id as much as EOS.
    for name in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>"):
        i = tok.token_to_id(name)
        if i is not None and i not in eos_ids and name in special:
            eos_ids.append(i)
    return HFTokenizer(tok, None if bos is None else int(bos), eos_ids, metadata.get("tokenizer.chat_template"),
                       add_bos=bool(metadata.get("tokenizer.ggml.add_bos_token", False)),
                       pad_id=None if pad is None else int(pad))


def from_gguf(path: str | Path) -> HFTokenizer:
    """The tokenizer stored in GGUF file ``path`` (reads metadata only, not the weights)."""
    from longhorizon.lm.checkpoints.gguf_file import read_gguf

    return from_metadata(read_gguf(path, tensors=False).metadata, source=str(path))
