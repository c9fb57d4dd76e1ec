"""The Ray engine against the fused engine, under faults, asynchronously, and its refusals.

All Ray tests share one Ray instance on loopback (``ray_session`` in conftest.py) and one fused
reference run. Sync runs use 2 seeds on 2 actors (one seed each).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from longhorizon.engine import ray as ray_engine
from longhorizon.engine.ray import RayEngine
from longhorizon.errors import UsageError
from longhorizon.runner import checkpoint
from longhorizon.runner.run import Run, RunSpec, train

pytestmark = pytest.mark.xdist_group("ray")  # one Ray instance: keep these tests on one worker (--dist loadgroup)

SHORT = {"total_steps": "4096", "num_steps": "32"}  # 128 steps per update, 32 updates: 4 chunks of 8
TIMING = ("steps_per_second", "wall_seconds", "time")


def _spec(out: Path, engine: str, seeds: int = 2, overrides: dict | None = None, chunks: int = 4, **ray) -> RunSpec:
    return RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(overrides or SHORT), seeds=seeds, out=str(out),
                   num_chunks=chunks, quiet=True, engine=engine, **ray)


def _curve(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def _final_checkpoint(out: Path) -> bytes:
    meta = checkpoint.latest_meta(out / "checkpoints")
    return (out / "checkpoints" / meta["file"]).read_bytes()


@pytest.fixture
def engines(monkeypatch):
    """Every Ray engine a test's runs create; their actors are killed (by handle) afterwards."""
    made, original = [], ray_engine.make_engine

    def recording(run, options=None):
        engine = original(run, options)
        real_close = engine.close

        def close_and_remember():  # the runner closes its engine at the end: keep the actors' pids
            if engine._workers:
                engine.pids_at_close = engine.actor_pids()
            real_close()

        engine.close = close_and_remember
        made.append(engine)
        return engine

    monkeypatch.setattr(ray_engine, "make_engine", recording)
    yield made
    for engine in made:
        engine.close()


@pytest.fixture(scope="module")
def fused_reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("fused") / "run"
    summary = train(_spec(out, "fused"))
    return summary, _curve(out), _final_checkpoint(out)


def _assert_same_run(out: Path, summary: dict, reference) -> None:
    ref_summary, ref_curve, ref_checkpoint = reference
    assert _curve(out) == ref_curve  # every logged metric of every chunk, bit for bit
    assert _final_checkpoint(out) == ref_checkpoint  # parameters, optimizer, environments, keys
    assert summary["final_eval_return"] == ref_summary["final_eval_return"]


@pytest.mark.slow
def test_ray_sync_equals_fused_bit_for_bit(ray_session, fused_reference, engines, tmp_path):
    out = tmp_path / "run"
    summary = train(_spec(out, "ray", actors=2))
    assert len(engines) == 1 and len(set(engines[0].pids_at_close)) == 2
    _assert_same_run(out, summary, fused_reference)


@pytest.mark.slow
def test_ray_sync_equals_fused_with_one_seed(ray_session, engines, tmp_path):
    """One seed runs unbatched in the fused engine; the actor and the learner must batch it the same way."""
    fused_out, ray_out = tmp_path / "fused", tmp_path / "ray"
    reference = train(_spec(fused_out, "fused", seeds=1, chunks=2))
    summary = train(_spec(ray_out, "ray", seeds=1, chunks=2, actors=1))
    _assert_same_run(ray_out, summary, (reference, _curve(fused_out), _final_checkpoint(fused_out)))


@pytest.mark.slow
def test_ray_actor_kill_and_learner_crash_leave_the_run_exact(ray_session, fused_reference, engines, tmp_path,
                                                              monkeypatch):
    """Chunk 2: actor 1's process is killed by its pid (replaced, its collect replayed); chunk 3: the
    learner crashes; --resume from the runner's checkpoint then ends bit-identical to fused."""
    calls, killed = [], []
    original = RayEngine._sync_collect

    def faulty_collect(self, state):
        calls.append(1)
        if len(calls) == 8 + 3:  # chunk 2, 3rd update
            killed.append(self.actor_pids()[1])
            os.kill(killed[0], signal.SIGKILL)
        if len(calls) == 2 * 8 + 3:  # chunk 3, 3rd update
            raise RuntimeError("learner crashed")
        return original(self, state)

    monkeypatch.setattr(RayEngine, "_sync_collect", faulty_collect)
    out = tmp_path / "run"
    spec = _spec(out, "ray", actors=2)
    with pytest.raises(RuntimeError, match="learner crashed"):
        train(spec)
    engine = engines[0]
    assert engine.actor_restarts == 1 and killed[0] not in engine.pids_at_close
    assert checkpoint.latest_meta(out / "checkpoints")["chunk"] == 2  # chunk 2 finished despite the kill
    engine.close()
    monkeypatch.setattr(RayEngine, "_sync_collect", original)
    summary = train(spec, resume=True)
    assert summary["status"] == "completed" and summary["chunks_done"] == 4
    _assert_same_run(out, summary, fused_reference)


