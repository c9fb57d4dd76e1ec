"""ES fine-tuning of a language-model policy: the population evaluated by batched generation.

Each ES step (:mod:`longhorizon.evolution.es`) draws ``P`` problems and evaluates all ``2n``
members ``theta +- sigma_t eps_i`` on the *same* problems (common random numbers: the fitness
difference of a pair is then due to its noise, not to the problems drawn). The ``2n`` members are
one vmapped program: each member's parameters are rebuilt from its seed inside it, then
:func:`longhorizon.lm.generate.generate` decodes the ``P`` prompts greedily, giving tokens
``[2n, P, N]``. Fitness is the verifiable reward (:func:`longhorizon.lm.tasks.score`: exact match
of the final answer for the h1 task), averaged over the ``P`` problems::

    f(member) = 1/P sum_p score(problem_p, decode(member, prompt_p))

No gradient, optimiser state over the model's activations, or reference model is ever held:
memory is the generation's plus one float32 master and the optimiser's moments.
A step costs ``2n P`` completions (what "equal rollouts" with GRPO counts).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.evolution import es
from longhorizon.lm.generate import generate
from longhorizon.lm.protocols import Trainer
from longhorizon.lm.tasks import score

DTYPES = ("float32", "bfloat16")
EVALUATIONS = ("vmap", "loop")


@dataclasses.dataclass(frozen=True)
class ESLMConfig:
    es: es.ESConfig = es.ESConfig()
    problems_per_member: int = 8  # P
    max_prompt_length: int = 64
    max_completion_length: int = 48
    member_dtype: str = "float32"  # members' parameters at evaluation; the master stays float32
    # "vmap": all 2n members in one program; "loop": one batched generation of the P prompts per member
    # (the same compiled generate as evaluation; far cheaper to compile on CPU)
    evaluation: str = "vmap"

    def __post_init__(self):
        if self.problems_per_member < 1:
            raise UsageError(f"problems_per_member={self.problems_per_member} must be a positive integer.")
        if self.max_prompt_length < 1 or self.max_completion_length < 1:
            raise UsageError("max_prompt_length and max_completion_length must be positive integers.")
        if self.member_dtype not in DTYPES:
            raise UsageError(f"member_dtype={self.member_dtype!r} is unknown; use one of {DTYPES}.")
        if self.evaluation not in EVALUATIONS:
            raise UsageError(f"evaluation={self.evaluation!r} is unknown; use one of {EVALUATIONS}.")

    @property
    def rollouts_per_step(self) -> int:
        return 2 * self.es.pairs * self.problems_per_member


@functools.partial(jax.jit, static_argnames=("mask", "model_cfg", "max_new_tokens", "eos_ids", "pad_id", "dtype"))
def population_generate(master, seeds, signs, sigma, prompt, prompt_valid, *, mask, model_cfg, max_new_tokens: int,
                        eos_ids: tuple[int, ...], pad_id: int, dtype: str):
    """Greedy completions ``[M, P, N]`` of the ``M`` members ``theta + signs_m sigma eps(seeds_m)``."""
    def member(seed, sign):
        params = es.perturbed(master, seed, sign * sigma, mask, jnp.dtype(dtype))
        gen = generate(params, prompt, prompt_valid, jax.random.PRNGKey(0), cfg=model_cfg, max_new_tokens=max_new_tokens,
                       temperature=0.0, eos_ids=eos_ids, pad_id=pad_id)
        return gen.tokens

    return jax.vmap(member)(seeds, signs)


@functools.partial(jax.jit, static_argnames=("mask", "dtype"))
def member_params(master, seed, scale, *, mask, dtype: str):
    return es.perturbed(master, seed, scale, mask, jnp.dtype(dtype))


def population_generate_loop(master, seeds, signs, sigma, prompt, prompt_valid, *, mask, model_cfg, max_new_tokens: int,
                             eos_ids: tuple[int, ...], pad_id: int, dtype: str):
    """:func:`population_generate` one member at a time (each member's ``P`` prompts still one batch)."""
    out = []
    for seed, sign in zip(np.asarray(seeds), np.asarray(signs)):
        params = member_params(master, jnp.uint32(seed), jnp.float32(sign) * sigma, mask=mask, dtype=dtype)
        out.append(generate(params, prompt, prompt_valid, jax.random.PRNGKey(0), cfg=model_cfg,
                            max_new_tokens=max_new_tokens, temperature=0.0, eos_ids=eos_ids, pad_id=pad_id).tokens)
    return jnp.stack(out)


class ESLMTrainer(Trainer):
    """Holds the ES state of an LM policy; :meth:`step` evaluates one population and updates the master.

    A :class:`longhorizon.lm.protocols.Trainer`, so the LM run spine drives it (:class:`ESSpec`): ``params``
    is the float32 master, ``opt_state`` the optimiser's moments, and the ES step (which fixes the noise seeds
    and sigma) is ``counters["es_steps"]``, so a checkpoint of the three resumes the run exactly.
    ``batch_rewards(problems, texts, completion_ids) -> (rewards, metrics)`` (optional, e.g.
    :class:`longhorizon.lm.data.RewardFunctions`) scores the members' completions instead of the task's verifier.
    """

    def __init__(self, params, model_cfg, tokenizer, cfg: ESLMConfig, batch_rewards=None):
        self.model_cfg, self.tokenizer, self.cfg = model_cfg, tokenizer, cfg
        state = es.es_init(params, cfg.es)
        self.params, self.opt_state = state.master, state.opt_state
        self.mask = es.selected(self.params, cfg.es.subset)
        self.batch_rewards = batch_rewards
        self.counters = {"generations": 0, "generated_tokens": 0, "rollout_tokens": 0, "es_steps": 0}

    @property
    def state(self) -> es.ESState:
        return es.ESState(self.params, self.opt_state, self.counters["es_steps"])

    def _population_args(self, problems):
        n, step = self.cfg.es.pairs, self.counters["es_steps"]
        seeds = es.member_seeds(self.cfg.es, step)
        ptok, pvalid = self.tokenizer.encode_prompts([p.prompt for p in problems], self.cfg.max_prompt_length)
        args = (self.params, jnp.asarray(np.concatenate([seeds, seeds])),
                jnp.asarray(np.repeat([1.0, -1.0], n), jnp.float32), jnp.float32(es.sigma_at(step, self.cfg.es)),
                jnp.asarray(ptok), jnp.asarray(pvalid))
        kwargs = dict(mask=self.mask, model_cfg=self.model_cfg, max_new_tokens=self.cfg.max_completion_length,
                      eos_ids=tuple(self.tokenizer.eos_ids), pad_id=self.tokenizer.pad_id, dtype=self.cfg.member_dtype)
        return args, kwargs

    def fitness(self, problems) -> np.ndarray:
        """``[2n]`` fitnesses of this step's members on ``problems`` (the ``+`` members first)."""
        args, kwargs = self._population_args(problems)
        run = population_generate if self.cfg.evaluation == "vmap" else population_generate_loop
        tokens = np.asarray(run(*args, **kwargs))
        m, p, t = tokens.shape
        flat = tokens.reshape(m * p, t)
        texts = self.tokenizer.decode_batch(flat)
        if self.batch_rewards is not None:
            ids = [row[row != self.tokenizer.pad_id].tolist() for row in flat]
            rewards = np.asarray(self.batch_rewards([problems[i % p] for i in range(m * p)], texts, ids)[0], np.float64)
        else:
            rewards = np.array([score(problems[i % p], text) for i, text in enumerate(texts)])
        self.counters["generations"] += m * p
        self.counters["generated_tokens"] += int((tokens != self.tokenizer.pad_id).sum())
        # what GRPO's counter holds: each completion's prompt and generated tokens (every member runs the prompts)
        self.counters["rollout_tokens"] += int((tokens != self.tokenizer.pad_id).sum()) + m * int(np.asarray(args[5]).sum())
        return np.nan_to_num(rewards, nan=0.0).reshape(m, p).mean(axis=1)  # a completion no function scores counts 0

    def step(self, problems, sizes=None) -> dict:
        """One ES step on ``problems`` (every member sees all of them; ``sizes`` is not used: ES has no groups)."""
        if len(problems) != self.cfg.problems_per_member:
            raise UsageError(f"an ES step takes problems_per_member={self.cfg.problems_per_member} problems, "
                             f"got {len(problems)}; sample that many.")
        t0, tokens_before = time.perf_counter(), self.counters["generated_tokens"]
        f = self.fitness(problems)
        n = self.cfg.es.pairs
        state, metrics = es.es_update(self.state, f[:n], f[n:], self.cfg.es, self.mask)
        self.params, self.opt_state = state.master, state.opt_state
        self.counters["es_steps"] += 1
        elapsed = time.perf_counter() - t0
        generated = self.counters["generated_tokens"] - tokens_before
        return {**metrics, "reward": float(f.mean()), "reward_best": float(f.max()), "step_s": elapsed,
                "tokens_per_s": generated / max(elapsed, 1e-9), **self.counters}

    def memory_bytes(self, problems) -> dict:
        """Compiled memory (XLA's ``memory_analysis``) of the population's generation and of the ES update."""
        args, kwargs = self._population_args(problems)
        if self.cfg.evaluation == "vmap":
            gen = compiled_bytes(population_generate.lower(*args, **kwargs).compile())
        else:  # one member's generation at a time
            params = member_params(args[0], args[1][0], args[3], mask=self.mask, dtype=self.cfg.member_dtype)
            gen = compiled_bytes(generate.lower(params, args[4], args[5], jax.random.PRNGKey(0), cfg=self.model_cfg,
                                                max_new_tokens=self.cfg.max_completion_length, temperature=0.0,
                                                eos_ids=kwargs["eos_ids"], pad_id=kwargs["pad_id"]).compile())
        n = self.cfg.es.pairs
        upd = compiled_bytes(es._weighted_noise_sum.lower(
            jnp.zeros(n, jnp.uint32), jnp.zeros(n, jnp.float32), self.params, mask=self.mask).compile())
        return {"population_generate": gen, "es_update": upd}


def compiled_bytes(compiled) -> int:
    """Peak bytes of one compiled program: arguments + outputs + temporaries, less donated aliases."""
    stats = compiled.memory_analysis()
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
               - stats.alias_size_in_bytes)


