"""Errors that the CLI turns into one clear sentence and exit code 2."""


class UsageError(ValueError):
    """Bad user input (unknown id, invalid config field, malformed file).

    The message must be one sentence that names the problem and the fix.
    The CLI prints it to stderr without a traceback and exits with code 2.
    """


class TrainingDiverged(RuntimeError):
    """NaN or Inf appeared in a loss or in the parameters during training."""
