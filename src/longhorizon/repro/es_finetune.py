"""es-finetune: antithetic ES fine-tunes an LM policy with inference-only memory; vs GRPO at equal rollouts.

From one supervised base (the h1 reproduction's cached base, :func:`longhorizon.repro.h1.cached_base`),
two arms train on h1's chained tasks with the same number of sampled completions per step:

* ES (:mod:`longhorizon.evolution.es_lm`): ``n`` antithetic pairs, each member greedy on ``P`` problems,
  ``2 n P`` completions per step; centred-rank fitness, cosine-decayed sigma, Adam on ``-g``;
* GRPO (:class:`longhorizon.lm.grpo.GRPOTrainer`, Dr. GRPO as in h1): ``Q`` prompts x ``G`` samples.

Claims, decided by :func:`decide` from measured values:

1. ES raises the base's held-out accuracy on the training horizons (by more than ``MARGIN`` and, with two or
   more training seeds, by more than twice the standard error over seeds);
2. ES's programs need less memory than GRPO's update step (XLA's compiled memory analysis);
3. at equal rollouts, ES is at least as accurate as GRPO on held-out chains (within the same bar, paired by seed).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.repro.report import mean_se

MARGIN = 0.02  # accuracy differences below this are within held-out sampling noise here


@dataclasses.dataclass(frozen=True)
class Setup:
    steps: int = 30
    pairs: int = 4  # ES: 2 * pairs * problems_per_member completions per step
    problems_per_member: int = 8
    sigma: float = 0.02
    sigma_final: float = 0.005
    es_learning_rate: float = 1e-3
    prompts_per_step: int = 8  # GRPO: prompts_per_step * num_generations completions per step
    num_generations: int = 8
    grpo_learning_rate: float = 2e-4
    train_horizons: tuple[int, ...] = (1, 2, 3)
    eval_horizons: tuple[int, ...] = (1, 2, 3, 4, 5)
    eval_per_horizon: int = 64
    eval_batch: int = 64  # = problems_per_member: evaluation reuses the ES members' compiled generation
    evaluation: str = "loop"  # es_lm.ESLMConfig.evaluation
    tiny_untrained_base: bool = False  # quick smoke test: a random 1-layer policy instead of the h1 base
    seeds: int = 3  # training seeds per arm (ES noise and GRPO sampling, and the training problems), one base

    def __post_init__(self):
        from longhorizon.errors import UsageError

        if 2 * self.pairs * self.problems_per_member != self.prompts_per_step * self.num_generations:
            raise UsageError("ES and GRPO must sample the same completions per step; make 2 * pairs * "
                             "problems_per_member equal prompts_per_step * num_generations.")


QUICK = Setup(steps=2, pairs=2, problems_per_member=4, prompts_per_step=4, num_generations=4, eval_per_horizon=4, eval_batch=4,
              eval_horizons=(1, 2), train_horizons=(1,), tiny_untrained_base=True, seeds=1)


def base_policy(setup: Setup):
    import jax

    from longhorizon.lm.model import ModelConfig, init_params
    from longhorizon.lm.tokenizer import Tokenizer
    from longhorizon.repro import h1

    if setup.tiny_untrained_base:
        tok = Tokenizer()
        cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=1, n_heads=2)
        return init_params(jax.random.PRNGKey(0), cfg), cfg, tok, "an untrained 1-layer d=32 policy (smoke test)"
    params, cfg, tok = h1.cached_base(h1.H1Setup())
    return params, cfg, tok, h1.base_label(h1.H1Setup())


def run_es(params, model_cfg, tok, setup: Setup, lengths, seed: int = 0, measure: bool = True):
    from longhorizon.evolution import es, es_lm
    from longhorizon.lm.tasks import ProblemStream
    from longhorizon.repro.h1 import task_config

    cfg = es_lm.ESLMConfig(es=es.ESConfig(pairs=setup.pairs, sigma=setup.sigma, sigma_final=setup.sigma_final,
                                          steps=setup.steps, learning_rate=setup.es_learning_rate, seed=seed),
                           problems_per_member=setup.problems_per_member, max_prompt_length=lengths[0],
                           max_completion_length=lengths[1], evaluation=setup.evaluation)
    trainer = es_lm.ESLMTrainer(params, model_cfg, tok, cfg)
    stream = ProblemStream("chain", task_config(), 11 + seed)
    curve = []
    for _ in range(setup.steps):
        m = trainer.step(stream.sample(setup.train_horizons, setup.problems_per_member))
        curve.append({"completions": m["generations"], "reward": m["reward"], "sigma": m["sigma"],
                      "tokens": m["generated_tokens"]})
    memory = trainer.memory_bytes(stream.sample(setup.train_horizons, setup.problems_per_member)) if measure else {}
    return trainer.params, curve, memory


def run_grpo(params, model_cfg, tok, setup: Setup, lengths, seed: int = 0, measure: bool = True):
    from longhorizon.evolution.es_lm import compiled_bytes
    from longhorizon.lm.grpo import GRPOConfig, GRPOTrainer, update
    from longhorizon.lm.tasks import ProblemStream
    from longhorizon.repro.h1 import task_config

    cfg = GRPOConfig(num_generations=setup.num_generations, loss_type="dr_grpo", scale_rewards="none",
                     learning_rate=setup.grpo_learning_rate, max_prompt_length=lengths[0],
                     max_completion_length=lengths[1])
    trainer = GRPOTrainer(model_cfg, params, tok, cfg, seed=seed)
    memory = {}
    plain = trainer.updater

    def measured(p, opt_state, batch):  # the update's compiled memory, taken once
        if not memory:
            memory["grpo_update"] = compiled_bytes(update.lower(p, opt_state, batch, model_cfg=model_cfg, cfg=cfg,
                                                                optimizer=trainer.optimizer).compile())
        return plain(p, opt_state, batch)

    if measure:
        trainer.updater = measured
    stream = ProblemStream("chain", task_config(), 11 + seed)
    curve = []
    for _ in range(setup.steps):
        m = trainer.step(stream.sample(setup.train_horizons, setup.prompts_per_step))
        curve.append({"completions": m["generations"], "reward": m["reward"], "tokens": m["generated_tokens"]})
    return trainer.params, curve, memory


def decide(acc: dict, memory: dict, train_horizons, eval_horizons, per_seed: dict | None = None) -> dict:
    """The claims (module docstring) from held-out accuracies ``acc[arm][h]`` (means over seeds) and compiled
    bytes. ``per_seed[arm]``: one ``{h: accuracy}`` per training seed; with two or more seeds an accuracy
    difference must also exceed twice its standard error over seeds (paired by seed against GRPO)."""
    def mean(arm, hs):
        return float(np.mean([acc[arm][h] for h in hs]))

    def bar(values) -> float:
        return max(MARGIN, 2 * mean_se(values)[1]) if len(values) >= 2 else MARGIN

    seeds = per_seed or {}
    es_gain = mean("es", train_horizons) - mean("base", train_horizons)
    gain_bar = bar([np.mean([a[h] for h in train_horizons]) for a in seeds.get("es", [])])
    es_peak = max(memory["population_generate"], memory["es_update"])
    diff = mean("es", eval_horizons) - mean("grpo", eval_horizons)
    diff_bar = bar([np.mean([e[h] - g[h] for h in eval_horizons]) for e, g in zip(seeds.get("es", []), seeds.get("grpo", []))])
    return {
        "ES raises the base's accuracy on the training horizons":
            (f"holds (+{es_gain:.3f}, bar {gain_bar:.3f})" if es_gain > gain_bar
             else f"contradicted ({es_gain:+.3f}, bar {gain_bar:.3f})"),
        "ES needs less memory than GRPO's update step":
            (f"holds ({es_peak / 1e6:.2f} MB vs {memory['grpo_update'] / 1e6:.2f} MB)"
             if es_peak < memory["grpo_update"] else
             f"contradicted ({es_peak / 1e6:.2f} MB vs {memory['grpo_update'] / 1e6:.2f} MB)"),
        "at equal rollouts ES is at least as accurate as GRPO":
            (f"holds (ES - GRPO = {diff:+.3f}, bar {diff_bar:.3f})" if diff >= -diff_bar
             else f"contradicted (ES - GRPO = {diff:+.3f}, bar {diff_bar:.3f})"),
    }


def run(out_dir: str, quick: bool = False, setup: Setup | None = None) -> dict:
    from longhorizon.lm.evaluate import evaluate
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, make_problems, max_lengths
    from longhorizon.repro.h1 import task_config
    from longhorizon.runner.results import write_json_atomic

    setup = setup or (QUICK if quick else Setup())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    params, model_cfg, tok, base_name = base_policy(setup)
    plen, clen = max_lengths("chain", max(setup.eval_horizons), task_config())
    lengths = (plen + 1, clen + 1)
    held = make_problems("chain", setup.eval_horizons, setup.eval_per_horizon * len(setup.eval_horizons),
                         HELD_OUT_OFFSET, task_config())

    def accuracy(p):
        return evaluate(p, model_cfg, tok, held, max_prompt_length=lengths[0], max_new_tokens=lengths[1],
                        batch_size=setup.eval_batch)["by_horizon"]

    acc = {"base": accuracy(params)}
    per_seed, curves, memory = {"es": [], "grpo": []}, {"es": [], "grpo": []}, {}
    for seed in range(setup.seeds):  # the compiled programs are reused: a seed costs its steps, not a compile
        es_params, es_curve, es_memory = run_es(params, model_cfg, tok, setup, lengths, seed, measure=seed == 0)
        per_seed["es"].append(accuracy(es_params))
        grpo_params, grpo_curve, grpo_memory = run_grpo(params, model_cfg, tok, setup, lengths, seed, measure=seed == 0)
        per_seed["grpo"].append(accuracy(grpo_params))
        memory.update(es_memory, **grpo_memory)  # the same programs every seed: measured on seed 0 only
        curves["es"].append(es_curve)
        curves["grpo"].append(grpo_curve)
        print(f"seed {seed}: ES {np.mean(list(per_seed['es'][-1].values())):.3f}, "
              f"GRPO {np.mean(list(per_seed['grpo'][-1].values())):.3f} mean held-out accuracy")
    for arm, rows in per_seed.items():
        acc[arm] = {h: float(np.mean([r[h] for r in rows])) for h in rows[0]}
    es_curve, grpo_curve = curves["es"][0], curves["grpo"][0]
    claims = decide(acc, memory, setup.train_horizons, setup.eval_horizons, per_seed)
    verdict = ("es-finetune: " + "; ".join(f"{k}: {v}" for k, v in claims.items())
               + (" (quick smoke test on an untrained policy: not evidence)" if setup.tiny_untrained_base else ""))
    summary = {"claims": claims, "verdict": verdict, "quick": quick, "accuracy_by_horizon": acc,
               "accuracy_by_horizon_per_seed": per_seed, "seeds": setup.seeds,
               "memory_bytes": memory, "rollouts_per_arm": setup.steps * setup.prompts_per_step * setup.num_generations,
               "generated_tokens": {"es": es_curve[-1]["tokens"], "grpo": grpo_curve[-1]["tokens"]},
               "base": base_name, "setup": dataclasses.asdict(setup), "wall_s": time.perf_counter() - t0}
    write_json_atomic(out / "summary.json", summary)
    write_json_atomic(out / "curves.json", curves)
    plot(out / "es_vs_grpo.png", acc, es_curve, grpo_curve)
    write_readme(out, summary, setup, quick)
    print(verdict)
    return summary


def plot(path: Path, acc: dict, es_curve, grpo_curve) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for arm, by_h in acc.items():
        hs = sorted(by_h)
        left.plot(hs, [by_h[h] for h in hs], marker="o", label=arm, linestyle="--" if arm == "base" else "-")
    left.set_xlabel("held-out chain horizon h")
    left.set_ylabel("final-answer accuracy (greedy)")
    left.legend()
    for name, curve in (("ES (population mean)", es_curve), ("GRPO (sampled)", grpo_curve)):
        right.plot([c["completions"] for c in curve], [c["reward"] for c in curve], label=name)
    right.set_xlabel("completions sampled")
    right.set_ylabel("training reward")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_readme(out: Path, summary: dict, setup: Setup, quick: bool) -> None:
    acc, mem = summary["accuracy_by_horizon"], summary["memory_bytes"]
    hs = sorted(acc["base"])
    lines = ["# es-finetune: antithetic ES vs GRPO on h1's chained tasks", "",
             f"Command: `longhorizon repro es-finetune{' --quick' if quick else ''}` (wall {summary['wall_s']:.0f} s).", "",
             "Claimed: ES fine-tunes an LM policy with inference-only memory (antithetic pairs, noise regenerated "
             "from seeds, cosine-decayed sigma, an fp32 master). Scale here: the h1 toy character model (0.1M "
             "parameters) instead of billion-parameter LMs, tens of steps instead of hundreds; both arms start "
             f"from {summary['base']} and sample {summary['rollouts_per_arm']} completions each.", "",
             f"Held-out greedy accuracy of the final answer, mean over {setup.seeds} training seed(s) (per seed "
             "in summary.json; the training curve plotted is seed 0's):", "",
             "| policy | " + " | ".join(f"h={h}" for h in hs) + " |", "|---|" + "---|" * len(hs)]
    lines += [f"| {arm} | " + " | ".join(f"{acc[arm][h]:.3f}" for h in hs) + " |" for arm in acc]
    lines += ["", "Compiled memory (XLA memory_analysis: arguments + outputs + temporaries):", "",
              "| program | MB |", "|---|---|"]
    lines += [f"| {k} | {v / 1e6:.3f} |" for k, v in mem.items()]
    lines += ["", f"Generated tokens: ES {summary['generated_tokens']['es']}, GRPO {summary['generated_tokens']['grpo']}.",
              "", "![ES vs GRPO](es_vs_grpo.png)", "", "## Verdict", ""]
    lines += [f"- {k}: **{v}**" for k, v in summary["claims"].items()]
    lines += ["", summary["verdict"], "", "## Setup", "", "```", repr(setup), "```", ""]
    (out / "README.md").write_text("\n".join(lines))
