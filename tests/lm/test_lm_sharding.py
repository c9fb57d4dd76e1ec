"""Sharded GRPO training and generation on a mesh (longhorizon.lm.sharding, issue 41.1).

The fast tests read meshes and partition specs in this process (one CPU device). The multi-device test runs
tests/lm/sharding_check.py in a subprocess with 8 virtual CPU devices (JAX fixes the device count at start-up):
4-device meshes on the first 4, 8-device meshes on all 8, each against the one-device step (the Llama on five
meshes, the in-house Transformer of lm.model on one). Tolerances, stated before the run:

* loss, gradient norm and every logged metric: relative 1e-5;
* the gradient (Adam's first moment after one step): max |difference| <= 1e-5 x the leaf's largest entry;
* updated parameters (AdamW at TRL's lr 1e-6): rtol 1e-5, atol 1e-7;
* greedy generations: the same tokens; their log-probabilities within 1e-5; the compiled program's KV caches hold
  n_kv_heads / tensor heads per device;
* parameters + optimiser state per device: between 1/F and 1.1/F of one device's (norms are replicated);
  the compiled step's temporaries on fsdp=8: under 1/4 of one device's (activations split by rows).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
import pytest
from jax.sharding import PartitionSpec as P

from longhorizon.errors import UsageError
from longhorizon.lm import llama, sharding
from longhorizon.lm.grpo import GRPOConfig, optimizer_for
from longhorizon.lm.model import ModelConfig
from longhorizon.lm.model import init_params as model_init

CHECK = Path(__file__).with_name("sharding_check.py")
LLAMA = llama.LlamaConfig(vocab_size=259, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128)


def test_mesh_sizes_and_a_one_device_mesh():
    assert sharding.mesh_sizes("fsdp=4") == {"data": 1, "fsdp": 4, "tensor": 1}
    assert sharding.mesh_sizes(" data=2, tensor=2 ") == {"data": 2, "fsdp": 1, "tensor": 2}
    assert sharding.mesh_sizes({"fsdp": 2}) == {"data": 1, "fsdp": 2, "tensor": 1}
    mesh = sharding.parse_mesh("data=1,fsdp=1,tensor=1", LLAMA, jax.devices()[:1])
    assert mesh.axis_names == ("data", "fsdp", "tensor") and dict(mesh.shape) == {"data": 1, "fsdp": 1, "tensor": 1}


@pytest.mark.parametrize("spec, words", [
    ("fsdp=2", "uses 2 devices but 1 are there"),
    ("pipeline=1", "axis 'pipeline' is unknown"),
    ("fsdp", "is not a list of AXIS=SIZE pairs"),
    ("fsdp=-1", "is not a list of AXIS=SIZE pairs"),
    ("fsdp=0", "fsdp=0 must be a positive integer"),
    ("fsdp=1,fsdp=1", "names axis 'fsdp' twice"),
])
def test_bad_meshes_are_refused_in_one_sentence(spec, words):
    with pytest.raises(UsageError, match=words) as error:
        sharding.parse_mesh(spec, LLAMA, jax.devices()[:1])
    message = str(error.value).replace("e.g. ", "")
    assert message.count(". ") == 0 and message.endswith(".")


def test_a_mesh_that_does_not_divide_the_model_is_refused():
    with pytest.raises(UsageError, match=r"tensor=4 does not divide the model's 2 key/value heads; pick tensor from \[1, 2\]"):
        sharding.check_model(sharding.mesh_sizes("tensor=4"), LLAMA)
    with pytest.raises(UsageError, match=r"tensor=3 does not divide the model's 4 query heads"):
        sharding.check_model(sharding.mesh_sizes("tensor=3"), LLAMA)
    with pytest.raises(UsageError, match=r"fsdp=3 does not divide the model's 64 model width"):
        sharding.check_model(sharding.mesh_sizes("fsdp=3"), LLAMA)
    with pytest.raises(UsageError, match=r"tensor=8 does not divide the model's 4 heads"):
        sharding.check_model(sharding.mesh_sizes("tensor=8"), ModelConfig(vocab_size=20, d_model=32, n_heads=4))
    sharding.check_model(sharding.mesh_sizes("data=3,fsdp=8,tensor=2"), LLAMA)  # data splits rows, not the model


def test_llama_partition_specs_by_hand():
    cfg = llama.LlamaConfig(vocab_size=259, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128, qkv_bias=True,
                            tie_embeddings=False)
    specs = sharding.param_specs(jax.eval_shape(lambda: llama.init_params(jax.random.PRNGKey(0), cfg)))
    blocks = specs["blocks"]
    assert specs["embed"]["embedding"] == P(None, "fsdp") and specs["lm_head"]["kernel"] == P("fsdp", None)
    assert specs["norm"]["scale"] == P()
    for name in ("q", "k", "v"):  # [L, D, heads, hd]: width over fsdp, heads over tensor, layers never split
        assert blocks[name]["kernel"] == P(None, "fsdp", "tensor", None)
        assert blocks[name]["bias"] == P(None, "tensor", None)
    assert blocks["o"]["kernel"] == P(None, "tensor", None, "fsdp")
    assert blocks["gate"]["kernel"] == blocks["up"]["kernel"] == P(None, "fsdp", "tensor")
    assert blocks["down"]["kernel"] == P(None, "tensor", "fsdp")
    assert blocks["attn_norm"]["scale"] == blocks["mlp_norm"]["scale"] == P()


def test_in_house_model_partition_specs_by_hand():
    cfg = ModelConfig(vocab_size=20, d_model=32, n_layers=2, n_heads=4, positions="learned", max_len=16)
    specs = sharding.param_specs(jax.eval_shape(lambda: model_init(jax.random.PRNGKey(0), cfg)))
    block = specs["block_1"]
    assert specs["embed"]["embedding"] == specs["pos_embed"]["embedding"] == P(None, "fsdp")
    assert block["qkv"]["kernel"] == P("fsdp", None, "tensor", None) and block["qkv"]["bias"] == P(None, "tensor", None)
    assert block["out"]["kernel"] == P("tensor", None, "fsdp") and block["out"]["bias"] == P()
    assert block["up"]["kernel"] == P("fsdp", "tensor") and block["up"]["bias"] == P("tensor")
    assert block["down"]["kernel"] == P("tensor", "fsdp") and block["ln_attn"]["scale"] == P()


def test_optimiser_state_follows_its_parameters():
    mesh = sharding.parse_mesh("fsdp=1", LLAMA, jax.devices()[:1])
    shapes = jax.eval_shape(lambda: llama.init_params(jax.random.PRNGKey(0), LLAMA))
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(optax.linear_schedule(1e-6, 0.0, 10)))
    state = sharding.opt_state_shardings(mesh, opt, shapes)
    adam = state[1][0]
    for moment in (adam.mu, adam.nu):
        assert moment["blocks"]["q"]["kernel"].spec == P(None, "fsdp", "tensor", None)
        assert moment["embed"]["embedding"].spec == P(None, "fsdp")
    assert adam.count.spec == P()
    assert all(s.spec == P() for s in jax.tree_util.tree_leaves(state[1][2]))  # the schedule's counter


def test_a_model_is_measured_from_its_shapes_alone():
    """ShardedUpdate.compile on ShapeDtypeStructs (how docs/scale.md sizes large models): one device's step holds
    the parameters and both AdamW moments, read from the compiled program without allocating them."""
    cfg = GRPOConfig(lr_scheduler_type="constant", max_prompt_length=8, max_completion_length=8)
    opt = optimizer_for(cfg)
    shapes = jax.eval_shape(lambda: llama.init_params(jax.random.PRNGKey(0), LLAMA))
    rows, width = 4, 16
    batch = {name: jax.ShapeDtypeStruct(shape, dtype) for name, shape, dtype in (
        ("tokens", (rows, width), jnp.int32), ("valid", (rows, width), jnp.bool_), ("mask", (rows, 8), jnp.float32),
        ("old_logp", (rows, 8), jnp.float32), ("ref_logp", (rows, 8), jnp.float32),
        ("advantages", (rows, 8), jnp.float32), ("rows", (rows,), jnp.float32))}
    step = sharding.ShardedUpdate(sharding.parse_mesh("fsdp=1", LLAMA, jax.devices()[:1]), shapes, model_cfg=LLAMA,
                                  cfg=cfg, optimizer=opt)
    memory = step.compile(shapes, jax.eval_shape(opt.init, shapes), batch).memory_analysis()
    weights = 3 * 4 * sum(x.size for x in jax.tree_util.tree_leaves(shapes))  # float32 parameters, mu, nu
    assert weights <= memory.output_size_in_bytes <= weights + 1024  # + the counters and the step's metrics


def _check(specs: list[str], options: tuple[str, ...]) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           # the partitioner is what is tested; LLVM's slow optimisations only halve the compile time (one device
           # and the meshes compile under the same flags)
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0 "
                        "--xla_llvm_disable_expensive_passes=true"}
    # no persistent compilation cache: the subprocess compiles under its own flags, nothing to share
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    args = [sys.executable, str(CHECK), *options, *specs]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_sharded_steps_and_generation_equal_one_device_and_memory_falls_as_1_over_f():
    meshes = ["tensor=2,fsdp=2", "fsdp=4", "data=2,fsdp=2", "fsdp=8", "data=2,fsdp=2,tensor=2"]
    report = _check(meshes, ("--shared", "--in-house=tensor=2,fsdp=2"))
    base = report["base"]
    for spec in meshes:
        row = report["meshes"][spec]
        for layout in ("rows", "shared") if spec == meshes[0] else ("rows",):
            got = row[layout]
            assert got["metrics_max_relative"] <= 1e-5, (spec, layout, got, base[layout])
            assert got["gradient_max_relative"] <= 1e-5, (spec, layout, got)
            assert got["params_within_tolerance"], (spec, layout, got)
        assert row["generation"]["identical"], (spec, row["generation"])
        assert row["generation"]["logprobs_max_abs"] <= 1e-5, (spec, row["generation"])
        # the KV cache is split with the key/value heads (2 heads: 1 per device under tensor=2)
        assert row["generation"]["kv_cache_heads_per_device"] == [2 // row["sizes"]["tensor"]], (spec, row["generation"])
    in_house = report["in_house"]["tensor=2,fsdp=2"]  # lm.model.Transformer: its qkv / out / up / down rules
    assert in_house["metrics_max_relative"] <= 1e-5 and in_house["gradient_max_relative"] <= 1e-5, in_house
    assert in_house["params_within_tolerance"], in_house
    one = report["one_device_bytes"]
    for spec, f in (("data=2,fsdp=2", 2), ("fsdp=4", 4), ("fsdp=8", 8)):
        for measure in ("held_bytes", "compiled_output_bytes"):
            share = report["meshes"][spec][measure] / one
            assert 1 / f <= share <= 1.1 / f, (spec, measure, share)
    # activations are split by rows too (lm.model.rows_sharded): without it the partitioner gathered whole-batch
    # activations and logits on every device (fsdp=8 held half of one device's temporaries, now 0.15)
    assert report["meshes"]["fsdp=8"]["compiled_temp_bytes"] < 0.25 * report["one_device_temp_bytes"]
    # tensor splits the attention and MLP (not the embedding) on top of fsdp
    assert report["meshes"]["tensor=2,fsdp=2"]["held_bytes"] < 0.7 * report["meshes"]["data=2,fsdp=2"]["held_bytes"]
    errors = report["errors"]
    assert "uses 3 devices but 4 are there" in errors["fsdp=3"]
    assert "axis 'pipeline' is unknown" in errors["data=2,fsdp=2,pipeline=1"]
    assert "does not divide the model's 2 key/value heads" in errors["tensor=4"]
    assert all(message is not None for message in errors.values())


def _mesh_run_check(tmp_path, mesh: str, mode: str) -> dict:
    """tests/lm/mesh_run_check.py in a process of 4 virtual CPU devices (compiled with less of LLVM's work); its report."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "LONGHORIZON_COMPILE_CACHE": "0",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0 "
                        "--xla_llvm_disable_expensive_passes=true"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    done = subprocess.run([sys.executable, str(CHECK.parent / "mesh_run_check.py"), str(tmp_path), mesh, mode],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_lm_rl_with_mesh_equals_one_device(tmp_path):
    """`lm rl --mesh fsdp=2,tensor=2` on 4 virtual devices: the same step as on one device (metrics to 1e-5, the
    trained parameters to 1e-7 at lr 1e-6), the mesh recorded in config.json."""
    report = _mesh_run_check(tmp_path, "fsdp=2,tensor=2", "rl")
    assert report["devices"] == 4 and report["config_mesh"] == "fsdp=2,tensor=2"
    one, mesh = report["one"], report["mesh"]
    assert one["reward"] == mesh["reward"] and one["grad_norm"] > 0  # the same rollout, and groups that mix
    for key in ("loss", "grad_norm", "entropy"):
        assert mesh[key] == pytest.approx(one[key], rel=1e-5, abs=1e-7), key
    assert report["max_param_difference"] <= 1e-7


@pytest.mark.slow
def test_lm_sft_with_mesh_equals_one_device(tmp_path):
    """`lm sft --mesh fsdp=2,tensor=2` on 4 virtual devices: two teacher-forced steps as on one device (metrics to
    1e-5, the trained parameters to 1e-7 at lr 1e-6: a tenth of one step's move), the mesh in config.json."""
    report = _mesh_run_check(tmp_path, "fsdp=2,tensor=2", "sft")
    assert report["devices"] == 4 and report["config_mesh"] == "fsdp=2,tensor=2"
    one, mesh = report["one"], report["mesh"]
    assert one["grad_norm"] > 0
    for key in ("loss", "token_accuracy", "grad_norm"):
        assert mesh[key] == pytest.approx(one[key], rel=1e-5, abs=1e-7), key
    assert report["max_param_difference"] <= 1e-7


@pytest.mark.slow
def test_lm_agent_with_mesh_equals_one_device(tmp_path):
    """`lm agent` on `fsdp=2,tensor=2` (4 virtual devices), multi-turn episodes of tiny-random in the search
    environment with a fixed +-1 advantage per episode (its outcomes do not mix): one step as on one device
    (gradient norm to 1e-5, the ~0 loss to 1e-6, parameters to 1e-7 at lr 1e-6), the mesh in config.json."""
    report = _mesh_run_check(tmp_path, "fsdp=2,tensor=2", "agent")
    assert report["devices"] == 4 and report["config_mesh"] == "fsdp=2,tensor=2"
    one, mesh = report["one"], report["mesh"]
    assert one["reward"] == mesh["reward"] and one["grad_norm"] > 1.0  # the same episodes, a real gradient
    assert mesh["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-5)
    assert mesh["loss"] == pytest.approx(one["loss"], abs=1e-6)
    assert report["max_param_difference"] <= 1e-7


@pytest.mark.slow
def test_a_run_saved_on_one_mesh_resumes_on_another(tmp_path):
    """`lm rl` on fsdp=4, Ctrl-C after step 1, `--resume --mesh tensor=2,fsdp=2` for step 2: the same step-2 metrics
    and parameters (within 1e-7 at lr 1e-6) as two steps straight on fsdp=4; config.json keeps the new mesh and
    the one before."""
    report = _mesh_run_check(tmp_path, "tensor=2,fsdp=2", "resume")
    assert report["interrupted_exit"] == 130 and report["devices"] == 4
    assert report["config_mesh"] == "tensor=2,fsdp=2" and report["meshes_before"] == ["fsdp=4"]
    one, moved = report["one"], report["mesh"]
    assert one["step"] == moved["step"] == 2 and one["reward"] == moved["reward"] and one["grad_norm"] > 0
    for key in ("loss", "grad_norm"):
        assert moved[key] == pytest.approx(one[key], rel=1e-5, abs=1e-7), key
    assert report["max_param_difference"] <= 1e-7


def test_lm_rl_refuses_a_mesh_it_cannot_use(tmp_path):
    from longhorizon.cli import main

    base = ["lm", "rl", "--model", "tiny-random", "--dataset", "examples/lm/chains.jsonl", "--reward-funcs",
            "examples/lm/rewards.py:correct_answer", "--steps", "1", "--out", str(tmp_path / "r"), "--dry-run"]
    assert main([*base, "--mesh", "fsdp=two"]) == 2
    assert main([*base, "--mesh", "fsdp=1", "--offload", "host"]) == 2
    assert main([*base, "--mesh", "fsdp=1"]) == 0  # one device: a valid mesh of size 1
