"""No option silently does nothing: every option of every command either acts or is refused.

The options are read from the CLI's own metadata (click's parameters of every command and
sub-command), so an option added without a case here fails
:func:`test_every_option_has_a_case`. A case is one of:

* ``Acts(a, b)``: the ``--dry-run`` outputs of argv ``a`` and argv ``b`` (``b`` sets the option)
  both succeed and differ, so the option reaches what would run;
* ``Refused(argv, needle)``: in a context where the option cannot act, the command exits 2 with
  one sentence containing ``needle``, before anything compiles;
* ``DRY``: the ``--dry-run`` flag itself: exit 0, JSON on stdout, nothing written.

Argv strings may name the fixture folders ``{RUN}``, ``{RUN2}`` (train results), ``{SFT}``,
``{SFT2}`` (lm sft results), ``{RL}`` (lm rl results), ``{GGUF}`` (a tiny pretrained model), ``{DATA}``,
``{DATA2}`` (prompt datasets), ``{AGENT}`` (lm agent results), ``{ATASKS}``, ``{ATASKS2}`` (agent task rows),
``{ODATA}``, ``{ODATA_VAL}``
(a tiny OGBench dataset and its -val file) and ``{TMP}`` (an empty scratch folder).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import typer

from longhorizon.cli import app, main

NPZ = str(Path(__file__).resolve().parents[1] / "fixtures" / "bridge" / "MiniGrid-KeyCorridorS3R1-v0" / "consolidated.npz")


@dataclasses.dataclass(frozen=True)
class Acts:
    a: tuple[str, ...]
    b: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Refused:
    argv: tuple[str, ...]
    needle: str


DRY = "dry"


def acts(base, *added, replace: dict | None = None) -> Acts:
    changed = [replace.get(w, w) for w in base] if replace else list(base)
    return Acts(tuple(base), tuple(changed + list(added)))


def refused(argv, needle) -> Refused:
    return Refused(tuple(argv), needle)


def launch_cases(base) -> dict:
    """The three launch options of a multi-process run (lm.processes): read only when the processes join, so
    each is shown to act by its refusals (a partial launch, a malformed address, an id out of range)."""
    return {"coordinator_address": [refused((*base, "--coordinator-address", "localhost", "--num-processes", "2",
                                             "--process-id", "0"), "is not HOST:PORT"),
                                    refused((*base, "--coordinator-address", "h:1"), "is missing")],
            "num_processes": [refused((*base, "--num-processes", "2"), "--coordinator-address, --process-id is missing"),
                              refused((*base, "--coordinator-address", "h:1", "--num-processes", "1", "--process-id",
                                       "1"), "outside 0..0")],
            "process_id": [refused((*base, "--process-id", "1"), "is missing"),
                           refused((*base, "--coordinator-address", "h:1", "--num-processes", "2", "--process-id",
                                    "2"), "outside 0..1")]}


# 8 PPO updates of 4 x 128 steps
TRAIN = ("train", "ppo", "--env", "CartPole-v1", "--total-steps", "4096", "--out", "{TMP}/t")
RAY = (*TRAIN, "--engine", "ray")
ASYNC = (*RAY, "--mode", "async", "--correction", "vtrace")
EVAL = ("eval", "{RUN}")
PLOT = ("plot", "{RUN}", "--out", "{TMP}/c.png")
HZ = ("horizon", NPZ)
HZ_ID = ("horizon", "DeepSea-bsuite")
SFT = ("lm", "sft", "--out", "{TMP}/s", "--steps", "10")
SFT_DATA = ("lm", "sft", "--dataset", "{SDATA}", "--model", "{GGUF}", "--out", "{TMP}/sd", "--max-steps", "2")
SFT_EPOCHS = ("lm", "sft", "--dataset", "{SDATA}", "--model", "{GGUF}", "--out", "{TMP}/sd")
RL = ("lm", "rl", "--init", "{SFT}", "--out", "{TMP}/r", "--steps", "10")
CURRICULUM = (*RL, "--curriculum")
DATASET = ("lm", "rl", "--dataset", "{DATA}", "--reward-funcs", "math:sqrt", "--out", "{TMP}/d", "--steps", "10")
SGPO = (*RL, "--sgpo")
LM_EVAL = ("lm", "eval", "--init", "{SFT}")
LM_EVAL_DATA = ("lm", "eval", "--model", "{GGUF}", "--dataset", "{DATA}", "--reward-funcs", "math:sqrt")
FETCH = ("lm", "fetch", "smollm2")
REPRO = ("repro", "h1")
OTRAIN = ("offline", "train", "ota", "--dataset", "pointmaze-medium-stitch-v0", "--out", "{TMP}/o")
OEVAL = (*OTRAIN, "--eval-episodes", "2")
MAKE = ("offline", "make-dataset", "pointmaze-medium-stitch-v0", "--out", "{TMP}/m.npz")
INSPECT = ("offline", "inspect", "{ODATA}")
DEMOS = ("lm", "demos", "--episodes", "2", "--out", "{TMP}/d.jsonl")
AGENT = ("lm", "agent", "--model", "tiny-random", "--out", "{TMP}/a", "--steps", "4", "--train-tasks", "8",
         "--eval-tasks", "2")
AGENT_ROWS = ("lm", "agent", "--model", "tiny-random", "--out", "{TMP}/a", "--steps", "4", "--tasks", "{ATASKS}")
EVOLVE = ("evolve", "drift", "--out", "{TMP}/e")
SWEEP = ("sweep", "ppo", "--env", "CartPole-v1", "--total-steps", "4096", "--grid", "learning_rate=1e-4,3e-4",
         "--out", "{TMP}/w")

CASES: dict[tuple[str, ...], dict[str, list]] = {
    ("evolve", "drift"): {
        "env": [acts(EVOLVE, "--env", "Acrobot-v1"), refused((*EVOLVE, "--env", "Pendulum-v1"), "no return range is known"),
                refused((*EVOLVE, "--env", "NoSuchEnv-v0"), "NoSuchEnv-v0")],
        "temporal": [acts(EVOLVE, "--no-temporal")],
        "lifetimes": [acts(EVOLVE, "--lifetimes", "4"), refused((*EVOLVE, "--lifetimes", "0"), "positive update counts"),
                      refused((*EVOLVE, "--lifetimes", "a,b"), "not a comma-separated list")],
        "seeds": [acts(EVOLVE, "--seeds", "3")],
        "population": [acts(EVOLVE, "--population", "16"), refused((*EVOLVE, "--population", "3"), "must be even")],
        "generations": [acts(EVOLVE, "--generations", "5"), refused((*EVOLVE, "--generations", "0"), "at least 1")],
        "sigma": [acts(EVOLVE, "--sigma", "0.1"), refused((*EVOLVE, "--sigma", "0"), "sigma")],
        "learning_rate": [acts(EVOLVE, "--learning-rate", "0.01")],
        "seed": [acts(EVOLVE, "--seed", "1")],
        "out": [acts(EVOLVE, replace={"{TMP}/e": "{TMP}/f"})],
        "resume": [refused(("evolve", "drift", "--resume", "{TMP}/none"), "config.json"),
                   refused(("evolve", "drift", "--resume", "{TMP}/none", "--seeds", "3"), "cannot be changed when resuming")],
        "dry_run": [DRY],
    },
    ("train",): {
        "algo": [acts(TRAIN, replace={"ppo": "pqn"})],
        "env": [acts(TRAIN, replace={"CartPole-v1": "Acrobot-v1"})],
        "seeds": [acts(TRAIN, "--seeds", "2")],
        "seed": [acts(TRAIN, "--seed", "3")],
        "total_steps": [acts(TRAIN, replace={"4096": "8192"}),
                        refused((*TRAIN, "--total-steps", "100"), "less than one update (512 environment steps")],
        "out": [acts(TRAIN, replace={"{TMP}/t": "{TMP}/u"})],
        "resume": [Acts(TRAIN, ("train", "--resume", "{RUN}")),
                   refused((*TRAIN, "--resume", "{RUN}"), "cannot be changed when resuming"),
                   refused(("train", "--resume", "{RUN}", "--seed", "1"), "--seed cannot be changed when resuming")],
        "chunks": [acts(TRAIN, "--chunks", "4"), refused((*TRAIN, "--chunks", "9"), "more chunks than the run's 8 updates")],
        "eval_every": [acts(TRAIN, "--eval-every", "2"), refused((*TRAIN, "--eval-every", "9"), "beyond the run's 8 chunks")],
        "eval_episodes": [acts(TRAIN, "--eval-episodes", "3")],
        "target_return": [acts((*TRAIN, "--eval-every", "2"), "--target-return", "400"),
                          refused((*TRAIN, "--target-return", "400"), "add --eval-every N")],
        "engine": [acts(TRAIN, "--engine", "ray"), refused((*TRAIN, "--engine", "host"), "drop --engine host")],
        "num_devices": [acts((*TRAIN, "--seeds", "2"), "--devices", "all"),  # acting on 2 devices: tests/engine/test_devices.py
                        refused((*TRAIN, "--devices", "2"), "the environments of one seed are not split"),
                        refused((*TRAIN, "--seeds", "3", "--devices", "2"), "--seeds 3 does not split evenly"),
                        refused((*RAY, "--seeds", "2", "--devices", "2"), "uses the ray engine; drop --devices")],
        "quiet": [acts(TRAIN, "--quiet")],
        "actors": [acts((*RAY, "--seeds", "2"), "--actors", "2"),
                   refused((*TRAIN, "--actors", "2"), "apply to --engine ray only")],
        "address": [acts(RAY, "--address", "auto"), refused((*TRAIN, "--address", "auto"), "apply to --engine ray only")],
        "mode": [acts(RAY, "--mode", "async"), refused((*TRAIN, "--mode", "async"), "apply to --engine ray only")],
        "max_staleness": [acts(ASYNC, "--max-staleness", "2"),
                          refused((*RAY, "--max-staleness", "2"), "applies to --mode async only"),
                          refused((*TRAIN, "--max-staleness", "2"), "apply to --engine ray only")],
        "actor_cpus": [acts(RAY, "--actor-cpus", "2"), refused((*TRAIN, "--actor-cpus", "2"), "apply to --engine ray only")],
        "actor_gpus": [acts(RAY, "--actor-gpus", "0.5"), refused((*TRAIN, "--actor-gpus", "0.5"), "apply to --engine ray only")],
        "wandb": ["wandb"],  # acts where the wandb extra is installed, refused (install it) where it is not
        "env_arg": [acts(TRAIN, "--env-arg", "max_steps_in_episode=200")],
        "config": [acts(TRAIN, "--config", "{TMP}/seeds3.yaml")],
        "dry_run": [DRY],
    },
    ("eval",): {
        "run_dir": [Acts(EVAL, ("eval", "{RUN2}"))],
        "episodes": [acts(EVAL, "--episodes", "3")],
        "render": [acts(EVAL, "--render", "{TMP}/e.gif")],
        "stochastic": [acts(EVAL, "--stochastic")],
        "dry_run": [DRY],
    },
    ("plot",): {
        "run_dirs": [acts(PLOT, "{RUN2}")],
        "out": [acts(PLOT, replace={"{TMP}/c.png": "{TMP}/d.png"})],
        "title": [acts(PLOT, "--title", "two runs")],
        "dry_run": [DRY],
    },
    ("horizon",): {
        "target": [acts(HZ, replace={NPZ: "DeepSea-bsuite"})],
        "horizon": [acts(HZ, "--horizon", "50")],
        "sticky": [acts(HZ, "--sticky", "0.25")],
        "json_path": [acts(HZ, "--json", "{TMP}/h.json")],
        "max_states": [acts(HZ_ID, "--max-states", "1000"), refused((*HZ, "--max-states", "1000"), "not to .npz files")],
        "tight": [acts(HZ, "--no-tight")],
        "max_k": [acts(HZ, "--max-k", "2"), refused((*HZ, "--no-tight", "--max-k", "2"), "which --no-tight skips")],
        "merge": [acts(HZ_ID, "--merge", "future"), refused((*HZ, "--merge", "future"), "not to .npz files")],
        "setting": [acts(HZ_ID, "--set", "size=10"), refused((*HZ, "--set", "size=10"), "not to .npz files"),
                    refused(("horizon", "MiniGrid-Empty-5x5-v0", "--set", "size=8"), "does not apply to MiniGrid ids")],
        "save": [acts(HZ, "--save", "{TMP}/m.npz")],
        "gorp": [acts(HZ, "--gorp")],
        "quiet": [acts((*HZ, "--json", "{TMP}/h.json"), "--quiet"), refused((*HZ, "--quiet"), "without --json or --save")],
        "dry_run": [DRY],
    },
    ("lm", "sft"): {
        "out": [acts(SFT, replace={"{TMP}/s": "{TMP}/s2"})],
        "task": [acts(SFT, "--task", "chain")],
        "horizons": [acts(SFT, "--horizons", "1-2")],
        "steps": [acts(SFT, replace={"10": "20"})],
        "batch_size": [acts(SFT, "--batch-size", "8")],
        "learning_rate": [acts(SFT, "--learning-rate", "1e-3")],
        "seq_len": [acts(SFT, "--seq-len", "64")],
        "d_model": [acts(SFT, "--d-model", "32")],
        "n_layers": [acts(SFT, "--n-layers", "1")],
        "n_heads": [acts(SFT, "--n-heads", "2")],
        "positions": [acts(SFT, "--positions", "learned")],
        "digits": [acts(SFT, "--digits", "1")],
        "operators": [acts(SFT, "--operators", "+-")],
        "const_max": [acts(SFT, "--const-max", "5")],
        "names": [acts(SFT, "--names", "random")],
        "fixed_width": [acts(SFT, "--no-fixed-width")],
        "eval_horizons": [acts(SFT, "--eval-horizons", "1-2")],
        "eval_problems": [acts(SFT, "--eval-problems", "16")],
        "checkpoint_every": [acts(SFT, "--checkpoint-every", "5")],
        "seed": [acts(SFT, "--seed", "1")],
        "resume": [Acts(SFT, ("lm", "sft", "--resume", "{SFT}")),
                   refused((*SFT, "--resume", "{SFT}"), "cannot be changed when resuming")],
        "dry_run": [DRY],
        "dataset": [acts(SFT_DATA, replace={"{SDATA}": "{SDATA2}"}),
                    refused((*SFT_DATA, "--steps", "3"), "belongs to the built-in tasks")],
        "model": [acts(SFT_DATA, replace={"{GGUF}": "{GGUF2}"}),
                  refused((*SFT, "--model", "{GGUF}"), "applies to --dataset runs only")],
        "dtype": [acts(SFT_DATA, "--dtype", "bfloat16"), refused((*SFT, "--dtype", "bfloat16"), "applies to --dataset runs only")],
        "init": [refused((*SFT_DATA, "--init", "{RL}"), "give only one of them"),
                 refused((*SFT, "--init", "{RL}"), "applies to --dataset runs only")],
        "eval_dataset": [acts(SFT_DATA, "--eval-dataset", "{SDATA2}"),
                         refused((*SFT, "--eval-dataset", "{SDATA2}"), "applies to --dataset runs only")],
        "eval_steps": [acts((*SFT_DATA, "--eval-dataset", "{SDATA2}"), "--eval-steps", "1"),
                       refused((*SFT, "--eval-steps", "1"), "applies to --dataset runs only")],
        "max_length": [acts(SFT_DATA, "--max-length", "64"), refused((*SFT, "--max-length", "64"), "applies to --dataset runs only")],
        "max_steps": [acts(SFT_DATA, replace={"2": "3"}), refused((*SFT, "--max-steps", "3"), "applies to --dataset runs only")],
        "num_train_epochs": [acts(SFT_EPOCHS, "--num-train-epochs", "1"),
                             refused((*SFT_DATA, "--num-train-epochs", "1"), "give only one of them")],
        "per_device_train_batch_size": [acts(SFT_DATA, "--per-device-train-batch-size", "2"),
                                        refused((*SFT, "--per-device-train-batch-size", "2"), "applies to --dataset runs only")],
        "lr_scheduler_type": [acts(SFT_DATA, "--lr-scheduler-type", "constant"),
                              refused((*SFT, "--lr-scheduler-type", "constant"), "applies to --dataset runs only")],
        "mesh": [acts(SFT_DATA, "--mesh", "data=1"), refused((*SFT_DATA, "--mesh", "fsdp=two"), "AXIS=SIZE"),
                 refused((*SFT, "--mesh", "data=1"), "applies to --dataset runs only")],
        **launch_cases(SFT_DATA),
    },
    ("lm", "rl"): {
        "init": [acts(RL, replace={"{SFT}": "{SFT2}"})],
        "model": [acts(DATASET, "--model", "{GGUF}"), refused((*RL, "--model", "{GGUF}"), "give only one of them")],
        "dtype": [acts(DATASET, "--dtype", "bfloat16"), refused((*RL, "--dtype", "bfloat16"), "drop --dtype")],
        "dataset": [acts(DATASET, replace={"{DATA}": "{DATA2}"}),
                    refused(("lm", "rl", "--dataset", "{DATA}", "--out", "{TMP}/d"), "--dataset needs --reward-funcs")],
        "reward_funcs": [acts(DATASET, replace={"math:sqrt": "math:fsum"}),
                         refused((*RL, "--reward-funcs", "math:sqrt"), "applies to --dataset runs only")],
        "reward_weights": [acts(DATASET, "--reward-weights", "2"),
                           refused((*RL, "--reward-weights", "2"), "applies to --dataset runs only"),
                           refused((*DATASET, "--reward-weights", "1,2"), "2 reward weights for 1")],
        "eval_dataset": [acts(DATASET, "--eval-dataset", "{DATA2}"),
                         refused((*RL, "--eval-dataset", "{DATA2}"), "applies to --dataset runs only")],
        "max_prompt_length": [acts(DATASET, "--max-prompt-length", "64"),
                              refused((*RL, "--max-prompt-length", "64"), "applies to --dataset runs only")],
        "max_completion_length": [acts(RL, "--max-completion-length", "8"), acts(DATASET, "--max-completion-length", "8")],
        "gradient_accumulation_steps": [acts(RL, "--gradient-accumulation-steps", "2"),
                                        refused((*RL, "--gradient-accumulation-steps", "2", "--steps-per-generation", "3"),
                                                "not a multiple of gradient_accumulation_steps")],
        "importance_sampling_level": [acts(RL, "--importance-sampling-level", "sequence")],
        "out": [acts(RL, replace={"{TMP}/r": "{TMP}/r2"})],
        "task": [acts(RL, "--task", "composed"),
                 refused((*DATASET, "--task", "composed"), "belongs to the built-in tasks")],
        "horizons": [acts(RL, "--horizons", "1-3")],
        "curriculum": [acts(RL, "--curriculum")],
        "steps_per_stage": [acts(CURRICULUM, "--steps-per-stage", "2"),
                            refused((*RL, "--steps-per-stage", "3"), "applies to --curriculum runs only")],
        "advance_on": [acts(CURRICULUM, "--advance-on", "train_reward", "--advance-at", "0.5"),
                       refused((*CURRICULUM, "--advance-on", "train_reward"), "needs --advance-at THRESHOLD"),
                       refused((*RL, "--advance-on", "train_reward", "--advance-at", "0.5"), "applies to --curriculum runs only"),
                       refused((*CURRICULUM, "--advance-on", "heldout_accuracy", "--advance-at", "0.5"),
                               "only periodic evaluations")],
        "advance_at": [acts((*CURRICULUM, "--advance-on", "train_reward", "--advance-at", "0.5"), replace={"0.5": "0.9"}),
                       refused((*RL, "--advance-at", "0.9"), "applies to --curriculum runs only"),
                       refused((*CURRICULUM, "--advance-at", "0.9"), "needs --advance-on")],
        "gate_window": [acts((*CURRICULUM, "--advance-on", "train_reward", "--advance-at", "0.5"), "--gate-window", "3"),
                        refused((*CURRICULUM, "--gate-window", "3"), "averages the training reward")],
        "scaler_target": [acts(RL, "--scaler-target", "0.5"),
                          refused((*CURRICULUM, "--scaler-target", "0.5"), "pass only one of them")],
        "sgpo": [acts(RL, "--sgpo")],
        "pool_size": [acts(SGPO, "--pool-size", "64"), refused((*RL, "--pool-size", "64"), "applies to --sgpo runs only")],
        "profile_samples": [acts(SGPO, "--profile-samples", "4"),
                            refused((*RL, "--profile-samples", "4"), "applies to --sgpo runs only")],
        "min_group": [acts(SGPO, "--min-group", "4"), refused((*RL, "--min-group", "4"), "applies to --sgpo runs only")],
        "max_group": [acts(SGPO, "--max-group", "8"), refused((*RL, "--max-group", "8"), "applies to --sgpo runs only")],
        "unsolved_keep": [acts(SGPO, "--unsolved-keep", "0.5"),
                          refused((*RL, "--unsolved-keep", "0.5"), "applies to --sgpo runs only")],
        "steps": [acts(RL, replace={"10": "20"})],
        "prompts_per_step": [acts(RL, "--prompts-per-step", "4")],
        "num_generations": [acts(RL, "--num-generations", "4")],
        "beta": [acts(RL, "--beta", "0.04")],
        "reference_kl": [acts(RL, "--reference-kl")],
        "mesh": [acts(RL, "--mesh", "data=1"), refused((*RL, "--mesh", "fsdp=two"), "AXIS=SIZE"),
                 acts(("lm", "rl", "--resume", "{RL}"), "--mesh", "data=1"),
                 refused(("lm", "rl", "--resume", "{RL}", "--mesh", "fsdp=two"), "AXIS=SIZE")],
        **launch_cases(RL),
        "rollout_dtype": [acts(RL, "--rollout-dtype", "bfloat16"), refused((*RL, "--rollout-dtype", "int4"), "is unknown"),
                          refused((*DATASET, "--model", "{GGUF}", "--dtype", "bfloat16", "--rollout-dtype", "bfloat16"),
                                  "drop one of them")],
        "rollout_is_cap": [acts((*RL, "--rollout-dtype", "bfloat16"), "--rollout-is-cap", "3"),
                           acts((*RL, "--actors", "2", "--mode", "async"), "--rollout-is-cap", "3"),
                           refused((*RL, "--rollout-is-cap", "3"), "--mode async runs; add one of them"),
                           refused((*RL, "--rollout-dtype", "bfloat16", "--rollout-is-cap", "0.5"), "at least 1")],
        "actors": [acts(RL, "--actors", "2"), refused((*RL, "--actors", "-1"), "actors must be at least 0")],
        "mode": [acts((*RL, "--actors", "2"), "--mode", "async"), refused((*RL, "--mode", "async"), "add --actors N"),
                 refused((*RL, "--actors", "2", "--mode", "x"), "sync or async")],
        "max_staleness": [acts((*RL, "--actors", "2", "--mode", "async"), "--max-staleness", "2"),
                          refused((*RL, "--actors", "2", "--max-staleness", "2"), "add --mode async")],
        "epsilon": [acts(RL, "--epsilon", "0.3")],
        "epsilon_high": [acts(RL, "--epsilon-high", "0.28")],
        "loss_type": [acts(RL, "--loss-type", "grpo")],
        "scale_rewards": [acts(RL, "--scale-rewards", "none")],
        "num_iterations": [acts(RL, "--num-iterations", "2")],
        "steps_per_generation": [acts(RL, "--steps-per-generation", "2")],
        "learning_rate": [acts(RL, "--learning-rate", "2e-4")],
        "lr_scheduler_type": [acts(RL, "--lr-scheduler-type", "constant"),
                              refused((*RL, "--lr-scheduler-type", "cosine"), "is unknown")],
        "temperature": [acts(RL, "--temperature", "0.7")],
        "top_p": [acts(RL, "--top-p", "0.9")],
        "dynamic_sampling": [acts(RL, "--dynamic-sampling")],
        "advantage": [acts(RL, "--advantage", "segment")],
        "reward": [acts(RL, "--reward", "all")],
        "gamma": [acts((*RL, "--reward", "discounted"), "--gamma", "0.9"),
                  refused((*RL, "--gamma", "0.9"), "add --reward discounted")],
        "eval_horizons": [acts(RL, "--eval-horizons", "1-4")],
        "eval_problems": [acts(RL, "--eval-problems", "16")],
        "eval_every": [acts(RL, "--eval-every", "5"), refused((*RL, "--eval-every", "20"), "beyond the run's 10 steps"),
                       refused((*DATASET, "--eval-every", "2"), "add --eval-dataset FILE")],
        "checkpoint_every": [acts(RL, "--checkpoint-every", "5")],
        "seed": [acts(RL, "--seed", "1")],
        "offload": [acts(DATASET, "--offload", "host"),
                    refused((*RL, "--offload", "host"), "not an `lm sft` character model"),
                    refused((*DATASET, "--offload", "disk"), "--offload disk is unknown")],
        "resume": [Acts(RL, ("lm", "rl", "--resume", "{RL}")),
                   refused((*RL, "--resume", "{RL}"), "cannot be changed when resuming")],
        "dry_run": [DRY],
    },
    ("lm", "eval"): {
        "init": [acts(LM_EVAL, replace={"{SFT}": "{SFT2}"})],
        "task": [acts(LM_EVAL, "--task", "composed")],
        "horizons": [acts(LM_EVAL, "--horizons", "1-3")],
        "problems": [acts(LM_EVAL, "--problems", "16")],
        "temperature": [acts(LM_EVAL, "--temperature", "0.7")],
        "out": [acts(LM_EVAL, "--out", "{TMP}/le")],
        "seed": [acts(LM_EVAL, "--seed", "1")],
        "model": [acts(LM_EVAL_DATA, replace={"{GGUF}": "tiny-random"}),
                  refused((*LM_EVAL, "--model", "{GGUF}"), "applies to --dataset evaluations only")],
        "dtype": [acts(LM_EVAL_DATA, "--dtype", "bfloat16")],
        "dataset": [acts(LM_EVAL_DATA, replace={"{DATA}": "{DATA2}"})],
        "reward_funcs": [acts(LM_EVAL_DATA, replace={"math:sqrt": "math:log"})],
        "reward_weights": [acts(LM_EVAL_DATA, "--reward-weights", "2")],
        "num_samples": [acts(LM_EVAL_DATA, "--temperature", "1", "--num-samples", "2"),
                        refused((*LM_EVAL_DATA, "--num-samples", "0"), "--num-samples")],
        "correct_threshold": [acts(LM_EVAL_DATA, "--correct-threshold", "0.5")],
        "limit": [acts(LM_EVAL_DATA, "--limit", "1")],
        "max_completion_length": [acts(LM_EVAL_DATA, "--max-completion-length", "32")],
        "max_prompt_length": [acts(LM_EVAL_DATA, "--max-prompt-length", "64")],
        "json_out": [acts(LM_EVAL_DATA, "--json")],
        "dry_run": [DRY],
    },
    ("lm", "fetch"): {
        "name": [refused(("lm", "fetch", "gemma"), "unknown model 'gemma'")],
        "cache": [acts(FETCH, "--cache", "{TMP}/models")],
        "dry_run": [DRY],
    },
    ("repro",): {
        "name": [acts(REPRO, replace={"h1": "sgpo"})],
        "out": [acts(REPRO, "--out", "{TMP}/h1")],
        "quick": [acts(REPRO, "--quick")],
        "dry_run": [DRY],
    },
    ("offline", "datasets"): {"dry_run": [DRY]},
    ("offline", "make-dataset"): {
        "name": [acts(MAKE, replace={"pointmaze-medium-stitch-v0": "pointmaze-large-stitch-v0"}),
                 refused(("offline", "make-dataset", "pointmaze-gaint-stitch-v0"), "did you mean")],
        "out": [acts(MAKE, replace={"{TMP}/m.npz": "{TMP}/n.npz"}), refused((*MAKE, "--out", "{TMP}/m.h5"), ".npz")],
        "size": [acts(MAKE, "--size", "400"), refused((*MAKE, "--size", "0"), "--size must be at least 1")],
        "seed": [acts(MAKE, "--seed", "1")],
        "workers": [acts(MAKE, "--workers", "1")],
        "force": [acts(MAKE, "--force")],
        "dry_run": [DRY],
    },
    ("offline", "inspect"): {
        "dataset": [acts(INSPECT, replace={"{ODATA}": "{ODATA_VAL}"}),
                    refused(("offline", "inspect", "pointmaze-gaint-stitch-v0"), "did you mean")],
        "env": [acts(INSPECT, "--env", "pointmaze-medium-navigate-v0"),
                refused((*INSPECT, "--env", "cube-single-play-v0"), "observation")],
        "dry_run": [DRY],
    },
    ("offline", "train"): {
        "agent": [acts(OTRAIN, replace={"ota": "hiql"}), refused(("offline", "train", "sac", "--dataset", "x.npz"), "sac")],
        "dataset": [acts(OTRAIN, replace={"pointmaze-medium-stitch-v0": "pointmaze-large-stitch-v0"})],
        "set_": [acts(OTRAIN, "--set", "option_length=3"), refused((*OTRAIN, "--set", "option_lenght=3"), "did you mean --option-length"),
                 acts(OTRAIN, "--option-length", "3")],
        "preset": [acts(OTRAIN, "--preset", "paper"), refused((*OTRAIN, "--preset", "gpu"), "unknown preset")],
        "seeds": [acts(OTRAIN, "--seeds", "2")],
        "seed": [acts(OTRAIN, "--seed", "1")],
        "num_updates": [acts(OTRAIN, "--num-updates", "500")],
        "chunks": [acts(OTRAIN, "--chunks", "4")],
        "eval_every": [acts(OEVAL, "--eval-every", "2"), refused((*OTRAIN, "--eval-every", "2"), "--eval-episodes")],
        "eval_episodes": [acts(OTRAIN, "--eval-episodes", "2")],
        "eval_env": [acts(OEVAL, "--eval-env", "pointmaze-medium-navigate-v0")],
        "eval_tasks": [acts(OEVAL, "--eval-tasks", "1,2"), refused((*OEVAL, "--eval-tasks", "one"), "--eval-tasks")],
        "dataset_size": [acts(OTRAIN, "--dataset-size", "1000")],
        "out": [acts(OTRAIN, replace={"{TMP}/o": "{TMP}/o2"})],
        "resume": [refused(("offline", "train", "--resume", "{RUN}"), "not written by `longhorizon offline train`"),
                   refused(("offline", "train", "--resume", "{RUN}", "--seeds", "2"), "cannot be changed when resuming")],
        "quiet": [acts(OTRAIN, "--quiet")],
        "dry_run": [DRY],
    },
    ("lm", "agent"): {
        "env": [acts(AGENT, "--env", "router"), refused((*AGENT, "--env", "mymod:Cls"), "tasks must be given"),
                refused((*AGENT_ROWS, "--env", "mymod:Cls"), "cannot import")],
        "tasks": [acts(AGENT_ROWS, replace={"{ATASKS}": "{ATASKS2}"}),
                  refused((*AGENT_ROWS, "--env-arg", "hops=2"), "drop --env-arg"),
                  refused(("lm", "agent", "--model", "tiny-random", "--out", "{TMP}/a", "--tasks", "{TMP}/none.jsonl"),
                          "does not exist")],
        "env_arg": [acts(AGENT, "--env-arg", "hops=3"), refused((*AGENT, "--env-arg", "bogus=1"), "does not fit"),
                    refused((*AGENT, "--env-arg", "hops"), "not KEY=VALUE")],
        "train_tasks": [acts(AGENT, replace={"8": "16"}), refused((*AGENT_ROWS, "--train-tasks", "4"), "drop --train-tasks")],
        "eval_tasks": [acts(AGENT, replace={"2": "3"})],
        "init": [acts(("lm", "agent", "--out", "{TMP}/a", "--init", "{RL}"), "--steps", "3"),
                 refused((*AGENT, "--init", "{RL}"), "give only one of them")],
        "model": [acts(AGENT, replace={"tiny-random": "{GGUF}"})],
        "out": [acts(AGENT, replace={"{TMP}/a": "{TMP}/a2"})],
        "steps": [acts(AGENT, replace={"4": "5"}), refused((*AGENT, "--steps", "0"), "at least 1")],
        "prompts_per_step": [acts(AGENT, "--prompts-per-step", "2")],
        "num_generations": [acts(AGENT, "--num-generations", "4"), refused((*AGENT, "--num-generations", "1"), "at least 2")],
        "beta": [acts(AGENT, "--beta", "0.04"), refused((*AGENT, "--beta", "-1"), "non-negative")],
        "epsilon": [acts(AGENT, "--epsilon", "0.3")],
        "loss_type": [acts(AGENT, "--loss-type", "grpo"), refused((*AGENT, "--loss-type", "x"), "unknown")],
        "scale_rewards": [acts(AGENT, "--scale-rewards", "none"), refused((*AGENT, "--scale-rewards", "x"), "unknown")],
        "learning_rate": [acts(AGENT, "--learning-rate", "1e-5"), refused((*AGENT, "--learning-rate", "0"), "positive")],
        "gradient_accumulation_steps": [acts(AGENT, "--gradient-accumulation-steps", "2"),
                                        refused((*AGENT, "--gradient-accumulation-steps", "0"), "positive")],
        "lr_scheduler_type": [acts(AGENT, "--lr-scheduler-type", "constant"),
                              refused((*AGENT, "--lr-scheduler-type", "cosine"), "is unknown")],
        "temperature": [acts(AGENT, "--temperature", "0.7"), refused((*AGENT, "--temperature", "0"), "positive")],
        "mesh": [acts(AGENT, "--mesh", "data=1"), refused((*AGENT, "--mesh", "fsdp=two"), "AXIS=SIZE")],
        **launch_cases(AGENT),
        "max_turns": [acts(AGENT, "--max-turns", "3"), refused((*AGENT, "--max-turns", "0"), "positive integer")],
        "max_action_tokens": [acts(AGENT, "--max-action-tokens", "32"),
                              refused((*AGENT, "--max-action-tokens", "4096"), "leaves no room")],
        "max_context_tokens": [acts(AGENT, "--max-context-tokens", "1024")],
        "context": [acts(AGENT, "--context", "workspace"), refused((*AGENT, "--context", "x"), "unknown")],
        "tool_format": [acts(AGENT, "--tool-format", "tags"), refused((*AGENT, "--tool-format", "x"), "unknown")],
        "credit": [acts(AGENT, "--credit", "turn"), refused((*AGENT, "--credit", "x"), "unknown")],
        "gamma": [acts((*AGENT, "--credit", "eapo"), "--gamma", "0.9"), refused((*AGENT, "--gamma", "0.9"), "drop --gamma")],
        "milestone_bonus": [acts(AGENT, "--milestone-bonus", "0.1")],
        "reward_weights": [acts(AGENT, "--reward-weights", "outcome=1"),
                           refused((*AGENT, "--reward-weights", "outcome"), "NAME=WEIGHT")],
        "latency": [acts(AGENT, "--latency", "0.1"), refused((*AGENT, "--latency", "-1"), "0 or positive")],
        "actors": [acts(AGENT, "--actors", "2")],
        "mode": [acts((*AGENT, "--actors", "2"), "--mode", "async"), refused((*AGENT, "--mode", "async"), "add --actors N"),
                 refused((*AGENT, "--actors", "2", "--mode", "x"), "sync or async")],
        "max_staleness": [acts((*AGENT, "--actors", "2", "--mode", "async"), "--max-staleness", "2"),
                          refused((*AGENT, "--actors", "2", "--max-staleness", "2"), "add --mode async")],
        "eval_every": [acts(AGENT, "--eval-every", "2"), refused((*AGENT, "--eval-every", "9"), "beyond the run's")],
        "checkpoint_every": [acts(AGENT, "--checkpoint-every", "2")],
        "seed": [acts(AGENT, "--seed", "1")],
        "resume": [Acts(AGENT, ("lm", "agent", "--resume", "{AGENT}")),
                   refused(("lm", "agent", "--resume", "{AGENT}", "--seed", "1"), "cannot be changed when resuming")],
        "dry_run": [DRY],
    },
    ("sweep",): {
        "algo": [acts(SWEEP, replace={"ppo": "pqn"})],
        "env": [acts(SWEEP, replace={"CartPole-v1": "Acrobot-v1"})],
        "grid": [acts(SWEEP, "--grid", "num_envs=4,8")],
        "seeds": [acts(SWEEP, "--seeds", "2")],
        "seed": [acts(SWEEP, "--seed", "3")],
        "total_steps": [acts(SWEEP, replace={"4096": "8192"})],
        "out": [acts(SWEEP, replace={"{TMP}/w": "{TMP}/w2"})],
        "chunks": [acts(SWEEP, "--chunks", "4"), refused((*SWEEP, "--chunks", "9"), "more chunks than")],
        "eval_every": [acts(SWEEP, "--eval-every", "2")],
        "eval_episodes": [acts(SWEEP, "--eval-episodes", "3")],
        "quiet": [acts(SWEEP, "--quiet")],
        "env_arg": [acts(SWEEP, "--env-arg", "max_steps_in_episode=200")],
        "dry_run": [DRY],
    },
}
CASES[("lm", "demos")] = {
    "env": [acts(DEMOS, "--env", "router"), refused((*DEMOS, "--env", "x.py:Cls"), "no scripted expert")],
    "env_arg": [acts(DEMOS, "--env-arg", "hops=3"), refused((*DEMOS, "--env-arg", "bogus=1"), "does not fit")],
    "episodes": [acts(DEMOS, "--episodes", "3"), refused((*DEMOS, "--episodes", "0"), "at least 1")],
    "tool_format": [acts(DEMOS, "--tool-format", "tags"), refused((*DEMOS, "--tool-format", "xml"), "is unknown")],
    "seed": [acts(DEMOS, "--seed", "1")],
    "out": [acts(DEMOS, replace={"{TMP}/d.jsonl": "{TMP}/e.jsonl"}), refused((*DEMOS, "--out", "{TMP}/d.json"), ".jsonl")],
    "dry_run": [DRY],
}
# Commands with no options to walk.
NO_OPTIONS = {("envs",)}
# A case for `--dry-run` needs a command that takes it.
DRY_ARGV = {("evolve", "drift"): EVOLVE, ("train",): TRAIN, ("eval",): EVAL, ("plot",): PLOT, ("horizon",): HZ, ("lm", "sft"): SFT, ("lm", "rl"): RL,
            ("lm", "eval"): LM_EVAL, ("lm", "fetch"): FETCH, ("repro",): REPRO, ("sweep",): SWEEP,
            ("offline", "datasets"): ("offline", "datasets"), ("offline", "make-dataset"): MAKE,
            ("offline", "inspect"): INSPECT, ("offline", "train"): OTRAIN, ("lm", "agent"): AGENT,
            ("lm", "demos"): DEMOS}


def cli_parameters() -> dict[tuple[str, ...], set[str]]:
    """Every command path and the names of its parameters, from click's metadata."""

    found: dict[tuple[str, ...], set[str]] = {}

    def walk(command, path):
        if hasattr(command, "commands"):  # a group (typer vendors its own click)
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
        else:
            found[path] = {p.name for p in command.params}

    walk(typer.main.get_command(app), ())
    return found


