"""The Llama-family decoder against ``transformers`` on tiny random checkpoints (tests/fixtures/hf/README.md)."""

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from longhorizon.errors import UsageError
from longhorizon.lm import llama
from longhorizon.lm.model import KVCache, positions_from_valid

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def load(name: str):
    folder = FIXTURES / name
    cfg = llama.config_from_hf(json.loads((folder / "config.json").read_text()))
    params = llama.params_from_hf(load_file(folder / "model.safetensors"), cfg)
    return cfg, params, np.load(folder / "reference.npz")


def test_configs_read_from_hf():
    llama_cfg, _, _ = load("tiny-llama")
    qwen_cfg, _, _ = load("tiny-qwen2")
    assert (llama_cfg.n_heads, llama_cfg.n_kv_heads, llama_cfg.head_dim, llama_cfg.rope_base) == (4, 2, 16, 1e5)
    assert llama_cfg.tie_embeddings and not llama_cfg.qkv_bias
    assert qwen_cfg.qkv_bias and not qwen_cfg.tie_embeddings
    qwen3_cfg, qwen3_params, _ = load("tiny-qwen3")
    assert qwen3_cfg.qk_norm and qwen3_cfg.head_dim == 32  # explicit head_dim, not 64 / 4
    assert qwen3_params["blocks"]["q"]["kernel"].shape == (qwen3_cfg.n_layers, 64, 4, 32)  # stacked layers


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-llama-rope-llama3"])
def test_logits_and_greedy_tokens_match_transformers(name):
    cfg, params, ref = load(name)
    tokens, valid = jnp.asarray(ref["input_ids"]), jnp.asarray(ref["valid"])
    # the prompts are left-padded here; transformers ran each one alone, so padding must not change a logit
    logits = np.asarray(llama.forward(params, cfg, tokens, valid))
    mask = ref["valid"]
    assert mask.sum() == 15 and np.abs(ref["logits"][mask]).max() > 1.0  # real prompts, logits far from uniform
    np.testing.assert_allclose(logits[mask], ref["logits"][mask], atol=1e-4, rtol=0)
    greedy = np.asarray(llama.greedy_generate(params, cfg, tokens, valid, 8))
    np.testing.assert_array_equal(greedy, ref["greedy"])


def test_llama3_rope_frequencies_by_band():
    """Head size 16, base 1e5: f_i = 1e5^(-i/8). Context 32, factor 8, low 1, high 4, so wavelengths
    2 pi / f_i below 8 stay, above 32 are divided by 8, and f_1 = 0.2371 (wavelength 26.5) is smoothed:
    s = (32 / 26.5 - 1) / 3 = 0.0692, f = (1 - s) * f_1 / 8 + s * f_1 = 0.04401 (transformers: 4.4010e-02)."""
    cfg, params, ref = load("tiny-llama-rope-llama3")
    assert (cfg.rope_type, cfg.rope_factor, cfg.rope_original_max_len) == ("llama3", 8.0, 32)
    base = 1e5 ** (-np.arange(8) / 8)
    expected = np.concatenate([[1.0, 4.4010e-02], base[2:] / 8])
    np.testing.assert_allclose(np.asarray(llama.rope_frequencies(cfg)), expected, rtol=1e-4)
    linear = dataclasses.replace(cfg, rope_type="linear")
    np.testing.assert_allclose(np.asarray(llama.rope_frequencies(linear)), base / 8, rtol=1e-5)
    # the scaling is visible in the logits: the unscaled frequencies miss the reference
    plain = dataclasses.replace(cfg, rope_type="default")
    logits = np.asarray(llama.forward(params, plain, jnp.asarray(ref["input_ids"]), jnp.asarray(ref["valid"])))
    assert np.abs(logits[ref["valid"]] - ref["logits"][ref["valid"]]).max() > 1e-2


def test_bfloat16_runs_in_bfloat16_close_to_the_float32_reference():
    cfg, params, ref = load("tiny-llama")
    cfg16 = llama.config_from_hf(json.loads((FIXTURES / "tiny-llama" / "config.json").read_text()), dtype="bfloat16")
    params16 = llama.params_from_hf(load_file(FIXTURES / "tiny-llama" / "model.safetensors"), cfg16)
    assert params16["blocks"]["q"]["kernel"].dtype == jnp.bfloat16
    logits = np.asarray(llama.forward(params16, cfg16, jnp.asarray(ref["input_ids"]), jnp.asarray(ref["valid"])))
    error = np.abs(logits[ref["valid"]] - ref["logits"][ref["valid"]])
    # bf16 keeps 8 mantissa bits (relative step 2^-8): logits up to ~6 move by a few hundredths, not 1e-6
    assert logits.dtype == np.float32 and 1e-3 < error.max() < 0.3 and error.mean() < 0.05


