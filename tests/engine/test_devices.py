"""Seeds sharded over local devices give the single-device results, and bad device requests are refused.

The sharded runs need a JAX started with two CPU devices, so they run in one subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` (this test process keeps its one device).
It runs two chunks of the fused engine for 4 seeds of PPO and of PQN on CartPole, on 1 and on 2
devices, and a 2-device PPO run through the runner (checkpoints, greedy evaluation) stopped after
one chunk and resumed, and reports what the tests below compare.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from longhorizon.errors import UsageError

pytestmark = pytest.mark.xdist_group("devices")  # one worker runs the subprocess that the sharded tests share

WORKER = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    import jax
    import numpy as np
    from flax import serialization

    from longhorizon.runner.run import Run, RunSpec, train

    root = Path(sys.argv[1])
    jax.config.update("jax_compilation_cache_dir", sys.argv[2])  # the runner's runs reuse the engine's programs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # tiny programs compile fast at level 0
    TINY = {"ppo": {"num_envs": "4", "num_steps": "16", "update_epochs": "2", "num_minibatches": "2",
                    "hidden": "16,16", "total_steps": "256"},
            "pqn": {"num_envs": "4", "num_steps": "8", "update_epochs": "2", "num_minibatches": "2",
                    "hidden": "16,16", "total_steps": "128"}}

    def spec(algo, devices, name):
        return RunSpec(algo=algo, env="CartPole-v1", seeds=4, num_chunks=2, eval_episodes=2, quiet=True,
                       num_devices=devices, config_overrides=TINY[algo], out=str(root / name))

    def as_lists(state_dict):
        \"\"\"Every leaf of a state (as its checkpoint stores it), by its path.\"\"\"
        return {jax.tree_util.keystr(path): np.asarray(x).tolist()
                for path, x in jax.tree_util.tree_leaves_with_path(state_dict)}

    def engine_run(algo, devices):
        \"\"\"Two chunks of the engine the runner would build, and each chunk's per-seed metrics.\"\"\"
        run = Run(spec(algo, devices, "unused"))
        engine, state, chunks = run.engine, run.engine.init(0), []
        for _ in range(run.num_chunks):
            state, metrics = engine.run_chunk(state)
            chunks.append({k: np.asarray(v).tolist() for k, v in metrics.items()})
        placement = sorted((s.device.id, s.data.shape[0]) for s in jax.tree.leaves(state)[0].addressable_shards)
        return {"leaves": as_lists(serialization.to_state_dict(jax.device_get(state))), "chunks": chunks,
                "placement": placement}

    def runner_state(folder):
        checkpoints = folder / "checkpoints"
        latest = json.loads((checkpoints / "latest.json").read_text())["file"]
        return as_lists(serialization.msgpack_restore((checkpoints / latest).read_bytes()))

    report = {"devices": len(jax.devices())}
    for algo in ("ppo", "pqn"):
        for devices in (1, 2):
            report[f"{algo}{devices}"] = engine_run(algo, devices)
    resumed = spec("ppo", 2, "resumed")  # the runner's path: checkpoints written from and read into sharded states
    train(resumed, max_chunks=1)
    report["resumed"] = {**train(resumed, resume=True), "leaves": runner_state(root / "resumed"),
                         "config": json.loads((root / "resumed" / "config.json").read_text())}
    print(json.dumps(report))
""")


def assert_close(one, two, path="") -> None:
    """Nested lists and dicts equal: integers and booleans exactly, floats to float32 round-off."""
    if isinstance(one, dict):
        assert one.keys() == two.keys(), path
        for key in one:
            assert_close(one[key], two[key], f"{path}{key}")
        return
    if isinstance(one, list) and one and isinstance(one[0], dict):  # one dict per chunk
        assert len(one) == len(two), path
        for index, (a, b) in enumerate(zip(one, two)):
            assert_close(a, b, f"{path}[{index}]")
        return
    a, b = np.asarray(one), np.asarray(two)
    if a.dtype.kind in "biu":
        np.testing.assert_array_equal(a, b, err_msg=path)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=path)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    """The worker's report: each run's final-state leaves and per-chunk metrics, and the resumed run's summary.

    Both sides compile at XLA's backend optimisation level 0, which halves the compile time of the
    four chunk programs; the benchmark (benchmarks/devices.py) checks the same equality at the default level.
    """
    root = tmp_path_factory.mktemp("devices")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "LONGHORIZON_COMPILE_CACHE": "0",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0"}
    proc = subprocess.run([sys.executable, "-c", WORKER, str(root), str(root / "cache")], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "pqn"])
def test_two_devices_train_what_one_trains(sharded, algo):
    """4 seeds: one device vmaps 4, two devices vmap 2 each. The batched matrix products of the two
    widths round differently in the last bits, so floats agree to round-off, integers (environment
    states, random keys, episode counts) exactly."""
    one, two = sharded[f"{algo}1"], sharded[f"{algo}2"]
    assert sharded["devices"] == 2 and one["placement"] == [[0, 4]]
    assert two["placement"] == [[0, 2], [1, 2]]  # each device holds its block of seeds
    assert_close(one["leaves"], two["leaves"])
    assert_close(one["chunks"], two["chunks"])


@pytest.mark.slow
def test_a_sharded_run_checkpoints_evaluates_and_resumes_exactly(sharded):
    resumed, straight = sharded["resumed"], sharded["ppo2"]
    assert resumed["config"]["seed_devices"] == 2 and resumed["status"] == "completed"
    assert resumed["leaves"] == straight["leaves"]  # the same program on the same devices: bit for bit
    assert len(resumed["final_eval_return"]) == 4


def test_device_requests_that_cannot_act_are_refused():
    from longhorizon.engine.fused import resolve_devices

    available = len(jax.devices())
    for asked, seeds, needle in [("0", 4, "neither a positive count nor 'all'"), ("two", 4, "pass --devices 2"),
                                 (2, 1, "the environments of one seed are not split"),
                                 (2, 3, "--seeds 3 does not split evenly over 2 devices"),
                                 (available + 1, available + 1, f"JAX already runs on {available}")]:
        with pytest.raises(UsageError, match=needle):
            resolve_devices(asked, seeds)
    assert resolve_devices(1, 3) == 1 and resolve_devices("all", available) == available


def test_devices_apply_to_the_fused_engine_only():
    from longhorizon.runner.run import Run, RunSpec

    for engine in ("ray", "host"):
        with pytest.raises(UsageError, match=f"uses the {engine} engine; drop --devices"):
            Run(RunSpec(algo="ppo", env="CartPole-v1" if engine == "ray" else "gymnasium:CartPole-v1",
                        seeds=2, num_devices=2, engine="fused" if engine == "host" else engine))
