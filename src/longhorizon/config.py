"""One config system: frozen dataclasses validated on construction, overridable from the CLI.

Every algorithm's ``Config`` subclasses :class:`AlgoConfig`. ``__post_init__`` validates fields and
raises :class:`~longhorizon.errors.UsageError` with one sentence naming the field and the fix, so
bad input fails before anything compiles.

Configs are also JAX pytrees, so an algorithm's state can carry its config as a pytree field. A
plain config has no leaves: every field is static, a compile-time constant, exactly as if the config
were closed over. A *stacked* config (:func:`stack_configs`, used by sweeps) carries chosen float
fields as array leaves with a leading row axis, so one vmapped program trains every row with its
own hyperparameters (the rejax idea: hyperparameters as pytree leaves). Unflattening skips
validation, which compares values and cannot run on traced ones.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any, Sequence

import jax
import numpy as np
from flax import serialization

from longhorizon.errors import UsageError


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class AlgoConfig:
    """Fields every algorithm has."""

    total_steps: int = 500_000

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _register(cls)

    def __post_init__(self):
        self._check_positive("total_steps")
        self.validate()

    def validate(self) -> None:  # overridden by algorithms
        pass

    def static_floats(self) -> set[str]:  # overridden by algorithms
        """Float fields this algorithm needs as Python numbers (they set a shape or live in a static
        object such as an environment wrapper); a sweep runs one program per value of these."""
        return set()

    # --- small validation helpers, each raising one clear sentence -------------------------
    def _fail(self, field: str, problem: str, fix: str) -> None:
        raise UsageError(f"{flag(field)} {problem} (got {getattr(self, field)!r}); {fix}.")

    def _check_positive(self, *fields: str) -> None:
        for field in fields:
            if not getattr(self, field) > 0:
                self._fail(field, "must be positive", f"pass a value above 0, e.g. {flag(field)} {_example(self, field)}")

    def _check_unit_interval(self, *fields: str) -> None:
        for field in fields:
            if not 0.0 <= getattr(self, field) <= 1.0:
                self._fail(field, "must lie in [0, 1]", "pass a value between 0 and 1")

    def _check_choice(self, field: str, choices) -> None:
        if getattr(self, field) not in choices:
            self._fail(field, f"must be one of {', '.join(map(str, choices))}", "pass one of those")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- configs as pytrees ------------------------------------------------------------------------
def _flatten(config: AlgoConfig):
    traced = getattr(config, "_traced", ())
    static = tuple((f.name, getattr(config, f.name)) for f in dataclasses.fields(config) if f.name not in traced)
    return tuple(getattr(config, name) for name in traced), (traced, static)


def _unflatten(cls: type, aux, leaves) -> AlgoConfig:
    traced, static = aux
    config = object.__new__(cls)  # no __post_init__: leaves may be tracers, which validation cannot compare
    for name, value in (*static, *zip(traced, leaves)):
        object.__setattr__(config, name, value)
    if traced:
        object.__setattr__(config, "_traced", traced)
    return config


def _to_state_dict(config: AlgoConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in getattr(config, "_traced", ())}


def _from_state_dict(target: AlgoConfig, state: dict[str, Any]) -> AlgoConfig:
    traced = getattr(target, "_traced", ())
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(target), [state[name] for name in traced])


def _register(cls: type) -> None:
    jax.tree_util.register_pytree_node(cls, _flatten, lambda aux, leaves: _unflatten(cls, aux, leaves))
    serialization.register_serialization_state(cls, _to_state_dict, _from_state_dict, override=True)


_register(AlgoConfig)


def float_fields(config: AlgoConfig) -> list[str]:
    """Fields declared ``float``."""
    hints = typing.get_type_hints(type(config))
    return [f.name for f in dataclasses.fields(config) if hints.get(f.name) is float]


def traceable_fields(config: AlgoConfig) -> list[str]:
    """Float fields that may become traced values: every float field except ``config.static_floats()``."""
    static = config.static_floats()
    return [name for name in float_fields(config) if name not in static]


def stack_configs(configs: Sequence[AlgoConfig], traced: Sequence[str]) -> AlgoConfig:
    """One config whose ``traced`` fields are float32 arrays ``[len(configs)]`` (row i from ``configs[i]``).

    Every other field must be equal across ``configs``: it stays static, shared by all rows."""
    first = configs[0]
    allowed = set(traceable_fields(first))
    for name in traced:
        if name not in allowed:
            raise UsageError(f"{flag(name)} cannot vary inside one compiled program; sweep it as a structural field.")
    for config in configs[1:]:
        if type(config) is not type(first):
            raise ValueError("stack_configs needs configs of one algorithm")
        for f in dataclasses.fields(first):
            if f.name not in traced and getattr(config, f.name) != getattr(first, f.name):
                raise ValueError(f"field {f.name} differs between rows but is not traced")
    shared = tuple((f.name, getattr(first, f.name)) for f in dataclasses.fields(first))
    stacked = _unflatten(type(first), ((), shared), ())
    object.__setattr__(stacked, "_traced", tuple(traced))
    for name in traced:
        object.__setattr__(stacked, name, np.asarray([getattr(c, name) for c in configs], np.float32))
    return stacked


def _example(config: AlgoConfig, field: str) -> str:
    default = next((f.default for f in dataclasses.fields(config) if f.name == field), None)
    return str(default) if default not in (None, dataclasses.MISSING) and default > 0 else "1"


def _parse_value(raw: str, annotation: Any, field: str) -> Any:
    """Parse a CLI string into the field's declared type."""
    if isinstance(annotation, str):
        annotation = eval(annotation, {"tuple": tuple, "int": int, "float": float, "str": str, "bool": bool})  # noqa: S307 - annotations of our own dataclasses
    origin = typing.get_origin(annotation)
    try:
        if annotation is bool:
            low = raw.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if annotation is int:
            value = float(raw)
            if value != int(value):
                raise ValueError
            return int(value)
        if annotation is float:
            return float(raw)
        if origin is tuple:
            (inner, *_rest) = typing.get_args(annotation)
            parts = [p for p in raw.replace("x", ",").split(",") if p.strip()]
            return tuple(_parse_value(p.strip(), inner, field) for p in parts)
        return raw
    except ValueError:
        kind = getattr(annotation, "__name__", str(annotation))
        raise UsageError(f"{flag(field)} expects a value of type {kind} but got '{raw}'; pass e.g. {flag(field)} {_type_example(annotation)}.") from None


