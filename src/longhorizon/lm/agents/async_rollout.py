"""Asynchronous rollouts on Ray for multi-turn LM agents (AReaL, Fu et al. 2025; ASearcher, Gao et al. 2025).

Generation of whole multi-turn trajectories is decoupled from learning: rollout actors on Ray
generate with the latest parameters the learner published, the learner trains on batches whose
trajectories are at most ``max_staleness`` policy versions old (the decoupled-PPO correction on the
learner side handles the lag). The rollout function is whatever a *rollout source* builds:

    source.build() -> fn,   fn(params, tasks: list[dict], seed: int, version: int) -> list[Trajectory]

(any picklable object; :class:`SyntheticSource` is one without a model, for tests and benchmarks).
One *request* is one call ``fn(params, tasks, seed, version)``; the learner's batch is
``requests_per_batch`` requests, taken in the order the request stream yields them. Per learner step
(``V`` the current version, ``s = max_staleness``, ``k = requests_per_batch``)::

    publish(params, V):  params -> object store once (ray.put); admit requests while fewer than
                         (s + 1) k are pending; dispatch admitted requests to idle actors with params V
    next():              wait for the first k pending requests; drop (and count) any result with
                         V - version > s and generate it again; return their trajectories in order

Staleness bound: a request admitted at version V sits among the first (s + 1) k pending, so it is
taken within s + 1 batches; with one ``publish`` per batch (the trainer loop) its lag is at most s,
so admission prevents stale batches. A learner that publishes several versions between two batches
would exceed it: those results are dropped (``info["dropped_stale"]``) and regenerated, never handed
over. ``sync`` mode admits and dispatches only inside ``next()``, so every request runs with the
current parameters: the batch equals calling ``fn`` in this process with the same params, tasks
and seeds in the same order, bit for bit (``actors=0`` is that in-process loop).

Every trajectory carries the version that generated it and ``uid = "{request id}-{index}"``; its
``group`` is renumbered per batch, one group per (request, the source's group) in order of
appearance, so requests whose sources number their groups from 0 never merge in group-relative
advantages.

Faults: an actor whose process dies is killed, replaced (its ``build`` runs again) and its lost
requests are dispatched again under the same ids, so nothing is counted twice; a request whose
rollout raises is dispatched again too, and with ``request_timeout_s`` an actor that gives no result
in time is killed and handled as dead. A request that fails more than ``max_restarts`` times ends
the run with :class:`RolloutFailed` (a ``UsageError``: one sentence, exit code 2), never a hang.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any

import jax
import numpy as np

from longhorizon.engine.ray import (ADDRESS, MODES, RayOptions, actor_died, await_placement, configure_actor_jax,
                                    connect_ray, driver_compile_settings)
from longhorizon.errors import UsageError
from longhorizon.lm.agents.trajectory import TokenSequence, Trajectory, Turn

_COUNTED = ("retries", "actor_restarts", "dropped_stale")  # run-long counters; info reports each call's share
_MINIMUM = {"actors": 0, "max_staleness": 0, "requests_per_batch": 1, "inflight_per_actor": 1, "max_restarts": 0,
            "actor_cpus": 0, "actor_gpus": 0, "placement_timeout_s": 0, "request_timeout_s": 0}


class RolloutFailed(UsageError):
    """Rollouts cannot go on: a request failed more than ``max_restarts`` times, or a source's build failed."""


