"""One config system: frozen dataclasses validated on construction, overridable from the CLI.

Every algorithm's ``Config`` subclasses :class:`AlgoConfig`. ``__post_init__`` validates fields and
raises :class:`~longhorizon.errors.UsageError` with one sentence naming the field and the fix, so
bad input fails before anything compiles.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any

from longhorizon.errors import UsageError


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class AlgoConfig:
    """Fields every algorithm has."""

    total_steps: int = 500_000

    def __post_init__(self):
        self._check_positive("total_steps")
        self.validate()

    def validate(self) -> None:  # overridden by algorithms
        pass

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
