"""Gymnasium environments, stepped on the host, behind the functional API.

``make("gymnasium:CartPole-v1")`` (or ``"gymnasium:my_pkg.envs:MyEnv"`` for an environment class or
factory) returns a :class:`GymnasiumEnv`: it describes one copy (spaces, time limit) for the
algorithms. ``vectorize(env, n)`` turns it into a :class:`GymnasiumVecEnv`, a natively vectorised
environment whose ``reset``/``step`` call the host through ``jax.pure_callback``, so the algorithm
modules run unchanged while a ``gymnasium.vector`` environment does the stepping:

* the JAX-side state of ``n`` copies is only ``(group, steps)``: ``group`` names one vector
  environment (an *env group*) held by this process, ``steps`` counts the steps taken in it;
* ``reset(key)`` draws ``group`` from ``key``; the host creates the vector environment lazily and
  resets it with seed ``seed_of(group, steps)``, so every process that meets the same state (the
  learner, a Ray actor, a resumed run) builds the same environments;
* seeds vmapped by the engine arrive as one batched call (``vmap_method="expand_dims"``) and are
  stepped one group after another (asynchronous vector environments all at once);
* the vector environment auto-resets in the same step (gymnasium's ``SAME_STEP`` mode), so
  ``info["final_obs"]`` holds the true last observation of a finished episode and truncated
  episodes are bootstrapped from it.

A Python environment's internal state cannot be checkpointed in general: when a state arrives whose
``steps`` differ from the host's count (a resumed run, or a state restored in the same process), the
host resets that group with the seed ``seed_of(group, steps)`` and continues from fresh episodes.

Settings: ``vector=sync|async`` (``SyncVectorEnv`` in this process, or ``AsyncVectorEnv`` with one
worker process per copy); every other setting is passed to ``gymnasium.make`` (e.g.
``max_episode_steps=200`` or an environment's own arguments such as ``ctrl_cost_weight=0.1``).
"""

from __future__ import annotations

import collections
import difflib
import importlib
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from longhorizon.envs.api import Environment, SpaceInfo
from longhorizon.errors import UsageError

PREFIX = "gymnasium:"
VECTOR_MODES = ("sync", "async")
# Vector environments kept per (environment, number of copies); the least recently used one is
# recycled when a new group appears (an evaluation, or SQIRL resetting every rollout), so a long
# run holds a bounded number of them. Live training groups are touched every step and never the
# least recently used while fewer than this many are live.
GROUPS_PER_SIZE = 32


def _gymnasium():
    try:
        import gymnasium
    except ImportError:
        raise UsageError("gymnasium environments need the gymnasium package; install it with "
                         "`pip install 'longhorizon[gym]'` (or 'longhorizon[mujoco]' for MuJoCo tasks).") from None
    return gymnasium


def seed_of(group: int, steps: int) -> int:
    """The reset seed of env group ``group`` met at step ``steps`` (copy ``i`` gets ``seed + i``)."""
    return (int(group) * 1_000_003 + int(steps) * 7_919) % (2**31 - 1)


@struct.dataclass
class GymnasiumState:
    group: jax.Array  # int32: which vector environment of this process
    steps: jax.Array  # int32: steps taken in it