def test_every_option_has_a_case():
    params = cli_parameters()
    assert not set(params) - set(CASES) - NO_OPTIONS, "a command was added: give its options cases here"
    for path, names in params.items():
        if path in NO_OPTIONS:
            assert not names, f"`{' '.join(path)}` gained options; give them cases"
            continue
        missing = sorted(names - set(CASES[path]))
        stale = sorted(set(CASES[path]) - names)
        assert not missing, f"`longhorizon {' '.join(path)}` options without a case: {missing}"
        assert not stale, f"cases for options `longhorizon {' '.join(path)}` no longer has: {stale}"
        assert all(CASES[path][name] for name in names)


def _materialise(folder: Path, plan: dict, lm: bool) -> None:
    """A results folder as the run would leave it: config.json (the dry run's plan), a checkpoint index, a row."""
    for key in ("out", "quiet", "wandb"):
        plan.pop(key, None)
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(plan))
    if plan.get("command") in ("lm rl", "lm agent"):
        (folder / "checkpoints" / "1").mkdir()  # an orbax step folder (lm.run_checkpoint)
    else:
        (folder / "checkpoints" / "latest.json").write_text(json.dumps({"chunk": 1, "step": 1, "file": "chunk_000001.msgpack"}))
    row = {"step": 1, "reward": 0.0} if lm else {"chunk": 1, "env_steps": 512, "episode_return_mean": 20.0,
                                                  "episode_return_min": 10.0, "episode_return_max": 30.0}
    (folder / "metrics.jsonl").write_text(json.dumps(row) + "\n")


