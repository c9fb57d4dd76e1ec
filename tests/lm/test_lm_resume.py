"""`longhorizon lm sft|rl`: Ctrl-C saves after the current step and `--resume` continues bit-exactly; sGPO from the CLI."""

import json
import signal

import jax
import numpy as np
import pytest
import typer
from flax import serialization
from typer.testing import CliRunner

from longhorizon.errors import UsageError
from longhorizon.lm import grpo, sft
from longhorizon.lm.cli import register
from longhorizon.lm.resume import INTERRUPTED_EXIT

pytestmark = pytest.mark.xdist_group("lm_resume")  # one worker: the module's base run and compiled programs are shared

TINY = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2"]
SFT = ["lm", "sft", "--steps", "6", "--batch-size", "8", "--horizons", "1", "--eval-horizons", "1", "--eval-problems", "4",
       "--checkpoint-every", "100", *TINY]
RL = ["--steps", "4", "--horizons", "1-2", "--curriculum", "--prompts-per-step", "2", "--num-generations", "4",
      "--beta", "0.04", "--eval-horizons", "1-2", "--eval-problems", "2", "--eval-every", "2", "--checkpoint-every", "100"]


def _app():
    app = typer.Typer()

    @app.callback()
    def main():
        pass

    register(app)
    return app


def _invoke(args, code=0):
    r = CliRunner().invoke(_app(), [str(a) for a in args])
    assert r.exit_code == code, (r.output, r.exception)
    return r


def _sigint_after(monkeypatch, module, name, calls: int):
    """Patch ``module.name`` so that its ``calls``-th call sends this process a SIGINT (a real Ctrl-C)."""
    original, count = getattr(module, name), {"n": 0}

    def wrapped(*args, **kwargs):
        out = original(*args, **kwargs)
        count["n"] += 1
        if count["n"] == calls:
            signal.raise_signal(signal.SIGINT)
        return out

    monkeypatch.setattr(module, name, wrapped)


def _final_state(run_dir):
    """``(meta, arrays)`` of the newest checkpoint: msgpack for `lm sft`, orbax for `lm rl`."""
    from longhorizon.lm.run_checkpoint import RunCheckpoints, latest_step

    if latest_step(run_dir / "checkpoints") is not None:
        with RunCheckpoints(run_dir / "checkpoints", read_only=True) as store:
            params, trainer, meta = store.restore()
        return meta, {"params": params, **trainer}
    meta = json.loads((run_dir / "checkpoints" / "latest.json").read_text())
    return meta, serialization.msgpack_restore((run_dir / "checkpoints" / meta["file"]).read_bytes())


def _assert_same_tree(a, b):
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(leaves_a) == len(leaves_b) > 0
    for x, y in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _rows(run_dir, keys):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: r.get(k) for k in keys} for r in rows]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm") / "base"
    _invoke([*SFT, "--out", folder])
    return folder


@pytest.mark.slow
def test_sft_interrupted_then_resumed_equals_uninterrupted(base, tmp_path, monkeypatch):
    run = tmp_path / "sft"
    with monkeypatch.context() as m:
        _sigint_after(m, sft, "sft_step", 3)
        r = _invoke([*SFT, "--out", run], code=INTERRUPTED_EXIT)
    assert f"--resume {run}" in r.output
    meta, _ = _final_state(run)
    assert meta["step"] == 3  # saved after the step in flight, not mid-step
    _invoke(["lm", "sft", "--resume", run])
    (meta_a, state_a), (meta_b, state_b) = _final_state(base), _final_state(run)
    assert meta_a["step"] == meta_b["step"] == 6 and meta_a["tokens"] == meta_b["tokens"]
    _assert_same_tree(state_a, state_b)  # params and optimiser state, bit for bit
    assert _rows(base, ("step", "loss")) == _rows(run, ("step", "loss"))


