"""The LM spine: orbax run checkpoints (bit-exact, atomic) and run_rl (resume exact, Ctrl-C saves, refusals)."""

import json
import signal
import subprocess
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm import grpo, samplers
from longhorizon.lm.run_checkpoint import RunCheckpoints, latest_step, steps

pytestmark = pytest.mark.xdist_group("lm_run")  # one worker: the tiny policy's compiled programs are shared


def _state(seed: int):
    params = {"w": jax.random.normal(jax.random.PRNGKey(seed), (3, 5)),
              "b": jnp.arange(4, dtype=jnp.bfloat16) * seed, "layers": [{"k": jnp.full((2,), seed, jnp.int32)}]}
    opt = optax.adamw(1e-3)
    opt_state = opt.update(params, opt.init(params), params)[1]  # count = 1, moments non-zero
    return params, {"opt_state": opt_state, "key": jax.random.PRNGKey(seed + 100)}


def _same(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b) and len(la) == len(lb) > 0
    for x, y in zip(la, lb):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_checkpoints_restore_bit_exactly_and_keep_the_last_two(tmp_path):
    with RunCheckpoints(tmp_path / "ck") as store:
        for step in (1, 2, 3):
            store.save(step, *_state(step), {"step": step, "sampler": {"rng": [1, 2]}})
    assert steps(tmp_path / "ck") == [2, 3] and latest_step(tmp_path / "missing") is None
    template = _state(0)
    with RunCheckpoints(tmp_path / "ck", read_only=True) as store:
        params, trainer, meta = store.restore(*template)
        _same((params, trainer), _state(3))
        assert meta == {"step": 3, "sampler": {"rng": [1, 2]}}
        _same(store.restore_params(template[0], step=2), _state(2)[0])  # --init reads the parameters alone
        raw_params, _, _ = store.restore()
        np.testing.assert_array_equal(np.asarray(raw_params["w"]), np.asarray(_state(3)[0]["w"]))
    with pytest.raises(UsageError, match="no checkpoint"):
        RunCheckpoints(tmp_path / "empty").restore()


