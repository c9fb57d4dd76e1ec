"""On-policy distillation: reverse KL (exact and sampled), domain routing, vocabulary alignment, teacher scoring."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.agents.distill import (
    Teacher,
    VocabularyMap,
    distillation_advantages,
    reverse_kl_exact,
    reverse_kl_sampled,
    route_by_domain,
    routed_teacher_logprobs,
    teacher_token_logprobs,
)
from longhorizon.lm.model import ModelConfig, init_params, token_logprobs
from longhorizon.lm.policy import tiny_random
from longhorizon.lm.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def byte_tok():
    return tiny_random().tokenizer


# ----------------------------------------------------------------------------- reverse KL


def test_reverse_kl_exact_by_hand():
    # student p = [0.5, 0.5], teacher q = [0.75, 0.25]: KL(p || q) = 0.5 ln(2/3) + 0.5 ln 2 = 0.5 ln(4/3)
    s = jnp.array([[[0.0, 0.0], [0.0, 0.0]]])
    t = jnp.array([[[np.log(3.0), 0.0], [np.log(3.0), 0.0]]])
    np.testing.assert_allclose(reverse_kl_exact(s, t, jnp.array([[1.0, 0.0]])), [[0.14384103622589042, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(reverse_kl_exact(t, t, jnp.ones((1, 2))), [[0.0, 0.0]], atol=1e-7)
    with pytest.raises(UsageError, match="one vocabulary"):
        reverse_kl_exact(s, jnp.zeros((1, 2, 3)), jnp.ones((1, 2)))


def test_reverse_kl_sampled_and_its_advantage_by_hand():
    # the same p, q: k1 at token 0 = ln(0.5/0.75), at token 1 = ln 2; their p-weighted mean is the KL
    student = jnp.log(jnp.array([[0.5, 0.5]]))
    teacher = jnp.log(jnp.array([[0.75, 0.25]]))
    k1 = reverse_kl_sampled(student, teacher)
    np.testing.assert_allclose(k1, [[-0.40546510810816444, 0.6931471805599453]], rtol=1e-6)
    assert float(0.5 * k1.sum()) == pytest.approx(0.14384103622589042, rel=1e-6)
    np.testing.assert_allclose(distillation_advantages(student, teacher, jnp.array([[1.0, 0.0]])),
                               [[0.40546510810816444, 0.0]], rtol=1e-6)


@pytest.mark.slow
def test_the_advantage_form_has_the_gradient_of_the_reverse_kl():
    # one position, V = 3: grad_theta KL(softmax(theta) || q) = E_{x ~ p}[grad log p(x) * (-A(x))]
    theta = jnp.array([0.3, -0.2, 1.1])
    log_q = jnp.log(jnp.array([0.2, 0.5, 0.3]))
    p = jax.nn.softmax(theta)
    adv = distillation_advantages(jax.nn.log_softmax(theta), log_q, 1.0)
    score = jax.jacobian(jax.nn.log_softmax)(theta)
    exact = jax.grad(lambda th: reverse_kl_exact(th[None, None], log_q[None, None], jnp.ones((1, 1)))[0, 0])(theta)
    np.testing.assert_allclose(exact, -(p * adv) @ score, atol=1e-6)


# ----------------------------------------------------------------------------- routing


def test_route_by_domain():
    teachers = {"math": "M", "code": "C"}
    rows = route_by_domain(["math", "code", "math", "chat"], teachers, default="code")
    assert {k: v.tolist() for k, v in rows.items()} == {"math": [0, 2], "code": [1, 3]}
    with pytest.raises(UsageError, match="'chat' has no teacher"):
        route_by_domain(["math", "chat"], teachers)
    with pytest.raises(UsageError, match="default teacher 'law'"):
        route_by_domain(["math"], teachers, default="law")


# ----------------------------------------------------------------------------- vocabulary alignment


def test_identity_when_the_tokenizers_are_the_same(byte_tok):
    assert VocabularyMap(byte_tok, byte_tok).identity
    assert VocabularyMap(Tokenizer(), Tokenizer()).identity
    assert not VocabularyMap(Tokenizer(), Tokenizer("abc")).identity
    tok, owner = VocabularyMap(byte_tok, byte_tok).to_teacher([9, 67, 68], [False, True, True])
    assert tok.tolist() == [67, 68] and owner.tolist() == [1, 2]


def test_byte_student_to_character_teacher(byte_tok):
    vm = VocabularyMap(byte_tok, Tokenizer())
    assert not vm.identity
    student = byte_tok.encode("ab=3") + [2]  # <|im_end|> stops
    assert student == [67, 68, 31, 21, 2]
    tok, owner = vm.to_teacher(student)
    # character ids: a -> 13, b -> 14, '=' -> 39, '3' -> 6, and the character tokenizer's EOS 2
    assert tok.tolist() == [13, 14, 39, 6, 2] and owner.tolist() == [0, 1, 2, 3, 4]


def test_character_student_to_byte_teacher_sums_the_pieces(byte_tok):
    vm = VocabularyMap(Tokenizer("abé "), byte_tok)
    tok, owner = vm.to_teacher([3, 5])  # "a", "é"
    assert tok.tolist() == [67, 130, 105] and owner.tolist() == [0, 1, 1]  # é is two UTF-8 bytes
    np.testing.assert_allclose(VocabularyMap.to_student([[-0.1, -0.2, -0.3]], owner[None], 2), [[-0.1, -0.5]], rtol=1e-6)


def test_partial_characters_join_the_next_token(byte_tok):
    vm = VocabularyMap(byte_tok, Tokenizer("abé"))
    tok, owner = vm.to_teacher([67, 130, 105])  # "a", then é's two bytes
    assert tok.tolist() == [3, 5] and owner.tolist() == [0, 2]
    np.testing.assert_allclose(VocabularyMap.to_student([[-0.1, -0.7]], owner[None], 3), [[-0.1, 0.0, -0.7]], rtol=1e-6)


def test_text_the_teacher_cannot_write_is_refused(byte_tok):
    with pytest.raises(UsageError, match="cannot be written in the teacher's vocabulary"):
        VocabularyMap(byte_tok, Tokenizer()).to_teacher([1])  # <|im_start|>


# ----------------------------------------------------------------------------- teachers


@pytest.fixture(scope="module")
def tiny_teacher():
    cfg = ModelConfig(vocab_size=50, d_model=16, n_layers=1, n_heads=2, max_len=16)
    return cfg, init_params(jax.random.PRNGKey(0), cfg), init_params(jax.random.PRNGKey(1), cfg)


@pytest.mark.slow
def test_teacher_token_logprobs_align_with_the_tokens(tiny_teacher):
    cfg, params, _ = tiny_teacher
    tokens = jnp.array([[5, 6, 7, 8], [0, 0, 9, 10]])
    valid = jnp.array([[1, 1, 1, 1], [0, 0, 1, 1]], bool)
    got = np.asarray(teacher_token_logprobs(params, cfg, tokens, valid))
    ref, _ = jax.jit(token_logprobs, static_argnums=1)(params, cfg, tokens, valid)
    # 0 where a token has no valid token before it (the first of each row) or is padding
    assert got.shape == (2, 4) and (got[:, 0] == 0).all() and (got[1, :3] == 0).all()
    np.testing.assert_allclose(got[0, 1:], np.asarray(ref)[0], rtol=1e-5)
    np.testing.assert_allclose(got[1, 3], np.asarray(ref)[1, 2], rtol=1e-5)
    assert (got[np.array([[0, 1, 1, 1], [0, 0, 0, 1]], bool)] < 0).all()


def test_routed_teachers_score_their_rows_through_the_map(tiny_teacher):
    cfg, p0, p1 = tiny_teacher
    student = Tokenizer("abc")  # ids 3..5, a character teacher over the default alphabet (ids 3..50)
    teacher_tok = Tokenizer()
    vm = VocabularyMap(student, teacher_tok)
    teachers = {"x": Teacher(p0, cfg, vm), "y": Teacher(p1, cfg, vm)}
    tokens = np.array([[1, 3, 4, 2], [1, 5, 5, 2], [1, 3, 5, 2]])  # BOS "ab" EOS, BOS "cc" EOS, ...
    valid = np.ones(tokens.shape, bool)
    out = routed_teacher_logprobs(["x", "y", "x"], teachers, tokens, valid)
    # the character teacher's ids: BOS 1, a -> 13, b -> 14, c -> 15, EOS 2
    t_tok = jnp.array([[1, 13, 14, 2], [1, 15, 15, 2], [1, 13, 15, 2]])
    direct0 = np.asarray(teacher_token_logprobs(p0, cfg, t_tok, jnp.ones((3, 4), bool)))
    direct1 = np.asarray(teacher_token_logprobs(p1, cfg, t_tok, jnp.ones((3, 4), bool)))
    np.testing.assert_allclose(out[[0, 2]], direct0[[0, 2]], rtol=1e-5)
    np.testing.assert_allclose(out[1], direct1[1], rtol=1e-5)
    assert not np.allclose(direct0[1], direct1[1])
