"""Asynchronous rollouts of multi-turn trajectories on Ray: sync == in-process, the staleness bound, faults.

The Ray tests share the test session's one Ray instance on loopback (``ray_session``,
tests/ray_fixture.py: a private network namespace, usage statistics and the dashboard off, ended with
``ray.shutdown()``). Sources defined here are pickled by value, so Ray's worker processes need not
import this test module.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.agents.async_rollout import (Config, RolloutFailed, Rollouts, SyntheticSource, generate,
                                                 group_requests)

pytestmark = pytest.mark.xdist_group("ray")  # one Ray instance: keep these tests on one worker (--dist loadgroup)

TASKS = [{"prompt": f"task {i}", "group": i} for i in range(5)]


def _params(version: int) -> dict:
    return {"w": np.full(3, 0.5 + version, np.float32), "b": np.float32(version)}


def _bits(value):
    """A comparable form of trajectories: every dataclass field, every array as (dtype, shape, bytes)."""
    if isinstance(value, np.ndarray):
        return value.dtype.str, value.shape, value.tobytes()
    if dataclasses.is_dataclass(value):
        return type(value).__name__, [(f.name, _bits(getattr(value, f.name))) for f in dataclasses.fields(value)]
    if isinstance(value, (list, tuple)):
        return [_bits(v) for v in value]
    if isinstance(value, dict):
        return sorted((k, _bits(v)) for k, v in value.items())
    return type(value).__name__, repr(value)


def _same(a, b) -> bool:
    """Bit-for-bit equality of (lists of) trajectories."""
    return _bits(a) == _bits(b)


def _reference(source, requests, params_by_batch, k):
    """The in-process loop written out: fn called in order with the same params, tasks and seeds; groups
    renumbered per batch (one per request and source group, in order)."""
    fn, out, requests = source.build(), [], iter(requests)
    for version, params in enumerate(params_by_batch):
        batch = []
        for _ in range(k):
            request_id = len(out) * k + len(batch)
            tasks, seed = next(requests)
            batch.append(generate(fn, params, request_id, tasks, seed, version))
        groups = {}
        for r, request in enumerate(batch):
            for t in request:
                t.group = groups.setdefault((r, t.group), len(groups))
        out.append([t for request in batch for t in request])
    return out


@dataclasses.dataclass(frozen=True)
class GatedSource(SyntheticSource):
    """A request whose seed is in ``gated_seeds`` writes ``started-{seed}`` (holding its process id) and then waits
    until the file ``open`` exists in ``marker_dir``: a test kills its actor while it provably is mid-trajectory,
    then opens the gate, with no sleep deciding who wins (the 120 s bound only keeps a broken test from hanging)."""

    marker_dir: str = ""
    gated_seeds: tuple[int, ...] = ()

    def rollout(self, params, tasks, seed, version):
        if seed in self.gated_seeds:
            Path(self.marker_dir, f"started-{seed}").write_text(str(os.getpid()))
            _wait_for(Path(self.marker_dir, "open").exists, what="the test to open the gate")
        return super().rollout(params, tasks, seed, version)


def _wait_for(condition, what: str, limit_s: float = 120.0) -> None:
    """Poll ``condition`` until it holds: an event to wait for, not a guess of how long something takes."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {limit_s:g} s for {what}"
        time.sleep(0.01)


def _started_pid(marker_dir: Path, seed: int) -> int:
    """The process id of the actor that started the gated request ``seed`` (waits until one has)."""
    marker = marker_dir / f"started-{seed}"
    _wait_for(lambda: marker.exists() and marker.read_text() != "", what=f"request with seed {seed} to start")
    return int(marker.read_text())


def _wait_until_done(rollouts: Rollouts, request_ids) -> None:
    """Block until the actors have finished these dispatched requests (results waiting in Ray's object store)."""
    import ray

    if not request_ids:
        return
    refs = [r.ref for r in rollouts._pending if r.id in request_ids and r.ref is not None]
    assert len(refs) == len(request_ids), "those requests are not in flight"
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=120)
    assert len(ready) == len(refs), f"requests {request_ids} did not finish within 120 s"


