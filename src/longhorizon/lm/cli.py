"""`longhorizon lm sft|rl|eval`: language-model policies on verifiable long-horizon tasks.

Heavy modules (JAX, flax, the trainers) are imported inside the commands so that
``longhorizon --help`` stays fast.
"""

from __future__ import annotations

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
    from longhorizon.lm.tokenizer import Tokenizer
    from longhorizon.runner import checkpoint
    from longhorizon.runner.results import read_json

    config_path = Path(init) / "config.json"
    if not config_path.exists():
        raise UsageError(f"{init} has no config.json; pass --init a folder written by `longhorizon lm sft` or `lm rl`.")
    config = read_json(config_path)
    tokenizer = Tokenizer(config.get("alphabet", Tokenizer().alphabet))
    model_cfg = ModelConfig(**config["model"])
    params, _ = checkpoint.restore(Path(init) / "checkpoints", init_params(jax.random.PRNGKey(0), model_cfg))
    return params, model_cfg, tokenizer, config


def _save_policy(results, params, step: int, meta: dict) -> None:
    from longhorizon.runner import checkpoint

    checkpoint.save(results.checkpoints, step, params, meta)


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


@lm_app.command()
def sft(
    out: Path = typer.Option(..., help="Results folder (config.json, metrics.jsonl, summary.json, curve.png, checkpoints/)."),
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
    seed: int = typer.Option(0),
) -> None:
    """Supervised (teacher-forced) training of a base policy."""
    import jax

    from longhorizon.lm.evaluate import evaluate
    from longhorizon.lm.model import ModelConfig, count_params, init_params
    from longhorizon.lm.sft import SFTConfig, train_sft
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, ProblemStream, make_problems, max_lengths, parse_horizons
    from longhorizon.lm.tokenizer import Tokenizer
    from longhorizon.runner.results import ResultsDir

    hs, eval_hs = parse_horizons(horizons), parse_horizons(eval_horizons)
    task_cfg = _task_cfg({"names": "split", "operators": "+"}, digits, operators, const_max, names, None, None,
                         fixed_width)
    tokenizer = Tokenizer()
    plen, clen = max_lengths(task, max(hs), task_cfg)
    seq_len = seq_len or plen + clen + 2
    model_cfg = ModelConfig(vocab_size=tokenizer.vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                            positions=positions, max_len=256)
    sft_cfg = SFTConfig(steps=steps, batch_size=batch_size, learning_rate=learning_rate, seq_len=seq_len)
    results = ResultsDir(out)
    config = {"command": "lm sft", "task": task, "horizons": hs, "task_config": task_cfg, "model": model_cfg,
              "sft": sft_cfg, "seed": seed, "alphabet": tokenizer.alphabet}
    results.write_config(config)
    params = init_params(jax.random.PRNGKey(seed), model_cfg)
    stream = ProblemStream(task, task_cfg, seed)
    rows: list[dict] = []
    with _progress() as bar:
        job = bar.add_task("sft", total=steps, info="")

        def on_log(row):
            rows.append(row)
            results.append_metrics(row)
            bar.update(job, completed=row["step"], info=f"loss {row['loss']:.3f}  tok-acc {row['token_accuracy']:.3f}")

        params, _ = train_sft(params, model_cfg, tokenizer, lambda _: stream.sample(hs, batch_size), sft_cfg,
                              log_every=max(1, steps // 50), on_log=on_log)
    _save_policy(results, params, steps, {"step": steps})
    held = make_problems("chain", eval_hs, eval_problems, seed + HELD_OUT_OFFSET, task_cfg)
    eplen, eclen = max_lengths("chain", max(eval_hs), task_cfg)
    ev = evaluate(params, model_cfg, tokenizer, held, max_prompt_length=eplen + 1, max_new_tokens=eclen + 1)
    _print_eval(ev)
    _plot(results, rows, ("loss", "token_accuracy"), "step", "SFT")
    results.write_summary({"params": count_params(params), "final": rows[-1] if rows else {}, "eval": ev,
                           "tokens": rows[-1]["tokens"] if rows else 0})
    print(f"wrote {results.root}")


# ----------------------------------------------------------------------------- rl


@lm_app.command()
def rl(
    init: Path = typer.Option(..., help="Base policy: a folder written by `longhorizon lm sft` (or `lm rl`)."),
    out: Path = typer.Option(..., help="Results folder."),
    task: str = typer.Option("chain", help=_TASK_HELP),
    horizons: str = typer.Option("1-5", help="Training horizons: one stage each with --curriculum, else sampled uniformly."),
    curriculum: bool = typer.Option(False, help="h1 curriculum: one stage per horizon, in order."),
    steps_per_stage: int = typer.Option(0, help="Curriculum stage length (0: steps / number of stages)."),
    advance_at: Optional[float] = typer.Option(None, help="Advance a stage early once held-out accuracy reaches this."),
    scaler_target: Optional[float] = typer.Option(None, help="SCALER: move the horizon toward this training success rate."),
    steps: int = typer.Option(100, help="Generation batches (RL steps)."),
    prompts_per_step: int = typer.Option(16),
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
    seed: int = typer.Option(0),
) -> None:
    """GRPO-family RL with verifiable rewards, optionally under the h1 horizon curriculum."""
    import numpy as np

    from longhorizon.lm.curricula import AdaptiveDifficulty, HorizonCurriculum
    from longhorizon.lm.evaluate import evaluate
    from longhorizon.lm.grpo import GRPOConfig, GRPOTrainer
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, ProblemStream, make_problems, max_lengths, parse_horizons
    from longhorizon.runner.results import ResultsDir

    params, model_cfg, tokenizer, base_config = _load_policy(init)
    task_cfg = _task_cfg(base_config.get("task_config"), None, None, None, None, reward, gamma)
    hs, eval_hs = parse_horizons(horizons), parse_horizons(eval_horizons)
    plen, clen = max_lengths(task, max(hs + eval_hs), task_cfg)
    grpo_cfg = GRPOConfig(
        num_generations=num_generations, beta=beta, epsilon=epsilon, epsilon_high=epsilon_high, loss_type=loss_type,
        scale_rewards=scale_rewards, num_iterations=num_iterations, steps_per_generation=steps_per_generation,
        learning_rate=learning_rate, temperature=temperature, top_p=top_p, max_prompt_length=plen + 1,
        max_completion_length=max_lengths(task, max(hs), task_cfg)[1] + 1, dynamic_sampling=dynamic_sampling,
        advantage=advantage,
    )
    if curriculum and scaler_target is not None:
        raise UsageError("--curriculum and --scaler-target are two different schedules; pass only one of them.")
    schedule = HorizonCurriculum(hs, steps_per_stage or max(1, steps // len(hs)), advance_at) if curriculum else None
    scaler = AdaptiveDifficulty(target=scaler_target, lo=min(hs), hi=max(hs), level=min(hs)) if scaler_target is not None else None
    scaler_rng = np.random.default_rng(seed)
    results = ResultsDir(out)
    results.write_config({"command": "lm rl", "init": str(init), "task": task, "horizons": hs, "curriculum": curriculum,
                          "scaler_target": scaler_target,
                          "steps": steps, "prompts_per_step": prompts_per_step, "grpo": grpo_cfg, "task_config": task_cfg,
                          "model": model_cfg, "seed": seed, "alphabet": tokenizer.alphabet,
                          "eval_horizons": eval_hs})
    trainer = GRPOTrainer(model_cfg, params, tokenizer, grpo_cfg, seed=seed)
    stream = ProblemStream(task, task_cfg, seed)
    held = make_problems(task, eval_hs, eval_problems * len(eval_hs), seed + HELD_OUT_OFFSET, task_cfg)

    def run_eval():
        return evaluate(trainer.params, model_cfg, tokenizer, held, max_prompt_length=plen + 1, max_new_tokens=clen + 1)

    rows: list[dict] = []
    with _progress() as bar:
        job = bar.add_task("rl", total=steps, info="")
        for step in range(1, steps + 1):
            if scaler is not None:
                current = [int(h) for h in scaler.sample(scaler_rng, prompts_per_step)]
                batch = [stream.sample([h], 1)[0] for h in current]
            else:
                current = [schedule.horizon] if schedule else hs
                batch = stream.sample(current, prompts_per_step)
            m = trainer.step(batch)
            if scaler is not None:
                m["difficulty"] = scaler.update(m["reward"])
            row = {"step": step, "horizon": max(current), **m}
            if eval_every and step % eval_every == 0:
                ev = run_eval()
                row.update(eval_accuracy=ev["accuracy"], eval_by_horizon=ev["by_horizon"])
            if schedule:
                stage_acc = row.get("eval_by_horizon", {}).get(schedule.horizon) if advance_at is not None else None
                schedule.advance(stage_acc)
            rows.append(row)
            results.append_metrics(row)
            bar.update(job, completed=step, info=f"h={max(current)} reward {m['reward']:.3f} kl {m.get('kl', 0):.4f}")
    _save_policy(results, trainer.params, steps, {"step": steps})
    ev = run_eval()
    _print_eval(ev)
    _plot(results, rows, ("reward", "entropy", "kl"), "step", "GRPO")
    summary = {"eval": ev, "counters": trainer.counters,
               "training_tokens": trainer.counters["rollout_tokens"] + trainer.counters["update_tokens"],
               "mean_tokens_per_s": sum(r["tokens_per_s"] for r in rows) / max(len(rows), 1)}
    results.write_summary(summary)
    print(f"training tokens {summary['training_tokens']}  (rollout {trainer.counters['rollout_tokens']}, "
          f"update {trainer.counters['update_tokens']}); groups dropped {trainer.counters['groups_dropped']}")
    print(f"wrote {results.root}")


# ----------------------------------------------------------------------------- eval


@lm_app.command("eval")
def eval_cmd(
    init: Path = typer.Option(..., help="A folder written by `longhorizon lm sft` or `lm rl`."),
    task: str = typer.Option("chain", help=_TASK_HELP),
    horizons: str = typer.Option("1-8"),
    problems: int = typer.Option(256, help="Held-out problems per horizon."),
    temperature: float = typer.Option(0.0, help="0 for greedy decoding."),
    out: Optional[Path] = typer.Option(None, help="Also write summary.json here."),
    seed: int = typer.Option(0),
) -> None:
    """Accuracy per horizon on held-out problems."""
    from longhorizon.lm.evaluate import evaluate
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, make_problems, max_lengths, parse_horizons
    from longhorizon.runner.results import ResultsDir

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