def test_generation_past_the_context_is_refused():
    cfg, params, ref = load("tiny-llama")
    with pytest.raises(UsageError, match="exceed the model's context of 256"):
        llama.greedy_generate(params, cfg, jnp.asarray(ref["input_ids"]), jnp.asarray(ref["valid"]), 250)


@pytest.mark.slow
def test_kv_cache_decoding_equals_the_full_forward():
    """Prefill then one token per call: every step's logits equal the no-cache forward at that column."""
    cfg, params, ref = load("tiny-qwen2")
    prompt, valid = jnp.asarray(ref["input_ids"]), jnp.asarray(ref["valid"])
    b, p = prompt.shape
    full = jnp.concatenate([prompt, jnp.asarray(ref["greedy"])], axis=1)
    full_valid = jnp.concatenate([valid, jnp.ones((b, 8), bool)], axis=1)
    expected = np.asarray(llama.forward(params, cfg, full, full_valid))
    model, positions = llama.Llama(cfg), positions_from_valid(full_valid)
    got, cache = model.apply({"params": params}, prompt, positions[:, :p], full_valid, KVCache.zeros(cfg, b, p + 8), 0)
    steps = [np.asarray(got)]
    for i in range(p, p + 8):
        got, cache = model.apply({"params": params}, full[:, i:i + 1], positions[:, i:i + 1], full_valid, cache, i)
        steps.append(np.asarray(got))
    got = np.concatenate(steps, axis=1)
    mask = np.asarray(full_valid)
    np.testing.assert_allclose(got[mask], expected[mask], atol=1e-5, rtol=0)
    # the cache holds n_kv_heads heads, not n_heads
    assert cache.k.shape == (cfg.n_layers, b, p + 8, cfg.n_kv_heads, cfg.head_dim)


def test_grouped_query_heads_share_their_key_value_head():
    """Query heads 0,1 read kv head 0 and heads 2,3 read kv head 1 (transformers' repeat_kv order).

    Zeroing kv head 1's value weights changes the logits, but not once the output projection of
    query heads 2,3 is zeroed too: no other query head reads kv head 1.
    """
    cfg, params, ref = load("tiny-llama")
    tokens, valid = jnp.asarray(ref["input_ids"][:1]), jnp.asarray(ref["valid"][:1])
    run = lambda p: np.asarray(llama.forward(p, cfg, tokens, valid))  # noqa: E731
    no_v1 = with_leaf(params, ("blocks", "v", "kernel"), lambda k: k.at[1, :, 1].set(0.0))  # layer 1
    no_o23 = with_leaf(params, ("blocks", "o", "kernel"), lambda k: k.at[1, 2:].set(0.0))
    both = with_leaf(no_v1, ("blocks", "o", "kernel"), lambda k: k.at[1, 2:].set(0.0))
    assert np.abs(run(no_v1) - run(params)).max() > 1e-2
    np.testing.assert_allclose(run(both), run(no_o23), atol=1e-6)


def with_leaf(params, path, fn):
    """A copy of the nested parameter dict with the leaf at ``path`` replaced by ``fn(leaf)``."""
    out = dict(params)
    node = out
    for key in path[:-1]:
        node[key] = dict(node[key])
        node = node[key]
    node[path[-1]] = fn(node[path[-1]])
    return out


@pytest.mark.parametrize(
    "change, words",
    [
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e5}}, "rope type 'yarn'"),
        ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"use_sliding_window": True}, "sliding-window"),
        ({"num_key_value_heads": 3}, "not a multiple of n_kv_heads=3"),
    ],
)
def test_unsupported_config_is_refused_in_one_sentence(change, words):
    hf = json.loads((FIXTURES / "tiny-qwen2" / "config.json").read_text())
    with pytest.raises(UsageError) as err:
        llama.config_from_hf({**hf, **change})
    message = str(err.value)
    assert words in message and message.count(". ") == 0 and message.endswith(".")


def test_sharded_folder_loads_like_one_file(tmp_path):
    cfg, params, _ = load("tiny-qwen2")
    weights = load_file(FIXTURES / "tiny-qwen2" / "model.safetensors")
    names = sorted(weights)
    save_file({n: weights[n] for n in names[:7]}, tmp_path / "model-00001-of-00002.safetensors")
    save_file({n: weights[n] for n in names[7:]}, tmp_path / "model-00002-of-00002.safetensors")
    (tmp_path / "config.json").write_text((FIXTURES / "tiny-qwen2" / "config.json").read_text())
    cfg2, params2 = llama.load_hf_folder(tmp_path)
    assert cfg2 == cfg
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(params2), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    (tmp_path / "config.json").unlink()
    with pytest.raises(UsageError, match="is not a Hugging Face checkpoint folder"):
        llama.load_hf_folder(tmp_path)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-llama-rope-llama3"])
