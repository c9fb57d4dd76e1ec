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

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.evolution import es
from longhorizon.lm.generate import generate
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


class ESLMTrainer:
    """Holds the ES state of an LM policy; :meth:`step` evaluates one population and updates the master."""

    def __init__(self, params, model_cfg, tokenizer, cfg: ESLMConfig):
        self.model_cfg, self.tokenizer, self.cfg = model_cfg, tokenizer, cfg
        self.state = es.es_init(params, cfg.es)
        self.mask = es.selected(self.state.master, cfg.es.subset)
        self.counters = {"generations": 0, "generated_tokens": 0, "es_steps": 0}

    @property
    def params(self):
        return self.state.master

    def _population_args(self, problems):
        n = self.cfg.es.pairs
        seeds = es.member_seeds(self.cfg.es, self.state.step)
        ptok, pvalid = self.tokenizer.encode_prompts([p.prompt for p in problems], self.cfg.max_prompt_length)
        args = (self.state.master, jnp.asarray(np.concatenate([seeds, seeds])),
                jnp.asarray(np.repeat([1.0, -1.0], n), jnp.float32), jnp.float32(es.sigma_at(self.state.step, self.cfg.es)),
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
        texts = self.tokenizer.decode_batch(tokens.reshape(m * p, t))
        rewards = np.array([score(problems[i % p], text) for i, text in enumerate(texts)]).reshape(m, p)
        self.counters["generations"] += m * p
        self.counters["generated_tokens"] += int((tokens != self.tokenizer.pad_id).sum())
        return rewards.mean(axis=1)

    def step(self, problems) -> dict:
        if len(problems) != self.cfg.problems_per_member:
            raise UsageError(f"an ES step takes problems_per_member={self.cfg.problems_per_member} problems, "
                             f"got {len(problems)}; sample that many.")
        t0 = time.perf_counter()
        f = self.fitness(problems)
        n = self.cfg.es.pairs
        self.state, metrics = es.es_update(self.state, f[:n], f[n:], self.cfg.es, self.mask)
        self.counters["es_steps"] += 1
        return {**metrics, "reward": float(f.mean()), "reward_best": float(f.max()), "step_s": time.perf_counter() - t0,
                **self.counters}

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
            jnp.zeros(n, jnp.uint32), jnp.zeros(n, jnp.float32), self.state.master, mask=self.mask).compile())
        return {"population_generate": gen, "es_update": upd}


def compiled_bytes(compiled) -> int:
    """Peak bytes of one compiled program: arguments + outputs + temporaries, less donated aliases."""
    stats = compiled.memory_analysis()
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
               - stats.alias_size_in_bytes)