def _wait_until_idle(rollouts: Rollouts) -> None:
    """Block until every request in flight has finished: the actors ran as far ahead as admission lets them."""
    _wait_until_done(rollouts, [r.id for r in rollouts._pending if r.ref is not None])


@dataclasses.dataclass(frozen=True)
class DyingSource(SyntheticSource):
    def rollout(self, params, tasks, seed, version):
        os._exit(1)  # the actor's process dies on every attempt


@dataclasses.dataclass(frozen=True)
class RaisingSource(SyntheticSource):
    def rollout(self, params, tasks, seed, version):
        raise ValueError("the tool server is unreachable.")


@dataclasses.dataclass(frozen=True)
class BrokenBuild:
    def build(self):
        raise RuntimeError("no model here")


@pytest.fixture(scope="module")
def ray_local(ray_session):
    """The session's Ray instance (tests/ray_fixture.py), with this module's sources pickled by value."""
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_session


# ----------------------------------------------------------------------------- without Ray
@pytest.mark.parametrize("fields, message", [
    (dict(mode="fast"), "mode must be sync or async"),
    (dict(mode="sync", max_staleness=1), "applies to mode='async' only"),
    (dict(mode="async", actors=0), "actors=0 is refused"),
    (dict(actors=-1), r"actors must be at least 0 \(got -1\); pass actors=0 or more"),
    (dict(mode="async", max_staleness=-1), "max_staleness must be at least 0"),
    (dict(requests_per_batch=0), "requests_per_batch must be at least 1"),
    (dict(inflight_per_actor=0), "inflight_per_actor must be at least 1"),
    (dict(max_restarts=-2), "max_restarts must be at least 0"),
    (dict(actor_gpus=-1.0), "actor_gpus must be at least 0"),
    (dict(actor_cpus=float("nan")), r"actor_cpus must be at least 0 \(got nan\)"),
    (dict(address="my cluster"), "address 'my cluster' is not local"),
])
def test_invalid_configs_are_refused_in_one_sentence(fields, message):
    with pytest.raises(UsageError, match=message) as error:
        Config(**fields)
    assert str(error.value).count(". ") == 0 and str(error.value).endswith(".")


def test_in_process_loop_is_the_rollout_function_called_in_order():
    source, k = SyntheticSource(turns=2, tokens_per_turn=3), 2
    rollouts = Rollouts(source, group_requests(TASKS, 2, seed=7), Config(actors=0, requests_per_batch=k))
    got = []
    for version in range(3):
        rollouts.publish(_params(version), version)
        trajectories, info = rollouts.next()
        assert info["versions"] == [version] * 4 and info["staleness_max"] == 0 and info["retries"] == 0
        assert info["request_ids"] == [2 * version, 2 * version + 1]
        got.append(trajectories)
    assert _same(got, _reference(source, group_requests(TASKS, 2, seed=7), [_params(v) for v in range(3)], k))
    assert [t.uid for t in got[1]] == ["2-0", "2-1", "3-0", "3-1"]
    assert [t.group for t in got[1]] == [0, 0, 1, 1]  # one group per request (the source's groups were 2 and 3)
    rollouts.warm_up(_params(5), TASKS, seed=1)
    assert rollouts.next()[1]["request_ids"] == [6, 7]  # warm_up took no request and no id
    # the content depends on params and seed (so the equality checks above mean something)
    fn = source.build()
    assert not _same(fn(_params(0), TASKS[:1], 7, 0), fn(_params(1), TASKS[:1], 7, 0))
    assert not _same(fn(_params(0), TASKS[:1], 7, 0), fn(_params(0), TASKS[:1], 8, 0))


