"""``make(env, **overrides)``: an environment from an id, a path or an object, with clear errors.

Accepted: a gymnax id (``CartPole-v1``), a tabular MDP ``.npz`` path, a gymnasium environment
(``gymnasium:CartPole-v1``, ``gymnasium:pkg.module:Class``; stepped on the host, see
:mod:`longhorizon.envs.gymnasium`), an import path ``pkg.module:factory`` whose attribute is a
gymnax-style environment, a class or function returning one, or an ``(env, params)`` pair like
``gymnax.make``; and such an environment object itself.
"""

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
    """The registry ids ``make`` accepts (gymnax's); gymnasium's are named ``gymnasium:ID``."""
    return _gymnax_ids()


def env_name(env: Any) -> str:
    """The id of an environment given by id or as an object."""
    if isinstance(env, str):
        return env
    return str(getattr(env, "id", None) or getattr(env, "name", None) or type(env).__name__)  # gymnax envs have .name


OBJECT_PREFIX = "object:"


def recorded_env_id(env: Any) -> str:
    """How a run's ``config.json`` names its environment: the id itself, or ``object:NAME`` for a
    Python object, which cannot be rebuilt from the file (``make`` refuses it with the way to resume)."""
    return env if isinstance(env, str) else OBJECT_PREFIX + env_name(env)


def family(env_id: Any) -> str:
    """A coarse family used for per-family defaults: classic, minatar, bsuite, misc or gymnasium."""
    env_id = env_name(env_id)
    if env_id.startswith("gymnasium:"):
        return "gymnasium"
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


def make(env_id: Any, env_params: Any = None, **overrides: Any) -> Environment:
    """Build environment ``env_id`` (see the module docstring for what it may be); ``overrides`` set
    fields of its params (e.g. ``max_steps_in_episode=200``) or arguments of its constructor (e.g.
    ``size=10`` for DeepSea; for gymnasium, arguments of ``gymnasium.make``). ``env_params`` replaces
    a gymnax-style environment's default params.

    The returned environment's ``default_params`` carry the overrides.
    """
    import gymnax

    if not isinstance(env_id, str):
        return _from_object(env_id, env_params, overrides, what=type(env_id).__name__)
    if env_id.startswith(OBJECT_PREFIX):
        raise UsageError(f"environment '{env_id}' was a Python object given to RunSpec(env=...), which a results folder "
                         f"cannot rebuild; resume it from Python with train(RunSpec(env=<the same object>, ...), resume=True).")
    if env_id.startswith("gymnasium:"):
        from longhorizon.envs.gymnasium import make_gymnasium

        _no_params(env_params, env_id)
        return make_gymnasium(env_id, **overrides)
    if env_id.endswith(".npz") or env_id.endswith(".npz/"):
        from longhorizon.envs.tabular import make_tabular

        _no_params(env_params, env_id)
        return make_tabular(env_id.rstrip("/"), **overrides)
    if ":" in env_id and env_id not in gymnax.registered_envs:
        return _from_import_path(env_id, env_params, overrides)
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
    param_overrides = {k: v for k, v in overrides.items() if k not in ctor_kwargs}
    params = _with_overrides(params if env_params is None else env_params, param_overrides, env_id, ctor_names)
    return GymnaxEnv(env_id, inner, params)


def _no_params(env_params: Any, env_id: str) -> None:
    if env_params is not None:
        raise UsageError(f"env_params applies to gymnax-style environment objects only, not to '{env_id}'; "
                         f"give its settings as overrides (--env-arg KEY=VALUE) instead.")


def _with_overrides(params: Any, overrides: dict[str, Any], env_id: str, ctor_names: set[str] = frozenset()) -> Any:
    """``params`` with fields replaced by ``overrides``; an unknown field is refused."""
    if not overrides:
        return params
    param_fields = {f.name for f in dataclasses.fields(params)} if dataclasses.is_dataclass(params) else set()
    bad = [k for k in overrides if k not in param_fields]
    if bad:
        valid = sorted(param_fields | set(ctor_names))
        raise UsageError(f"'{bad[0]}' is not a setting of environment '{env_id}'; valid settings are: "
                         f"{', '.join(valid) or 'none'}.")
    return params.replace(**overrides)


