"""SRL's scaling reproduction: the simulated step cost by hand, the two claims' rules on recorded numbers made
up to hit each verdict, and the quick run end to end (a child process with its own simulated Ray cluster)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest

from longhorizon.repro import claims as C
from longhorizon.repro import srl


def _rollout(env, num_envs: int, num_steps: int):
    """``num_steps`` vectorised steps of ``num_envs`` environments with random actions, jitted as one program."""
    import jax

    def run(key):
        keys = jax.random.split(key, num_envs)
        obs, state = jax.vmap(env.reset)(keys)

        def step(carry, key):
            state = carry
            act_key, step_key = jax.random.split(key)
            action = jax.random.randint(act_key, (num_envs,), 0, 2)
            obs, state, reward, *_ = jax.vmap(env.step)(jax.random.split(step_key, num_envs), state, action)
            return state, (obs, reward)

        return jax.lax.scan(step, state, jax.random.split(key, num_steps))[1]

    return jax.jit(run)


def test_the_step_cost_is_paid_once_per_vectorised_step_and_changes_nothing_else():
    import jax
    import numpy as np

    from longhorizon.envs import make

    num_envs, num_steps, cost = 8, 4, 0.05
    costly = _rollout(make(srl.ENV_ID, step_cost_s=cost), num_envs, num_steps)
    plain = _rollout(make("CartPole-v1"), num_envs, num_steps)
    key = jax.random.PRNGKey(0)
    jax.block_until_ready(costly(key))  # compile (and pay once) outside the timing
    start = time.perf_counter()
    got = jax.block_until_ready(costly(key))
    seconds = time.perf_counter() - start
    assert seconds >= num_steps * cost  # XLA kept the sleep: once per step ...
    assert seconds < num_envs * num_steps * cost / 2  # ... not once per environment
    for a, b in zip(got, plain(key)):  # the zero it adds leaves observations and rewards as CartPole's
        assert np.array_equal(np.asarray(a), np.asarray(b))


def _recorded(throughput, share, bound, seeds=(0, 1, 2), quick=False):
    """Rows as :func:`srl.measure` records them; ``throughput[n]``, ``share[n]``, ``bound[n]`` per actor count,
    each seed scaled by a small factor so that the intervals have a width."""
    setup = srl.QUICK if quick else dataclasses.replace(srl.Setup(), seeds=tuple(seeds))
    rows = [{"actors": n, "seed": s, "steps_per_second": throughput[n] * (1 + 0.01 * i),
             "learner_share": min(1.0, share[n] * (1 + 0.01 * i)), "learner_bound": bound[n] * (1 + 0.01 * i)}
            for n in setup.actors for i, s in enumerate(setup.seeds)]
    return C.as_recorded({"setup": dataclasses.asdict(setup), "rows": rows})


ACTORS = (1, 2, 4, 8, 16)
BOUND = dict.fromkeys(ACTORS, 6000.0)


def _verdicts(L, quick=False):
    return [c.verdict for c in srl.judge(L, quick)[0]]


def test_the_claims_rules_give_each_verdict():
    # the claim's shape: linear until the learner (6000 steps/s) saturates near 6 actors, the learner's from there
    srl_like = _recorded({n: 1000.0 * min(n, 6) for n in ACTORS}, {n: min(1.0, n / 6) for n in ACTORS}, BOUND)
    claims, arms = srl.judge(srl_like)
    assert [c.verdict for c in claims] == [C.HOLDS, C.HOLDS]
    assert claims[0].evidence["actors"] == 2 and claims[1].evidence["actors"] == 16  # share(4) = 2/3 is not below 1/2
    assert set(arms) == {f"{n} actors" for n in ACTORS}
    # throughput hardly grows while the learner idles (judged at 8, the most actors with a share below 1/2), and
    # at 16 something other than the learner bounds it
    poor = _recorded({1: 1000.0, 2: 1200.0, 4: 1500.0, 8: 2000.0, 16: 3000.0},
                     {1: 0.1, 2: 0.15, 4: 0.3, 8: 0.4, 16: 0.5}, BOUND)
    claims, _ = srl.judge(poor)
    assert [c.verdict for c in claims] == [C.CONTRADICTED, C.CONTRADICTED] and claims[0].evidence["actors"] == 8
    assert _verdicts(_recorded({n: 1000.0 * min(n, 6) for n in ACTORS}, {n: min(1.0, n / 6) for n in ACTORS}, BOUND,
                               seeds=(0, 1))) == [C.INCONCLUSIVE, C.INCONCLUSIVE]
    assert _verdicts(srl_like, quick=True) == [C.QUICK, C.QUICK]
    quick = _recorded({1: 1000.0, 2: 2000.0}, {1: 0.2, 2: 0.4}, {1: 5000.0, 2: 5000.0}, quick=True)
    assert _verdicts(quick, quick=True) == [C.QUICK, C.QUICK]


def test_a_run_that_cannot_speak_to_a_claim_gets_no_signal():
    # the learner is saturated from 2 actors on: no actor-bound N >= 2 to measure scaling at
    saturated = _recorded({n: 5000.0 for n in ACTORS}, {1: 0.6, 2: 0.9, 4: 1.0, 8: 1.0, 16: 1.0}, BOUND)
    assert _verdicts(saturated)[0] == C.NO_SIGNAL
    # a learner so fast that even 9 working actors cannot feed it: nothing beyond saturation to judge
    fast_learner = _recorded({n: 1000.0 * n for n in ACTORS}, {n: n / 100 for n in ACTORS}, dict.fromkeys(ACTORS, 1e5))
    claims, arms = srl.judge(fast_learner)
    assert [c.verdict for c in claims] == [C.HOLDS, C.NO_SIGNAL]
    assert "cannot be what bounds" in claims[1].evidence["did_not_move"][0]
    summary = C.summary(paper=srl.PAPER, claims=claims, arms=arms, scale="-", quick=False, command="-",
                        wall_seconds=None)
    assert C.validate_summary(summary) == []


@pytest.mark.slow
def test_the_quick_run_end_to_end_and_its_rerun_reads_every_measurement_back(tmp_path):
    """In a child process: the run starts its own simulated cluster, which cannot share a process with the test
    session's Ray instance (``ray_session``)."""
    pytest.importorskip("ray")
    code = "import sys; from longhorizon.repro import srl; srl.run(sys.argv[1], quick=True)"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "JAX_PLATFORMS": "cpu"}

    def run() -> tuple[subprocess.CompletedProcess, float]:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                              timeout=400)
        return done, time.perf_counter() - start

    done, seconds = run()
    if "network namespace" in done.stderr and done.returncode != 0:
        pytest.skip("the simulated cluster needs a loopback-only network namespace (root or CAP_SYS_ADMIN)")
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"quick run: {seconds:.0f} s")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(summary) == [] and summary["quick"]
    assert [c["verdict"] for c in summary["claims"]] == [C.QUICK, C.QUICK]
    assert [(r["actors"], r["seed"]) for r in summary["rows"]] == [(1, 0), (2, 0)]
    for row in summary["rows"]:
        assert row["finite"] and row["steps_per_second"] > 0 and 0 <= row["learner_share"] <= 1
        assert len(row["placed_on"]) == row["actors"] and "head" not in row["placed_on"]  # none on the learner's node
        assert row["collect_seconds_per_call"] >= srl.QUICK.num_steps * srl.QUICK.step_cost_s
        assert max(map(int, row["staleness_seen"])) <= srl.QUICK.max_staleness
    for name in ("README.md", "throughput_vs_actors.png", "curves/throughput.csv", "partial/actors2_seed0.json"):
        assert (tmp_path / name).exists(), name
    again, _ = run()
    assert again.returncode == 0, again.stderr[-4000:]
    assert again.stdout.count("read back from") == 2 and "Connected to Ray" not in again.stderr
