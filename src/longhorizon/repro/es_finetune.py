"""es-finetune: antithetic ES fine-tunes an LM policy with inference-only memory; vs GRPO at equal rollouts.

From one supervised base (the h1 reproduction's cached base, :func:`longhorizon.lm.chain_base.cached_base`),
two arms train on h1's chained tasks with the same number of sampled completions per step:

* ES (:mod:`longhorizon.evolution.es_lm`): ``n`` antithetic pairs, each member greedy on ``P`` problems,
  ``2 n P`` completions per step; centred-rank fitness, cosine-decayed sigma, Adam on ``-g``;
* GRPO (:class:`longhorizon.lm.grpo.GRPOTrainer`, Dr. GRPO as in h1): ``Q`` prompts x ``G`` samples.

Claims, judged by :func:`judge` from the recorded numbers (Student-t 95% intervals over training seeds, >= 3):

1. ES raises the base's held-out accuracy on the training horizons (per seed against the base's);
2. ES's programs need less memory than GRPO's update step (XLA's compiled memory analysis: an exact comparison);
3. at equal rollouts, ES is at least as accurate as GRPO on held-out chains (ES - GRPO paired by seed, interval
   above ``-MARGIN``); ``no signal`` unless ES learned and GRPO beat the base on the training horizons.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro.report import verdict_lines

MARGIN = 0.02  # the non-inferiority margin of claim 3, stated before the run
CLAIMS = ("ES raises the base's accuracy on the training horizons", "ES needs less memory than GRPO's update step",
          "at equal rollouts ES is at least as accurate as GRPO (margin -0.02, the run's stated bar)")


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

    from longhorizon.lm.chain_base import base_label, cached_base
    from longhorizon.lm.model import ModelConfig, init_params
    from longhorizon.lm.tokenizer import Tokenizer
    from longhorizon.repro import h1

    if setup.tiny_untrained_base:
        tok = Tokenizer()
        cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=1, n_heads=2)
        return init_params(jax.random.PRNGKey(0), cfg), cfg, tok, "an untrained 1-layer d=32 policy (smoke test)"
    params, cfg, tok = cached_base(h1.H1Setup().recipe)
    return params, cfg, tok, base_label(h1.H1Setup().recipe, params)


def run_es(params, model_cfg, tok, setup: Setup, lengths, seed: int = 0, measure: bool = True):
    from longhorizon.evolution import es, es_lm
    from longhorizon.lm.tasks import ProblemStream
    from longhorizon.lm.chain_base import task_config

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
    from longhorizon.lm.chain_base import task_config

    cfg = GRPOConfig(lr_scheduler_type="constant", num_generations=setup.num_generations, loss_type="dr_grpo", scale_rewards="none",
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


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers (module docstring): ``accuracy_by_horizon`` (the base's),
    ``accuracy_by_horizon_per_seed`` (each arm's, per training seed), ``memory_bytes`` and ``setup``."""
    setup = L["setup"]
    mean_over = lambda row, hs: float(np.mean([row[str(h)] for h in hs]))  # noqa: E731
    per = {a: {k: [mean_over(r, setup[f"{k}_horizons"]) for r in rows] for k in ("train", "eval")}
           for a, rows in L["accuracy_by_horizon_per_seed"].items()}
    base = {k: mean_over(L["accuracy_by_horizon"]["base"], setup[f"{k}_horizons"]) for k in ("train", "eval")}
    es = C.arm_signal("ES", eval_start=base["train"], eval_end=per["es"]["train"], what="accuracy on the training horizons")
    grpo = C.baseline_signal("GRPO", per["grpo"]["train"], base["train"], what="the base it started from")
    mem = L["memory_bytes"]
    claims = [C.judge(CLAIMS[0], C.difference(per["es"]["train"], base["train"]), quick=quick),
              C.judge(CLAIMS[1], C.agreement(max(mem["population_generate"], mem["es_update"]), mem["grpo_update"], 0.0, "below"),
                      quick=quick),
              C.judge(CLAIMS[2], C.difference(per["es"]["eval"], per["grpo"]["eval"], margin=-MARGIN), [es, grpo], quick=quick)]
    return claims, {"ES": C.arm(setup["steps"], L["seeds"], es), "GRPO": C.arm(setup["steps"], L["seeds"], grpo)}


def run(out_dir: str, quick: bool = False, setup: Setup | None = None) -> dict:
    from longhorizon.lm.evaluate import evaluate
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, make_problems, max_lengths
    from longhorizon.lm.chain_base import task_config
    from longhorizon.repro.report import write_run
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
    recorded = C.as_recorded({
        "accuracy_by_horizon": acc, "accuracy_by_horizon_per_seed": per_seed, "seeds": setup.seeds, "memory_bytes": memory,
        "rollouts_per_arm": setup.steps * setup.prompts_per_step * setup.num_generations,
        "generated_tokens": {"es": es_curve[-1]["tokens"], "grpo": grpo_curve[-1]["tokens"]}, "base": base_name,
        "setup": dataclasses.asdict(setup)})
    claims, arms = judge(recorded, quick)
    scale = (f"h1's character base; {setup.steps} steps, {recorded['rollouts_per_arm']} rollouts per arm; {setup.seeds} "
             f"seeds; {setup.eval_per_horizon} held-out chains per horizon")
    summary = C.summary(paper="ES fine-tuning", claims=claims, arms=arms, scale=scale, quick=quick,
                        command="longhorizon repro es-finetune" + (" --quick" if quick else ""),
                        wall_seconds=time.perf_counter() - t0, **recorded)
    write_json_atomic(out / "curves.json", curves)
    plot(out / "es_vs_grpo.png", acc, es_curve, grpo_curve)
    write_run(out, summary, readme(summary, setup, quick),
              {arm: [dict(c, step=j + 1, seed=i) for i, cs in enumerate(runs) for j, c in enumerate(cs)] for arm, runs in curves.items()})
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


def readme(summary: dict, setup: Setup, quick: bool) -> list[str]:
    acc, mem = summary["accuracy_by_horizon"], summary["memory_bytes"]
    hs = sorted(acc["base"], key=int)
    lines = ["# es-finetune: antithetic ES vs GRPO on h1's chained tasks", "",
             f"Command: `longhorizon repro es-finetune{' --quick' if quick else ''}` (wall {summary['wall_seconds']:.0f} s).", "",
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
    lines += verdict_lines(summary)
    if setup.tiny_untrained_base:
        lines += ["", "(A quick smoke test on an untrained policy: not evidence.)"]
    lines += ["", "## Setup", "", "```", repr(setup), "```", ""]
    return lines