@dataclasses.dataclass(frozen=True)
class Config:
    actors: int = 2  # Ray actors generating trajectories; 0: generate in this process (the in-process loop)
    mode: str = "sync"  # sync: every batch with the current parameters; async: actors generate ahead
    max_staleness: int = 0  # async: largest version lag of a trajectory the learner receives
    requests_per_batch: int = 1  # k: requests (rollout-function calls) per learner batch
    inflight_per_actor: int = 2  # requests queued on one actor at once (one running, one ready to start)
    max_restarts: int = 3  # retries of one request (its actor died or its rollout raised) before giving up
    address: str = "local"  # local | auto | HOST:PORT | ray://HOST:PORT, as the Ray engine
    actor_cpus: float = 1.0
    actor_gpus: float = 0.0
    placement_timeout_s: float = 300.0
    request_timeout_s: float = 0.0  # > 0: an attempt without a result this long after dispatch is a dead actor

    def __post_init__(self):
        if self.mode not in MODES:
            raise UsageError(f"mode must be sync or async (got '{self.mode}'); pass mode='sync' or mode='async'.")
        for name, low in _MINIMUM.items():
            if not getattr(self, name) >= low:
                raise UsageError(f"{name} must be at least {low} (got {getattr(self, name)}); pass {name}={low} or more.")
        if self.mode == "sync" and self.max_staleness:
            raise UsageError(f"max_staleness={self.max_staleness} applies to mode='async' only; drop it or pass "
                             f"mode='async'.")
        if self.mode == "async" and self.actors == 0:
            raise UsageError("mode='async' generates on Ray actors, so actors=0 is refused; pass actors=1 or more.")
        if not ADDRESS.match(self.address):
            raise UsageError(f"address '{self.address}' is not local, auto, HOST:PORT or ray://HOST:PORT; pass "
                             f"address='local' for a private instance on this machine.")

    def ray_options(self) -> RayOptions:
        return RayOptions(actors=self.actors, address=self.address, mode=self.mode, max_staleness=self.max_staleness,
                          actor_cpus=self.actor_cpus, actor_gpus=self.actor_gpus,
                          placement_timeout_s=self.placement_timeout_s)


# ----------------------------------------------------------------------------- requests
@dataclasses.dataclass
class Request:
    """One call of the rollout function, and the state of its current attempt."""

    id: int
    tasks: list
    seed: int
    attempts: int = 0
    version: int = -1  # parameter version of the current (or finished) attempt
    actor: int = -1  # actor running it (-1: not dispatched)
    ref: Any = None  # Ray object reference of the attempt in flight
    dispatched: float = 0.0  # time.monotonic() of the attempt's dispatch
    result: list[Trajectory] | None = None


def group_requests(tasks: Iterable[dict], num_generations: int, seed: int = 0) -> Iterator[tuple[list[dict], int]]:
    """The GRPO request stream: request ``i`` is ``num_generations`` copies of task ``i`` (one group) with seed
    ``seed + i``; cycles over ``tasks`` forever."""
    tasks = list(tasks)
    if not tasks or num_generations < 1:
        raise UsageError("group_requests needs at least one task and num_generations >= 1; pass both.")
    for i, task in enumerate(itertools.cycle(tasks)):
        yield [task] * num_generations, seed + i


def generate(fn, params: Any, request_id: int, tasks: list, seed: int, version: int) -> list[Trajectory]:
    """``fn(params, tasks, seed, version)``, every trajectory stamped with the version and ``uid = id-index``."""
    trajectories = list(fn(params, tasks, seed, version))
    for index, trajectory in enumerate(trajectories):
        trajectory.version, trajectory.uid = version, f"{request_id}-{index}"
    return trajectories


def _cause(error: BaseException) -> str:
    """``Type: message`` of what raised inside an actor (its last traceback line for a failed actor start)."""
    if getattr(error, "error_msg", None):  # the actor's creation task (the source's build) raised
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in error.error_msg.splitlines()]
        return next((line for line in reversed(lines) if line), type(error).__name__).rstrip(".")
    cause = getattr(error, "cause", None) or error
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[-1].rstrip('.')}" if text else type(cause).__name__


# ----------------------------------------------------------------------------- the actor
class RolloutWorker:
    """One Ray actor: builds the rollout function once, then generates requests with the parameters given."""

    def __init__(self, source: Any, compile_settings: dict[str, Any]):
        configure_actor_jax(compile_settings)
        self.fn = source.build()

    def pid(self) -> int:
        import os

        return os.getpid()

    def generate(self, params: Any, request_id: int, tasks: list, seed: int, version: int) -> list[Trajectory]:
        return generate(self.fn, params, request_id, tasks, seed, version)


