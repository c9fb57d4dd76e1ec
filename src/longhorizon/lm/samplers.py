"""Problem samplers: what the RL loop (:func:`longhorizon.lm.run.run_rl`) trains on next.

A run names its sampler by a frozen *spec* (settings only, written to ``config.json``); the loop
calls ``spec.check(steps, evaluation)`` before anything loads, then ``spec.build()`` for the
stateful sampler it drives. The sampler protocol is small on purpose:

``sample(n) -> (items, group_sizes)``
    The next generation batch: ``n`` items (a sampler that sizes its own batches, sGPO, may return
    another number) and their group sizes, or ``None`` for ``num_generations`` each. An item is
    whatever the trainer's reward function scores; it needs ``.prompt`` (str), and the built-in
    verifier and :func:`longhorizon.lm.evaluate.evaluate` read a :class:`longhorizon.lm.tasks.Problem`.
``observe(metrics, evaluation) -> dict``
    Called after every step with the trainer's metrics and, on steps with a held-out evaluation,
    its result (else ``None``); advances the sampler and returns fields for the metrics row.
``state() -> dict`` / ``restore(state)``
    Everything ``sample`` and ``observe`` will read, as JSON (numpy generators via
    :func:`longhorizon.lm.resume.rng_state`), so a resumed run draws exactly what an uninterrupted
    one would have.
``describe() -> dict``
    The settings, for ``config.json``.
``prepare(trainer) -> dict | None`` (default: None)
    A one-off pass before the first step of a fresh run (sGPO's profile); its record goes to
    ``RUN/sampler.json`` and ``summary.json``. What it decides must be in ``state()``. A sampler whose
    pass takes time names it in ``preparation`` (the progress display prints it).

Every sampler derives from :class:`longhorizon.lm.protocols.Sampler`, which holds those defaults.

Implementations: :class:`FixedMix` (uniform over horizons), :class:`Curriculum` (h1 stages with an
explicit :class:`Gate`), :class:`Scaler` (SCALER's adaptive difficulty), :class:`SGPO` (profile
once, group size ~ 1/success rate) and :class:`ShuffledPool` (a fixed list of items in shuffled
epochs: the shape of a dataset sampler).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.protocols import Sampler
from longhorizon.lm.curricula import AdaptiveDifficulty, HorizonCurriculum, SGPOConfig, batches_by_samples, sgpo_plan
from longhorizon.lm.resume import rng_state, set_rng_state
from longhorizon.lm.tasks import ProblemStream, TaskConfig


class SamplerSpec(Protocol):
    def build(self) -> Sampler: ...

    def check(self, steps: int, evaluation: Any) -> None: ...

    def describe(self) -> dict: ...


def _describe(spec) -> dict:
    """A spec's settings for config.json; a field that describes itself (a :class:`PoolSource`) does so."""
    from longhorizon.runner.results import to_jsonable

    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    return {"sampler": type(spec).__name__,
            **{k: v.describe() if hasattr(v, "describe") else to_jsonable(v) for k, v in fields.items()}}


