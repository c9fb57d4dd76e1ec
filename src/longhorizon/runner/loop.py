"""The one training loop: a :class:`Trainable` run chunk by chunk into a results folder.

Every family's training command goes through :func:`train_loop`, which alone owns the results folder
(:mod:`longhorizon.runner.results`): the lock (one writer), ``config.json``,
``metrics.jsonl`` with its TensorBoard and W&B views, a checksummed checkpoint after every chunk,
Ctrl-C (the chunk in flight finishes and is saved), exact resume from the newest intact checkpoint,
the stop on NaN/Inf (the last good checkpoint is kept), the evaluation cadence, ``summary.json`` and
``curve.png``. A family supplies what differs as a :class:`Trainable`: how to build, restore and
advance its state by one chunk, what a chunk's metrics row holds, how to evaluate, and the fields
its summary adds. The loop adds the keys every family shares (``docs/logging.md``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from longhorizon.errors import TrainingDiverged, UsageError
from longhorizon.runner import checkpoint
from longhorizon.runner.compiled_programs import release_compiled_programs_if_near_limit
from longhorizon.runner.interrupts import Interrupted, StopRequest
from longhorizon.runner.lock import FolderLock, refuse_if_held
from longhorizon.runner.loggers import MetricsLoggers
from longhorizon.runner.plots import plot_runs
from longhorizon.runner.progress import ChunkProgress
from longhorizon.runner.results import ResultsDir, read_json

# what a checkpoint records besides the state, carried over a resume so totals cover the whole run
TIMINGS = ("wall_seconds", "train_seconds", "compile_seconds")


class Trainable:
    """One run as the loop drives it. A family subclasses it and sets the attributes and the methods that
    raise ``NotImplementedError``; the others have defaults that do nothing (or the common thing).

    By default the state is a pytree that the loop checkpoints with :mod:`longhorizon.runner.checkpoint`
    (msgpack plus a checksum) and restores into the template :meth:`init_state` builds, so a resumed run
    continues bit for bit; a family with another checkpoint format (the LM runs' orbax steps) overrides
    the three checkpoint methods.
    """

    out: Path  # the results folder
    num_chunks: int  # chunks the whole run has
    resume_command: str  # the command that continues this run (named by the Ctrl-C message)
    step_key: str = "env_steps"  # the metrics rows' step axis (TensorBoard's global step)
    eval_every: int = 0  # chunks between evaluations; the last chunk is always evaluated
    checkpoint_every: int = 1  # chunks between checkpoints; the last chunk and a Ctrl-C always save
    quiet: bool = False
    wandb: str | None = None  # a Weights & Biases project that also receives the rows
    progress_description: str = "training"
    progress_headline: tuple[str, str] = ("return", "episode_return_mean")  # label, row key
    plot_title: str = ""
    divergence_advice: str = "lower --learning-rate and start again"

    def resolved_config(self) -> dict[str, Any]:
        """``config.json``: everything needed to rebuild the run."""
        raise NotImplementedError

    def init_state(self) -> Any:
        """The initial training state (also the template a checkpoint is restored into)."""
        raise NotImplementedError

    def has_checkpoint(self, directory: Path) -> bool:
        """Whether ``directory`` (the folder's ``checkpoints/``) holds a checkpoint."""
        return checkpoint.latest_meta(directory) is not None

    def save_checkpoint(self, directory: Path, chunk: int, state: Any, meta: dict[str, Any]) -> None:
        """Save ``state`` after ``chunk`` chunks with ``meta`` (JSON: the step and the timings)."""
        checkpoint.save(directory, chunk, state, meta)

    def restore_checkpoint(self, directory: Path, template: Any) -> tuple[Any, dict[str, Any]]:
        """``(state, meta)`` of the newest intact checkpoint; ``meta["chunk"]`` is its chunk."""
        return checkpoint.restore(directory, template)

    def begin(self, state: Any, stop: StopRequest) -> list[dict[str, Any]]:
        """Work a fresh run does before its first chunk, once the folder is settled (a sampler's preparation
        pass, an evaluation of the starting policy); returns metrics rows to log at step 0. ``stop.requested``
        says whether Ctrl-C was pressed (then skip what is not needed to resume)."""
        return []

    def compile(self, state: Any) -> float:
        """Compile the chunk program ahead of the first chunk; returns the seconds it took."""
        return 0.0

    def run_chunk(self, state: Any, chunk: int) -> tuple[Any, dict[str, Any]]:
        """Run chunk ``chunk`` (0-based): the new state and the chunk's raw metrics, whose ``finite``
        (one flag per seed) says whether the losses and parameters stayed finite."""
        raise NotImplementedError

    def metrics_row(self, metrics: dict[str, Any], chunk: int, elapsed: float) -> dict[str, Any]:
        """The family's part of the metrics row of chunk ``chunk`` (1-based, just finished) that ran in
        ``elapsed`` seconds; the loop adds ``chunk``, the step key, ``wall_seconds`` and the evaluation."""
        raise NotImplementedError

    def step_after(self, chunks_done: int) -> int:
        """The step axis (``step_key``) once ``chunks_done`` chunks have run."""
        raise NotImplementedError

    def evaluate(self, state: Any, chunk: int) -> list[float] | None:
        """One figure per seed (return, success rate), or None when the run does not evaluate."""
        return None

    def agree_to_stop(self, requested: bool) -> bool:
        """Whether the run stops here, given whether this process was asked to (Ctrl-C): a run of several
        processes stops only where all of them do, so each process saves the same chunk."""
        return requested

    def target_reached(self, evaluation: list[float]) -> bool:
        """Whether the run may stop early after this evaluation."""
        return False

    def saved(self, state: Any, chunk: int) -> None:
        """Called after chunk ``chunk``'s checkpoint is written: for artefacts a user reads during the run."""

    def summary_fields(self, state: Any, chunks_done: int, final_eval: list[float] | None,
                       train_seconds: float) -> dict[str, Any]:
        """The family's fields of ``summary.json`` (the loop adds the shared ones)."""
        return {}

    def plot(self, results: ResultsDir) -> None:
        """``curve.png`` from ``metrics.jsonl`` (called only when it holds a row)."""
        plot_runs([results.root], results.curve_path, title=self.plot_title)

    def close(self) -> None:
        """Release workers, environments or files the run holds."""


def check_folder(out: Path, resume: bool, saved: bool | None = None) -> None:
    """``out`` as a run needs it: a new run may not reuse a folder that holds a run, a resumed one needs a checkpoint.

    ``saved`` says whether ``out/checkpoints`` holds one, for runs whose checkpoints are not this
    runner's msgpack files (the LM loop's orbax steps); by default the msgpack index is read.
    """
    refuse_if_held(out)  # a live writer is named first, whatever else the folder holds
    if saved is None:
        saved = checkpoint.latest_meta(out / "checkpoints") is not None
    if resume and not saved:
        raise UsageError(f"no checkpoint in {out / 'checkpoints'}; the run saved none before it stopped, "
                         "so start it again without --resume.")
    if not resume and ((out / "metrics.jsonl").exists() or saved):
        raise UsageError(f"{out} already holds a run; pass --resume {out} to continue it or choose another --out.")


def completed_summary(out: Path) -> dict[str, Any] | None:
    """The summary of a run in ``out`` that has finished (completed or reached its target), else None."""
    path = Path(out) / "summary.json"
    if not path.exists():
        return None
    try:
        summary = read_json(path)
    except ValueError:
        return None
    return summary if summary.get("status") in ("completed", "target_reached") else None


def train_loop(build: Callable[[], Trainable], resume: bool = False,
               max_chunks: int | None = None) -> tuple[dict[str, Any], Any]:
    """Build the trainable and run it to completion (or ``max_chunks`` more chunks); ``(summary, state)``.

    ``build`` runs under the Ctrl-C guard, so an interrupt while a family starts workers or loads data
    is handled like one while compiling. Ctrl-C lets start-up and the chunk in flight finish, saves,
    and raises :class:`~longhorizon.runner.interrupts.Interrupted` saying what was saved; a second one
    drops the chunk in flight. A resumed run that already finished is returned unchanged (state None).
    """
    release_compiled_programs_if_near_limit()  # a process that trains many runs keeps their programs mapped
    with StopRequest("chunk") as stop:
        trainable = build()
        lock = FolderLock(trainable.out)  # one writer per results folder; released however this process ends
        loop = _Loop(trainable, stop)
        try:
            lock.acquire()
            return loop.run(resume, max_chunks)
        finally:
            try:  # everything that may still write to the folder closes before its lock is released
                if loop.loggers is not None:
                    loop.loggers.close()
                trainable.close()
            finally:
                lock.release()


class _Loop:
    """The state of one session of :func:`train_loop` (timings, the last checkpoint, the loggers)."""

    def __init__(self, trainable: Trainable, stop: StopRequest):
        self.t, self.stop = trainable, stop
        self.loggers: MetricsLoggers | None = None
        self.start_wall = time.perf_counter()
        self.prior = dict.fromkeys(TIMINGS, 0.0)
        self.compile_seconds = self.train_seconds = 0.0

    def wall(self) -> float:
        return self.prior["wall_seconds"] + time.perf_counter() - self.start_wall

    def run(self, resume: bool, max_chunks: int | None) -> tuple[dict[str, Any], Any]:
        t = self.t
        check_folder(t.out, resume, saved=t.has_checkpoint(t.out / "checkpoints"))
        if resume and (done := completed_summary(t.out)) is not None:
            print(f"{t.out} holds a finished run (status {done['status']}); nothing to resume, nothing changed.",
                  file=sys.stderr)
            return done, None
        results = self.results = ResultsDir(t.out)
        state = t.init_state()  # bad input (a malformed dataset) fails here, before config.json is written
        first_chunk, resume_step = 0, None
        if resume:
            state, meta = t.restore_checkpoint(results.checkpoints, state)
            first_chunk = int(meta["chunk"])
            resume_step = t.step_after(first_chunk)
            self.prior = {k: float(meta.get(k, 0.0)) for k in TIMINGS}
            results.truncate_metrics(resume_step, key=t.step_key)
        else:
            results.write_config(t.resolved_config())
        self.loggers = MetricsLoggers(results.root, read_json(results.config_path), wandb_project=t.wandb,
                                      resume_step=resume_step, step_key=t.step_key)
        started = [] if resume else t.begin(state, self.stop)
        for row in started:
            self.loggers.log(results.append_metrics({"chunk": 0, t.step_key: t.step_after(0), **row,
                                                     "wall_seconds": self.wall()}))
        self.compile_seconds = t.compile(state) if first_chunk < t.num_chunks else 0.0
        resume_hint = f"continue with `{t.resume_command}`"
        stopping = t.agree_to_stop(self.stop.requested)
        if stopping and started:  # the rows logged at step 0 are kept with a checkpoint to resume
            self.save(0, state)
            raise Interrupted(f"interrupted before the first chunk finished: chunk 0 of {t.num_chunks} is saved in "
                              f"{results.checkpoints}; {resume_hint}.", saved=0)
        if stopping:  # Ctrl-C while starting: start-up was let finish, no chunk has run
            raise Interrupted(f"interrupted before training resumed: {results.checkpoints} still holds chunk "
                              f"{first_chunk}; {resume_hint}." if resume else
                              f"interrupted before the first chunk finished: nothing was saved; run the same command "
                              f"again to start {t.out} afresh.", saved=first_chunk if resume else None)
        self.train_seconds = self.prior["train_seconds"]
        status, chunk, last_eval = "completed", first_chunk, None
        saved = first_chunk if resume else None
        stop_at = t.num_chunks if max_chunks is None else min(t.num_chunks, first_chunk + max_chunks)
        progress = ChunkProgress(total_steps=t.step_after(t.num_chunks), description=t.progress_description,
                                 quiet=t.quiet, completed=t.step_after(first_chunk), headline=t.progress_headline)
        try:
            with progress:
                while chunk < stop_at:
                    t0 = time.perf_counter()
                    new_state, metrics = t.run_chunk(state, chunk)
                    elapsed = time.perf_counter() - t0
                    if not np.all(metrics["finite"]):
                        bad = [i for i, ok in enumerate(np.atleast_1d(metrics["finite"])) if not ok]
                        kept = f"the last good checkpoint (chunk {saved}) is kept in {results.checkpoints}" \
                            if saved is not None else "no checkpoint was saved before it"
                        raise TrainingDiverged(f"NaN or Inf in the loss or parameters during chunk {chunk + 1} "
                                               f"(seed index {bad}); {kept}; {t.divergence_advice}.")
                    state, chunk = new_state, chunk + 1
                    self.train_seconds += elapsed
                    row = {"chunk": chunk, t.step_key: t.step_after(chunk), **t.metrics_row(metrics, chunk, elapsed),
                           "wall_seconds": self.wall()}
                    # The last chunk is always evaluated: that evaluation is the run's final one, the same
                    # number in metrics.jsonl, TensorBoard, the curve and summary.json.
                    if (t.eval_every and chunk % t.eval_every == 0) or chunk == t.num_chunks:
                        evaluation = t.evaluate(state, chunk)
                        if evaluation is not None:
                            last_eval = evaluation
                            row.update(eval_return_mean=float(np.mean(evaluation)), eval_return_per_seed=evaluation)
                    self.loggers.log(results.append_metrics(row))
                    # every process of a multi-process run takes these two decisions alike (agree_to_stop)
                    if t.agree_to_stop(self.stop.requested) or chunk % t.checkpoint_every == 0 or chunk == t.num_chunks:
                        self.save(chunk, state)
                        saved = chunk
                    progress.update(t.step_after(chunk), row)
                    if last_eval is not None and t.target_reached(last_eval):
                        status = "target_reached"
                        break
                    if t.agree_to_stop(self.stop.requested):
                        status = "interrupted"
                        break
            if chunk < t.num_chunks and status == "completed":
                status = "stopped"
            if status == "stopped" and saved != chunk:  # a stop between checkpoints keeps the chunks it ran
                self.save(chunk, state)
                saved = chunk
        except KeyboardInterrupt:  # a second Ctrl-C: the chunk in flight is dropped, the saved ones stay
            status = "interrupted"
        except TrainingDiverged:
            self.finish(state, chunk, "diverged", None)
            raise

        final_eval = last_eval if status in ("completed", "target_reached") else None
        if status == "completed" and final_eval is None:  # resumed after the last chunk's save, before its summary
            final_eval = t.evaluate(state, chunk)
        summary = self.finish(state, chunk, status, final_eval)
        if status == "interrupted":
            if saved is None:
                raise Interrupted(f"interrupted before the first chunk finished: nothing was saved; run the same "
                                  f"command again to start {t.out} afresh.", summary)
            raise Interrupted(f"interrupted: chunk {saved} of {t.num_chunks} is saved in {results.checkpoints}; "
                              f"{resume_hint}.", summary, saved=saved)
        return summary, state

    def save(self, chunk: int, state: Any) -> None:
        self.t.save_checkpoint(self.results.checkpoints, chunk, state, {
            self.t.step_key: self.t.step_after(chunk), "wall_seconds": self.wall(), "train_seconds": self.train_seconds,
            "compile_seconds": self.prior["compile_seconds"] + self.compile_seconds})
        self.t.saved(state, chunk)

    def finish(self, state: Any, chunk: int, status: str, final_eval: list[float] | None) -> dict[str, Any]:
        t, results = self.t, self.results
        summary = {"status": status, "chunks_done": chunk,
                   **t.summary_fields(state, chunk, final_eval, self.train_seconds),
                   "final_eval_return": final_eval,
                   "final_eval_return_mean": None if final_eval is None else float(np.mean(final_eval)),
                   "compile_seconds": self.prior["compile_seconds"] + self.compile_seconds,
                   "train_seconds": self.train_seconds, "wall_seconds": self.wall(), "results": str(results.root)}
        results.write_summary(summary)
        if results.read_metrics():
            t.plot(results)
        return summary