@pytest.mark.slow
def test_ray_async_ppo_vtrace_solves_cartpole(ray_session, engines, tmp_path, monkeypatch):
    """Asynchronous PPO with V-trace, 2 actors, staleness up to 2, one actor killed mid-run: >= 475 in 5e5 steps."""
    overrides = {"correction": "vtrace", "num_envs": "16", "num_steps": "64", "learning_rate": "1e-3", "update_epochs": "4",
                 "total_steps": "500000"}
    original, calls = RayEngine.run_chunk, []

    def run_chunk(self, state, num_updates=None):  # during chunk 3, kill actor 0 while requests are in flight
        calls.append(1)
        if len(calls) == 3:
            threading.Timer(0.05, os.kill, (self.actor_pids()[0], signal.SIGKILL)).start()
        return original(self, state, num_updates)

    monkeypatch.setattr(RayEngine, "run_chunk", run_chunk)
    out = tmp_path / "run"
    summary = train(_spec(out, "ray", seeds=1, overrides=overrides, chunks=10, actors=2, mode="async", max_staleness=2))
    rows = _curve(out)
    assert summary["status"] == "completed" and summary["total_env_steps"] <= 1_000_000
    assert summary["final_eval_return"][0] >= 475, summary["final_eval_return"]
    assert all(row["staleness_max"] <= 2 for row in rows)
    assert sum(row["staleness_mean"] for row in rows) > 0  # acting really ran ahead of learning
    assert engines[0].actor_restarts == 1


@pytest.mark.parametrize("settings, overrides, message", [
    (dict(mode="async", max_staleness=2), {}, "ppo tolerates a staleness of at most 0 without an off-policy correction"),
    (dict(mode="async", max_staleness=9), {"correction": "vtrace"}, "at most 8 with the vtrace correction"),
    (dict(mode="async"), {"normalize_observations": "true"}, "cannot run with --mode async"),
    (dict(mode="sync", actors=3), {}, "--actors 3 needs --seeds 3 or more"),
    (dict(mode="sync", max_staleness=1), {}, "applies to --mode async only"),
    (dict(mode="fast"), {}, "--mode must be sync or async"),
    (dict(address="my cluster"), {}, "--address 'my cluster' is not local"),
])
def test_ray_invalid_settings_are_refused_before_anything_starts(settings, overrides, message, tmp_path, monkeypatch):
    def no_ray(self):
        raise AssertionError("Ray was started for an invalid setting")

    monkeypatch.setattr(RayEngine, "_connect", no_ray)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        Run(_spec(tmp_path / "run", "ray", overrides={**SHORT, **overrides}, **settings))
    assert str(error.value).count(". ") == 0 and str(error.value).endswith(".")  # one sentence


def test_ray_pqn_staleness_above_one_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(RayEngine, "_connect", lambda self: (_ for _ in ()).throw(AssertionError("Ray started")))
    spec = RunSpec(algo="pqn", env="CartPole-v1", config_overrides={"total_steps": "4096"}, out=str(tmp_path / "run"),
                   quiet=True, engine="ray", mode="async", actors=2, max_staleness=2)
    with pytest.raises(UsageError, match="pqn tolerates a staleness of at most 1"):
        Run(spec)


@pytest.mark.slow
def test_ray_async_pqn_runs_with_lag_at_most_one(ray_session, engines, tmp_path):
    out = tmp_path / "run"
    spec = RunSpec(algo="pqn", env="CartPole-v1", out=str(out), quiet=True, engine="ray", mode="async", actors=2,
                   max_staleness=1, num_chunks=4,
                   config_overrides={"total_steps": "16384", "num_envs": "8", "num_steps": "64", "num_minibatches": "4",
                                     "hidden": "32,32"})
    summary = train(spec)
    rows = _curve(out)
    assert summary["status"] == "completed" and summary["total_env_steps"] == 16384
    assert all(row["staleness_max"] <= 1 for row in rows) and sum(row["staleness_mean"] for row in rows) > 0


