"""The one progress display: a rich progress bar on a terminal, one plain line per chunk otherwise."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class ChunkProgress:
    """``headline``: the label and metrics-row key of the figure shown first (the training return by default)."""

    def __init__(self, total_steps: int, description: str, quiet: bool = False, completed: int = 0,
                 headline: tuple[str, str] = ("return", "episode_return_mean")):
        self.total, self.description, self.quiet, self.completed = total_steps, description, quiet, completed
        self.headline = headline
        self.console = Console(stderr=True)
        self.live = self.console.is_terminal and not quiet
        self._progress: Progress | None = None

    def __enter__(self) -> "ChunkProgress":
        if self.live:
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("steps"), TimeElapsedColumn(), TimeRemainingColumn(),
                                      TextColumn("{task.fields[info]}"), console=self.console)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.description, total=self.total, completed=self.completed,
                                                 info="compiling done, training")
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def update(self, completed: int, row: dict[str, Any]) -> None:
        label, key = self.headline
        value = row.get(key)
        info = f"{label} {value:8.2f}" if value is not None else f"{label}    n/a"
        if row.get("eval_return_mean") is not None:
            info += f" · eval {row['eval_return_mean']:.2f}"
        if row.get("steps_per_second") is not None:
            info += f" · {row['steps_per_second']:,.0f} steps/s"
        if self._progress is not None:
            self._progress.update(self._task, completed=completed, info=info)
        elif not self.quiet:
            print(f"[{self.description}] {completed:>10,}/{self.total:,} steps · {info}", file=sys.stderr, flush=True)
