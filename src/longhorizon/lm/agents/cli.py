"""`longhorizon lm agent`: multi-turn RL of a language-model agent in a tool environment.

The command only builds an :class:`longhorizon.lm.run.RLSpec` with an
:class:`longhorizon.lm.agents.spec.AgentSpec`; the LM run spine trains it (results folder,
checkpoints, ``--resume``, Ctrl-C).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from longhorizon.errors import UsageError
from longhorizon.lm.command_line import (ACTORS, COORDINATOR_ADDRESS, MAX_STALENESS, MODE, NUM_PROCESSES, PROCESS_ID,
                                         check_worker_options, workers_config)


def agent(
    ctx: typer.Context,
    env: str = typer.Option("search", help="Environment: search, router, fees, research, or a TRL-style class "
                            "'pkg.module:Class' / 'file.py:Class' (then --tasks is required)."),
    tasks: Optional[Path] = typer.Option(None, help="Task rows, a JSONL file with a `prompt` column (other columns go to "
                                         "the environment's reset); default: the environment's own generated tasks."),
    env_arg: Optional[list[str]] = typer.Option(None, help="KEY=VALUE for the environment's task generator, e.g. "
                                                "hops=3 (repeatable)."),
    train_tasks: int = typer.Option(256, help="Generated training tasks (without --tasks)."),
    eval_tasks: int = typer.Option(32, help="Held-out tasks played greedily at --eval-every and after the last step "
                                   "(generated, or the last rows of --tasks; 0: none)."),
    init: Optional[Path] = typer.Option(None, help="Base policy: a folder written by `lm agent`, `lm rl` or `lm sft`."),
    model: Optional[str] = typer.Option(None, help="Pretrained policy when --init is not given: smollm2 (the default), "
                                        "tiny-random, a .gguf file or a Hugging Face folder."),
    out: Optional[Path] = typer.Option(None, help="Results folder."),
    steps: int = typer.Option(50, help="RL steps (generation batches)."),
    prompts_per_step: int = typer.Option(4, help="Tasks per step; each is played --num-generations times."),
    num_generations: int = typer.Option(8, help="Episodes per task (the group of group-relative advantages)."),
    beta: float = typer.Option(0.0, help="KL anchor to the initial policy (CANOPY), k3 estimator."),
    epsilon: float = typer.Option(0.2),
    loss_type: str = typer.Option("dapo", help="grpo, dr_grpo, dapo or bnpo."),
    scale_rewards: str = typer.Option("group", help="group, batch or none."),
    learning_rate: float = typer.Option(1e-6),
    gradient_accumulation_steps: int = typer.Option(1, help="Micro-batches per optimiser step (TRL's name): the update "
                                                    "holds 1/N of the episodes' activations at a time (a SmolLM2 agent "
                                                    "step of 32 episodes needs about 8 on a 24 GB CPU host)."),
    lr_scheduler_type: str = typer.Option("linear", help="linear (TRL's default: decays to 0 by the last step) or constant."),
    temperature: float = typer.Option(1.0),
    max_turns: int = typer.Option(6, help="Model turns per episode."),
    max_action_tokens: int = typer.Option(64, help="New tokens per model turn."),
    max_context_tokens: int = typer.Option(2048, help="The longest an episode's sequence may grow."),
    context: str = typer.Option("full", help="full (the whole history) or workspace (IterResearch: report + last "
                                "action and observation, rebuilt each round)."),
    tool_format: str = typer.Option("hermes", help="hermes (<tool_call>{json}</tool_call>) or tags (<tool>arg</tool>)."),
    credit: str = typer.Option("trajectory", help="trajectory (one group-normalised outcome advantage), turn (returns "
                               "to go of per-turn rewards) or eapo (gamma^(T-t) R_T)."),
    gamma: float = typer.Option(1.0, help="--credit turn/eapo: the per-turn discount."),
    milestone_bonus: float = typer.Option(0.0, help="MiRA: reward added when a turn reaches a new milestone."),
    reward_weights: Optional[str] = typer.Option(None, help="Learn from a weighted sum of the environment's reward "
                                                 "terms, e.g. format=1,outcome=1,cost=-0.5 (default: its reward)."),
    latency: float = typer.Option(0.0, help="Seconds every tool call sleeps (a slow environment)."),
    actors: int = ACTORS,
    mode: str = MODE,
    max_staleness: int = MAX_STALENESS,
    mesh: Optional[str] = typer.Option(None, help="data=D,fsdp=F,tensor=T: shard the update over the local devices "
                                       "(parameters and optimiser state over fsdp, heads and MLP columns over tensor, "
                                       "the rows over data x fsdp; docs/scale.md)."),
    coordinator_address: Optional[str] = COORDINATOR_ADDRESS,
    num_processes: Optional[int] = NUM_PROCESSES,
    process_id: Optional[int] = PROCESS_ID,
    eval_every: int = typer.Option(0, help="Evaluate every N steps (0: only at the end)."),
    checkpoint_every: int = typer.Option(0, help="Save a checkpoint every N steps (0: about ten per run)."),
    seed: int = typer.Option(0),
    resume: Optional[Path] = typer.Option(None, help="Continue the run in this folder with its saved options."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check every option and print the config.json the run "
                                 "would write; train and write nothing."),
) -> None:
    """Multi-turn agent RL: episodes of a tool environment (search, router, feedback scaffolds, research workspace, or
    your TRL environment class), trajectory- or turn-level credit, the GRPO-family loss on action tokens only."""
    from longhorizon.lm.command_line import plan_or_run, run_options
    from longhorizon.runner.command_line import given_options

    o = run_options(ctx, resume, "lm agent")
    folder = o["out"]
    _check_agent_options(o, set(given_options(ctx)))
    summary = plan_or_run(agent_spec(o, folder), "lm agent", resume is not None, dry_run)
    if summary is None:
        return
    ev = summary["eval"]
    if ev is not None:
        print(f"held-out: reward {ev['reward']:.3f}  success {ev['success']:.3f}  turns {ev['turns']:.2f}  "
              f"tool errors {ev['tool_errors']:.2f}  ({ev['episodes']} episodes)")
    print(f"wrote {folder}")


def demos(
    env: str = typer.Option("search", help="A built-in environment with a scripted expert: search, router, fees or "
                            "research."),
    env_arg: Optional[list[str]] = typer.Option(None, help="KEY=VALUE for the environment's task generator, e.g. "
                                                "hops=3 (repeatable)."),
    episodes: int = typer.Option(256, help="Expert episodes, one per generated task."),
    tool_format: str = typer.Option("hermes", help="hermes (<tool_call>{json}</tool_call>) or tags (<tool>arg</tool>)."),
    seed: int = typer.Option(0, help="Seed of the generated tasks (lm agent's training tasks use --seed too)."),
    out: Path = typer.Option(..., help="The JSONL file to write (TRL's SFT `messages` format)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the options and print what would be written."),
) -> None:
    """Demonstrations for agent warm starts: the scripted expert's episodes as TRL SFT rows (`messages`), laid out as
    `lm agent` shows an episode to the policy; train on them with `lm sft --dataset FILE`."""
    from longhorizon.lm.agents import envs, protocol
    from longhorizon.lm.agents.demos import demonstration_rows
    from longhorizon.runner.command_line import print_json

    if ":" in env:
        raise UsageError(f"--env {env} is your own class, which has no scripted expert; use search, router, fees or "
                         "research.")
    spec = envs.get(env)
    if episodes < 1:
        raise UsageError(f"--episodes must be at least 1 (got {episodes}).")
    if tool_format not in protocol.TOOL_FORMATS:
        raise UsageError(f"--tool-format {tool_format} is unknown; use one of {', '.join(protocol.TOOL_FORMATS)}.")
    if out.suffix != ".jsonl":
        raise UsageError(f"--out {out} must name a .jsonl file (one row per line), e.g. demos.jsonl.")
    args = _env_args(env_arg)
    try:
        rows = spec.make_tasks(episodes, seed=seed, **args)
    except TypeError as e:
        raise UsageError(f"--env-arg does not fit the {env} task generator ({e}); check the KEY names.") from None
    plan = {"command": "lm demos", "env": env, "env_args": args, "episodes": episodes, "tool_format": tool_format,
            "seed": seed, "out": str(out)}
    if dry_run:
        print_json(plan)
        return
    demonstrations = demonstration_rows(env, rows, tool_format)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text("".join(json.dumps(r) + "\n" for r in demonstrations))
    partial.replace(out)  # whole or absent: a killed run leaves no half file under the name
    rewards = [r["reward"] for r in demonstrations]
    print(f"wrote {len(demonstrations)} expert episodes of {env} to {out} (mean reward {sum(rewards) / len(rewards):.3f}, "
          f"{sum(r['turns'] for r in demonstrations) / len(demonstrations):.2f} turns); warm-start with "
          f"`longhorizon lm sft --dataset {out}`")


def _check_agent_options(o: dict, given: set[str]) -> None:
    """Refuse an option that nothing in this run would read."""
    if "gamma" in given and o["credit"] == "trajectory":
        raise UsageError("--gamma discounts turns under --credit turn or eapo; --credit trajectory has one value per "
                         "episode, so add --credit turn/eapo or drop --gamma.")
    check_worker_options(o, given)
    if "train_tasks" in given and o.get("tasks") is not None:
        raise UsageError("--train-tasks sizes generated tasks; with --tasks the rows are given, so drop --train-tasks.")


def _env_args(pairs: list[str] | None) -> dict:
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise UsageError(f"--env-arg {pair!r} is not KEY=VALUE; write e.g. --env-arg hops=3.")
        key, value = pair.split("=", 1)
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def _read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise UsageError(f"--tasks {path} does not exist; give a JSONL file of task rows.")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"--tasks {path} line {n} is not JSON ({e.msg}); write one JSON object per line.") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise UsageError(f"--tasks {path} line {n} has no `prompt` string; every row needs one.")
        rows.append(row)
    if not rows:
        raise UsageError(f"--tasks {path} holds no rows; write one JSON object per line.")
    return rows


def agent_spec(o: dict, out: str):
    """The run spec of ``lm agent`` options (validated, nothing loaded)."""
    from longhorizon.lm import samplers
    from longhorizon.lm.agents import envs
    from longhorizon.lm.agents.rollout import AgentConfig
    from longhorizon.lm.agents.spec import AgentEval, AgentSpec
    from longhorizon.lm.agents.trainer import CreditConfig
    from longhorizon.lm.grpo import GRPOConfig
    from longhorizon.lm.run import Pretrained, RLSpec

    if o.get("init") is not None and o.get("model") is not None:
        raise UsageError("--init continues a policy and --model starts from a pretrained one; give only one of them.")
    init = o["init"] if o.get("init") is not None else Pretrained(o.get("model") or "smollm2")
    registered = ":" not in o["env"]
    args = _env_args(o.get("env_arg"))
    if o.get("tasks") is not None:
        if args:
            raise UsageError("--env-arg configures generated tasks; with --tasks the rows are given, so drop --env-arg.")
        rows = _read_rows(Path(o["tasks"]))
        from longhorizon.lm.agents.protocol import check_rows

        # a row reset() cannot take is refused now, not once the model has loaded
        check_rows(envs.environment_class(o["env"]), rows, f"--tasks {o['tasks']}")
        n_eval = min(o["eval_tasks"], len(rows) - 1)
        train, held = rows[: len(rows) - n_eval], rows[len(rows) - n_eval:]
    elif registered:
        make = envs.get(o["env"]).make_tasks
        try:
            train = make(o["train_tasks"], seed=o["seed"], **args)
            held = make(o["eval_tasks"], seed=o["seed"] + 10_000, **args) if o["eval_tasks"] else []
        except TypeError as e:
            raise UsageError(f"--env-arg does not fit the {o['env']} task generator ({e}); check the KEY names.") from None
    else:
        raise UsageError(f"--env {o['env']} is your environment class, so its tasks must be given: add --tasks FILE.jsonl.")
    weights = ()
    if o.get("reward_weights"):
        pairs = [p.split("=", 1) for p in o["reward_weights"].split(",")]
        if any(len(p) != 2 for p in pairs):
            raise UsageError("--reward-weights takes NAME=WEIGHT pairs, e.g. format=1,outcome=1,cost=-0.5.")
        try:
            weights = tuple((k.strip(), float(v)) for k, v in pairs)
        except ValueError:
            raise UsageError("--reward-weights takes numbers as weights, e.g. outcome=1,cost=-0.5.") from None
    agent_cfg = AgentConfig(max_turns=o["max_turns"], max_action_tokens=o["max_action_tokens"],
                            max_context_tokens=o["max_context_tokens"], context=o["context"],
                            tool_format=o["tool_format"], temperature=o["temperature"])
    credit_cfg = CreditConfig(credit=o["credit"], gamma=o["gamma"], milestone_bonus=o["milestone_bonus"],
                              reward_weights=weights)
    grpo_cfg = GRPOConfig(num_generations=o["num_generations"], beta=o["beta"], epsilon=o["epsilon"],
                          loss_type=o["loss_type"], scale_rewards=o["scale_rewards"], learning_rate=o["learning_rate"],
                          gradient_accumulation_steps=o.get("gradient_accumulation_steps", 1),
                          lr_scheduler_type=o.get("lr_scheduler_type", "constant"), temperature=o["temperature"], max_prompt_length=1, max_completion_length=o["max_context_tokens"] - 1)
    spec = AgentSpec(o["env"], agent_cfg, credit_cfg, latency_s=o["latency"],
                     workers=workers_config(o, requests_per_batch=o["prompts_per_step"]))
    # the held-out episodes are also played before the first step, so every curve starts at the starting policy
    evaluation = AgentEval(tuple(held), o["env"], agent_cfg, o["eval_every"], o["latency"], at_start=True) if held else None
    return RLSpec(out=str(out), init=init, grpo=grpo_cfg, sampler=samplers.ShuffledPool(tuple(train), seed=o["seed"]),
                  steps=o["steps"], prompts_per_step=o["prompts_per_step"], evaluation=evaluation,
                  checkpoint_every=o["checkpoint_every"], seed=o["seed"], record={"command": "lm agent", "options": o},
                  agent=spec, mesh=o.get("mesh"))