def _type_example(annotation: Any) -> str:
    return {bool: "true", int: "64", float: "0.001"}.get(annotation, "64,64")


def config_fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def parse_field(config: AlgoConfig, name: str, raw: str) -> Any:
    """CLI text ``raw`` parsed into the declared type of field ``name`` of ``config`` (one-sentence error if it does not parse)."""
    return _parse_value(raw, typing.get_type_hints(type(config)).get(name, str), name)


def apply_overrides(config: AlgoConfig, overrides: dict[str, str]) -> AlgoConfig:
    """Return ``config`` with string ``overrides`` (field name -> CLI text) parsed and applied."""
    fields = config_fields(type(config))
    hints = typing.get_type_hints(type(config))
    values: dict[str, Any] = {}
    for name, raw in overrides.items():
        name = name.replace("-", "_")
        if name not in fields:
            close = difflib.get_close_matches(name, list(fields), n=1)
            hint = f"did you mean {flag(close[0])}?" if close else "run with --help to list the settings."
            raise UsageError(f"{flag(name)} is not a setting of {type(config).__module__.rsplit('.', 1)[-1]}; {hint}")
        values[name] = _parse_value(raw, hints.get(name, str), name)
    return dataclasses.replace(config, **values)


def config_overrides(config: AlgoConfig, default: AlgoConfig) -> dict[str, str]:
    """The fields where ``config`` differs from ``default``, as CLI text (a tuple as ``a,b``): the overrides that
    :func:`apply_overrides` turns ``default`` into ``config`` with (what a run spec's ``config_overrides`` holds)."""
    return {f.name: ",".join(map(str, v)) if isinstance(v, tuple) else str(v)
            for f in dataclasses.fields(config) if (v := getattr(config, f.name)) != getattr(default, f.name)}
