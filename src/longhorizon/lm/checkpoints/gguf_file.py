"""Read a Llama-family GGUF file: its metadata as a frozen spec, its tensors as float32 arrays in HF layout.

GGUF (llama.cpp's format) stores each tensor with its dimensions listed fastest-varying first, so the
numpy array ``GGUFReader`` returns is already in row-major ``(out_features, in_features)`` order, the
layout of HF's ``nn.Linear.weight``. Quantised tensors are dequantized with ``gguf.quants.dequantize``.

Tensor names, GGUF -> HF (``N`` is the layer index):

=============================  =================================================
``token_embd.weight``          ``model.embed_tokens.weight``        (vocab, d)
``output_norm.weight``         ``model.norm.weight``                (d,)
``output.weight``              ``lm_head.weight`` (absent when tied to the embedding)
``blk.N.attn_norm.weight``     ``model.layers.N.input_layernorm.weight``
``blk.N.attn_q.weight``        ``model.layers.N.self_attn.q_proj.weight``  (heads*hd, d), un-permuted
``blk.N.attn_k.weight``        ``model.layers.N.self_attn.k_proj.weight``  (kv*hd, d), un-permuted
``blk.N.attn_v.weight``        ``model.layers.N.self_attn.v_proj.weight``
``blk.N.attn_output.weight``   ``model.layers.N.self_attn.o_proj.weight``
``blk.N.ffn_norm.weight``      ``model.layers.N.post_attention_layernorm.weight``
``blk.N.ffn_gate.weight``      ``model.layers.N.mlp.gate_proj.weight``
``blk.N.ffn_up.weight``        ``model.layers.N.mlp.up_proj.weight``
``blk.N.ffn_down.weight``      ``model.layers.N.mlp.down_proj.weight``
=============================  =================================================

Rotary permutation. HF Llama rotates the two *halves* of each head, (x[i], x[i + hd/2]); llama.cpp
rotates *adjacent pairs*, (x[2i], x[2i+1]). The HF -> GGUF converter therefore reorders the rows of
q_proj and k_proj within each head: viewing the rows of one head as ``(2, hd/2)`` (half, index), it
stores them as ``(hd/2, 2)``, i.e. GGUF row ``2i + s`` of a head is HF row ``s*hd/2 + i``. Loading
undoes it: view the rows as ``(heads, hd/2, 2, in)``, swap the two middle axes, flatten back.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from longhorizon.errors import UsageError

SUPPORTED_ARCHITECTURES = ("llama",)
# Weight types this loader dequantizes; llama.cpp's i-quants and ternary types are refused by name.
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                   "Q6_K")

_LAYER_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                "ffn_down": "mlp.down_proj"}
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
              "output.weight": "lm_head.weight"}


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    """The architecture of a Llama-family checkpoint, as its metadata states it."""

    architecture: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    rope_base: float
    rms_eps: float
    vocab_size: int
    context_length: int
    tied_output: bool
    bos_id: int | None
    eos_id: int | None


@dataclasses.dataclass(frozen=True)
class GGUFCheckpoint:
    """A GGUF file's spec, its HF-named float32 tensors, and its raw metadata fields (tokenizer included)."""

    spec: CheckpointSpec
    tensors: dict[str, np.ndarray]
    metadata: dict[str, object]


def _field_values(reader) -> dict[str, object]:
    values = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        values[key] = field.contents()
    return values


def unpermute_rotary(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row order: per head, rows (hd/2, 2) -> (2, hd/2); see the module docstring."""
    rows, cols = weight.shape
    half = rows // n_heads // 2
    return weight.reshape(n_heads, half, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def hf_name(name: str) -> str:
    """The HF/Llama name of a GGUF tensor name (see the table in the module docstring)."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    match = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", name)
    if match is None or match.group(2) not in _LAYER_NAMES:
        raise UsageError(f"GGUF tensor '{name}' is not part of the Llama architecture; use a Llama-family GGUF file.")
    layer, part, kind = match.groups()
    return f"model.layers.{layer}.{_LAYER_NAMES[part]}.{kind}"


def read_spec(metadata: dict[str, object], path: Path, has_output: bool) -> CheckpointSpec:
    """The spec from ``{arch}.*`` metadata keys (head_dim = d_model / heads unless stated)."""
    arch = metadata.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UsageError(f"{path} is a '{arch}' GGUF model, which this loader does not support; "
                         f"use a GGUF file of architecture {', '.join(SUPPORTED_ARCHITECTURES)}.")

    def need(key):
        if f"{arch}.{key}" not in metadata:
            raise UsageError(f"{path} lacks the metadata key '{arch}.{key}'; re-export the GGUF file with llama.cpp.")
        return metadata[f"{arch}.{key}"]

    d_model, n_heads = int(need("embedding_length")), int(need("attention.head_count"))
    n_kv = int(metadata.get(f"{arch}.attention.head_count_kv", n_heads))
    head_dim = int(metadata.get(f"{arch}.attention.key_length", d_model // n_heads))
    tokens = metadata.get("tokenizer.ggml.tokens")
    vocab = int(metadata.get(f"{arch}.vocab_size", len(tokens) if tokens is not None else 0))
    bos, eos = metadata.get("tokenizer.ggml.bos_token_id"), metadata.get("tokenizer.ggml.eos_token_id")
    return CheckpointSpec(
        architecture=str(arch), n_layers=int(need("block_count")), d_model=d_model, n_heads=n_heads,
        n_kv_heads=n_kv, head_dim=head_dim, ffn_dim=int(need("feed_forward_length")),
        rope_base=float(metadata.get(f"{arch}.rope.freq_base", 10000.0)),
        rms_eps=float(need("attention.layer_norm_rms_epsilon")), vocab_size=vocab,
        context_length=int(need("context_length")), tied_output=not has_output,
        bos_id=None if bos is None else int(bos), eos_id=None if eos is None else int(eos))


def read_gguf(path: str | Path, tensors: bool = True) -> GGUFCheckpoint:
    """Read ``path``: spec, metadata, and (unless ``tensors=False``) every tensor dequantized to float32, HF-named."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"GGUF file {path} does not exist; pass the path of a .gguf file "
                         "(or run `longhorizon lm fetch smollm2`).")
    try:
        reader = GGUFReader(path)
    except (ValueError, OSError) as err:
        raise UsageError(f"{path} is not a readable GGUF file ({err}); "
                         "pass a .gguf file written by llama.cpp.") from err
    metadata = _field_values(reader)
    names = {t.name for t in reader.tensors}
    spec = read_spec(metadata, path, has_output="output.weight" in names)
    out: dict[str, np.ndarray] = {}
    if tensors:
        for t in reader.tensors:
            kind = t.tensor_type.name
            if kind not in SUPPORTED_TYPES:
                raise UsageError(f"tensor '{t.name}' of {path} is stored as {kind}, a type this loader cannot "
                                 f"dequantize; use a GGUF file quantised as one of {', '.join(SUPPORTED_TYPES)}.")
            name = hf_name(t.name)
            value = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
            if t.name.endswith("attn_q.weight"):
                value = unpermute_rotary(value, spec.n_heads)
            elif t.name.endswith("attn_k.weight"):
                value = unpermute_rotary(value, spec.n_kv_heads)
            out[name] = value
    return GGUFCheckpoint(spec=spec, tensors=out, metadata=metadata)
