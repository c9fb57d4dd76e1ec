"""A tiny GGUF checkpoint written on the spot (no download): a 2-layer Llama (d=32, 4 heads, 2 KV heads,
head_dim 8) with F32, Q8_0 and Q4_1 tensors drawn from a fixed seed, a byte-level BPE vocabulary
(3 control tokens, the 256 byte characters, 6 merges) and a ChatML template."""

from __future__ import annotations

import numpy as np
import tokenizers
import gguf
from gguf import GGMLQuantizationType as Q

D, HEADS, KV, HD, FFN, LAYERS = 32, 4, 2, 8, 64, 2  # rows of 32: one quantisation block
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "l l", "he ll", "hell o", "Ġ w", "1 2"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def byte_alphabet() -> list[str]:
    return sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())


def vocab_tokens() -> list[str]:
    return SPECIAL + byte_alphabet() + ["he", "ll", "hell", "hello", "Ġw", "12"]


def hf_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF -> GGUF row order, written from llama.cpp's convention: per head (2, hd/2) -> (hd/2, 2)."""
    rows, cols = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def originals() -> dict[str, tuple[np.ndarray, Q]]:
    """HF-layout tensors of the fixture and the GGUF type each is stored as."""
    rng = np.random.default_rng(0)
    w = {"token_embd.weight": (rng.standard_normal((len(vocab_tokens()), D)), Q.Q8_0),
         "output_norm.weight": (1 + 0.1 * rng.standard_normal(D), Q.F32)}
    for n in range(LAYERS):
        w |= {f"blk.{n}.attn_norm.weight": (rng.standard_normal(D), Q.F32),
              f"blk.{n}.ffn_norm.weight": (rng.standard_normal(D), Q.F32),
              f"blk.{n}.attn_q.weight": (rng.standard_normal((HEADS * HD, D)), Q.F32),
              f"blk.{n}.attn_k.weight": (rng.standard_normal((KV * HD, D)), Q.F32),
              f"blk.{n}.attn_v.weight": (rng.standard_normal((KV * HD, D)), Q.Q8_0),
              f"blk.{n}.attn_output.weight": (rng.standard_normal((D, HEADS * HD)), Q.Q4_1),
              f"blk.{n}.ffn_gate.weight": (rng.standard_normal((FFN, D)), Q.Q4_1),
              f"blk.{n}.ffn_up.weight": (rng.standard_normal((FFN, D)), Q.Q8_0),
              f"blk.{n}.ffn_down.weight": (rng.standard_normal((D, FFN)), Q.Q4_1)}
    return {k: (v.astype(np.float32), t) for k, (v, t) in w.items()}


def write_gguf(path, arch="llama", extra_tensor=None, tokenizer_model="gpt2"):
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(LAYERS)
    writer.add_context_length(64)
    writer.add_embedding_length(D)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    tokens = vocab_tokens()
    writer.add_tokenizer_model(tokenizer_model)
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3] * len(SPECIAL) + [1] * (len(tokens) - len(SPECIAL)))
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(0)
    writer.add_chat_template(CHATML)
    for name, (value, kind) in originals().items():
        if name.endswith(("attn_q.weight", "attn_k.weight")):
            value = hf_permute(value, HEADS if "attn_q" in name else KV)
        if kind == Q.F32:
            writer.add_tensor(name, value)
        else:
            writer.add_tensor(name, gguf.quants.quantize(value, kind), raw_dtype=kind)
    if extra_tensor is not None:
        writer.add_tensor(*extra_tensor[:2], raw_dtype=extra_tensor[2])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
