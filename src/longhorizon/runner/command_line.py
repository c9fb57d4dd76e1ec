"""What the commands that start runs share: reading ``--field value`` and ``KEY=VALUE`` options, the
flags a user gave, JSON output, the checks of a resolved run against what was asked, and JAX's
compilation cache.

The top-level CLI (:mod:`longhorizon.cli`), the sweep command and the families' commands (offline,
LM, reproductions) all use these, so they live below every command module: no command imports another.
Nothing here imports JAX at import time, so ``longhorizon --help`` stays fast.
"""

from __future__ import annotations

import os
from pathlib import Path

from longhorizon.errors import UsageError


def setup_compilation_cache() -> None:
    """JAX's persistent compilation cache in the user's cache folder: on by default on GPUs and TPUs, off by
    default on CPUs until its gain there is measured.

    Turn it on with ``LONGHORIZON_COMPILE_CACHE=1`` (or a folder: ``LONGHORIZON_COMPILE_CACHE=/some/dir``), off
    with ``LONGHORIZON_COMPILE_CACHE=0``.
    """
    import jax

    setting = os.environ.get("LONGHORIZON_COMPILE_CACHE")
    if setting is None:
        setting = "0" if jax.default_backend() == "cpu" else "1"
    if setting.lower() in ("0", "off", "false", "no"):
        return
    folder = Path(setting) if setting not in ("1", "on", "true", "yes") else \
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "longhorizon" / "jax"
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    share_compilation_cache_safely()


CACHE_BYTES = 8 * 2**30  # the persistent compilation cache's size; the least recently used programs go first


def share_compilation_cache_safely(max_bytes: int = CACHE_BYTES) -> None:
    """Let several processes use one persistent compilation cache folder without reading half-written programs.

    JAX writes a cache entry in place and, with no size limit, reads and writes it without a lock: a process
    that loads a program another process is still writing gets a truncated executable and aborts inside XLA
    (seen as segfaults and aborts of test workers in ``executable.serialize`` and in the cache read). With a
    size limit JAX takes a file lock around every read and write (and evicts the least recently used
    programs beyond it), so concurrent runs, sweeps and test workers are safe."""
    import jax

    jax.config.update("jax_compilation_cache_max_size", max_bytes)


def parse_field_args(args: list[str]) -> dict[str, str]:
    """``--field value`` / ``--field=value`` pairs left over after a command's known options."""
    overrides: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise UsageError(f"unexpected argument '{arg}'; config fields are given as --field value.")
        name, _, value = arg[2:].partition("=")
        if not value:
            if i + 1 >= len(args) or (args[i + 1].startswith("--") and not _is_number(args[i + 1])):
                raise UsageError(f"--{name} needs a value; write --{name} VALUE.")
            value, i = args[i + 1], i + 1
        overrides[name.replace("-", "_")] = value
        i += 1
    return overrides


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def parse_env_args(items: list[str]) -> dict:
    """``KEY=VALUE`` environment settings; values are read as Python literals where they parse (numbers, booleans)."""
    import ast

    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env-arg '{item}' is not KEY=VALUE; write e.g. --env-arg max_steps_in_episode=200.")
        try:
            settings[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            settings[key] = value
    return settings


def given_options(ctx) -> list[str]:
    """Names of the parameters of a command (a ``typer.Context``) set on the command line, not left at their defaults."""
    return [name for name in ctx.params
            if (source := ctx.get_parameter_source(name)) is not None and source.name == "COMMANDLINE"]


def print_json(value) -> None:
    """``value`` as indented JSON on stdout (what a ``--dry-run`` prints)."""
    import json

    from longhorizon.runner.results import to_jsonable

    print(json.dumps(to_jsonable(value), indent=2))


def check_resolved(resolved: dict, recorded: dict) -> None:
    """Refuse settings the resolved run cannot honour, and a config.json whose recorded plan differs from this run's.

    ``resolved``: the run's config.json (:func:`longhorizon.runner.run.dry_run`); ``recorded``:
    ``{"asked": settings given explicitly, "values": derived values a --config file recorded}``."""
    asked, updates, chunks = recorded["asked"], resolved.get("num_updates"), resolved["num_chunks"]
    steps_per_update = resolved["steps_per_chunk"] // resolved["updates_per_chunk"]
    total = resolved["config"]["total_steps"]
    if total < steps_per_update:
        raise UsageError(f"--total-steps {total} is less than one update ({steps_per_update} environment steps per "
                         f"seed); pass --total-steps {steps_per_update} or more.")
    if "num_chunks" in asked and updates is not None and asked["num_chunks"] > updates:
        raise UsageError(f"--chunks {asked['num_chunks']} asks for more chunks than the run's {updates} updates; pass "
                         f"--chunks {updates} or fewer, or more --total-steps.")
    if "eval_every" in asked and resolved["eval_every"] > chunks:
        raise UsageError(f"--eval-every {resolved['eval_every']} is beyond the run's {chunks} chunks, so no periodic "
                         f"evaluation would happen; pass at most --eval-every {chunks} (or 0 for the final one only).")
    for key, value in recorded["values"].items():
        if key in resolved and resolved[key] != value:
            raise UsageError(f"the --config file records {key} = {value}, but these settings give {resolved[key]}; "
                             f"{key} follows from the other settings, so remove it from the file.")
