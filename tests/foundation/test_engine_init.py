"""Initialising several seeds must not batch a QR decomposition (it deadlocked XLA's CPU pool on 2 cores);
the engine's faster-compiling initialisation builds the same bits as a plain ``jax.jit``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.algos import dqn, ppo, pqn, sqirl
from longhorizon.engine.fused import FusedEngine
from longhorizon.envs import make


def _qr_operand_ranks(jaxpr) -> list[int]:
    """Rank of the operand of every QR factorisation in a (nested) jaxpr."""
    ranks = []
    for eqn in jaxpr.eqns:
        if "geqrf" in eqn.primitive.name or eqn.primitive.name == "qr":
            ranks.append(eqn.invars[0].aval.ndim)
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                inner = getattr(sub, "jaxpr", None)
                if inner is not None:
                    ranks += _qr_operand_ranks(getattr(inner, "jaxpr", inner))
    return ranks


@pytest.mark.slow
def test_multi_seed_init_runs_each_seed_qr_unbatched_and_matches_single_seed_inits():
    env, config = make("CartPole-v1"), ppo.Config(num_envs=4, num_steps=8)
    engine = FusedEngine(ppo, env, config, 3, 1)
    keys = engine.seed_keys(0)
    ranks = _qr_operand_ranks(jax.make_jaxpr(engine._init.jitted)(keys).jaxpr)
    assert ranks and all(rank == 2 for rank in ranks), ranks  # orthogonal init present, never batched
    states = engine.init(0)
    for i in range(3):
        single = jax.jit(lambda k: ppo.init(k, env, config))(keys[i])
        for a, b in zip(jax.tree.leaves(states), jax.tree.leaves(single)):
            np.testing.assert_array_equal(np.asarray(a)[i], np.asarray(b))


@pytest.mark.slow
def test_repeated_multi_seed_init_finishes():
    """The hang itself: a 4-seed PPO init called repeatedly, in a fresh process, with a deadline."""
    code = textwrap.dedent("""
        import jax
        from longhorizon.algos import ppo
        from longhorizon.engine.fused import FusedEngine
        from longhorizon.envs import make
        engine = FusedEngine(ppo, make("CartPole-v1"), ppo.Config(num_envs=8, num_steps=128), 4, 1)
        for seed in range(40):
            jax.block_until_ready(engine.init(seed))
        print("done")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0 and "done" in result.stdout, result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("algo", [ppo, pqn, dqn, sqirl], ids=lambda a: a.__name__.rsplit(".", 1)[-1])
def test_initial_state_compiled_at_level_one_equals_the_default_compile_bit_for_bit(algo):
    """``INITIALISE`` (LLVM at level 1) is only a compile-time saving: the initial state of each algorithm's
    default config on CartPole is bit-identical to the one a default ``jax.jit`` builds."""
    env, config = make("CartPole-v1"), algo.Config()
    engine = FusedEngine(algo, env, config, 1, 1)
    fast = engine.init(7)
    plain = jax.jit(lambda k: algo.init(k, env, config))(engine.seed_keys(7)[0])
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(plain), strict=True):
        np.testing.assert_array_equal(np.asarray(a)[0], np.asarray(b))
