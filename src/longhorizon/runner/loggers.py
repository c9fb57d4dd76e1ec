"""TensorBoard and Weights & Biases views of ``metrics.jsonl``.

Every row the runner appends to ``metrics.jsonl`` is also written as scalars at global step =
``env_steps`` (environment steps per seed), so one TensorBoard over ``runs/`` compares runs of any
algorithm on one axis. Tags follow CleanRL, whose names RL users already know; each quantity has one
key and so one tag (``docs/logging.md`` has the full table, and the test suite checks CleanRL's PPO
and DQN tags against runs of ours):

==========================  =====================================================================
row key                     tag
==========================  =====================================================================
episode_return_mean         ``charts/episodic_return``
episode_return_min / _max   ``charts/episodic_return_min`` / ``charts/episodic_return_max``
episode_return_per_seed     ``charts/episodic_return_seed{i}`` (seed index ``i``)
episode_length_mean         ``charts/episodic_length``
eval_return_mean            ``charts/eval_return``
eval_return_per_seed        ``charts/eval_return_seed{i}``
steps_per_second            ``charts/SPS``
episodes                    ``charts/episodes`` (episodes that ended in the chunk, all seeds)
chunk, updates              ``charts/chunk``, ``charts/updates`` (updates run in the chunk)
wall_seconds                ``charts/wall_seconds``
updates_per_second          ``charts/updates_per_second`` (offline: updates of all seeds per second)
mean_fitness                ``charts/mean_fitness`` (``evolve drift``: the ES population's mean fitness)
epsilon, learning_rate,     ``charts/<key>`` (schedules, not losses)
learning
any other key               ``losses/<key>``: what the algorithm's ``learn`` reports, e.g. PPO's
                            ``losses/policy_loss``, ``losses/value_loss``, ``losses/entropy``,
                            ``losses/old_approx_kl``, ``losses/approx_kl``, ``losses/clipfrac``,
                            ``losses/explained_variance``, ``losses/loss``; DQN's and PQN's
                            ``losses/td_loss``, ``losses/q_values`` (PQN: ``losses/target_mean``)
==========================  =====================================================================

``env_steps`` is the step axis and ``time`` the event's wall time; neither is a tag (the LM loop,
:func:`longhorizon.lm.run.run_rl`, logs on its RL ``step`` instead: ``step_key="step"``). Empty values
(``None``: no episode ended yet, a seed without an episode) are skipped, never written as 0.

The TensorBoard events live in ``RUN/tensorboard/``, beside ``metrics.jsonl``. A fresh run also writes
its resolved config as text (tag ``config``) and its hyperparameters for the HParams dashboard.
Every session's event file opens with a session-start marker (tensorboardX's ``purge_step``): at
step 0 for a new run, at ``T + 1`` when resuming from the checkpoint at step ``T``. TensorBoard reads
the later marker as a restart and drops every point the interrupted session wrote after ``T``, just
as ``metrics.jsonl`` drops those rows, so no step shows twice.

``--wandb PROJECT`` sends the same tags and config to Weights & Biases (extra ``longhorizon[wandb]``;
``WANDB_MODE=offline`` writes ``RUN/wandb/`` for a later ``wandb sync``).
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path
from typing import Any

from longhorizon.errors import UsageError

RUNNER_TAGS = {
    "episode_return_mean": "charts/episodic_return",
    "episode_return_min": "charts/episodic_return_min",
    "episode_return_max": "charts/episodic_return_max",
    "episode_return_per_seed": "charts/episodic_return_seed",
    "episode_length_mean": "charts/episodic_length",
    "eval_return_mean": "charts/eval_return",
    "eval_return_per_seed": "charts/eval_return_seed",
    "steps_per_second": "charts/SPS",
    "episodes": "charts/episodes",
    "chunk": "charts/chunk",
    "wall_seconds": "charts/wall_seconds",
    "epsilon": "charts/epsilon",
    "learning_rate": "charts/learning_rate",
    "learning": "charts/learning",
    "updates": "charts/updates",
    "updates_per_second": "charts/updates_per_second",
    "mean_fitness": "charts/mean_fitness",
}
NOT_TAGGED = ("env_steps", "time")  # the step axis and the event's wall time


def tag_for(key: str) -> str:
    """The TensorBoard tag of a metrics-row key (see the module docstring's table)."""
    return RUNNER_TAGS.get(key, f"losses/{key}")


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """Tag -> value for every numeric entry of a metrics row; per-seed lists become one tag per seed."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if key in NOT_TAGGED or isinstance(value, (str, bool)):
            continue
        if isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                if _is_number(v):
                    out[f"{tag_for(key)}{i}"] = float(v)
        elif _is_number(value):
            out[tag_for(key)] = float(value)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def hparams(config: dict[str, Any]) -> dict[str, str | float | bool]:
    """The run's settings as the flat name -> scalar/str mapping the HParams dashboard accepts."""
    flat: dict[str, str | float | bool] = {k: config[k] for k in ("algo", "env", "engine", "seeds") if k in config}
    for key, value in config.get("config", {}).items():
        if value is None:
            continue
        flat[key] = value if isinstance(value, (str, bool, int, float)) else json.dumps(value)
    return flat


class TensorBoardLogger:
    """Writes metrics rows as TensorBoard scalars in ``root/tensorboard`` (one event file per session)."""

    def __init__(self, root: str | Path, config: dict[str, Any], resume_step: int | None = None,
                 step_key: str = "env_steps"):
        from tensorboardX import SummaryWriter
        from tensorboardX.summary import hparams as hparams_summaries

        self.logdir = Path(root) / "tensorboard"
        self.step_key = step_key
        # Each session opens with a session-start marker at purge_step; at T + 1 TensorBoard hides what an
        # interrupted session logged after the checkpoint. A fresh run's marker (step 0) hides nothing, but
        # TensorBoard's server takes a folder's first marker as the start, not a restart, so it must exist.
        purge_step = 0 if resume_step is None else resume_step + 1
        self.writer = SummaryWriter(logdir=str(self.logdir), purge_step=purge_step)
        if resume_step is None:  # a resumed run already wrote these at step 0
            text = json.dumps(config, indent=2, default=str)
            self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()), 0)  # markdown code
            # Session start info only: TensorBoard builds the experiment from every run's sessions.
            _, session_start, _ = hparams_summaries(hparams(config), {})
            self.writer.file_writer.add_summary(session_start)
            self.writer.flush()

    def log(self, row: dict[str, Any]) -> None:
        step, walltime = int(row[self.step_key]), row.get("time")
        for tag, value in scalars({k: v for k, v in row.items() if k != self.step_key}).items():
            self.writer.add_scalar(tag, value, step, walltime=walltime)
        self.writer.flush()  # one row per chunk: cheap, and TensorBoard shows it at once

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """Logs the same tags to Weights & Biases; resuming continues the same W&B run (its id is kept in the folder)."""

    def __init__(self, project: str, root: str | Path, config: dict[str, Any], resume: bool, step_key: str = "env_steps"):
        wandb = require_wandb()
        self.step_key = step_key
        root = Path(root)
        id_path = root / "wandb-run-id"
        if resume and id_path.exists():
            run_id = id_path.read_text().strip()
        else:
            run_id = uuid.uuid4().hex[:12]
            id_path.write_text(run_id + "\n")
        self.run = wandb.init(project=project, dir=str(root), name=root.name, id=run_id, resume="allow", config=config)

    def log(self, row: dict[str, Any]) -> None:
        # W&B steps only go forward: after a resume it ignores steps it already holds.
        self.run.log(scalars({k: v for k, v in row.items() if k != self.step_key}), step=int(row[self.step_key]))

    def close(self) -> None:
        self.run.finish()


def require_wandb():
    """Import wandb or refuse ``--wandb`` with the install command."""
    try:
        import wandb
    except ImportError:
        raise UsageError("--wandb needs Weights & Biases, which is not installed; "
                         "run `pip install 'longhorizon[wandb]'` or drop --wandb.") from None
    return wandb


class MetricsLoggers:
    """Every live view of a run's metrics: TensorBoard always, W&B when a project is named."""

    def __init__(self, root: str | Path, config: dict[str, Any], resume_step: int | None = None,
                 wandb_project: str | None = None, step_key: str = "env_steps"):
        self.loggers: list[Any] = [TensorBoardLogger(root, config, resume_step, step_key)]
        if wandb_project:
            self.loggers.append(WandbLogger(wandb_project, root, config, resume=resume_step is not None,
                                            step_key=step_key))

    def log(self, row: dict[str, Any]) -> None:
        for logger in self.loggers:
            logger.log(row)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()
