"""Sweeps: grid parsing, configs as pytrees, one program per structural combination, and the key
property: each (combination, seed) row of a one-program sweep ends with the parameters of a plain
run of that config and seed."""

import json

import jax
import numpy as np
import pytest
from flax import serialization

from longhorizon.algos import dqn, ppo, pqn, sqirl
from longhorizon.cli import main
from longhorizon.config import stack_configs, traceable_fields
from longhorizon.errors import UsageError
from longhorizon.runner import checkpoint
from longhorizon.runner.run import RunSpec, train
from longhorizon.runner.sweep import classify, combinations, parse_grid, plan, sweep

TINY = {"num_envs": "4", "num_steps": "16", "num_minibatches": "2", "update_epochs": "1", "total_steps": "512",
        "hidden": "16,16"}


def spec(out, overrides=TINY, **kw):
    return RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(overrides), seeds=2, out=str(out), num_chunks=4,
                   eval_episodes=4, quiet=True, **kw)


def _agent(run_dir):
    meta = checkpoint.latest_meta(run_dir / "checkpoints")
    return serialization.msgpack_restore((run_dir / "checkpoints" / meta["file"]).read_bytes())["agent"]


# ----------------------------------------------------------------------------- grid parsing
def test_grid_parsing_and_classification():
    config = ppo.Config()
    grid = parse_grid(["learning_rate=1e-4,3e-4,1e-3", "ent-coef=0,0.01", "hidden=64x64,32"], config)
    assert grid == {"learning_rate": ["1e-4", "3e-4", "1e-3"], "ent_coef": ["0", "0.01"], "hidden": ["64x64", "32"]}
    assert classify(grid, config) == (["learning_rate", "ent_coef"], ["hidden"])
    combos = combinations(grid, ["learning_rate", "ent_coef"])
    assert len(combos) == 6 and combos[1] == {"learning_rate": "1e-4", "ent_coef": "0.01"}  # last varies fastest


@pytest.mark.parametrize("items, message", [
    ([], "has no grid"),
    (["learning_rat=1e-3"], "did you mean learning_rate"),
    (["learning_rate=fast,1e-3"], "expects a value of type float but got 'fast'"),
    (["update_epochs=2.5"], "expects a value of type int"),
    (["learning_rate"], "is not FIELD=V1,V2"),
    (["learning_rate="], "has no values"),
    (["learning_rate=1e-3,1e-3"], "lists a value twice"),
    (["gamma=0.9", "gamma=0.99"], "is given twice"),
])
def test_grid_errors_name_the_problem(items, message):
    with pytest.raises(UsageError, match=message):
        parse_grid(items, ppo.Config())


def test_which_floats_can_be_traced():
    assert "gamma" in traceable_fields(ppo.Config())
    assert "gamma" not in traceable_fields(ppo.Config(normalize_rewards=True))  # the reward wrapper holds gamma
    assert "epsilon_end" not in traceable_fields(pqn.Config()) and "learning_rate" in traceable_fields(pqn.Config())
    assert "epsilon_end" not in traceable_fields(dqn.Config()) and "tau" in traceable_fields(dqn.Config())
    assert traceable_fields(sqirl.Config()) == []  # its acting parameters carry the config as Python values
    assert "num_envs" not in traceable_fields(ppo.Config())  # ints set shapes


def test_plan_validates_every_combination_and_refuses_options(tmp_path):
    with pytest.raises(UsageError, match="num-minibatches 3 does not divide"):
        plan(spec(tmp_path / "a", {k: v for k, v in TINY.items() if k != "num_minibatches"}), ["num_minibatches=2,3"])
    with pytest.raises(UsageError, match="both fixed and in the grid"):
        plan(spec(tmp_path / "b"), ["num_envs=4,8"])
    with pytest.raises(UsageError, match="fused engine only"):
        plan(spec(tmp_path / "c", engine="ray"), ["learning_rate=1e-3"])
    # gamma is numeric unless a structural value normalises rewards, where it must stay a Python number
    with pytest.raises(UsageError, match="--gamma cannot vary inside one program when normalize_rewards=true"):
        plan(spec(tmp_path / "d"), ["gamma=0.9,0.99", "normalize_rewards=false,true"])