class GymnasiumEnv(Environment):
    """One gymnasium environment, described for the algorithms (not stepped itself: see
    :meth:`vectorized`). ``target`` is a registered id or an ``EnvSpec`` built for a class path."""

    def __init__(self, env_id: str, target: Any, make_kwargs: dict[str, Any], vector: str = "sync"):
        gym = _gymnasium()
        if vector not in VECTOR_MODES:
            raise UsageError(f"--env-arg vector={vector} is not a vector mode; choose one of {', '.join(VECTOR_MODES)}.")
        self.id, self.target, self.make_kwargs, self.vector = env_id, target, dict(make_kwargs), vector
        # Environments built alike are interchangeable: their env groups share one pool.
        self.spec_key = (env_id, repr(target), repr(sorted(self.make_kwargs.items())), vector)
        probe = self.make_one()
        try:
            self._obs_space, self._act_space = probe.observation_space, probe.action_space
            spec = getattr(probe, "spec", None)
            self._max_steps = getattr(spec, "max_episode_steps", None)
        finally:
            probe.close()
        spaces = gym.spaces
        if not isinstance(self._act_space, (spaces.Discrete, spaces.Box)):
            raise UsageError(f"{env_id} has action space {self._act_space}, which is neither Discrete nor Box; "
                             f"wrap it (e.g. gymnasium.wrappers.FlattenObservation / a custom ActionWrapper) first.")
        if not isinstance(self._obs_space, (spaces.Discrete, spaces.Box)):
            raise UsageError(f"{env_id} has observation space {self._obs_space}, which is neither Discrete nor Box; "
                             f"wrap it with gymnasium.wrappers.FlattenObservation first.")
        _ = self.obs_info, self.act_info

    # --------------------------------------------------------------- description
    def make_one(self, **extra: Any):
        """A fresh single gymnasium environment (``extra``: e.g. ``render_mode="rgb_array"``)."""
        gym = _gymnasium()
        try:
            return gym.make(self.target, **self.make_kwargs, **extra)
        except TypeError as error:
            raise UsageError(f"{self.id} rejected its settings ({error}); pass only arguments its constructor takes "
                             f"with --env-arg KEY=VALUE.") from None

    @property
    def default_params(self):
        return None

    @property
    def max_episode_steps(self) -> int:
        return int(self._max_steps or 1000)

    def observation_space(self, params=None):
        gym = _gymnasium()
        if isinstance(self._obs_space, gym.spaces.Discrete):  # one-hot, like the tabular environments
            return gym.spaces.Box(0.0, 1.0, (int(self._obs_space.n),), np.float32)
        return self._obs_space

    def action_space(self, params=None):
        return self._act_space

    def reset(self, key, params=None):
        raise TypeError("a gymnasium environment is stepped in groups; use longhorizon.envs.vectorize(env, n).")

    step = reset

    def vectorized(self, num_envs: int) -> "GymnasiumVecEnv":
        return GymnasiumVecEnv(self, num_envs)

    # ---------------------------------------------------------------- host side
    def make_vector(self, num_envs: int, **extra: Any):
        """A ``gymnasium.vector`` environment of ``num_envs`` copies that auto-resets in the same step."""
        gym = _gymnasium()
        fns = [lambda: self.make_one(**extra)] * num_envs
        if self.vector == "sync":
            return gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        # Workers are spawned, not forked: forking a process that runs JAX threads can deadlock.
        return gym.vector.AsyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, context="spawn")

    def host_obs(self, obs: np.ndarray) -> np.ndarray:
        """A batch of gymnasium observations as float32 arrays (one-hot for a Discrete space)."""
        if self.obs_info.shape != tuple(self._obs_space.shape or ()):  # Discrete -> one-hot
            return np.eye(self.obs_info.shape[0], dtype=np.float32)[np.asarray(obs, np.int64)]
        return np.asarray(obs, np.float32)

    def host_action(self, action: np.ndarray) -> np.ndarray:
        return np.asarray(action, np.int64) if self.act_info.discrete else np.asarray(action, self._act_space.dtype)