def _dry(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([*argv, "--dry-run"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def places(tmp_path_factory):
    """The fixture folders, laid out from the dry runs of the commands that would write them."""
    root = tmp_path_factory.mktemp("options")
    folders = {name: root / name.lower() for name in ("RUN", "RUN2", "SFT", "SFT2", "RL", "AGENT")}
    makers = {"RUN": ["train", "ppo", "--env", "CartPole-v1", "--total-steps", "4096"],
              "RUN2": ["train", "ppo", "--env", "CartPole-v1", "--total-steps", "4096", "--seeds", "2"],
              "SFT": ["lm", "sft", "--steps", "10"], "SFT2": ["lm", "sft", "--steps", "10", "--d-model", "32"],
              "RL": ["lm", "rl", "--init", str(folders["SFT"]), "--steps", "10"],
              "AGENT": ["lm", "agent", "--model", "tiny-random", "--steps", "4", "--train-tasks", "8", "--eval-tasks", "2"]}
    import contextlib
    import io

    for name, argv in makers.items():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main([*argv, "--out", str(folders[name]), "--dry-run"]) == 0
        _materialise(folders[name], json.loads(out.getvalue()), lm=argv[0] == "lm")
    from tiny_gguf import write_gguf  # tests/tiny_gguf.py: a tiny pretrained model for --model

    files = {"GGUF": write_gguf(root / "tiny.gguf"), "GGUF2": write_gguf(root / "tiny2.gguf"), "DATA": root / "d.jsonl",
             "DATA2": root / "d2.jsonl", "SDATA": root / "s.jsonl", "SDATA2": root / "s2.jsonl"}
    files["SDATA"].write_text("".join(f'{{"prompt": "{i}+1=", "completion": " {i + 1}"}}\n' for i in range(20)))
    files["SDATA2"].write_text('{"messages": [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "5"}]}\n')
    files["DATA"].write_text('{"prompt": "2+2=", "answer": "4"}\n')
    files["DATA2"].write_text('{"prompt": [{"role": "user", "content": "2+3?"}], "answer": "5"}\n')
    files["ATASKS"], files["ATASKS2"] = root / "a.jsonl", root / "a2.jsonl"  # agent task rows (search env columns)
    files["ATASKS"].write_text('{"prompt": "Who?", "answer": "x"}\n{"prompt": "Where?", "answer": "y"}\n')
    files["ATASKS2"].write_text('{"prompt": "When?", "answer": "z"}\n{"prompt": "Why?", "answer": "w"}\n')
    from longhorizon.offline.datasets import make_dataset, val_path  # a tiny OGBench-format file for `offline inspect`

    files["ODATA"] = make_dataset("pointmaze-medium-stitch-v0", root / "pm.npz", size=400, workers=1, progress=False)
    files["ODATA_VAL"] = val_path(files["ODATA"])
    return {**{k: str(v) for k, v in {**folders, **files}.items()}, "TMP": str(root / "scratch")}


@pytest.fixture()
def scratch(places):
    """An empty scratch folder per case (dry runs must leave it empty)."""
    import shutil

    folder = Path(places["TMP"])
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    (folder / "seeds3.yaml").write_text("seeds: 3\n")
    return folder


def _fill(argv, places) -> list[str]:
    return [word.format(**places) for word in argv]


REGISTERED = set(cli_parameters())
ALL = [(path, name, case) for path, options in CASES.items() for name, cases in options.items() for case in cases]


@pytest.mark.parametrize("path, name, case", ALL,
                         ids=[f"{' '.join(p)}:{n}:{i}" for i, (p, n, _) in enumerate(ALL)])
def test_option_acts_or_is_refused(path, name, case, places, scratch, capsys):
    if path not in REGISTERED:
        pytest.skip(f"`longhorizon {' '.join(path)}` is not part of this installation")
    before = sorted(p.name for p in scratch.iterdir())
    if isinstance(case, Acts):
        code_a, out_a, err_a = _dry(_fill(case.a, places), capsys)
        code_b, out_b, err_b = _dry(_fill(case.b, places), capsys)
        assert code_a == 0 and code_b == 0, (err_a, err_b)
        assert json.loads(out_a) != json.loads(out_b), f"--{name.replace('_', '-')} changed nothing in the dry run"
    elif isinstance(case, Refused):
        code, _, err = _dry(_fill(case.argv, places), capsys)
        assert code == 2 and case.needle in err, err
        assert err.strip().count("\n") == 0 and "Traceback" not in err
    elif case == DRY:
        code, out, err = _dry(_fill(DRY_ARGV[path], places), capsys)
        assert code == 0, err
        assert isinstance(json.loads(out), dict)
    elif case == "wandb":
        code, out, err = _dry(_fill((*TRAIN, "--wandb", "my-project"), places), capsys)
        assert (code == 0 and json.loads(out)["wandb"] == "my-project") or (code == 2 and "wandb" in err), err
    else:
        raise AssertionError(f"unknown case {case!r}")
    assert sorted(p.name for p in scratch.iterdir()) == before, "a dry run wrote into the scratch folder"