# ----------------------------------------------------------------------------- configs as pytrees
def test_plain_config_is_static_and_stacked_config_is_traced():
    plain = ppo.Config(learning_rate=1e-3)
    assert jax.tree.leaves(plain) == []  # a plain run compiles the config in as constants
    assert jax.tree.structure(plain) == jax.tree.structure(ppo.Config(learning_rate=1e-3))
    assert jax.tree.structure(plain) != jax.tree.structure(ppo.Config(learning_rate=2e-3))
    stacked = stack_configs([ppo.Config(learning_rate=1e-3, ent_coef=0.0), ppo.Config(learning_rate=3e-4, ent_coef=0.5)],
                            ["learning_rate", "ent_coef"])
    np.testing.assert_allclose(jax.tree.leaves(stacked)[0], [1e-3, 3e-4], rtol=1e-7)
    # vmapped rows see scalars: 2 * lr + ent_coef per row
    out = jax.vmap(lambda c: 2 * c.learning_rate + c.ent_coef)(stacked)
    np.testing.assert_allclose(out, [2e-3, 0.5006], rtol=1e-6)
    # rebuilding from leaves skips validation (a negative learning rate would be refused on construction)
    negative = jax.tree.map(lambda x: -x, stacked)
    assert float(negative.learning_rate[0]) == pytest.approx(-1e-3)
    with pytest.raises(UsageError):
        ppo.Config(learning_rate=-1e-3)
    with pytest.raises(UsageError, match="--epsilon-end cannot vary inside one compiled program"):
        stack_configs([pqn.Config(), pqn.Config(epsilon_end=0.1)], ["epsilon_end"])
    with pytest.raises(ValueError, match="num_envs differs"):
        stack_configs([ppo.Config(), ppo.Config(num_envs=8)], ["learning_rate"])


# ----------------------------------------------------------------------------- the key property
@pytest.mark.slow
def test_one_program_sweep_rows_equal_plain_runs(tmp_path):
    """2 learning rates x 2 seeds in one program; every row's final parameters match a plain `train`
    of that learning rate with --seeds 2 (same seed keys)."""
    record = sweep(spec(tmp_path / "sweep"), ["learning_rate=2.5e-4,1e-2"])
    assert len(record["programs"]) == 1 and record["programs"][0]["rows"] == 4
    swept = _agent(tmp_path / "sweep")
    for c, lr in enumerate(["2.5e-4", "1e-2"]):
        train(spec(tmp_path / f"plain{c}", {**TINY, "learning_rate": lr}))
        plain = _agent(tmp_path / f"plain{c}")
        rows = jax.tree.map(lambda x: np.asarray(x)[2 * c:2 * c + 2], swept["weights"])
        for a, b in zip(jax.tree.leaves(rows), jax.tree.leaves(plain["weights"])):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        summary = json.loads((tmp_path / f"plain{c}" / "summary.json").read_text())
        # seed i of every combination is evaluated on the episodes of the plain run's seed i
        assert record["results"][c]["final_eval_return"] == pytest.approx(summary["final_eval_return"], rel=1e-5)
    # the two learning rates really trained differently
    first = jax.tree.leaves(swept["weights"])[0]
    assert not np.allclose(np.asarray(first)[0], np.asarray(first)[2])


