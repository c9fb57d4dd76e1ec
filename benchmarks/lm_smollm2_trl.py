"""GRPO throughput on the real SmolLM2-135M-Instruct, longhorizon vs TRL, on the same weights and batch shape.

Workload (identical for both): the weights of ``SmolLM2-135M-Instruct.Q4_1.gguf`` (``longhorizon lm
fetch smollm2``) dequantized to float32 (134.5M parameters, fp32 compute, CPU); 4 chat-templated
arithmetic prompts per step (``"What is 37 + 48? Answer with the number only."`` in the file's
ChatML template with its default system prompt: 46 tokens each; the same text and the same token
ids on both sides) x ``num_generations = 4`` = 16 completions of at most 32 new tokens, temperature
1, stop at ``<|im_end|>``; a trivial Python reward (1 if the sum is among the integers the completion
writes); one AdamW step per generation batch (``num_iterations = steps_per_generation =
gradient_accumulation_steps = 1``), ``beta = 0``, ``loss_type = "dapo"``, ``epsilon = 0.2``, learning
rate 1e-6 (constant), gradient clipping at 1.0, no weight decay.

* ``longhorizon``: :class:`longhorizon.lm.grpo.GRPOTrainer` on :mod:`longhorizon.lm.llama`
  (``read_gguf`` + ``params_from_hf``, the tokenizer and template of :func:`hf_tokenizer.from_gguf`).
* ``trl``: TRL's ``GRPOTrainer`` on ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
  dtype=float32)`` (transformers dequantizes the same file; its logits agree with ours to 1.2e-4,
  ``check_smollm2_logits.py``) and ``AutoTokenizer`` from the same file, ``bf16=False`` and
  ``gradient_checkpointing=False`` (TRL's defaults are True for both; transformers marks a GGUF-loaded
  model as quantized and Trainer refuses it, so the dequantized weights are copied into a plain
  ``LlamaForCausalLM`` of the same config, identical logits), in ``benchmarks/.venvs/trl-gguf``
  (``lm_throughput.py``'s pinned TRL requirements + ``gguf``, built by ``peer_env`` on first use).
  ``trl-1thread`` is the same pinned to one torch thread. The generation / update split comes from
  TRL's own profiling timers: ``transformers.generate`` (sampling) and ``_prepare_inputs``
  (sampling + rewards + advantages); update = step - ``_prepare_inputs``.
* ``tunix``: google-tunix 0.1.7's ``GRPOLearner`` (``RLCluster``, vanilla rollout, actor and rollout
  sharing one model on a 1x1 CPU mesh, no reference model as ``beta = 0``, ``loss_agg_mode =
  "token-mean"``) on its ``Llama3`` built with SmolLM2's config and loaded from the same dequantized
  tensors (``read_gguf`` written to a safetensors file, tunix's ``create_model_from_safe_tensors``;
  logits checked against ``llama.forward`` on one prompt), optax clip 1.0 + AdamW 1e-6, in
  ``benchmarks/.venvs/tunix`` (``TUNIX_REQUIREMENTS``). tunix 0.1.7's Llama3 ignores
  ``ModelConfig.rope_theta`` (always base 1e6), patched to 1e5 in the worker. Split: timers around
  ``RLCluster.generate`` (sampling), ``_generate_and_compute_advantage`` (sampling + rewards +
  advantages) and ``update_actor``; update = step - the latter.

Each contender runs in a fresh process: one warm-up step (compilation for JAX; lazy initialisation
for torch) reported as ``first step s``, then ``--steps`` timed steps. Rounds are interleaved (round
i runs every contender with seed i); the report gives median and range of steps/s (wall and per
CPU-second), the generation and update seconds per step, and the ratio longhorizon / TRL per round.

    nice -n 10 .venv/bin/python benchmarks/lm_smollm2_trl.py --rounds 3 --steps 3 [--only longhorizon,trl,trl-1thread,tunix]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))

PROMPTS, GENERATIONS, MAX_NEW, LEARNING_RATE = 4, 4, 32, 1e-6


@dataclasses.dataclass(frozen=True)
class Problem:
    prompt: str  # the chat-templated text, generation prompt included
    answer: int


def make_problems(tokenizer, seed: int, n: int) -> list[Problem]:
    """``n`` sums of two 2-digit numbers (deterministic in ``seed``), rendered with the model's chat template.

    ``tokenizer``: our :class:`longhorizon.lm.hf_tokenizer.HFTokenizer` (both workers render with it).
    """
    import numpy as np

    rng = np.random.default_rng(1000 + seed)
    out = []
    for a, b in rng.integers(10, 100, size=(n, 2)):
        question = f"What is {a} + {b}? Answer with the number only."
        out.append(Problem(tokenizer.apply_chat_template([{"role": "user", "content": question}]), int(a + b)))
    return out


def reward_text(text: str, answer: int) -> float:
    """1.0 if ``answer`` is one of the integers written in ``text``, else 0.0."""
    return float(str(answer) in re.findall(r"-?\d+", text))


def reward(problem: Problem, text: str) -> float:  # longhorizon's reward_fn(problem, text)
    return reward_text(text, problem.answer)


def _path():
    from longhorizon.lm.checkpoints.fetch import model_path

    path = model_path("smollm2")
    if not path.is_file():
        raise SystemExit(f"SmolLM2 is not cached at {path}; run `longhorizon lm fetch smollm2` first.")
    return path


# ----------------------------------------------------------------------------- longhorizon worker


def worker_longhorizon(seed: int, steps: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from longhorizon.lm import llama
    from longhorizon.lm.checkpoints import read_gguf
    from longhorizon.lm.grpo import GRPOConfig, GRPOTrainer
    from longhorizon.lm.hf_tokenizer import from_gguf

    path = _path()
    t0 = time.perf_counter()
    ckpt = read_gguf(path)
    cfg = llama.config_from_gguf_spec(ckpt.spec)
    params = llama.params_from_hf(ckpt.tensors, cfg)
    del ckpt
    tok = from_gguf(path)
    load_s = time.perf_counter() - t0
    problems = make_problems(tok, seed, PROMPTS * (steps + 1))
    plen = max(len(tok.encode(p.prompt)) for p in problems)
    gcfg = GRPOConfig(lr_scheduler_type="constant", num_generations=GENERATIONS, beta=0.0, loss_type="dapo", epsilon=0.2,
                      learning_rate=LEARNING_RATE, max_grad_norm=1.0, weight_decay=0.0, temperature=1.0, top_p=1.0,
                      max_prompt_length=plen, max_completion_length=MAX_NEW)
    trainer = GRPOTrainer(model_cfg=cfg, params=params, tokenizer=tok, cfg=gcfg, reward_fn=reward, seed=seed)
    t0 = time.perf_counter()
    first_m = trainer.step(problems[:PROMPTS])
    jax.block_until_ready(trainer.params)
    first = time.perf_counter() - t0
    # The update runs on the batch's longest completion rounded up to a power of two (16 or 32 columns here), each
    # width compiled once: compile both now, on copies, so the timed steps measure steps and not compilation.
    t0 = time.perf_counter()
    ro = trainer.rollout(problems[:PROMPTS])
    for width in (16, MAX_NEW):
        ro["valid"] = ro["valid"] & (np.arange(ro["valid"].shape[1]) < width)[None]
        ro["valid"][0, :width] = True
        batch = trainer._train_batch(ro, trainer.advantages(ro), ro["valid"].astype(np.float32), np.ones(len(ro["rows"]), bool))
        copies = jax.tree_util.tree_map(jnp.array, (trainer.params, trainer.opt_state))
        jax.block_until_ready(trainer.updater(*copies, batch))
    other_widths = time.perf_counter() - t0
    gen_s = upd_s = 0.0
    new_tokens = rewards = 0.0
    c0, t0 = time.process_time(), time.perf_counter()
    for s in range(1, steps + 1):
        m = trainer.step(problems[s * PROMPTS:(s + 1) * PROMPTS])
        jax.block_until_ready(trainer.params)
        gen_s += m["generation_s"]
        upd_s += m["step_s"] - m["generation_s"]
        new_tokens += m["completion_length"] * PROMPTS * GENERATIONS
        rewards += m["reward"]
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"params": int(sum(x.size for x in jax.tree_util.tree_leaves(trainer.params))), "steps": steps,
            "seconds": seconds, "cpu_seconds": cpu, "first_step_seconds": first, "compile_other_widths_seconds": other_widths,
            "first_step_generation_seconds": first_m["generation_s"], "load_seconds": load_s,
            "generation_seconds_per_step": gen_s / steps, "update_seconds_per_step": upd_s / steps,
            "new_tokens_per_step": new_tokens / steps, "reward": rewards / steps, "prompt_tokens": plen,
            "version": f"jax {jax.__version__}"}


# ----------------------------------------------------------------------------- TRL worker (runs in the trl-gguf venv)


def worker_trl(seed: int, steps: int) -> dict:
    import tempfile

    import torch
    import transformers
    import trl
    import trl.extras.profiling as profiling
    from datasets import Dataset
    from transformers import TrainerCallback

    from longhorizon.lm.hf_tokenizer import from_gguf

    path = _path()
    ours = from_gguf(path)
    problems = make_problems(ours, seed, PROMPTS * (steps + 1))
    t0 = time.perf_counter()
    folder, name = os.path.split(path)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # transformers marks a GGUF-loaded model as quantized (GgufHfQuantizer) although its weights are now
    # plain float32, and Trainer refuses to fine-tune "purely quantized models": the same weights go into
    # a plain model of the same config (identical logits, checked here).
    config = loaded.config
    del config.quantization_config
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    probe = torch.tensor([[1, 4093, 198, 34, 27, 35]])
    with torch.no_grad():
        assert torch.equal(model(probe).logits, loaded(probe).logits)
    del loaded
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    load_s = time.perf_counter() - t0
    # TRL tokenizes plain-text prompts with tokenizer(text=...): the same ids as ours, or the comparison is off.
    theirs_ids = tokenizer(text=[p.prompt for p in problems])["input_ids"]
    assert all(list(t) == ours.encode(p.prompt) for t, p in zip(theirs_ids, problems)), "prompt ids differ"
    dataset = Dataset.from_dict({"prompt": [p.prompt for p in problems], "answer": [p.answer for p in problems]})

    def reward_trl(prompts, completions, answer, **_):
        return [reward_text(text, a) for text, a in zip(completions, answer)]

    timers: list[tuple[int, str, float]] = []  # (step, timer name, seconds) from TRL's own profiling contexts
    original = profiling.ProfilingContext._log_metrics

    def record(self, duration):
        timers.append((len(times) // 2, self.name, duration))
        return original(self, duration)

    profiling.ProfilingContext._log_metrics = record
    times: list[tuple[float, float]] = []
    logs: list[dict] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            times.append((time.perf_counter(), time.process_time()))

        def on_step_end(self, args, state, control, **kw):
            times.append((time.perf_counter(), time.process_time()))

        def on_log(self, args, state, control, logs=None, **kw):
            logs_list.append(dict(logs or {}))

    logs_list = logs
    with tempfile.TemporaryDirectory() as out:
        args = trl.GRPOConfig(
            output_dir=out, per_device_train_batch_size=PROMPTS * GENERATIONS, num_generations=GENERATIONS,
            gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1, max_completion_length=MAX_NEW,
            learning_rate=LEARNING_RATE, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
            max_grad_norm=1.0, beta=0.0, loss_type="dapo", epsilon=0.2, temperature=1.0, top_p=1.0,
            bf16=False, fp16=False, gradient_checkpointing=False, max_steps=steps + 1, logging_steps=1,
            report_to="none", save_strategy="no", use_cpu=True, seed=seed, disable_tqdm=True,
            dataloader_num_workers=0, shuffle_dataset=False,
        )
        trainer = trl.GRPOTrainer(model=model, reward_funcs=reward_trl, args=args, train_dataset=dataset,
                                  processing_class=tokenizer, callbacks=[Clock()])
        trainer.train()
    assert next(model.parameters()).dtype == torch.float32
    begins, ends = times[0::2], times[1::2]
    timed = range(1, steps + 1)

    def per_step(suffix):
        return sum(d for s, n, d in timers if s in timed and n.endswith(suffix)) / steps

    step_logs = [entry for entry in logs if "completions/mean_length" in entry]
    step_s = (ends[-1][0] - ends[0][0]) / steps
    prepare = per_step("._prepare_inputs")
    return {"params": sum(p.numel() for p in model.parameters()), "steps": steps,
            "seconds": ends[-1][0] - ends[0][0], "cpu_seconds": ends[-1][1] - ends[0][1],  # steps 2..steps+1
            "first_step_seconds": ends[0][0] - begins[0][0], "load_seconds": load_s,
            "generation_seconds_per_step": per_step(".transformers.generate"),
            "prepare_seconds_per_step": prepare, "update_seconds_per_step": step_s - prepare,
            "new_tokens_per_step": statistics.mean(e["completions/mean_length"] for e in step_logs[1:])
            * PROMPTS * GENERATIONS if len(step_logs) > 1 else None,
            "reward": statistics.mean(e.get("reward", 0.0) for e in step_logs[1:]) if len(step_logs) > 1 else None,
            "torch_threads": torch.get_num_threads(), "prompt_tokens": len(theirs_ids[0]),
            "version": f"trl {trl.__version__}, transformers {transformers.__version__}, torch {torch.__version__}"}


# ----------------------------------------------------------------------------- tunix worker (runs in the tunix venv)

TUNIX_REQUIREMENTS = ["google-tunix==0.1.7", "jax==0.10.2", "flax==0.12.8", "gguf==0.17.1", "jinja2"]


class _TunixTokenizer:
    """Our tokenizer under tunix's duck-typed interface (encode/decode/bos_id/eos_id/pad_id).

    ``bos_id`` is None: tunix's sampler prepends a bos when it has one, and our chat-templated prompts
    carry none (the same 46 ids as the other contenders).
    """

    def __init__(self, tok):
        self.tok = tok

    def encode(self, text, **_):
        return self.tok.encode(str(text))  # tunix hands numpy strings

    def decode(self, ids, **kw):
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=kw.get("skip_special_tokens", True))

    def bos_id(self):
        return None

    def eos_id(self):
        return self.tok.eos_id

    def pad_id(self):
        return self.tok.pad_id


def worker_tunix(seed: int, steps: int) -> dict:
    import tempfile

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    import safetensors.numpy
    from flax import nnx
    from tunix.models.llama3 import model as tmodel
    from tunix.models.llama3 import params as tparams
    from tunix.rl import rl_cluster as rlc
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    from longhorizon.lm import llama
    from longhorizon.lm.checkpoints import read_gguf
    from longhorizon.lm.hf_tokenizer import from_gguf

    path = _path()
    t0 = time.perf_counter()
    ckpt = read_gguf(path)
    ours_cfg = llama.config_from_gguf_spec(ckpt.spec)
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in ckpt.tensors.items()}
    tied = ours_cfg.tie_embeddings
    if tied:
        tensors.pop("lm_head.weight", None)
    cfg = tmodel.ModelConfig(num_layers=ours_cfg.n_layers, vocab_size=ours_cfg.vocab_size, embed_dim=ours_cfg.d_model,
                             hidden_dim=ours_cfg.d_ff, num_heads=ours_cfg.n_heads, head_dim=ours_cfg.head_dim,
                             num_kv_heads=ours_cfg.n_kv_heads, rope_theta=int(ours_cfg.rope_base),
                             norm_eps=ours_cfg.rms_eps, weight_tying=tied)
    # tunix 0.1.7's Llama3 attention calls apply_rope(x, pos, head_dim=...) without config.rope_theta, so
    # every Llama3 gets the default base 1e6 (logits off by 8 on SmolLM2, base 1e5): patched to the config's.
    import functools
    import inspect

    assert inspect.signature(tmodel.apply_rope).parameters["rope_theta"].default == 1_000_000
    tmodel.apply_rope = functools.partial(tmodel.apply_rope, rope_theta=cfg.rope_theta)
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with tempfile.TemporaryDirectory() as folder:
        safetensors.numpy.save_file(tensors, os.path.join(folder, "model.safetensors"))
        model = tparams.create_model_from_safe_tensors(folder, cfg, mesh, dtype=jnp.float32)
    tok = from_gguf(path)
    load_s = time.perf_counter() - t0

    # The weights loaded right: tunix's logits against ours on one prompt.
    problems = make_problems(tok, seed, PROMPTS * (steps + 1))
    ids = jnp.asarray([tok.encode(problems[0].prompt)], jnp.int32)
    n = ids.shape[1]
    theirs, _ = model(ids, jnp.arange(n)[None], None, jnp.tril(jnp.ones((1, n, n), bool)))
    params = llama.params_from_hf(ckpt.tensors, ours_cfg)
    del ckpt
    reference = llama.forward(params, ours_cfg, ids, jnp.ones_like(ids, bool))
    logits_max_abs_diff = float(jnp.max(jnp.abs(theirs - reference)))
    argmax_agree = float(jnp.mean(jnp.argmax(theirs, -1) == jnp.argmax(reference, -1)))
    del params, reference, theirs
    assert logits_max_abs_diff < 1e-2, logits_max_abs_diff

    plen = max(len(tok.encode(p.prompt)) for p in problems)
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(LEARNING_RATE, weight_decay=0.0))
    if True:
        training = rlc.RLTrainingConfig(actor_optimizer=optimizer, eval_every_n_steps=10**9, max_steps=steps + 1,
                                        mini_batch_size=PROMPTS, train_micro_batch_size=PROMPTS,
                                        checkpoint_root_directory=None, pbar_description=None)
        rollout = base_rollout.RolloutConfig(max_tokens_to_generate=MAX_NEW, temperature=1.0, top_p=1.0, top_k=None,
                                             max_prompt_length=plen, kv_cache_size=plen + MAX_NEW + 8,
                                             eos_tokens=list(tok.eos_ids), seed=seed)  # a key array is donated by step 1
        roles = {r: mesh for r in (rlc.Role.ACTOR, rlc.Role.REFERENCE, rlc.Role.ROLLOUT)}
        cluster = rlc.RLCluster(actor=model, reference=None, tokenizer=_TunixTokenizer(tok),
                                cluster_config=rlc.ClusterConfig(role_to_mesh=roles, rollout_engine="vanilla",
                                                                 offload_to_cpu=False, training_config=training,
                                                                 rollout_config=rollout))
        algo = grpo_learner.GRPOConfig(num_generations=GENERATIONS, num_iterations=1, beta=0.0, epsilon=0.2,
                                       loss_agg_mode="token-mean")

        def reward_tunix(prompts, completions, answer, **_):
            return [reward_text(text, a) for text, a in zip(completions, answer)]

        learner = grpo_learner.GRPOLearner(rl_cluster=cluster, algo_config=algo, reward_fns=reward_tunix)

        # Timers around tunix's own phases: rollout (sampling), rollout + rewards + advantages, the actor update.
        timers: list[tuple[str, float]] = []
        marks: list[tuple[float, float]] = []
        lengths: list[float] = []
        rewards_seen: list[float] = []

        def timed(name, fn, after=None):
            def wrapper(*a, **kw):
                t = time.perf_counter()
                result = fn(*a, **kw)
                if after is not None:
                    after(result)
                timers.append((name, time.perf_counter() - t))
                return result
            return wrapper

        def after_prepare(example):
            jax.block_until_ready(example.advantages)
            lengths.append(float(np.asarray(example.completion_mask).sum()))

        cluster.generate = timed("generate", cluster.generate)
        learner._generate_and_compute_advantage = timed("prepare", learner._generate_and_compute_advantage,
                                                        after_prepare)
        cluster.update_actor = timed("update", cluster.update_actor,
                                     lambda _: jax.block_until_ready(nnx.state(cluster.actor_trainer.model)))
        original_step = learner._run_global_step

        def global_step(*a, **kw):
            marks.append((time.perf_counter(), time.process_time()))
            result = original_step(*a, **kw)
            jax.block_until_ready(nnx.state(cluster.actor_trainer.model))
            marks.append((time.perf_counter(), time.process_time()))
            return result

        learner._run_global_step = global_step
        original_reward = learner._compute_rewards

        def compute_rewards(*a, **kw):
            r = original_reward(*a, **kw)
            rewards_seen.append(float(np.mean(r)))
            return r

        learner._compute_rewards = compute_rewards
        # Arrays, not lists: tunix repeats each field G times with tree_map(np.repeat), which would split a list.
        data = [{"prompts": np.array([p.prompt for p in problems[s * PROMPTS:(s + 1) * PROMPTS]]),
                 "answer": np.array([p.answer for p in problems[s * PROMPTS:(s + 1) * PROMPTS]])}
                for s in range(steps + 1)]
        learner.train(data)
    begins, ends = marks[0::2], marks[1::2]
    assert len(ends) == steps + 1, (len(ends), timers)
    per = {name: [d for n, d in timers if n == name] for name in ("generate", "prepare", "update")}
    step_s = (ends[-1][0] - ends[0][0]) / steps
    prepare = sum(per["prepare"][1:]) / steps
    import importlib.metadata as md
    return {"params": int(sum(x.size for x in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)))),
            "steps": steps, "seconds": ends[-1][0] - ends[0][0], "cpu_seconds": ends[-1][1] - ends[0][1],
            "first_step_seconds": ends[0][0] - begins[0][0], "load_seconds": load_s,
            "first_step_generation_seconds": per["generate"][0] if per["generate"] else None,
            "generation_seconds_per_step": sum(per["generate"][1:]) / steps,
            "prepare_seconds_per_step": prepare, "update_seconds_per_step": step_s - prepare,
            "actor_update_seconds_per_step": sum(per["update"][1:]) / steps,
            "new_tokens_per_step": statistics.mean(lengths[1:]), "reward": statistics.mean(rewards_seen[1:]),
            "prompt_tokens": plen, "logits_max_abs_diff": logits_max_abs_diff, "logits_argmax_agree": argmax_agree,
            "version": f"google-tunix {md.version('google-tunix')}, jax {jax.__version__}, "
                       f"flax {md.version('flax')}"}


# ----------------------------------------------------------------------------- driver


def _run_worker(contender: str, seed: int, steps: int) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(SRC), "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if contender.startswith("trl"):
        from check_smollm2_logits import peer_python

        python = str(peer_python())
        if contender == "trl-1thread":
            env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    elif contender == "tunix":
        from peer_env import peer_python

        python = str(peer_python("tunix", TUNIX_REQUIREMENTS))
    else:
        python = sys.executable
    worker = "trl" if contender.startswith("trl") else contender
    out = subprocess.run([python, __file__, "--worker", worker, "--seed", str(seed), "--steps", str(steps)],
                         check=False, capture_output=True, text=True, env=env)
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:500], "stderr_tail": out.stderr[-3000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="timed GRPO steps per run (after one warm-up step)")
    parser.add_argument("--only", default="longhorizon,trl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(HERE / "out" / "lm_smollm2_trl.json"))
    args = parser.parse_args()
    if args.worker:
        fn = {"longhorizon": worker_longhorizon, "trl": worker_trl, "tunix": worker_tunix}[args.worker]
        print(json.dumps(fn(args.seed, args.steps)), flush=True)
        return
    names = args.only.split(",")
    results: dict[str, list[dict]] = {}
    errors: dict[str, str] = {}
    for rnd in range(args.rounds):
        for name in names:
            before = os.getloadavg()[0]
            row = _run_worker(name, args.seed + rnd, args.steps)
            if "error" in row:
                errors[name] = row["error"]
                print(f"{name} round {rnd} failed: {row['error']}", flush=True)
                continue
            row.update(round=rnd, contender=name, load_average_before=before, load_average_after=os.getloadavg()[0],
                       steps_per_second=row["steps"] / row["seconds"],
                       steps_per_cpu_second=row["steps"] / row["cpu_seconds"])
            results.setdefault(name, []).append(row)
            print(json.dumps(row), flush=True)

    def spread(values):
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    summary = {}
    for key, rows in results.items():
        summary[key] = {k: spread([r[k] for r in rows]) for k in
                        ("steps_per_second", "steps_per_cpu_second", "first_step_seconds",
                         "generation_seconds_per_step", "update_seconds_per_step")}
        summary[key].update(params=rows[0]["params"], version=rows[0]["version"], prompt_tokens=rows[0]["prompt_tokens"])
    ratios = {}
    for peer in ("trl", "trl-1thread", "tunix"):
        a, b = results.get("longhorizon"), results.get(peer)
        if a and b:
            pairs = [(x, y) for x in a for y in b if x["round"] == y["round"]]
            wall = [x["steps_per_second"] / y["steps_per_second"] for x, y in pairs]
            cpu = [x["steps_per_cpu_second"] / y["steps_per_cpu_second"] for x, y in pairs]
            ratios[f"longhorizon/{peer}"] = {"wall": spread(wall), "cpu": spread(cpu), "per_round_wall": wall}
    report = {"config": {"prompts": PROMPTS, "num_generations": GENERATIONS, "max_completion_length": MAX_NEW,
                         "learning_rate": LEARNING_RATE, "steps_timed": args.steps, "rounds": args.rounds},
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average": os.getloadavg()},
              "runs": results, "summary": summary, "ratios": ratios, "errors": errors}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nGRPO steps on SmolLM2-135M fp32 ({PROMPTS} prompts x {GENERATIONS}, <= {MAX_NEW} new tokens), "
          f"{args.steps} timed steps, {args.rounds} rounds")
    print(f"{'contender':12} {'steps/s median [min, max]':>28} {'per CPU-s':>10} {'gen s/step':>11} "
          f"{'update s/step':>14} {'first step s':>13}")
    for key, s in summary.items():
        st = s["steps_per_second"]
        print(f"{key:12} {st['median']:>10.4f} [{st['min']:.4f}, {st['max']:.4f}]".ljust(41) +
              f" {s['steps_per_cpu_second']['median']:>10.4f} {s['generation_seconds_per_step']['median']:>11.2f} "
              f"{s['update_seconds_per_step']['median']:>14.2f} {s['first_step_seconds']['median']:>13.1f}")
    for key, r in ratios.items():
        print(f"{key}: wall {r['wall']['median']:.2f} [{r['wall']['min']:.2f}, {r['wall']['max']:.2f}] per round "
              f"{', '.join(f'{x:.2f}' for x in r['per_round_wall'])}; per CPU-second {r['cpu']['median']:.2f}")
    for key, e in errors.items():
        print(f"{key} failed: {e}")


if __name__ == "__main__":
    main()