def _digest(items: Sequence) -> str:
    """A short fingerprint of a list of items (their prompts), so config.json names the pool without listing it."""
    h = hashlib.sha1()
    for item in items:
        h.update(getattr(item, "prompt", repr(item)).encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def _horizons(evaluation) -> set[int]:
    return {int(p.horizon) for p in evaluation.problems if hasattr(p, "horizon")} if evaluation is not None else set()


@dataclasses.dataclass(frozen=True)
class TaskSource:
    """Fresh problems of one task kind at a requested horizon, from a stream seeded by ``seed``."""

    kind: str = "chain"
    config: TaskConfig = TaskConfig()
    seed: int = 0

    def stream(self) -> ProblemStream:
        return ProblemStream(self.kind, self.config, self.seed)


@dataclasses.dataclass(frozen=True, eq=False)
class PoolSource:
    """Items grouped by horizon (``pools[h]``: e.g. dataset examples with a ``horizon`` column), served
    like a :class:`TaskSource`: each draw picks a horizon among the requested ones, then an item of
    that horizon's pool, uniformly and with replacement (pools larger than a run's draws rarely repeat)."""

    pools: dict
    seed: int = 0

    def __post_init__(self):
        if not self.pools or any(len(v) == 0 for v in self.pools.values()):
            raise UsageError("every horizon of a PoolSource needs at least one item; give non-empty pools.")

    def stream(self) -> "PoolStream":
        return PoolStream(self.pools, self.seed)

    def describe(self) -> dict:
        return {"source": "PoolSource", "seed": self.seed,
                "pools": {int(h): {"items": len(v), "items_digest": _digest(v)} for h, v in sorted(self.pools.items())}}


class PoolStream:
    """``sample(horizons, n)`` as :class:`longhorizon.lm.tasks.ProblemStream` has it, over fixed pools."""

    def __init__(self, pools: dict, seed: int):
        self.pools, self.rng = pools, np.random.default_rng(seed)

    def sample(self, horizons, n: int) -> list:
        hs = [int(horizons)] if np.isscalar(horizons) else [int(h) for h in horizons]
        missing = [h for h in hs if h not in self.pools]
        if missing:
            raise UsageError(f"the pool has no items of horizon {missing}; give pools for every horizon the sampler asks for.")
        out = []
        for _ in range(n):
            pool = self.pools[hs[int(self.rng.integers(len(hs)))]]
            out.append(pool[int(self.rng.integers(len(pool)))])
        return out


class _StreamSampler(Sampler):
    """Shared by the samplers that draw fresh problems from a :class:`TaskSource` (or a :class:`PoolSource`)."""

    def __init__(self, spec):
        self.spec = spec
        self.stream = spec.source.stream()

    def describe(self) -> dict:
        return self.spec.describe()

    def observe(self, metrics: dict, evaluation: dict | None) -> dict:
        return {}

    def state(self) -> dict:
        return {"stream": rng_state(self.stream.rng)}

    def restore(self, state: dict) -> None:
        set_rng_state(self.stream.rng, state["stream"])


# ----------------------------------------------------------------------------- fixed mix


@dataclasses.dataclass(frozen=True)
class FixedMix:
    """Every problem's horizon drawn uniformly from ``horizons``, every step."""

    source: TaskSource
    horizons: tuple[int, ...]

    def __post_init__(self):
        if not self.horizons or min(self.horizons) < 1:
            raise UsageError(f"horizons {list(self.horizons)} must be a non-empty list of positive horizons.")

    def check(self, steps: int, evaluation) -> None:
        pass

    def describe(self) -> dict:
        return _describe(self)

    def build(self) -> "_FixedMixSampler":
        return _FixedMixSampler(self)


class _FixedMixSampler(_StreamSampler):
    def sample(self, n: int):
        return self.stream.sample(list(self.spec.horizons), n), None


# ----------------------------------------------------------------------------- h1 curriculum

GATES = ("steps", "train_reward", "heldout_accuracy")


@dataclasses.dataclass(frozen=True)
class Gate:
    """When a curriculum stage may end before its ``steps_per_stage`` (the last stage never ends).

    * ``on="steps"``: never; every stage lasts exactly ``steps_per_stage`` steps.
    * ``on="train_reward"``: after a step at which the stage has run at least ``window`` steps and
      the mean training reward (the trainer's ``reward``: fresh problems every step, so sampled
      accuracy on unseen problems) of its last ``window`` steps is at least ``threshold``.
    * ``on="heldout_accuracy"``: after a step with a held-out evaluation whose accuracy at the
      stage's horizon is at least ``threshold``; needs an evaluation cadence and held-out problems
      of every stage's horizon (refused otherwise). ``window`` is not read.
    """

    on: str = "steps"
    threshold: float | None = None
    window: int = 5

    def __post_init__(self):
        if self.on not in GATES:
            raise UsageError(f"curriculum gate {self.on!r} is unknown; use one of {', '.join(GATES)}.")
        if (self.threshold is None) != (self.on == "steps"):
            raise UsageError(f"a {self.on!r} gate needs a threshold" if self.threshold is None else
                             "a threshold needs a gate that reads it: train_reward or heldout_accuracy.")
        if self.window < 1:
            raise UsageError(f"the gate's window {self.window} must be at least one step.")


@dataclasses.dataclass(frozen=True)
class Curriculum:
    """h1: one stage per horizon, in order; a stage lasts ``steps_per_stage`` steps unless ``gate`` ends it earlier."""

    source: TaskSource
    stages: tuple[int, ...]
    steps_per_stage: int
    gate: Gate = Gate()

    def __post_init__(self):
        HorizonCurriculum(tuple(self.stages), self.steps_per_stage)  # validates stages and length

    def check(self, steps: int, evaluation) -> None:
        if self.gate.on == "steps" and (len(self.stages) - 1) * self.steps_per_stage >= steps:
            first_late = next(i for i in range(len(self.stages)) if i * self.steps_per_stage >= steps)
            raise UsageError(f"with {self.steps_per_stage} steps per stage the stage h={self.stages[first_late]} would "
                             f"start after the run's {steps} steps; lower --steps-per-stage or raise --steps.")
        if self.gate.on == "heldout_accuracy":
            if evaluation is None or not evaluation.every:
                raise UsageError("a heldout_accuracy gate reads held-out accuracy, which only periodic evaluations "
                                 "measure; add an evaluation cadence (--eval-every N) or gate on train_reward.")
            missing = [h for h in self.stages[:-1] if h not in _horizons(evaluation)]
            if missing:
                raise UsageError(f"a heldout_accuracy gate reads held-out accuracy at each stage's horizon, and the "
                                 f"held-out set has no problem of horizon {missing}; add them to --eval-horizons.")

    def describe(self) -> dict:
        return _describe(self)

    def build(self) -> "_CurriculumSampler":
        return _CurriculumSampler(self)


class _CurriculumSampler(_StreamSampler):
    def __init__(self, spec: Curriculum):
        super().__init__(spec)
        gate = spec.gate
        self.schedule = HorizonCurriculum(tuple(spec.stages), spec.steps_per_stage, gate.threshold,
                                          min_steps_per_stage=gate.window if gate.on == "train_reward" else 0)
        self.rewards: list[float] = []  # this stage's training rewards, the last `window` of them

    def sample(self, n: int):
        return self.stream.sample([self.schedule.horizon], n), None

    def observe(self, metrics: dict, evaluation: dict | None) -> dict:
        gate, horizon = self.spec.gate, self.schedule.horizon
        value = None
        if gate.on == "train_reward":
            self.rewards = [*self.rewards, float(metrics["reward"])][-gate.window:]
            value = float(np.mean(self.rewards))
        elif gate.on == "heldout_accuracy" and evaluation is not None:
            value = evaluation["by_horizon"].get(horizon)
        if self.schedule.advance(value):
            self.rewards = []
        return {"stage": self.schedule.stage}

    def state(self) -> dict:
        return {**super().state(), "stage": self.schedule.stage, "steps_in_stage": self.schedule.steps_in_stage,
                "rewards": list(self.rewards)}

    def restore(self, state: dict) -> None:
        super().restore(state)
        self.schedule.stage, self.schedule.steps_in_stage = int(state["stage"]), int(state["steps_in_stage"])
        self.rewards = [float(r) for r in state["rewards"]]


# ----------------------------------------------------------------------------- SCALER


@dataclasses.dataclass(frozen=True)
class Scaler:
    """SCALER: a difficulty level moved toward ``target`` training success (:class:`AdaptiveDifficulty`);
    each problem's horizon is ``floor(level)`` or ``floor(level) + 1`` so that their mean is the level."""

    source: TaskSource
    lo: int
    hi: int
    target: float = 0.5
    rate: float = 2.0

    def __post_init__(self):
        AdaptiveDifficulty(target=self.target, rate=self.rate, lo=self.lo, hi=self.hi, level=self.lo)

    def check(self, steps: int, evaluation) -> None:
        pass

    def describe(self) -> dict:
        return _describe(self)

    def build(self) -> "_ScalerSampler":
        return _ScalerSampler(self)


class _ScalerSampler(_StreamSampler):
    def __init__(self, spec: Scaler):
        super().__init__(spec)
        self.difficulty = AdaptiveDifficulty(target=spec.target, rate=spec.rate, lo=spec.lo, hi=spec.hi, level=spec.lo)
        self.rng = np.random.default_rng(spec.source.seed)

    def sample(self, n: int):
        return [self.stream.sample([int(h)], 1)[0] for h in self.difficulty.sample(self.rng, n)], None

    def observe(self, metrics: dict, evaluation: dict | None) -> dict:
        return {"difficulty": self.difficulty.update(float(metrics["reward"]))}

    def state(self) -> dict:
        return {**super().state(), "rng": rng_state(self.rng), "level": self.difficulty.level}

    def restore(self, state: dict) -> None:
        super().restore(state)
        set_rng_state(self.rng, state["rng"])
        self.difficulty.level = float(state["level"])


# ----------------------------------------------------------------------------- fixed pools


@dataclasses.dataclass(frozen=True)
class ShuffledPool:
    """A fixed list of items in shuffled epochs: each epoch is a fresh permutation, and a batch that
    crosses an epoch's end continues into the next one (so every item is seen once per epoch)."""

    items: tuple
    seed: int = 0

    def __post_init__(self):
        if not self.items:
            raise UsageError("the pool holds no items; give at least one.")

    def check(self, steps: int, evaluation) -> None:
        pass

    def describe(self) -> dict:
        return {"sampler": "ShuffledPool", "items": len(self.items), "items_digest": _digest(self.items),
                "seed": self.seed}

    def build(self) -> "_ShuffledPoolSampler":
        return _ShuffledPoolSampler(self)


class _ShuffledPoolSampler(Sampler):
    def __init__(self, spec: ShuffledPool):
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        self.epoch, self.position = 0, 0
        self._new_epoch()

    def _new_epoch(self) -> None:
        self.epoch_start = rng_state(self.rng)  # the permutation is redrawn from this on restore
        self.order = self.rng.permutation(len(self.spec.items))

    def sample(self, n: int):
        out = []
        while len(out) < n:
            if self.position == len(self.order):
                self.epoch, self.position = self.epoch + 1, 0
                self._new_epoch()
            take = self.order[self.position:self.position + n - len(out)]
            out.extend(self.spec.items[int(i)] for i in take)
            self.position += len(take)
        return out, None

    def observe(self, metrics: dict, evaluation: dict | None) -> dict:
        return {"epoch": self.epoch}

    def state(self) -> dict:
        return {"epoch_start": self.epoch_start, "epoch": self.epoch, "position": self.position}

    def restore(self, state: dict) -> None:
        set_rng_state(self.rng, state["epoch_start"])
        self._new_epoch()
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def describe(self) -> dict:
        return self.spec.describe()


@dataclasses.dataclass(frozen=True)
class SGPO:
    """sGPO: profile every pool query once (``profile_samples`` samples under the initial policy,
    counted in the trainer's token counters), then :func:`~longhorizon.lm.curricula.sgpo_plan`
    (drop solved, keep a share of never-solved, group size ``clip(round(1/p))``, easy to hard) in
    steps of at most ``samples_per_step`` samples, the plan repeated as often as the run needs.

    ``profile_batch`` queries are profiled per rollout (``None``: the whole pool in one). A plan
    that keeps no query is a UsageError, wherever the run was built.
    """

    pool: tuple
    config: SGPOConfig
    samples_per_step: int
    profile_batch: int | None = None
    seed: int = 0

    def __post_init__(self):
        if not self.pool:
            raise UsageError("the sGPO query pool is empty; pass a positive pool size.")
        if self.samples_per_step < 1:
            raise UsageError(f"sGPO's samples per step ({self.samples_per_step}) must be positive.")
        if self.profile_batch is not None and self.profile_batch < 1:
            raise UsageError(f"sGPO's profile batch ({self.profile_batch}) must be positive.")

    def check(self, steps: int, evaluation) -> None:
        pass

    def describe(self) -> dict:
        from longhorizon.runner.results import to_jsonable

        return {"sampler": "SGPO", "pool": len(self.pool), "pool_digest": _digest(self.pool),
                "pool_horizons": sorted({int(getattr(p, "horizon", 0)) for p in self.pool}),
                "config": to_jsonable(self.config), "samples_per_step": self.samples_per_step,
                "profile_batch": self.profile_batch, "seed": self.seed}

    def build(self) -> "_SGPOSampler":
        return _SGPOSampler(self)


class _SGPOSampler(Sampler):
    preparation = "profiling every pool query once"
    def __init__(self, spec: SGPO):
        self.spec = spec
        self.rates: list[float] | None = None
        self.batches: list = []
        self.next = 0

    def prepare(self, trainer) -> dict:
        spec, cfg = self.spec, self.spec.config
        pool, size = list(spec.pool), spec.profile_batch or len(spec.pool)
        before, generated = trainer.counters["rollout_tokens"], trainer.counters.get("generated_tokens", 0)
        rates: list[float] = []
        for i in range(0, len(pool), size):
            chunk = pool[i:i + size]
            ro = trainer.rollout(chunk, [cfg.profile_samples] * len(chunk))
            rates.extend(float(r) for r in np.bincount(ro["group_ids"], ro["rewards"], minlength=len(chunk))
                         / cfg.profile_samples)
        stats = self._plan(rates)
        stats["profiling_tokens"] = trainer.counters["rollout_tokens"] - before
        stats["profiling_generated_tokens"] = trainer.counters.get("generated_tokens", 0) - generated
        self.stats = stats
        return {"config": cfg, "success_rates": rates, "stats": stats}

    def _plan(self, rates: list[float]) -> dict:
        plan, stats = sgpo_plan(list(self.spec.pool), rates, self.spec.config, np.random.default_rng(self.spec.seed))
        if not plan:
            raise UsageError(f"sGPO profiling kept no query of {len(rates)} ({stats['dropped_solved']} solved, "
                             f"{stats['unsolved']} never solved, {stats['kept_unsolved']} of those kept); use harder "
                             "horizons or keep more never-solved queries (--unsolved-keep).")
        self.rates = rates
        self.batches = list(batches_by_samples(plan, self.spec.samples_per_step))
        return stats

    def sample(self, n: int):
        if self.rates is None:
            raise RuntimeError("sGPO samples only after prepare(trainer) has profiled the pool.")
        problems, sizes = self.batches[self.next % len(self.batches)]
        self.next += 1
        return list(problems), list(sizes)

    def observe(self, metrics: dict, evaluation: dict | None) -> dict:
        return {}

    def state(self) -> dict:
        return {"success_rates": self.rates, "stats": getattr(self, "stats", None), "next": self.next}

    def restore(self, state: dict) -> None:
        self._plan([float(r) for r in state["success_rates"]])
        self.stats, self.next = state["stats"], int(state["next"])

    def describe(self) -> dict:
        return self.spec.describe()
