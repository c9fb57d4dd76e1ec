"""Tokenizer, transformer and KV-cache generation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.generate import generate, greedy_no_cache, top_p_filter
from longhorizon.lm.model import ModelConfig, forward, init_params, token_logprobs
from longhorizon.lm.tokenizer import BOS, EOS, PAD, Tokenizer

TOK = Tokenizer()
PROMPTS = ["a=1;b=a+2;", "c=3;", "zz", "q=99;r=q*7;s=r-1;"]
N_NEW = 10


@pytest.fixture(scope="module", params=["rope", "learned"])
def model(request):
    cfg = ModelConfig(vocab_size=TOK.vocab_size, d_model=32, n_layers=2, n_heads=4, positions=request.param, max_len=64)
    return cfg, init_params(jax.random.PRNGKey(0), cfg)


def test_tokenizer_roundtrip_and_padding():
    ids = TOK.encode("a=12;", bos=True, eos=True)
    assert ids[0] == BOS and ids[-1] == EOS
    assert TOK.decode(ids) == "a=12;"
    assert TOK.decode(TOK.encode("x=1;") + [EOS] + TOK.encode("junk")) == "x=1;"
    tokens, valid = TOK.encode_prompts(["ab", "abcd"], 6)
    assert tokens.shape == (2, 6) and (tokens[0, :3] == PAD).all() and tokens[0, 3] == BOS
    assert valid.sum(1).tolist() == [3, 5]
    comp, cvalid = TOK.encode_completions(["1;", ""], 4)
    assert comp[1, 0] == EOS and cvalid.sum(1).tolist() == [3, 1]
    with pytest.raises(UsageError):
        TOK.encode("A")
    with pytest.raises(UsageError):
        TOK.encode_prompts(["abcdef"], 3)


def test_model_config_validation():
    with pytest.raises(UsageError):
        ModelConfig(d_model=30, n_heads=4)
    with pytest.raises(UsageError):
        ModelConfig(positions="alibi")


@pytest.mark.slow
def test_left_padding_does_not_change_logits(model):
    cfg, params = model
    short, sv = TOK.encode_prompts(["q=99;r=q*7;"])
    long, lv = TOK.encode_prompts(["q=99;r=q*7;"], short.shape[1] + 5)
    a = forward(params, cfg, jnp.asarray(short), jnp.asarray(sv))
    b = forward(params, cfg, jnp.asarray(long), jnp.asarray(lv))[:, 5:]
    np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.slow
def test_kv_cache_greedy_equals_no_cache_greedy(model):
    cfg, params = model
    p, pv = TOK.encode_prompts(PROMPTS)
    g = generate(params, p, pv, jax.random.PRNGKey(0), cfg=cfg, max_new_tokens=N_NEW, temperature=0.0)
    ref_tokens, ref_valid = greedy_no_cache(params, p, pv, cfg=cfg, max_new_tokens=N_NEW)
    np.testing.assert_array_equal(np.asarray(g.tokens), np.asarray(ref_tokens))
    np.testing.assert_array_equal(np.asarray(g.valid), np.asarray(ref_valid))


@pytest.mark.slow
def test_generation_logprobs_equal_teacher_forced(model):
    cfg, params = model
    p, pv = TOK.encode_prompts(PROMPTS * 4)
    for temperature in (3.0,):  # the temperature of the invariants test: one compiled sampler
        g = generate(params, p, pv, jax.random.PRNGKey(3), cfg=cfg, max_new_tokens=N_NEW, temperature=temperature)
        seq = jnp.concatenate([p, g.tokens], 1)
        valid = jnp.concatenate([pv, g.valid], 1)
        lp, ent = token_logprobs(params, cfg, seq, valid, temperature)
        lp = np.asarray(lp[:, p.shape[1] - 1 :])
        mask = np.asarray(g.valid)
        assert mask.any()
        np.testing.assert_allclose(np.where(mask, lp, 0.0), np.asarray(g.logprobs), atol=2e-5)
        assert (np.asarray(ent) >= -1e-6).all()


def test_stop_at_eos_and_padding_invariants(model):
    cfg, params = model
    p, pv = TOK.encode_prompts(PROMPTS * 4)
    g = generate(params, p, pv, jax.random.PRNGKey(1), cfg=cfg, max_new_tokens=N_NEW, temperature=3.0)
    tokens, valid = np.asarray(g.tokens), np.asarray(g.valid)
    for row, ok in zip(tokens, valid):
        n = int(ok.sum())
        assert ok[:n].all() and not ok[n:].any()  # valid is a prefix
        assert (row[n:] == PAD).all()
        eos = np.flatnonzero(row == EOS)
        assert len(eos) <= 1
        if len(eos):
            assert eos[0] == n - 1  # generation stopped right after EOS
        else:
            assert n == N_NEW
    # Same key, same samples: generation is a pure function.
    g2 = generate(params, p, pv, jax.random.PRNGKey(1), cfg=cfg, max_new_tokens=N_NEW, temperature=3.0)
    np.testing.assert_array_equal(tokens, np.asarray(g2.tokens))


def test_top_p_filter_keeps_the_nucleus():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    kept = np.isfinite(np.asarray(top_p_filter(logits, 0.7)))
    assert kept.tolist() == [[True, True, False, False]]  # 0.5 < 0.7, 0.8 >= 0.7
    kept = np.isfinite(np.asarray(top_p_filter(logits, 0.1)))
    assert kept.tolist() == [[True, False, False, False]]  # the top token is always kept
    assert np.isfinite(np.asarray(top_p_filter(logits, 1.0))).all()


@pytest.mark.slow
def test_top_p_sampling_never_draws_outside_nucleus(model):
    cfg, params = model
    if cfg.positions != "rope":
        pytest.skip("one positional scheme is enough for the sampler filter")
    p, pv = TOK.encode_prompts(["a=1;"] * 16)
    g = generate(params, p, pv, jax.random.PRNGKey(7), cfg=cfg, max_new_tokens=1, temperature=1.0, top_p=0.3)
    logits = forward(params, cfg, jnp.asarray(p), jnp.asarray(pv))[:, -1]
    allowed = np.isfinite(np.asarray(top_p_filter(logits, 0.3)))
    first = np.asarray(g.tokens)[:, 0]
    assert allowed[np.arange(16), first].all()


@pytest.mark.slow
def test_shared_prompt_logprobs_equal_per_row_logprobs_and_gradients(model):
    """Groups that share a prompt (run once) give the log-probs, entropies and gradients of the rows
    run separately with the prompt repeated; padded prompts and completions ending early included."""
    from longhorizon.lm.model import shared_prompt_logprobs

    cfg, params = model
    s = 3
    prompt, pvalid = TOK.encode_prompts(PROMPTS[:3], 12)  # left-padded by different amounts
    comp, cvalid = TOK.encode_completions(["b=3;", "", "x", "1;2", "r=", "c;", "q=9", "zz;", "7"], 5)
    rows_prompt, rows_pvalid = jnp.repeat(prompt, s, 0), jnp.repeat(pvalid, s, 0)
    tokens, valid = jnp.concatenate([rows_prompt, comp], 1), jnp.concatenate([rows_pvalid, cvalid], 1)
    mask = np.asarray(cvalid)
    assert not mask.all() and mask.any()

    def per_row(p):
        lp, ent = token_logprobs(p, cfg, tokens, valid, 2.0)
        return lp[:, prompt.shape[1] - 1 :], ent[:, prompt.shape[1] - 1 :]

    def shared(p):
        return shared_prompt_logprobs(p, cfg, prompt, pvalid, comp, cvalid, 2.0)

    # jitted: run op by op, the forward and backward passes take minutes on 2 cores
    for a, b in zip(jax.jit(shared)(params), jax.jit(per_row)(params)):
        np.testing.assert_allclose(np.where(mask, a, 0.0), np.where(mask, b, 0.0), atol=2e-6)
    grads = [jax.jit(jax.grad(lambda p, f=f: jnp.sum(jnp.where(mask, f(p)[0], 0.0))))(params) for f in (shared, per_row)]
    for a, b in zip(*(jax.tree.leaves(g) for g in grads)):
        np.testing.assert_allclose(a, b, atol=5e-5, rtol=1e-4)


@pytest.mark.slow
def test_grouped_generation_equals_repeated_prompts(model):
    """Prefilling each prompt once for a group of S rows samples what S copies of the prompt would."""
    cfg, params = model
    s = 4
    p, pv = TOK.encode_prompts(PROMPTS)
    key = jax.random.PRNGKey(1)
    grouped = generate(params, p, pv, key, cfg=cfg, max_new_tokens=N_NEW, temperature=1.0, group_size=s)
    repeated = generate(params, jnp.repeat(p, s, 0), jnp.repeat(pv, s, 0), key, cfg=cfg, max_new_tokens=N_NEW,
                        temperature=1.0)
    assert grouped.tokens.shape == (len(PROMPTS) * s, N_NEW)
    np.testing.assert_array_equal(np.asarray(grouped.tokens), np.asarray(repeated.tokens))
    np.testing.assert_array_equal(np.asarray(grouped.valid), np.asarray(repeated.valid))
    np.testing.assert_allclose(np.asarray(grouped.logprobs), np.asarray(repeated.logprobs), atol=2e-6)
    assert len({tuple(r) for r in np.asarray(grouped.tokens)[:s]}) > 1  # the rows of a group differ
