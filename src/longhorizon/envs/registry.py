"""``make(env_id, **overrides)``: every gymnax environment by id, with clear errors."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from typing import Any

from longhorizon.errors import UsageError
from longhorizon.envs.api import Environment, GymnaxEnv

# gymnax environments that need a download at construction time (not possible offline).
_NEEDS_DOWNLOAD = {"MNISTBandit-bsuite"}


def _gymnax_ids() -> list[str]:
    import gymnax

    return list(gymnax.registered_envs)


def list_env_ids() -> list[str]:
    """All ids ``make`` accepts."""
    return _gymnax_ids()


def family(env_id: str) -> str:
    """A coarse family used for per-family defaults: classic, minatar, bsuite or misc."""
    if env_id.endswith("-MinAtar"):
        return "minatar"
    if env_id.endswith("-bsuite"):
        return "bsuite"
    if env_id.endswith("-misc"):
        return "misc"
    return "classic"


def _unknown(env_id: str) -> UsageError:
    known = list_env_ids()
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.4)
    if not close:  # also try a case-insensitive substring match ("breakout" -> Breakout-MinAtar)
        close = [k for k in known if env_id.lower().split("-")[0] in k.lower()][:3]
    hint = f"did you mean {', '.join(close)}?" if close else "run `longhorizon envs` to list them."
    return UsageError(f"unknown environment '{env_id}': {hint}")


def make(env_id: str, **overrides: Any) -> Environment:
    """Build environment ``env_id`` (a gymnax id, or the path of a tabular MDP ``.npz``); ``overrides`` set fields of its params (e.g.
    ``max_steps_in_episode=200``) or arguments of its constructor (e.g. ``size=10`` for DeepSea).

    The returned environment's ``default_params`` carry the overrides.
    """
    import gymnax

    if env_id.endswith(".npz") or env_id.endswith(".npz/"):
        from longhorizon.envs.tabular import make_tabular

        return make_tabular(env_id.rstrip("/"), **overrides)
    if env_id not in gymnax.registered_envs:
        raise _unknown(env_id)
    if env_id in _NEEDS_DOWNLOAD:
        raise UsageError(f"environment '{env_id}' needs a dataset download at start-up, which this installation cannot do; choose another environment.")
    factory = gymnax.registration._registry[env_id] if hasattr(gymnax, "registration") else None
    ctor_names: set[str] = set()
    if factory is not None:
        try:
            ctor_names = set(inspect.signature(factory).parameters) - {"self", "kwargs", "args"}
        except (TypeError, ValueError):
            ctor_names = set()
    ctor_kwargs = {k: v for k, v in overrides.items() if k in ctor_names}
    inner, params = gymnax.make(env_id, **ctor_kwargs)
    param_fields = {f.name for f in dataclasses.fields(params)}
    param_overrides = {k: v for k, v in overrides.items() if k not in ctor_kwargs}
    bad = [k for k in param_overrides if k not in param_fields]
    if bad:
        valid = sorted(param_fields | ctor_names)
        raise UsageError(f"'{bad[0]}' is not a setting of environment '{env_id}'; valid settings are: {', '.join(valid)}.")
    if param_overrides:
        params = params.replace(**param_overrides)
    return GymnaxEnv(env_id, inner, params)