@pytest.mark.slow
def test_rl_interrupted_then_resumed_equals_uninterrupted(base, tmp_path, monkeypatch):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    _invoke(["lm", "rl", "--init", base, "--out", straight, *RL])
    with monkeypatch.context() as m:
        _sigint_after(m, grpo.GRPOTrainer, "step", 3)
        _invoke(["lm", "rl", "--init", base, "--out", resumed, *RL], code=INTERRUPTED_EXIT)
    assert _final_state(resumed)[0]["step"] == 3
    _invoke(["lm", "rl", "--resume", resumed])
    (meta_a, state_a), (meta_b, state_b) = _final_state(straight), _final_state(resumed)
    assert meta_a["counters"] == meta_b["counters"] and meta_a["sampler"] == meta_b["sampler"]
    assert set(state_a) == {"params", "opt_state", "key", "ref_params"}  # beta > 0: the reference is saved
    _assert_same_tree(state_a, state_b)  # params, optimiser, reference and PRNG key
    keys = ("step", "horizon", "reward", "loss", "kl", "eval_accuracy")
    assert _rows(straight, keys) == _rows(resumed, keys)
    eval_a, eval_b = ({k: v for k, v in json.loads((d / "summary.json").read_text())["eval"].items()
                       if k != "tokens_per_s"} for d in (straight, resumed))
    assert eval_a == eval_b


@pytest.mark.slow
def test_rl_sgpo_from_the_cli(base, tmp_path):
    run = tmp_path / "sgpo"
    _invoke(["lm", "rl", "--init", base, "--out", run, "--sgpo", "--pool-size", "6", "--profile-samples", "3",
             "--min-group", "2", "--max-group", "5", "--unsolved-keep", "1.0", "--horizons", "1-2", "--steps", "2",
             "--prompts-per-step", "2", "--num-generations", "4", "--eval-horizons", "1", "--eval-problems", "2"])
    profile = json.loads((run / "sampler.json").read_text())
    assert len(profile["success_rates"]) == 6
    summary = json.loads((run / "summary.json").read_text())
    stats = summary["sampler"]
    # profiling is counted: 6 queries x 3 samples were generated before the first RL step
    assert stats["profiling_tokens"] > 0 and summary["counters"]["generations"] >= 18 + 1
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = rows[1:]  # after step 0, the base's evaluation
    assert len(rows) == 2 and all(2 <= r["group_size_mean"] <= 5 for r in rows)
    assert all(r["groups"] * 2 <= 8 for r in rows)  # a step holds at most prompts x generations samples


def test_resume_rejects_changes_and_bad_folders(base, tmp_path):
    r = CliRunner().invoke(_app(), ["lm", "sft", "--resume", str(base), "--steps", "9"])
    assert isinstance(r.exception, UsageError) and "--steps" in str(r.exception)
    r = CliRunner().invoke(_app(), ["lm", "rl", "--resume", str(base)])
    assert isinstance(r.exception, UsageError) and "lm sft" in str(r.exception)
    r = CliRunner().invoke(_app(), [*SFT, "--out", str(base)])
    assert isinstance(r.exception, UsageError) and "already holds a run" in str(r.exception)
    r = CliRunner().invoke(_app(), ["lm", "rl", "--init", str(base), "--out", str(tmp_path / "x"), "--sgpo", "--curriculum"])
    assert isinstance(r.exception, UsageError) and "--sgpo" in str(r.exception)


@pytest.mark.slow
def test_load_params_reads_run_state_and_params_only_checkpoints(tmp_path):
    from longhorizon.lm.model import ModelConfig, init_params
    from longhorizon.lm.resume import load_params
    from longhorizon.runner import checkpoint

    cfg = ModelConfig(vocab_size=20, d_model=8, n_layers=1, n_heads=2)
    params = init_params(jax.random.PRNGKey(1), cfg)
    template = init_params(jax.random.PRNGKey(2), cfg)
    checkpoint.save(tmp_path / "state", 3, {"params": params, "opt_state": {"count": np.int32(3)}}, {})
    checkpoint.save(tmp_path / "bare", 3, params, {})  # the format of runs written before --resume existed
    for folder in ("state", "bare"):
        _assert_same_tree(load_params(tmp_path / folder, template), params)
    with pytest.raises(UsageError, match="no checkpoint"):
        load_params(tmp_path / "missing", template)