# ----------------------------------------------------------------------------- the learner's side
class Rollouts:
    """Batches of trajectories for a learner: ``publish(params, version)``, ``next() -> (trajectories, info)``.

    ``requests`` yields ``(tasks, seed)`` pairs (e.g. :func:`group_requests`). The trainer loop::

        rollouts.publish(params, 0)
        for step in range(steps):
            trajectories, info = rollouts.next()
            params = train(params, trajectories)
            rollouts.publish(params, step + 1)
        rollouts.close()
    """

    def __init__(self, source: Any, requests: Iterable[tuple[list[dict], int]], config: Config = Config()):
        if not callable(getattr(source, "build", None)):
            raise UsageError(f"a rollout source needs a build() method returning fn(params, tasks, seed, version); "
                             f"{type(source).__name__} has none.")
        self.source, self.config = source, config
        self._requests = iter(requests)
        self._ids = itertools.count()
        self._pending: collections.deque[Request] = collections.deque()  # admitted, in the order batches take them
        self._head: list[Request] = []  # the batch next() is waiting for (no longer pending)
        self._version: int | None = None
        self._params: Any = None  # on host (numpy leaves): what every request of this version gets
        self._params_ref: Any = None
        self.retries = self.actor_restarts = self.dropped_stale = 0
        self._exhausted = False
        self._fn = None  # in-process (actors=0)
        self._workers: list[Any] = []
        self._ray_started = False
        if config.actors == 0:
            self._fn = source.build()
        else:
            self._start()

    # ------------------------------------------------------------------ the learner-facing API
    def publish(self, params: Any, version: int) -> None:
        """Make ``params`` the current policy, version ``version`` (strictly increasing); in async mode the
        actors start on new requests with it right away."""
        if self._version is not None and version <= self._version:
            raise UsageError(f"publish needs increasing versions (got {version} after {self._version}); pass "
                             f"version={self._version + 1}.")
        self._version, self._params = int(version), jax.device_get(params)
        self._params_ref = None
        if self._workers:
            import ray

            self._params_ref = ray.put(self._params)  # once per version; requests pass the reference
            if self.config.mode == "async":
                self._admit()
                self._dispatch()

    def next(self) -> tuple[list[Trajectory], dict]:
        """The next batch: the trajectories of the next ``requests_per_batch`` requests, in request order, and
        ``info``: ``request_ids``, per trajectory ``versions`` and ``lags`` (current version - version),
        ``staleness_max``/``_mean``, and during this call: ``retries`` (requests dispatched again),
        ``actor_restarts``, ``dropped_stale`` (results too old to hand over, generated again) and
        ``wait_seconds``. The attributes ``retries``, ``actor_restarts``, ``dropped_stale`` count the whole run.
        Raises ``StopIteration`` when the request stream is exhausted."""
        if self._version is None:
            raise UsageError("rollouts need parameters before the first batch; call publish(params, 0) first.")
        start, before = time.perf_counter(), {name: getattr(self, name) for name in _COUNTED}
        self._admit()
        head = [self._pending.popleft() for _ in range(min(self.config.requests_per_batch, len(self._pending)))]
        if not head:
            raise StopIteration
        if self._fn is not None:
            for request in head:
                request.version = self._version
                request.result = generate(self._fn, self._params, request.id, request.tasks, request.seed,
                                          self._version)
        else:
            self._await(head)
        groups: dict[tuple[int, Any], int] = {}
        for request in head:  # one batch-wide group per (request, the source's group): sources may number from 0
            for t in request.result:
                t.group = groups.setdefault((request.id, t.group), len(groups))
        trajectories = [t for request in head for t in request.result]
        versions = [t.version for t in trajectories]
        lags = [self._version - v for v in versions]
        info = {"request_ids": [r.id for r in head], "trajectories": len(trajectories), "versions": versions,
                "lags": lags, "staleness_max": max(lags, default=0),
                "staleness_mean": float(np.mean(lags)) if lags else 0.0,
                **{name: getattr(self, name) - then for name, then in before.items()},
                "wait_seconds": time.perf_counter() - start}
        return trajectories, info

    def warm_up(self, params: Any, tasks: list, seed: int = 0) -> float:
        """Run ``fn(params, tasks, seed)`` once on every actor (``actors=0``: here) and discard the trajectories,
        so each process compiles its programs before training (or a benchmark's clock) starts; nothing
        is published or counted. Returns the seconds it took."""
        start, params = time.perf_counter(), jax.device_get(params)
        if self._fn is not None:
            generate(self._fn, params, -1, list(tasks), seed, 0)
        else:
            import ray

            ref = ray.put(params)
            ray.get([w.generate.remote(ref, -1, list(tasks), seed, 0) for w in self._workers])
        return time.perf_counter() - start

    def __iter__(self) -> Iterator[tuple[list[Trajectory], dict]]:
        while True:
            try:
                yield self.next()
            except StopIteration:
                return

    def close(self) -> None:
        """Kill the actors this object started (by handle); shut Ray down if it started Ray."""
        if self._workers or self._ray_started:
            import ray

            for worker in self._workers:
                try:
                    ray.kill(worker)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            self._workers = []
            if self._ray_started:
                ray.shutdown()
                self._ray_started = False

    def __enter__(self) -> "Rollouts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def actor_pids(self) -> list[int]:
        """Process ids of the actors (e.g. to watch or to kill one)."""
        import ray

        return ray.get([w.pid.remote() for w in self._workers])

    # ------------------------------------------------------------------ admission and dispatch
    def _admit(self) -> None:
        """Take requests from the stream while fewer than (s + 1) k are pending (sync: k)."""
        limit = (self.config.max_staleness + 1) * self.config.requests_per_batch
        while len(self._pending) < limit and not self._exhausted:
            try:
                tasks, seed = next(self._requests)
            except StopIteration:
                self._exhausted = True
                break
            self._pending.append(Request(next(self._ids), list(tasks), int(seed)))

    def _dispatch(self, requests: Iterable[Request] | None = None) -> None:
        """Give admitted requests without an attempt, in order, to the least loaded actors with room."""
        load = collections.Counter(r.actor for r in self._all_requests() if r.ref is not None)
        for request in self._pending if requests is None else requests:
            if request.ref is not None or request.result is not None:
                continue
            actor = min(range(len(self._workers)), key=lambda i: (load[i], i))
            if load[actor] >= self.config.inflight_per_actor:
                return
            load[actor] += 1
            request.attempts += 1
            request.actor, request.version, request.dispatched = actor, self._version, time.monotonic()
            request.ref = self._workers[actor].generate.remote(self._params_ref, request.id, request.tasks,
                                                               request.seed, self._version)

    def _all_requests(self) -> list[Request]:
        return [*self._head, *self._pending]

    def _await(self, head: list[Request]) -> None:
        """Wait until every request of ``head`` has a result at most ``max_staleness`` versions old."""
        import ray

        self._head = head
        try:
            while True:
                for request in head:
                    if request.result is not None and self._version - request.version > self.config.max_staleness:
                        request.result, request.actor = None, -1  # too old to learn from: generate it again
                        self.dropped_stale += 1
                if all(r.result is not None for r in head):
                    return
                self._dispatch(head)
                self._dispatch()
                flying = {r.ref: r for r in self._all_requests() if r.ref is not None}
                timeout = self.config.request_timeout_s or None
                if timeout:  # wake up when the oldest attempt runs out of time
                    timeout = max(0.0, min(r.dispatched for r in flying.values()) + timeout - time.monotonic())
                ready, _ = ray.wait(list(flying), num_returns=1, timeout=timeout)
                if ready:
                    self._receive(flying[ready[0]])
                else:  # a hung actor: kill it, as if it had died (replaced, its requests retried)
                    late = min(flying.values(), key=lambda r: r.dispatched)
                    late.ref = None
                    self._replace(late.actor, TimeoutError(f"no result within request_timeout_s="
                                                           f"{self.config.request_timeout_s:g} s"), late)
        finally:
            self._head = []

    def _receive(self, request: Request) -> None:
        import ray

        ref, request.ref = request.ref, None
        try:
            request.result = ray.get(ref)
        except Exception as error:  # noqa: BLE001 - a dead actor or a rollout that raised: both are retried
            if actor_died(error):
                self._replace(request.actor, error, request)
            else:
                self._retry(request, error)

    def _retry(self, request: Request, error: BaseException) -> None:
        request.actor = -1
        self.retries += 1
        if request.attempts > self.config.max_restarts:
            what = "its actor's process died" if actor_died(error) else _cause(error)
            self.close()
            times = f"{request.attempts} time{'s' * (request.attempts > 1)}"
            raise RolloutFailed(f"rollout request {request.id} failed {times} (last: {what}); run the source's build() "
                                f"and fn in-process to see why, or raise max_restarts (now "
                                f"{self.config.max_restarts}).") from error

    # ------------------------------------------------------------------ Ray
    def _start(self) -> None:
        self._ray_started = connect_ray(self.config.ray_options())
        self._workers = [self._new_worker() for _ in range(self.config.actors)]
        self._placed(self._workers)

    def _new_worker(self):
        import ray

        remote = ray.remote(num_cpus=self.config.actor_cpus, num_gpus=self.config.actor_gpus,
                            max_restarts=0, max_task_retries=0)(RolloutWorker)
        return remote.remote(self.source, driver_compile_settings())

    def _placed(self, workers: list[Any]) -> None:
        """Wait for Ray to start the actors (each builds the rollout function); a build that fails ends the run."""
        try:
            await_placement(workers, self.config.ray_options(), on_refusal=self.close)
        except UsageError:
            raise
        except Exception as error:  # noqa: BLE001 - the source's build() raised inside the actor
            self.close()
            raise RolloutFailed(f"the rollout source's build() failed on a Ray actor ({_cause(error)}); run "
                                f"{type(self.source).__name__}(...).build() in-process to see why.") from error

    def _replace(self, index: int, error: BaseException, failed: Request) -> None:
        """Actor ``index`` died: start another in its place and retry every request it held."""
        import ray

        try:
            ray.kill(self._workers[index])
        except Exception:  # noqa: BLE001 - already gone
            pass
        lost = [r for r in self._all_requests() if r.actor == index and (r.ref is not None or r is failed)]
        for request in lost:
            request.ref = None
        self.actor_restarts += 1
        for request in lost:
            self._retry(request, error)
        self._workers[index] = self._new_worker()
        self._placed([self._workers[index]])