def test_groups_are_one_per_request_and_source_group():
    """Request 0 holds source groups 0, 1, 0 and request 1 source group 0 again: batch groups 0, 1, 0, 2."""
    requests = [([TASKS[0], TASKS[1], TASKS[0]], 0), ([TASKS[0]], 1)]
    rollouts = Rollouts(SyntheticSource(turns=1), requests, Config(actors=0, requests_per_batch=2))
    rollouts.publish(_params(0), 0)
    trajectories, _ = rollouts.next()
    assert [t.group for t in trajectories] == [0, 1, 0, 2] and [t.uid for t in trajectories] == ["0-0", "0-1", "0-2", "1-0"]


def test_synthetic_source_by_hand():
    """One task, one turn of 2 tokens, params summing to 2: tokens [4 prompt, 2 action, 2 observation], action mask
    on the middle two, log-probs -2 u for the two uniforms drawn after the tokens, reward their mean + index."""
    (trajectory,) = SyntheticSource(turns=1, tokens_per_turn=2).rollout({"a": np.array([1.5, 0.5])}, [{}], 3, 0)
    rng = np.random.default_rng([3, 0])
    prompt, action, observation, u = rng.integers(0, 256, 4), rng.integers(0, 256, 2), rng.integers(0, 256, 2), rng.random(2)
    (sequence,) = trajectory.sequences
    assert sequence.tokens.tolist() == [*prompt, *action, *observation]
    assert sequence.action_mask.tolist() == [False] * 4 + [True, True, False, False]
    assert sequence.turn.tolist() == [-1] * 4 + [0] * 4
    np.testing.assert_allclose(sequence.logprobs[4:6], -2.0 * u, rtol=1e-6)
    assert trajectory.reward == pytest.approx(float(np.mean(np.float32(-2.0 * u))), rel=1e-6)


def test_misuse_is_refused():
    rollouts = Rollouts(SyntheticSource(), group_requests(TASKS, 1), Config(actors=0))
    with pytest.raises(UsageError, match=r"call publish\(params, 0\) first"):
        rollouts.next()
    rollouts.publish(_params(0), 3)
    with pytest.raises(UsageError, match="increasing versions \\(got 3 after 3\\); pass version=4"):
        rollouts.publish(_params(0), 3)
    with pytest.raises(UsageError, match="needs a build\\(\\) method"):
        Rollouts(object(), [], Config(actors=0))
    finite = Rollouts(SyntheticSource(), [([{}], 0), ([{}], 1), ([{}], 2)], Config(actors=0, requests_per_batch=2))
    finite.publish(_params(0), 0)
    assert [info["request_ids"] for _, info in finite] == [[0, 1], [2]]  # the last batch is partial, then it ends


# ----------------------------------------------------------------------------- on Ray
@pytest.mark.slow
def test_sync_equals_in_process_bit_for_bit(ray_local):
    source, k = SyntheticSource(turns=2, tokens_per_turn=4, latency_s=0.01), 3
    params = [_params(v) for v in range(3)]
    with Rollouts(source, group_requests(TASKS, 2, seed=11), Config(actors=2, requests_per_batch=k)) as rollouts:
        assert rollouts.warm_up(_params(9), TASKS[:2], seed=5) > 0  # runs on both actors; nothing published or counted
        got = []
        for version, p in enumerate(params):
            rollouts.publish(p, version)
            trajectories, info = rollouts.next()
            assert info["lags"] == [0] * 6 and info["actor_restarts"] == 0
            got.append(trajectories)
        assert len(set(rollouts.actor_pids())) == 2
    assert _same(got, _reference(source, group_requests(TASKS, 2, seed=11), params, k))