def test_a_killed_save_leaves_the_last_good_step(tmp_path):
    """SIGKILL while step 2 is being written (its arrays written, not yet renamed into place): step 1 restores exactly."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parent)!r})
        from test_lm_run import _state
        from longhorizon.lm.run_checkpoint import RunCheckpoints
        from orbax.checkpoint._src.path import atomicity

        store = RunCheckpoints({str(tmp_path / "ck")!r})
        store.save(1, *_state(1), {{"step": 1}})
        async def killed(self, *args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        atomicity.AtomicRenameTemporaryPath.finalize = killed
        store.save(2, *_state(2), {{"step": 2}})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert any("tmp" in p.name for p in (tmp_path / "ck").iterdir())  # the unfinished step 2 is on disk
    assert steps(tmp_path / "ck") == [1]
    with RunCheckpoints(tmp_path / "ck") as store:  # opening for writing clears the unfinished step
        params, trainer, meta = store.restore(*_state(0))
        _same((params, trainer), _state(1))
        assert meta["step"] == 1
        store.save(2, *_state(2), {"step": 2})
    assert [p.name for p in sorted((tmp_path / "ck").iterdir()) if not p.name.startswith("_")] == ["1", "2"]


# ----------------------------------------------------------------------------- the loop


@pytest.fixture(scope="module")
def policy():
    from longhorizon.lm.model import ModelConfig, init_params
    from longhorizon.lm.run import Policy
    from longhorizon.lm.tokenizer import Tokenizer

    tok = Tokenizer()
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2)
    return Policy(init_params(jax.random.PRNGKey(0), cfg), cfg, tok, label="tiny random policy")


def _spec(policy, out, sampler=None, **changes):
    import dataclasses

    from longhorizon.lm.run import EvalSpec, RLSpec
    from longhorizon.lm.tasks import TaskConfig, make_problems, max_lengths

    tcfg = TaskConfig(names="split")
    plen, clen = max_lengths("chain", 2, tcfg)
    cfg = grpo.GRPOConfig(lr_scheduler_type="constant", num_generations=2, beta=0.04, max_prompt_length=plen + 1, max_completion_length=clen + 1)
    source = samplers.TaskSource("chain", tcfg, seed=1)
    held = tuple(make_problems("chain", [1, 2], 4, seed=9, cfg=tcfg))
    spec = RLSpec(out=str(out), init=policy, grpo=cfg, sampler=sampler or samplers.Scaler(source, lo=1, hi=2),
                  steps=4, prompts_per_step=2, evaluation=EvalSpec(held, plen + 1, clen + 1, every=2),
                  checkpoint_every=100, seed=3)
    return dataclasses.replace(spec, **changes)


def _interrupt_at(monkeypatch, calls: int):
    original, count = grpo.GRPOTrainer.step, {"n": 0}

    def step(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        count["n"] += 1
        if count["n"] == calls:
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C, during the step
        return out

    monkeypatch.setattr(grpo.GRPOTrainer, "step", step)


def _rows(run, keys=("step", "horizon", "reward", "loss", "kl", "difficulty", "eval_accuracy")):
    return [{k: r.get(k) for k in keys} for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]


@pytest.mark.slow
def test_run_rl_interrupted_then_resumed_equals_uninterrupted(policy, tmp_path, monkeypatch):
    from longhorizon.lm.run import Interrupted, run_rl

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    summary = run_rl(_spec(policy, straight), quiet=True)
    for name in ("config.json", "metrics.jsonl", "summary.json", "curve.png", "tensorboard"):
        assert (straight / name).exists(), name
    assert summary["eval"]["problems"] == 4 and summary["training_tokens"] > 0
    before = {t.ident for t in threading.enumerate()}
    with monkeypatch.context() as m:
        _interrupt_at(m, 2)
        with pytest.raises(Interrupted) as stop:
            run_rl(_spec(policy, resumed), quiet=True)
    assert stop.value.step == 2 and steps(resumed / "checkpoints") == [2]  # saved after the step in flight
    # multiprocessing.Queue's own feeder (a daemon the stdlib starts once per queue, seen once in CI) is no writer of ours
    extra = [t.name for t in threading.enumerate()
             if t.is_alive() and t.ident not in before and t.name != "QueueFeederThread"]
    assert not extra, extra  # no writer thread outlives it
    with pytest.raises(UsageError, match="'steps'"):  # a resume runs the spec it was started with
        run_rl(_spec(policy, resumed, steps=5), resume=True, quiet=True)
    again = run_rl(_spec(policy, resumed), resume=True, quiet=True)
    assert _rows(straight) == _rows(resumed) and len(_rows(resumed)) == 5  # step 0 (the base's evaluation) .. 4
    assert _rows(straight)[0]["eval_accuracy"] == summary["eval_start"]["accuracy"] == again["eval_start"]["accuracy"]
    assert again["counters"] == summary["counters"]
    assert {k: v for k, v in again["eval"].items() if k != "tokens_per_s"} == \
        {k: v for k, v in summary["eval"].items() if k != "tokens_per_s"}
    with RunCheckpoints(straight / "checkpoints", read_only=True) as a, \
            RunCheckpoints(resumed / "checkpoints", read_only=True) as b:
        (pa, ta, ma), (pb, tb, mb) = a.restore(), b.restore()
    _same((pa, ta), (pb, tb))  # parameters, optimiser state, PRNG key, reference: bit for bit
    assert ma["sampler"] == mb["sampler"] and ma["counters"] == mb["counters"]


def test_run_rl_refuses_what_cannot_act_before_writing(policy, tmp_path):
    from longhorizon.lm.run import EvalSpec, run_rl
    from longhorizon.runner.lock import FolderLock

    source = samplers.TaskSource("chain", seed=0)
    gated = samplers.Curriculum(source, (1, 2), 10, samplers.Gate("heldout_accuracy", 0.5))
    spec = _spec(policy, tmp_path / "a", gated)
    no_cadence = _spec(policy, tmp_path / "a", gated, evaluation=EvalSpec(spec.evaluation.problems, 30, 20, every=0))
    with pytest.raises(UsageError, match="periodic evaluations"):
        run_rl(no_cadence, quiet=True)
    with pytest.raises(UsageError, match="beyond the run's 4 steps"):
        run_rl(_spec(policy, tmp_path / "a", evaluation=EvalSpec(spec.evaluation.problems, 30, 20, every=5)), quiet=True)
    assert not (tmp_path / "a").exists()
    with pytest.raises(UsageError, match="no checkpoint"):
        run_rl(_spec(policy, tmp_path / "b"), resume=True, quiet=True)
    with FolderLock(tmp_path / "c"), pytest.raises(UsageError, match="being written by another run"):
        run_rl(_spec(policy, tmp_path / "c"), quiet=True)


def test_resume_check_reads_a_setting_added_since_the_run_started_as_its_default():
    from longhorizon.lm.run import _saved_config_matches
    from longhorizon.runner.results import to_jsonable

    config = {"grpo": grpo.GRPOConfig(learning_rate=1e-5), "steps": 30}
    saved = json.loads(json.dumps(to_jsonable(config)))
    _saved_config_matches(saved, config)
    del saved["grpo"]["rollout_is_cap"]  # a run started before the field existed behaved as its default
    _saved_config_matches(saved, config)
    with pytest.raises(UsageError, match="'grpo.rollout_is_cap'"):  # but not as another value
        _saved_config_matches(saved, {**config, "grpo": grpo.GRPOConfig(learning_rate=1e-5, rollout_is_cap=3.0)})
    with pytest.raises(UsageError, match="'grpo.learning_rate'"):
        _saved_config_matches(saved, {**config, "grpo": grpo.GRPOConfig(learning_rate=3e-5)})
    with pytest.raises(UsageError, match="'steps'"):
        _saved_config_matches(saved, {**config, "steps": 31})
    saved["grpo"]["retired_setting"] = 1  # a field longhorizon no longer has: not the run it was
    with pytest.raises(UsageError, match="'grpo.retired_setting'"):
        _saved_config_matches(saved, config)