@dataclasses.dataclass(frozen=True)
class ESSpec:
    """ES fine-tuning of the policy ``init`` (see :func:`longhorizon.lm.run.load_policy`) through the LM run
    spine (:func:`longhorizon.lm.run.run_rl`: lock, config, metrics, orbax checkpoints, Ctrl-C, exact resume,
    held-out evaluation, summary, curve), as :class:`longhorizon.lm.run.RLSpec` runs GRPO.

    ``sampler``: a sampler spec of :mod:`longhorizon.lm.samplers` (each step takes ``problems_per_member``
    of its items, and every member is scored on all of them); ``rewards``: a
    :class:`longhorizon.lm.data.RewardFunctions` (None: the task problems' verifier); ``evaluation``: an
    :class:`longhorizon.lm.run.EvalSpec`; the noise schedule spans ``steps`` (``es.es.steps`` is set to it).
    """

    out: str
    init: Any
    es: ESLMConfig
    sampler: Any
    steps: int
    evaluation: Any = None
    rewards: Any = None
    checkpoint_every: int = 0
    seed: int = 0  # the spine's record; the members' noise comes from es.es.seed
    record: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if isinstance(self.steps, int) and self.steps > 0 and self.es.es.steps != self.steps:
            object.__setattr__(self, "es", dataclasses.replace(self.es, es=dataclasses.replace(self.es.es, steps=self.steps)))

    def check(self) -> None:
        """Refuse settings that cannot act, before anything loads or compiles."""
        if self.steps < 1:
            raise UsageError(f"--steps must be at least 1 (got {self.steps}).")
        if self.checkpoint_every < 0:
            raise UsageError(f"--checkpoint-every must be 0 or positive (got {self.checkpoint_every}).")
        self.sampler.check(self.steps, self.evaluation)

    @property
    def checkpoint_interval(self) -> int:
        return self.checkpoint_every or max(1, self.steps // 10)

    def config(self) -> dict:
        """The config.json this run writes (the policy's folder is read, its parameters are not)."""
        from longhorizon.lm.run import _policy_record

        return {**self.record, **_policy_record(self.init), "es": self.es, "sampler": self.sampler.describe(),
                **({"rewards": self.rewards.describe()} if self.rewards is not None else {}),
                "steps": self.steps, "evaluation": self.evaluation.describe() if self.evaluation is not None else None,
                "checkpoint_every": self.checkpoint_interval, "seed": self.seed}

    def build(self, policy):
        """The ES trainer on ``policy``'s weights, the sampler and the evaluation."""
        from longhorizon.lm.run import Parts

        trainer = ESLMTrainer(policy.params, policy.model_cfg, policy.tokenizer, self.es, batch_rewards=self.rewards)
        return Parts(trainer, self.sampler.build(), self.evaluation, ("opt_state",), self.es.problems_per_member,
                     _progress, ("reward", "reward_best"), "ES", "es", type(self.sampler).__name__)


def _progress(metrics: dict) -> str:
    return f"reward {metrics['reward']:.3f} best {metrics['reward_best']:.3f} sigma {metrics['sigma']:.4f}"