@pytest.mark.slow
def test_cli_sweep_with_a_structural_field_writes_table_and_plot(tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", "ppo", "--env", "CartPole-v1", "--grid", "learning_rate=2.5e-4,1e-2", "--grid", "hidden=16x16,8",
            "--seeds", "2", "--chunks", "2", "--eval-episodes", "2", "--quiet", "--out", str(out)]
    args += [x for k, v in TINY.items() if k != "hidden" for x in (f"--{k.replace('_', '-')}", v)]
    assert main(args + ["--dry-run"]) == 0
    assert not out.exists()  # a dry run writes nothing
    assert main(args) == 0
    record = json.loads((out / "sweep.json").read_text())
    assert record["numeric_fields"] == ["learning_rate"] and record["structural_fields"] == ["hidden"]
    assert [p["structural"] for p in record["programs"]] == [{"hidden": "16x16"}, {"hidden": "8"}]
    assert len(record["results"]) == 4
    for row in record["results"]:
        values = row["final_eval_return"]
        assert len(values) == 2 and row["mean"] == pytest.approx(np.mean(values))
        assert row["min"] == min(values) and row["max"] == max(values) and row["std"] == pytest.approx(np.std(values))
    for program in ("hidden=16x16", "hidden=8"):
        for name in ("config.json", "metrics.jsonl", "summary.json", "checkpoints/latest.json"):
            assert (out / program / name).exists(), (program, name)
        saved = json.loads((out / program / "config.json").read_text())
        assert saved["seeds"] == 4  # 2 learning rates x 2 seeds
        assert [(r["learning_rate"], r["seed_index"]) for r in saved["sweep"]["rows"]] == \
            [("2.5e-4", 0), ("2.5e-4", 1), ("1e-2", 0), ("1e-2", 1)]
    table = (out / "sweep.md").read_text()
    assert "| learning_rate | hidden | mean | std | min | max |" in table and "| 1e-2 | 8 |" in table
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert main(args) == 2  # the folder now holds a sweep
    assert main(["train", "--resume", str(out / "hidden=8"), "--dry-run"]) == 2  # rows of a sweep cannot resume as one run
    assert main(["eval", str(out / "hidden=8"), "--episodes", "1"]) == 0  # but its checkpoints evaluate like a run's
    assert main([*args[:-1], str(tmp_path / "other"), "--chunks", "9"]) == 2  # 8 updates cannot fill 9 chunks


@pytest.mark.slow
@pytest.mark.parametrize("name, overrides, grid", [
    ("pqn", {"num_envs": "4", "num_steps": "8", "total_steps": "256", "num_minibatches": "2", "hidden": "8,8"},
     [{"learning_rate": "1e-3", "epsilon_fraction": "0.5", "q_lambda": "0.9"},
      {"learning_rate": "1e-2", "epsilon_fraction": "0.1", "q_lambda": "0.5"}]),
    ("dqn", {"num_envs": "2", "num_steps": "8", "total_steps": "256", "gradient_steps": "4", "learning_starts": "16",
             "hidden": "8,8", "buffer_size": "64"},
     [{"learning_rate": "1e-3", "tau": "1.0", "gamma": "0.99"}, {"learning_rate": "1e-2", "tau": "0.5", "gamma": "0.9"}]),
])
def test_q_learning_sweep_rows_equal_plain_engines(name, overrides, grid):
    """PQN and DQN read their traced settings in schedules (epsilon, learning rate) and targets (gamma,
    lambda, tau): a row of the stacked program ends where the plain program of its config ends."""
    from longhorizon import algos
    from longhorizon.config import apply_overrides
    from longhorizon.engine.fused import FusedEngine
    from longhorizon.envs import make

    algo, env = algos.get(name), make("CartPole-v1")
    base = apply_overrides(algo.default_config("CartPole-v1"), overrides)
    configs = [apply_overrides(base, combo) for combo in grid]
    stacked = stack_configs([c for c in configs for _ in range(2)], list(grid[0]))
    engine = FusedEngine(algo, env, base, 4, 4, rows=([0, 1, 0, 1], stacked))
    state, _ = engine.run_chunk(engine.init(0))
    swept = jax.tree.leaves(algo.agent_params(state).weights)
    for c, config in enumerate(configs):
        plain_engine = FusedEngine(algo, env, config, 2, 4)
        plain, _ = plain_engine.run_chunk(plain_engine.init(0))
        for a, b in zip(swept, jax.tree.leaves(algo.agent_params(plain).weights)):
            np.testing.assert_allclose(np.asarray(a)[2 * c:2 * c + 2], np.asarray(b), rtol=1e-5, atol=1e-6)
    first = np.asarray(swept[0])
    assert not np.allclose(first[0], first[2])  # the two configs trained differently