def test_saved_folder_has_the_checkpoints_tensors_and_reads_back(name, tmp_path):
    """save_hf_folder writes the original HF tensors bit for bit (transformers loading them is checked by
    benchmarks/check_llama_export.py) and a config that reads back to the same model."""
    cfg, params = llama.load_hf_folder(FIXTURES / name)
    llama.save_hf_folder(tmp_path, params, cfg)
    original, saved = load_file(FIXTURES / name / "model.safetensors"), load_file(tmp_path / "model.safetensors")
    assert sorted(saved) == sorted(original)
    for key, value in original.items():
        np.testing.assert_array_equal(saved[key], value, err_msg=key)
    assert llama.load_hf_folder(tmp_path)[0] == cfg


def test_checkpoint_missing_a_tensor_is_refused_by_name():
    cfg, _, _ = load("tiny-qwen2")
    weights = load_file(FIXTURES / "tiny-qwen2" / "model.safetensors")
    del weights["model.layers.1.self_attn.k_proj.bias"]
    with pytest.raises(UsageError, match="model.layers.1.self_attn.k_proj.bias"):
        llama.params_from_hf(weights, cfg)


def llama_cpp_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF q/k rows -> llama.cpp's: per head, the two rotary halves (2, D/2) are interleaved as (D/2, 2)."""
    rows, cols = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def test_tiny_llama_through_a_gguf_file_matches_transformers(tmp_path):
    """The transformers checkpoint written as an F32 GGUF file in llama.cpp's layout, read back by
    :func:`read_gguf`: the same logits (1e-4) and greedy tokens as transformers."""
    gguf = pytest.importorskip("gguf")
    from longhorizon.lm.checkpoints.gguf_file import read_gguf

    hf = json.loads((FIXTURES / "tiny-llama" / "config.json").read_text())
    weights = load_file(FIXTURES / "tiny-llama" / "model.safetensors")
    layer = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    writer = gguf.GGUFWriter(str(tmp_path / "tiny.gguf"), "llama")
    writer.add_block_count(hf["num_hidden_layers"])
    writer.add_context_length(hf["max_position_embeddings"])
    writer.add_embedding_length(hf["hidden_size"])
    writer.add_feed_forward_length(hf["intermediate_size"])
    writer.add_head_count(hf["num_attention_heads"])
    writer.add_head_count_kv(hf["num_key_value_heads"])
    writer.add_rope_freq_base(hf["rope_parameters"]["rope_theta"])
    writer.add_layer_norm_rms_eps(hf["rms_norm_eps"])
    writer.add_vocab_size(hf["vocab_size"])
    for name, value in weights.items():
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        else:
            _, _, n, rest = name.split(".", 3)
            gname = f"blk.{n}.{layer[rest.rsplit('.', 1)[0]]}.weight"
        if gname.endswith("attn_q.weight"):
            value = llama_cpp_rows(value, hf["num_attention_heads"])
        elif gname.endswith("attn_k.weight"):
            value = llama_cpp_rows(value, hf["num_key_value_heads"])
        writer.add_tensor(gname, np.ascontiguousarray(value, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    checkpoint = read_gguf(tmp_path / "tiny.gguf")
    cfg = llama.config_from_gguf_spec(checkpoint.spec)
    assert cfg.rms_eps == pytest.approx(1e-6)  # GGUF stores it as float32
    assert cfg == dataclasses.replace(llama.config_from_hf(hf), rms_eps=cfg.rms_eps)
    params = llama.params_from_hf(checkpoint.tensors, cfg)
    ref = np.load(FIXTURES / "tiny-llama" / "reference.npz")
    tokens, valid = jnp.asarray(ref["input_ids"]), jnp.asarray(ref["valid"])
    logits = np.asarray(llama.forward(params, cfg, tokens, valid))
    np.testing.assert_allclose(logits[ref["valid"]], ref["logits"][ref["valid"]], atol=1e-4, rtol=0)
    np.testing.assert_array_equal(np.asarray(llama.greedy_generate(params, cfg, tokens, valid, 8)), ref["greedy"])


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2"])
def test_scanned_layers_give_bit_identical_logits_to_a_layer_by_layer_loop(name):
    """The model scans one Block over the stacked weights; the same Blocks applied one after another (what the
    model did before its layers were stacked) give exactly the same logits, left padding included."""
    cfg, params, ref = load(name)
    tokens, valid = jnp.asarray(ref["input_ids"]), jnp.asarray(ref["valid"])
    layer_by_layer = lambda p: llama.forward_layer_by_layer(p, cfg, tokens, valid)  # noqa: E731
    scanned = np.asarray(jax.jit(lambda p: llama.forward(p, cfg, tokens, valid))(params))
    assert cfg.n_layers >= 2 and np.array_equal(scanned, np.asarray(jax.jit(layer_by_layer)(params)))
    assert jax.tree_util.tree_leaves(params["blocks"])[0].shape[0] == cfg.n_layers