# ----------------------------------------------------------------------------- a source without a model
@dataclasses.dataclass(frozen=True)
class SyntheticSource:
    """Trajectories without a model, for tests and benchmarks: ``turns`` rounds of ``tokens_per_turn`` action and
    observation tokens, each environment turn sleeping ``latency_s``. Deterministic in (params, task, seed):
    token ids come from ``numpy.random.default_rng([seed, index])``, the log-probabilities are
    ``-|sum(params)| * u`` with ``u ~ U[0, 1)`` from the same stream, the reward ``mean(logprobs) + index``."""

    turns: int = 3
    tokens_per_turn: int = 8
    latency_s: float = 0.0

    def build(self):
        return self.rollout

    def rollout(self, params: Any, tasks: list[dict], seed: int, version: int) -> list[Trajectory]:
        scale = abs(float(sum(np.sum(np.asarray(leaf, np.float64)) for leaf in jax.tree.leaves(params))))
        out = []
        for index, task in enumerate(tasks):
            rng = np.random.default_rng([seed, index])
            n = self.tokens_per_turn
            # a 4-token prompt, then per turn n action tokens (sampled) and n observation tokens
            tokens, mask, logprobs, turn_ids = [rng.integers(0, 256, 4)], [np.zeros(4, bool)], [np.zeros(4)], [np.full(4, -1)]
            turns = []
            for t in range(self.turns):
                time.sleep(self.latency_s)  # the environment's turn (a tool call)
                action, observation = rng.integers(0, 256, n), rng.integers(0, 256, n)
                tokens += [action, observation]
                mask += [np.ones(n, bool), np.zeros(n, bool)]
                logprobs += [-scale * rng.random(n), np.zeros(n)]
                turn_ids += [np.full(2 * n, t)]
                turns.append(Turn(action=f"turn {t}", observation=f"observation {t}"))
            sequence = TokenSequence(np.concatenate(tokens), np.concatenate(mask), np.concatenate(logprobs),
                                     np.concatenate(turn_ids))
            reward = float(sequence.logprobs[sequence.action_mask].mean()) + index if self.turns else float(index)
            out.append(Trajectory(group=int(task.get("group", 0)), sequences=[sequence], turns=turns, reward=reward,
                                  version=version, task=task))
        return out
