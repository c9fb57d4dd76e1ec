"""Verifiable tasks: determinism, reference answers, reward modes, robust verifiers."""

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longhorizon.errors import UsageError
from longhorizon.lm.tasks import (
    REWARDS,
    TaskConfig,
    chain_problem,
    correct_flags,
    make_problems,
    max_lengths,
    parse_completion,
    score,
    segment_ids,
    segment_rewards,
)
from longhorizon.lm.tokenizer import Tokenizer


def evaluate_prompt(prompt: str, modulus: int) -> dict[str, int]:
    """Independent reference evaluator of a task prompt."""
    env = {}
    for stmt in filter(None, prompt.split(";")):
        name, expr = stmt.split("=")
        m = re.fullmatch(r"([a-z]|\d+)([+\-*])(\d+)", expr)
        if m is None:
            env[name] = int(expr)
            continue
        a, op, c = m.groups()
        x = env[a] if a.isalpha() else int(a)
        env[name] = {"+": x + int(c), "-": x - int(c), "*": x * int(c)}[op] % modulus
    return env


@pytest.mark.parametrize("kind", ["chain", "composed", "packed"])
def test_problems_are_deterministic_and_answers_correct(kind):
    cfg = TaskConfig(digits=2, operators="+-*")
    a = make_problems(kind, [1, 3, 5], 40, seed=7, cfg=cfg)
    assert a == make_problems(kind, [1, 3, 5], 40, seed=7, cfg=cfg)
    assert a != make_problems(kind, [1, 3, 5], 40, seed=8, cfg=cfg)
    tok = Tokenizer()
    for p in a:
        env = evaluate_prompt(p.prompt, cfg.modulus)
        assert all(env[v] == x for v, x in p.answers)
        assert score(p, p.target) == 1.0
        tok.encode(p.prompt + p.target)  # every character is in the alphabet
        plen, clen = max_lengths(kind, 5, cfg)
        assert len(p.prompt) <= plen and len(p.target) <= clen


def test_chain_structure_each_step_consumes_previous_answer():
    p = chain_problem(np.random.default_rng(0), 4, TaskConfig(names="sequential"))
    stmts = p.prompt.rstrip(";").split(";")
    assert len(stmts) == 5 and p.horizon == 4
    for i in range(1, 5):
        assert stmts[i].startswith(f"{'abcde'[i]}={'abcde'[i - 1]}")
    assert p.scored == ("b", "c", "d", "e") and p.final == "e"


def test_reward_modes_hand_computed():
    base = make_problems("chain", 4, 1, seed=0, cfg=TaskConfig(names="sequential"))[0]
    (b, vb), (c, vc), (d, vd), (e, ve) = base.answers
    text = f"{b}={vb};{c}={vc};{d}={(vd + 1) % 100};{e}={ve};"  # third answer wrong, final right
    assert correct_flags(base, text) == [True, True, False, True]
    got = {r: score(dataclasses.replace(base, reward=r, gamma=0.5), text) for r in REWARDS}
    assert got["final"] == 1.0
    assert got["all"] == 0.0
    assert got["milestone"] == 0.75
    # weights gamma^(n-i) = 0.125, 0.25, 0.5, 1 over answers 1..4; answer 3 is wrong.
    assert got["discounted"] == pytest.approx((0.125 + 0.25 + 1.0) / 1.875)


def test_composed_is_all_or_nothing():
    p = make_problems("composed", 3, 1, seed=1)[0]
    assert p.reward == "all" and len(p.scored) == 3
    assert score(p, p.target) == 1.0
    pieces = p.target.rstrip(";").split(";")
    name, value = pieces[0].split("=")
    wrong = ";".join([f"{name}={(int(value) + 1) % 100}"] + pieces[1:]) + ";"
    assert score(p, wrong) == 0.0


def test_verifier_reads_first_assignment_and_exact_strings():
    p = make_problems("chain", 1, 1, seed=3, cfg=TaskConfig(names="sequential"))[0]
    (v, x), = p.answers
    assert score(p, f"{v}={x};") == 1.0
    assert score(p, f"{v}={(x + 1) % 100};{v}={x};") == 0.0  # guessing twice earns nothing
    assert score(p, f"{v}=0{x};") == 0.0  # leading zero is not the canonical answer
    assert score(p, f"  {v}={x} ;junk") == 1.0  # whitespace around a statement is tolerated
    assert parse_completion("a=1;b=x;c=;=3;d=04;e=5") == {"a": "1", "d": "04", "e": "5"}


def test_fixed_width_values():
    cfg = TaskConfig(digits=2, fixed_width=True, names="sequential")
    for p in make_problems("chain", 3, 20, seed=0, cfg=cfg):
        assert all(len(s.split("=")[1]) == 2 for s in p.target.rstrip(";").split(";"))
        assert re.fullmatch(r"a=\d\d;", p.prompt[:5])
        assert score(p, p.target) == 1.0
    p = make_problems("chain", 1, 1, seed=0, cfg=cfg)[0]
    (v, x), = p.answers
    assert score(p, f"{v}={x};") == float(x >= 10)  # "7" is not the canonical "07"


def test_segments():
    assert segment_ids("b=1;c=22;", 2).tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert segment_ids("b=1;c=2;d=3;", 2).tolist()[-4:] == [-1, -1, -1, -1]
    p = make_problems("chain", 2, 1, seed=0)[0]
    (v1, x1), (v2, x2) = p.answers
    assert segment_rewards(p, f"{v1}={x1};{v2}={(x2 + 1) % 100};") == [1.0, 0.0]


def test_bad_task_input_raises_usage_error():
    with pytest.raises(UsageError):
        TaskConfig(operators="/")
    with pytest.raises(UsageError):
        TaskConfig(reward="dense")
    with pytest.raises(UsageError):
        make_problems("sorting", 2, 3, seed=0)
    with pytest.raises(UsageError):
        make_problems("chain", 40, 3, seed=0)


ALPHABET = "abcz0123456789=;+-* \n\x00é"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=60), st.sampled_from(REWARDS), st.integers(1, 6))
def test_verifiers_never_crash_on_malformed_text(text, reward, horizon):
    p = make_problems("chain", horizon, 1, seed=horizon, cfg=TaskConfig(reward=reward))[0]
    r = score(p, text)
    assert 0.0 <= r <= 1.0
    assert len(segment_rewards(p, text)) == horizon
    assert segment_ids(text, horizon).shape == (len(text),)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_parse_never_crashes_on_any_unicode(text):
    parsed = parse_completion(text)
    assert all(re.fullmatch(r"[a-z]", k) and v.isdigit() for k, v in parsed.items())
