"""Ctrl-C that stops a run where it is safe and says exactly what was saved.

A ``KeyboardInterrupt`` raised at an arbitrary point can land inside JAX while XLA compiles on its
own threads; the interpreter then tears down under them and the process aborts (``pure virtual
method called``, exit 134) instead of saving and exiting with 130. So while a run is active
(:class:`StopRequest`), the first SIGINT only sets a flag that the training loop reads between
chunks (steps, generations): start-up and compilation finish, the chunk in flight finishes and is
saved, and the loop stops. A second SIGINT raises ``KeyboardInterrupt`` at once, keeping only what
was already saved.

:class:`Interrupted` carries the one sentence that says what was saved (nothing, or chunk k) and
how to continue; the CLI prints it and exits with :data:`INTERRUPTED_EXIT`.
"""

from __future__ import annotations

import signal
import sys
import threading

INTERRUPTED_EXIT = 130  # the shell's code for a process ended by SIGINT
# what Ctrl-C outside a run's safe points says (no run was saving anything then)
NOT_SAVED = "interrupted: the work in flight was not saved; whatever a results folder held before is unchanged."


class Interrupted(Exception):
    """Ctrl-C stopped a run at a safe point; ``str(self)`` says what was saved and how to continue.

    An ``Exception``, not a ``KeyboardInterrupt``: the command-line layer (typer) turns any
    ``KeyboardInterrupt`` into a bare exit code and would drop this message."""

    def __init__(self, message: str, summary: dict | None = None, saved: int | None = None):
        super().__init__(message)
        self.message, self.summary, self.saved = message, summary, saved  # saved: the chunk saved last, if any

    def __str__(self) -> str:
        return self.message


class StopRequest:
    """While active (``with``), the first SIGINT sets :attr:`requested`; a second one raises ``KeyboardInterrupt``.

    Outside the main thread (where Python cannot install signal handlers) it does nothing and
    Ctrl-C keeps its default behaviour.
    """

    def __init__(self, what: str = "step"):
        self.requested = False
        self.what = what
        self._previous = None

    def _handler(self, signum, frame):
        if self.requested:
            print(f"\naborting without saving the {self.what} in flight", file=sys.stderr, flush=True)
            raise KeyboardInterrupt
        self.requested = True
        print(f"\nstopping after this {self.what} to save a checkpoint (Ctrl-C again to abort without saving)",
              file=sys.stderr, flush=True)

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