@pytest.mark.slow
def test_async_lags_by_hand_with_one_actor(ray_local):
    """s = 1, k = 1, one actor holding 2 requests: publish(0) admits requests 0 and 1 (both with version 0);
    every later publish(V) admits one more, dispatched with V. So batch t (learned at version t) holds request
    t generated at versions 0, 0, 1, 2, 3: lags 0, 1, 1, 1, 1, never above s. Then the learner publishes 5 and
    6 before its next batch: request 5 (made with version 4, lag 2 > s) is dropped, counted and generated again
    with version 6, never handed over."""
    config = Config(actors=1, mode="async", max_staleness=1, requests_per_batch=1, inflight_per_actor=2)
    source = SyntheticSource(turns=1, latency_s=0.05)
    with Rollouts(source, group_requests(TASKS, 1), config) as rollouts:
        versions, lags, ids = [], [], []
        for version in range(5):
            rollouts.publish(_params(version), version)
            trajectories, info = rollouts.next()
            versions += info["versions"]
            lags += info["lags"]
            ids += info["request_ids"]
            assert [t.version for t in trajectories] == info["versions"] and info["dropped_stale"] == 0
        assert versions == [0, 0, 1, 2, 3] and lags == [0, 1, 1, 1, 1] and ids == [0, 1, 2, 3, 4]
        rollouts.publish(_params(5), 5)
        _wait_until_done(rollouts, [5])  # request 5 (version 4) is finished before version 6 exists
        rollouts.publish(_params(6), 6)
        trajectories, info = rollouts.next()
        assert info["request_ids"] == [5] and info["versions"] == [6] and info["dropped_stale"] == 1
        assert rollouts.next()[1]["lags"] == [1]  # request 6, dispatched at publish(5)
    (expected,) = generate(source.build(), _params(6), 5, [TASKS[0]], 5, 6)
    expected.group = 0
    assert _same(trajectories, [expected])


@pytest.mark.slow
def test_async_actors_run_ahead_within_max_staleness(ray_local):
    """Two actors run ahead (s = 2) while the learner trains: lags above 0 occur, none above s, every uid once.
    The learner's "training" waits until the actors have finished all they hold, so they run ahead as far as
    admission allows whatever the machine's load; lags above 0 need no timing: publish(0) dispatches requests
    0-3 (two per actor) with version 0, and batch 1 (requests 2 and 3) is learned at version 1."""
    config = Config(actors=2, mode="async", max_staleness=2, requests_per_batch=2)
    seen, lags = [], []
    with Rollouts(SyntheticSource(turns=2, latency_s=0.03), group_requests(TASKS, 2), config) as rollouts:
        for version in range(6):
            rollouts.publish(_params(version), version)
            trajectories, info = rollouts.next()
            assert all(0 <= lag <= 2 for lag in info["lags"]) and info["dropped_stale"] == 0
            seen += [t.uid for t in trajectories]
            lags += info["lags"]
            _wait_until_idle(rollouts)  # training
    assert len(seen) == len(set(seen)) == 6 * 2 * 2
    assert max(lags) > 0  # acting really ran ahead: requests 2 and 3 were dispatched with version 0


@pytest.mark.slow
def test_a_worker_killed_mid_trajectory_is_replaced_and_its_request_retried(ray_local, tmp_path):
    """Sync, 2 actors: actor 1's process is killed by its pid while it waits inside the source (the second
    batch's requests are gated until the kill); it is replaced, its request generated again under the same
    ids, and the batch still equals the in-process loop bit for bit (no trajectory lost or counted twice)."""
    source, k = GatedSource(turns=2, latency_s=0.01, marker_dir=str(tmp_path), gated_seeds=(2, 3)), 2
    with Rollouts(source, group_requests(TASKS, 2), Config(actors=2, requests_per_batch=k)) as rollouts:
        rollouts.publish(_params(0), 0)
        first, info = rollouts.next()
        assert info["retries"] == 0
        victim = rollouts.actor_pids()[1]

        def kill_when_busy():  # next() dispatches batch 2 and waits: kill the victim inside its request
            _wait_for(lambda: any(m.read_text() == str(victim) for m in tmp_path.glob("started-*")),
                      what="the victim to start a request")
            os.kill(victim, signal.SIGKILL)
            (tmp_path / "open").touch()

        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        rollouts.publish(_params(1), 1)
        second, info = rollouts.next()
        killer.join()
        assert info["actor_restarts"] == 1 and info["retries"] == 1
        assert victim not in rollouts.actor_pids()
    assert _same([first, second], _reference(source, group_requests(TASKS, 2), [_params(0), _params(1)], k))
    uids = [t.uid for t in first + second]
    assert len(uids) == len(set(uids)) == 2 * k * 2