@pytest.mark.slow
def test_ray_valid_async_setting_is_accepted(ray_session, engines, tmp_path):
    """Decoupled PPO at the largest staleness it accepts runs on Ray, and its correction acts: where a
    batch came from an older policy the weights min(1, pi_prox / mu) average below 1."""
    out = tmp_path / "run"
    summary = train(_spec(out, "ray", seeds=1, overrides={**SHORT, "correction": "decoupled"}, chunks=2,
                          mode="async", max_staleness=8, actors=2))
    rows = _curve(out)
    assert summary["status"] == "completed" and summary["total_env_steps"] == 4096
    assert engines[0].options.max_staleness == 8 and all(row["staleness_max"] <= 8 for row in rows)
    lagged = [row for row in rows if row["staleness_mean"] > 0]
    assert lagged and all(row["importance_weight"] < 1.0 for row in lagged)


def test_ray_cli_refuses_invalid_staleness_with_exit_code_2(tmp_path, capsys):
    from longhorizon.cli import main

    code = main(["train", "ppo", "--env", "CartPole-v1", "--engine", "ray", "--mode", "async", "--max-staleness", "3",
                 "--out", str(tmp_path / "run")])
    assert code == 2
    assert "so --max-staleness 3 is refused; pass --max-staleness 0 or less." in capsys.readouterr().err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_ray_options_with_another_engine_are_refused(tmp_path):
    with pytest.raises(UsageError, match="apply to --engine ray only"):
        Run(_spec(tmp_path / "run", "fused", actors=2))


def test_passthrough_reads_the_traced_program():
    """By hand: leaf 0 is returned in place and read, leaf 1 is changed, leaf 2 is returned untouched."""
    import jax.numpy as jnp

    state = (jnp.zeros(2), jnp.ones(3), jnp.zeros(()))
    kept, read, _ = ray_engine._passthrough(lambda s: ((s[0], s[1] + 1, s[2]), s[0] * 2), state)
    assert kept == [True, False, True] and read == [True, True, False]
    kept, read, _ = ray_engine._passthrough(lambda s: ((s[1], s[0], s[2]),), (jnp.zeros(2), jnp.ones(2), jnp.zeros(())))
    assert kept == [False, False, True] and read == [True, True, False]  # swapped leaves count as read


@pytest.mark.parametrize("algo_name, learn_only", [("ppo", ()), ("pqn", (".update_step",))])
def test_sync_flow_sends_parameters_and_returns_environments(algo_name, learn_only):
    """Each update the learner sends what learn changed and collect reads (the weights, the key, and
    PQN's update count for its epsilon); the actor returns what collect changed (environments, key)."""
    import importlib

    import jax

    from longhorizon.envs import make

    algo = importlib.import_module(f"longhorizon.algos.{algo_name}")
    env = make("CartPole-v1")
    shape = jax.eval_shape(lambda key: algo.init(key, env, algo.Config()), jax.random.PRNGKey(0))
    paths = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_leaves_with_path(shape)]
    to_actor, from_actor = ray_engine.state_flow(algo, shape)
    assert {paths[i] for i in to_actor} == {p for p in paths if p.startswith(".agent.weights")} | {".key", *learn_only}
    assert {paths[i] for i in from_actor} == {p for p in paths if p.startswith(".env_state")} | {".obs", ".key"}


@pytest.mark.slow
def test_ray_actors_the_cluster_cannot_hold_are_refused_not_awaited(ray_session):
    """Ray would queue an actor asking for a GPU on this CPU-only instance forever; the engine gives up
    after its placement timeout with one sentence naming the resources, and leaves nothing running."""
    from longhorizon.algos import ppo
    from longhorizon.envs import make

    config = ppo.Config(num_envs=4, num_steps=8, total_steps=1024)
    options = ray_engine.RayOptions(actors=1, actor_gpus=1.0, placement_timeout_s=3.0)
    engine = RayEngine(ppo, "CartPole-v1", {}, config, 1, 1, options, env=make("CartPole-v1"))
    with pytest.raises(UsageError, match=r"Ray started 0 of 1 actors within 3 s because each asks for 1 CPU and 1 GPU "
                                         r"while the cluster has .* free; pass fewer --actors") as error:
        engine.compile(engine.init(0))
    assert str(error.value).count(". ") == 0
    assert engine._workers == [] and ray_session.is_initialized()