class _Groups:
    """The vector environments of this process, by env group, with the steps each has taken."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pools: dict[tuple[tuple, int], collections.OrderedDict] = {}  # (spec, copies) -> group -> entry

    def get(self, env: GymnasiumEnv, num_envs: int, group: int, steps: int, reset: bool = False):
        """The vector environment of ``group`` as ``[venv, steps taken]``, reset with seed
        ``seed_of(group, steps)`` if ``reset`` or unless it has taken exactly ``steps`` steps here
        (a new group, or a state restored from elsewhere). Returns (entry, the reset obs or None)."""
        with self._lock:
            pool = self._pools.setdefault((env.spec_key, num_envs), collections.OrderedDict())
            entry = pool.pop(group, None)
            if entry is None:
                venv = pool.popitem(last=False)[1][0] if len(pool) >= GROUPS_PER_SIZE else env.make_vector(num_envs)
                entry = [venv, -1]
            pool[group] = entry
        obs = None
        if reset or entry[1] != steps:
            obs, _ = entry[0].reset(seed=seed_of(group, steps))
            entry[1] = steps
        return entry, obs

    def close(self, env: GymnasiumEnv) -> None:
        with self._lock:
            for key in [k for k in self._pools if k[0] == env.spec_key]:
                for venv, _ in self._pools.pop(key).values():
                    venv.close()


GROUPS = _Groups()


class GymnasiumVecEnv(Environment):
    """``num_envs`` copies of a :class:`GymnasiumEnv`, stepped on the host as one env group."""

    def __init__(self, env: GymnasiumEnv, num_envs: int):
        self.env, self.num_envs, self.id = env, num_envs, env.id
        self.batch_shape = (num_envs,)

    @property
    def default_params(self):
        return None

    @property
    def obs_info(self) -> SpaceInfo:
        return self.env.obs_info

    @property
    def act_info(self) -> SpaceInfo:
        return self.env.act_info

    @property
    def max_episode_steps(self) -> int:
        return self.env.max_episode_steps

    def observation_space(self, params=None):
        return self.env.observation_space()

    def action_space(self, params=None):
        return self.env.action_space()

    def _shapes(self):
        """What a step returns per copy: obs, reward, terminated, truncated, final obs."""
        n, obs = self.num_envs, self.obs_info.shape
        f32 = lambda *s: jax.ShapeDtypeStruct((n,) + s, jnp.float32)  # noqa: E731
        flag = jax.ShapeDtypeStruct((n,), jnp.bool_)
        return f32(*obs), f32(), flag, flag, f32(*obs)

    def reset(self, key, params=None):
        group = jax.random.randint(key, (), 0, 2**31 - 1, dtype=jnp.int32)
        steps = jnp.zeros((), jnp.int32)
        obs = jax.pure_callback(self._host_reset, self._shapes()[0], group, steps, vmap_method="expand_dims")
        return obs, GymnasiumState(group, steps)

    def step(self, key, state, action, params=None):
        obs, reward, terminated, truncated, final_obs = jax.pure_callback(
            self._host_step, self._shapes(), self._pack(state, action), vmap_method="expand_dims")
        state = GymnasiumState(state.group, state.steps + 1)
        return obs, state, reward, terminated, truncated, {"final_obs": final_obs}

    # ---------------------------------------------------------------- host side
    # The callbacks get one group per seed, with the seed axes in front (``lead``: () unbatched).
    def _host_reset(self, group, steps):
        lead = np.shape(group)
        out = [self.env.host_obs(GROUPS.get(self.env, self.num_envs, int(g), int(s), reset=True)[1])
               for g, s in zip(np.ravel(group), np.ravel(np.broadcast_to(steps, lead)))]
        return np.stack(out).reshape(lead + out[0].shape)

    def _pack(self, state, action):
        """Group, step count and actions as one int32 array (float actions by their bits): a callback
        with one argument costs JAX markedly less than one with three (docs/benchmarks.md)."""
        bits = (action.astype(jnp.int32) if self.act_info.discrete else
                jax.lax.bitcast_convert_type(action.astype(jnp.float32), jnp.int32))
        return jnp.concatenate([jnp.stack([state.group, state.steps]).astype(jnp.int32), bits.reshape(-1)])

    def _host_step(self, packed):
        """One step of every env group in ``packed`` ``[..., 2 + actions]`` (see :meth:`_pack`)."""
        packed = np.asarray(packed)
        lead, rows = packed.shape[:-1], packed.reshape(-1, packed.shape[-1])
        bits = rows[:, 2:] if self.act_info.discrete else rows[:, 2:].view(np.float32)
        actions = bits.reshape((-1, self.num_envs) + self.act_info.shape)
        entries = [GROUPS.get(self.env, self.num_envs, int(g), int(s))[0] for g, s in rows[:, :2]]
        if self.env.vector == "async":  # every group's workers step at once
            for entry, a in zip(entries, actions):
                entry[0].step_async(self.env.host_action(a))
            results = [entry[0].step_wait() for entry in entries]
        else:
            results = [entry[0].step(self.env.host_action(a)) for entry, a in zip(entries, actions)]
        columns = []
        for entry, (obs, reward, terminated, truncated, info) in zip(entries, results):
            entry[1] += 1
            obs = self.env.host_obs(obs)
            final = obs.copy()
            if "final_obs" in info:  # SAME_STEP autoreset: obs already starts the next episode
                for i in np.flatnonzero(info["_final_obs"]):
                    final[i] = self.env.host_obs(info["final_obs"][i][None])[0]
            columns.append((obs, np.asarray(reward, np.float32), np.asarray(terminated, bool),
                            np.asarray(truncated, bool), final))
        return tuple(np.stack(col).reshape(lead + col[0].shape) for col in zip(*columns))

    def __repr__(self) -> str:
        return f"GymnasiumVecEnv({self.id}, num_envs={self.num_envs})"


def host_env(env: Any) -> GymnasiumEnv | None:
    """The gymnasium environment inside ``env`` (possibly wrapped or vectorised), or None."""
    while env is not None:
        if isinstance(env, GymnasiumEnv):
            return env
        env = env.__dict__.get("env") if hasattr(env, "__dict__") else None
    return None


def is_host_env(env: Any) -> bool:
    """Whether ``env`` (possibly wrapped) is stepped on the host rather than inside XLA."""
    return host_env(env) is not None


def close_groups(env: Any) -> None:
    """Close this process's vector environments of ``env`` (async workers stop); a later step of one
    of its groups builds and resets it afresh."""
    inner = host_env(env)
    if inner is not None:
        GROUPS.close(inner)


def make_gymnasium(env_id: str, **settings: Any) -> GymnasiumEnv:
    """``gymnasium:ID`` (a registered id) or ``gymnasium:pkg.module:Name`` (an environment class or
    a function returning an environment); ``settings`` go to ``gymnasium.make`` except ``vector``."""
    gym = _gymnasium()
    name = env_id[len(PREFIX):]
    vector = settings.pop("vector", "sync")
    if ":" in name:  # pkg.module:Name: a class or factory, or an id the module registers on import
        module_name, _, attr = name.partition(":")
        found = _import_attr(module_name, attr, env_id, registered=gym.registry)
        if found is None:
            target = attr
        else:
            target = gym.envs.registration.EnvSpec(id=attr, entry_point=name,
                                                   max_episode_steps=settings.pop("max_episode_steps", None))
    else:
        if name not in gym.registry:
            close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(PREFIX + c for c in close)}?" if close else \
                "list them with `python -c 'import gymnasium; gymnasium.pprint_registry()'`."
            raise UsageError(f"unknown gymnasium environment '{name}': {hint}")
        target = name
    try:
        return GymnasiumEnv(env_id, target, settings, vector)
    except gym.error.DependencyNotInstalled as error:
        raise UsageError(f"{env_id} needs a package that is not installed ({error}); install it, e.g. "
                         f"`pip install 'longhorizon[mujoco]'` for MuJoCo tasks.") from None


def _import_attr(module_name: str, attr: str, what: str, registered: Any = ()):
    """``module_name.attr`` (None if importing the module registered ``attr`` as an id in
    ``registered``), or a UsageError naming what is missing."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(f"cannot import module '{module_name}' for environment '{what}' ({error}); "
                         f"check the import path (written package.module:name) and that the package is installed.") from None
    if attr in registered:
        return None
    if not hasattr(module, attr):
        raise UsageError(f"module '{module_name}' has no attribute '{attr}' for environment '{what}'; "
                         f"check the name after the colon.")
    return getattr(module, attr)