@pytest.mark.slow
def test_async_ray_kill_mid_run_counts_every_request_once(ray_local, tmp_path):
    """Async, s = 1: after publish(1) the actor holding request 4 is killed (ray.kill) while request 4 waits at
    a gate inside it; it is replaced once, and every request's trajectories arrive exactly once."""
    config = Config(actors=2, mode="async", max_staleness=1, requests_per_batch=2)
    source = GatedSource(turns=2, latency_s=0.01, marker_dir=str(tmp_path), gated_seeds=(4,))
    uids = []
    with Rollouts(source, group_requests(TASKS, 3), config) as rollouts:
        pids, restarts = rollouts.actor_pids(), 0
        for version in range(4):
            rollouts.publish(_params(version), version)
            if version == 1:  # publish(1) dispatched request 4 (seed 4); kill its actor inside it
                ray_local.kill(rollouts._workers[pids.index(_started_pid(tmp_path, 4))])
                (tmp_path / "open").touch()
            trajectories, info = rollouts.next()
            restarts += info["actor_restarts"]
            assert max(info["lags"]) <= 1
            uids += [t.uid for t in trajectories]
    assert restarts == 1
    assert len(uids) == len(set(uids)) == 4 * 2 * 3
    assert sorted({int(u.split("-")[0]) for u in uids}) == list(range(8))


@pytest.mark.slow
def test_an_actor_that_dies_on_every_attempt_ends_the_run_in_one_sentence(ray_local):
    rollouts = Rollouts(DyingSource(), group_requests(TASKS, 1), Config(actors=1, max_restarts=1))
    rollouts.publish(_params(0), 0)
    with pytest.raises(RolloutFailed, match=r"rollout request 0 failed 2 times \(last: its actor's process died\)") as error:
        rollouts.next()
    assert str(error.value).count(". ") == 0 and rollouts._workers == [] and ray_local.is_initialized()


@pytest.mark.slow
def test_a_source_that_raises_every_time_is_retried_then_named(ray_local):
    rollouts = Rollouts(RaisingSource(), group_requests(TASKS, 1), Config(actors=1, max_restarts=2))
    rollouts.publish(_params(0), 0)
    with pytest.raises(RolloutFailed, match=r"failed 3 times \(last: ValueError: the tool server is unreachable\)"):
        rollouts.next()
    assert rollouts.retries == 3 and rollouts.actor_restarts == 0


@pytest.mark.slow
def test_a_hung_actor_is_killed_after_request_timeout_s(ray_local):
    """The source sleeps 60 s per turn; with request_timeout_s=1 the actor is killed and replaced, then the run
    ends (max_restarts=0: no retry) with one sentence naming the timeout, instead of waiting. No clock is
    checked: had next() waited for the source, it would have returned the trajectories and raised nothing."""
    config = Config(actors=1, max_restarts=0, request_timeout_s=1.0)
    rollouts = Rollouts(SyntheticSource(turns=1, latency_s=60.0), group_requests(TASKS, 1), config)
    rollouts.publish(_params(0), 0)
    with pytest.raises(RolloutFailed, match=r"failed 1 time \(last: TimeoutError: no result within "
                                            r"request_timeout_s=1 s\)") as error:
        rollouts.next()
    assert rollouts.actor_restarts == 1 and str(error.value).count(". ") == 0


@pytest.mark.slow
def test_a_build_that_fails_is_one_sentence(ray_local):
    with pytest.raises(RolloutFailed, match=r"build\(\) failed on a Ray actor \(RuntimeError: no model here\)") as error:
        Rollouts(BrokenBuild(), group_requests(TASKS, 1), Config(actors=1))
    assert str(error.value).count(". ") == 0