def _from_import_path(path: str, env_params: Any, overrides: dict[str, Any]) -> Environment:
    """``pkg.module:name``: an environment object, a class or function returning one (called with
    the overrides its signature names), or an ``(env, params)`` pair."""
    from longhorizon.envs.gymnasium import _import_attr

    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise UsageError(f"'{path}' is not an import path; write package.module:name (e.g. my_pkg.envs:make_env).")
    found = _import_attr(module_name, attr, path)
    what = f"'{path}'"
    if callable(found) and not _is_env_object(found):
        try:
            names = set(inspect.signature(found).parameters)
        except (TypeError, ValueError):
            names = set()
        ctor = {k: v for k, v in overrides.items() if k in names}
        overrides = {k: v for k, v in overrides.items() if k not in ctor}
        try:
            found = found(**ctor)
        except UsageError:  # already one sentence (e.g. the factory called make with a bad id)
            raise
        except Exception as error:  # a user's factory can fail in any way; name it and stop
            raise UsageError(f"calling '{path}' to build the environment raised {type(error).__name__} "
                             f"({_brief(error)}); point --env at a gymnax-style environment, or at a factory that "
                             f"returns one when called with no arguments (or only --env-arg settings).") from None
        what = f"'{path}' returned a {type(found).__name__}, which"
    return _from_object(found, env_params, overrides, what=what, env_id=path)


def _brief(error: Exception, limit: int = 160) -> str:
    """An exception's message on one line, cut to ``limit`` characters."""
    text = " ".join(str(error).split()) or "no message"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_env_object(obj: Any) -> bool:
    return not isinstance(obj, type) and all(hasattr(obj, name) for name in ("reset", "step", "action_space"))


def _from_object(obj: Any, env_params: Any, overrides: dict[str, Any], what: str, env_id: str | None = None) -> Environment:
    """Validate a user's environment object (or ``(env, params)`` pair) and adapt it to the API."""
    if isinstance(obj, tuple) and len(obj) == 2:
        obj, env_params = obj[0], obj[1] if env_params is None else env_params
    if isinstance(obj, Environment):
        if overrides or env_params is not None:
            raise UsageError(f"{obj!r} is already a longhorizon environment; build it with the settings you want "
                             f"instead of passing overrides or env_params.")
        return obj
    if type(obj).__module__.split(".")[0] == "gymnasium" or hasattr(obj, "np_random"):
        raise UsageError(f"{what} is a gymnasium environment (stepped on the host); pass it as "
                         f"'gymnasium:ID' or 'gymnasium:package.module:Class' instead of an object.")
    if not _is_env_object(obj) or not hasattr(obj, "default_params"):
        raise UsageError(f"{what} is not a gymnax-style environment (needs reset, step, observation_space, "
                         f"action_space and default_params); pass a gymnax environment, a factory returning one, or an id.")
    env_id = env_id or getattr(obj, "name", None) or type(obj).__name__
    params = _with_overrides(obj.default_params if env_params is None else env_params, overrides, env_id)
    _check_gymnax_api(obj, params, env_id)
    return GymnaxEnv(env_id, obj, params)


def _check_gymnax_api(obj: Any, params: Any, env_id: str) -> None:
    """Trace one reset and one step (nothing runs) to refuse an environment with another API now."""
    import jax

    from longhorizon.envs.api import space_info

    try:
        key = jax.random.PRNGKey(0)
        _, state = jax.eval_shape(lambda k: obj.reset(k, params), key)
        info = space_info(obj.action_space(params))
        action = jax.numpy.zeros((), jax.numpy.int32) if info.discrete else jax.numpy.zeros(info.shape, jax.numpy.float32)
        out = jax.eval_shape(lambda k, s: obj.step(k, s, action, params), key, state)
    except Exception as error:  # a user's environment can fail in any way; name it and stop
        raise UsageError(f"environment '{env_id}' failed a traced reset/step ({type(error).__name__}: {error}); "
                         f"it must follow gymnax 1.0's functional API.") from None
    if len(out) != 6:
        raise UsageError(f"environment '{env_id}' returns {len(out)} values from step, not gymnax 1.0's 6 "
                         f"(obs, state, reward, terminated, truncated, info); update it to gymnax>=1.0's API.")
    if "final_observation" not in out[5]:
        raise UsageError(f"environment '{env_id}' does not report info['final_observation'] from step; subclass "
                         f"gymnax.environments.environment.Environment, whose step auto-resets and reports it.")
