"""A supervised base policy for the chain task of :mod:`longhorizon.lm.tasks`, trained once and kept on disk.

The task: ``a=57;b=a+5;c=b+3;...`` -> ``b=62;c=65;...``, values mod 100 written with two digits (:func:`task_config`).
The base is a small character-level transformer taught by teacher forcing on *packed independent* problems
(``a=04;b=a+5;c=71;d=c+2;`` -> ``b=09;d=73;``, ``sft_packed`` of them per prompt): it learns the atomic skill and
the answer format, never a problem whose input is its own previous answer; a nonzero ``sft_chain_fraction`` adds
that share of supervised h = 2 chains. RL studies of composition (h1, sGPO, ES fine-tuning) start from it.

:func:`cached_base` keeps it in the policy cache (:mod:`longhorizon.lm.policy_cache`) by its recipe, seed, task and
JAX version. The same recipe does not give the same base everywhere (the supervised run ends where greedy h = 1
accuracy swings with float rounding: docs/results/h1/NOTES.md), so :func:`base_label` names a base by its recipe
and its parameters' digest.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class BaseRecipe:
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    sft_steps: int = 1200
    sft_batch: int = 64
    sft_lr: float = 3e-3
    sft_packed: tuple[int, ...] = (1, 2, 3)  # independent problems per prompt
    sft_chain_fraction: float = 0.0  # that share of each batch are supervised h = 2 chains


def task_config():
    """The chain task of the base and of the RL studies that start from it."""
    from longhorizon.lm.tasks import TaskConfig

    return TaskConfig(digits=2, operators="+", const_max=9, names="split", reward="final", fixed_width=True)


def model_config(recipe: BaseRecipe):
    """The base's transformer and its character tokenizer: ``(model_cfg, tokenizer)``."""
    from longhorizon.lm.model import ModelConfig
    from longhorizon.lm.tokenizer import Tokenizer

    tokenizer = Tokenizer()
    return ModelConfig(vocab_size=tokenizer.vocab_size, d_model=recipe.d_model, n_layers=recipe.n_layers,
                       n_heads=recipe.n_heads), tokenizer


def train_base(recipe: BaseRecipe, seed: int, log=print):
    """SFT on packed independent single problems; returns ``(params, model_cfg, tokenizer, history)``."""
    import jax

    from longhorizon.lm.model import init_params
    from longhorizon.lm.sft import SFTConfig, train_sft
    from longhorizon.lm.tasks import ProblemStream, max_lengths

    tcfg = task_config()
    model_cfg, tokenizer = model_config(recipe)
    plen, clen = max_lengths("packed", max(recipe.sft_packed), tcfg)
    cfg = SFTConfig(steps=recipe.sft_steps, batch_size=recipe.sft_batch, learning_rate=recipe.sft_lr,
                    warmup_steps=min(50, recipe.sft_steps // 4), seq_len=plen + clen + 2)
    stream = ProblemStream("packed", tcfg, seed)
    chains = ProblemStream("chain", tcfg, seed + 1)
    n_chain = int(round(recipe.sft_chain_fraction * recipe.sft_batch))

    def batch(_):
        return stream.sample(recipe.sft_packed, recipe.sft_batch - n_chain) + (chains.sample([2], n_chain) if n_chain else [])

    params = init_params(jax.random.PRNGKey(seed), model_cfg)
    params, history = train_sft(params, model_cfg, tokenizer, batch,
                                cfg, log_every=max(1, recipe.sft_steps // 6),
                                on_log=lambda r: log(f"  sft step {r['step']}: loss {r['loss']:.3f} tok-acc {r['token_accuracy']:.3f}"))
    return params, model_cfg, tokenizer, history


def cached_base(recipe: BaseRecipe, seed: int = 0, log=print):
    """:func:`train_base`, cached on disk by its recipe, seed, task and the JAX version (a cache written by
    another JAX version is not reused); ``(params, model_cfg, tokenizer)``."""
    import jax
    import jaxlib

    from longhorizon.lm.model import init_params
    from longhorizon.lm.policy_cache import cache_path, load_or_train

    fields = {k: getattr(recipe, k) for k in ("d_model", "n_layers", "n_heads", "sft_steps", "sft_batch", "sft_lr",
                                               "sft_packed")}
    if recipe.sft_chain_fraction:
        fields["sft_chain_fraction"] = recipe.sft_chain_fraction
    fields.update(seed=seed, task=repr(task_config()), version=2,  # bump when task generation changes
                  jax=jax.__version__, jaxlib=jaxlib.__version__)
    model_cfg, tokenizer = model_config(recipe)
    params = load_or_train(cache_path("lm", "h1_base_", fields), init_params(jax.random.PRNGKey(0), model_cfg),
                           lambda: train_base(recipe, seed, log)[0], log)
    return params, model_cfg, tokenizer


def base_label(recipe: BaseRecipe, params, seed: int = 0) -> str:
    """How config.json and the summaries name a cached base (:func:`cached_base`): its recipe and its parameters'
    digest (:func:`longhorizon.lm.policy_cache.params_digest`; two machines can train different bases from one recipe)."""
    import jax

    from longhorizon.lm.policy_cache import params_digest

    fields = ", ".join(f"{f.name}={getattr(recipe, f.name)!r}" for f in dataclasses.fields(recipe))
    return (f"longhorizon.lm.chain_base.cached_base({fields}, seed={seed}) "
            f"[params sha256 {params_digest(params)}, jax {jax.__version__}]")
