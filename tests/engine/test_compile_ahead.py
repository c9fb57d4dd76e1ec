"""Compiling ahead on worker threads (the runner overlaps the chunk's, the evaluation's and the initial
state's compiles): the same programs, compiled once, the same results, errors raised where they are awaited."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.algos import ppo
from longhorizon.engine.fused import FusedEngine, RunOnce
from longhorizon.envs import make
from longhorizon.runner.evaluate import compile_evaluation_in_background, evaluate


def test_run_once_compiled_in_background_traces_once_and_computes_the_same():
    traces = []

    def fn(x):
        traces.append(x.shape)
        return jnp.cumsum(x * 2.0 + 1.0)

    once = RunOnce(fn)
    once.compile_in_background(jax.ShapeDtypeStruct((5,), jnp.float32))
    out = once(jnp.arange(5.0))
    again = once(jnp.ones(5))
    np.testing.assert_array_equal(np.asarray(out), [1.0, 4.0, 9.0, 16.0, 25.0])
    np.testing.assert_array_equal(np.asarray(again), [3.0, 6.0, 9.0, 12.0, 15.0])
    assert traces == [(5,)]  # one trace and compile, shared by the background request and both calls


def test_a_failed_background_compile_is_raised_by_the_call_that_waits_for_it():
    once = RunOnce(lambda x: x @ x)  # a vector @ vector is fine, a rank-3 operand is not
    bad = jax.ShapeDtypeStruct((2, 3, 4), jnp.float32)
    once.compile_in_background(bad)
    with pytest.raises(TypeError):
        once(jnp.zeros((2, 3, 4)))


@pytest.fixture(scope="module")
def tiny():
    return make("CartPole-v1"), ppo.Config(num_envs=4, num_steps=8, update_epochs=1, num_minibatches=2)


def test_chunk_compiled_ahead_from_shapes_runs_bit_identical_to_the_plain_compile(tiny):
    env, config = tiny
    ahead, plain = FusedEngine(ppo, env, config, 2, 3), FusedEngine(ppo, env, config, 2, 3)
    ahead.compile_in_background(5)
    state_a = ahead.init(5)
    seconds = ahead.compile(state_a)
    assert seconds > 0 and ahead._pending is None
    state_p = plain.init(5)
    plain.compile(state_p)
    for _ in range(2):
        state_a, metrics_a = ahead.run_chunk(state_a)
        state_p, metrics_p = plain.run_chunk(state_p)
    for a, b in zip(jax.tree.leaves(state_a), jax.tree.leaves(state_p), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(metrics_a["loss"], metrics_p["loss"])
    # The evaluation compiled ahead from the abstract state gives the returns a plain evaluation gives.
    compile_evaluation_in_background(ppo, ahead.abstract_state(5), env, 3)
    key = jax.random.PRNGKey(1)
    assert evaluate(ppo, state_a, env, key, 3) == evaluate(ppo, state_p, env, key, 3)


def test_a_failed_background_chunk_compile_is_raised_by_compile(tiny, monkeypatch):
    env, config = tiny
    engine = FusedEngine(ppo, env, config, 1, 2)

    def broken(state):
        raise RuntimeError("XLA ran out of memory")

    monkeypatch.setattr(engine, "_compile", broken)
    engine.compile_in_background(0)
    with pytest.raises(RuntimeError, match="out of memory"):
        engine.compile(engine.init(0))
