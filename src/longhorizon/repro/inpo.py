"""`longhorizon repro inpo`: INPO (Zhang et al. 2024, "Iterative Nash Policy Optimization"), tabular and on a tiny LM.

Part 1, tabular (float64, :mod:`longhorizon.games.inpo`). (a) On random preference games (n = 3, 10, 100), the
minimiser of INPO's full-expectation pairwise loss, found by Newton's method on the logits, equals the OMD iterate
:func:`longhorizon.games.preference.omd_update` (max |log-ratio| < 1e-5), and stops doing so when a coefficient
of the loss is perturbed. (b) Sampled-pairs INPO (minibatches of pairs from pi_t, one Bernoulli preference each,
SGD on the logits) drives KL(pi*_tau || pi_t) down on the 3x3 intransitive game and a random 10-response game.

Part 2, policy level (:mod:`longhorizon.games.preference_lm`). A tiny character-level transformer is taught by
teacher forcing to answer ``u=NN;w=u+C;`` with ``w=MM;`` followed by a style tag r/p/s drawn 60/30/10 (the
reference policy pi_ref: imperfect arithmetic, a skewed tag mix). Five arms start from it and run the same number of
steps on the same prompts per step and completions per prompt: INPO (online pairs), policy-gradient Nash-MP, DPO and
IPO (pairs from pi_ref) and reward-model GRPO (correctness as the reward), all with KL weight tau. The oracle prefers
the correct completion, and among equally correct ones the tag that beats the other (r > s > p > r). Measured on
held-out prompts: win rate against pi_ref, the pairwise win-rate matrix of the final policies, KL(pi || pi_ref),
accuracy and tag mix.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C

PAPER = "INPO"
ARMS = ("inpo", "nash_mp_pg", "dpo", "ipo", "grpo_rm", "inpo_x4")  # inpo_x4: 4 optimiser steps per INPO iteration
REF_TAGS = {"r": 0.6, "p": 0.3, "s": 0.1}


@dataclasses.dataclass(frozen=True)
class TabularSetup:
    sizes: tuple[int, ...] = (3, 10, 100)
    games_per_size: int = 5
    tau: float = 0.1
    eta: float = 2.0
    iterations: int = 40
    seeds: int = 5
    pairs: int = 1024
    sgd_steps: int = 50
    learning_rate: float = 1.0


@dataclasses.dataclass(frozen=True)
class LMSetup:
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    sft_steps: int = 300
    sft_batch: int = 64
    sft_lr: float = 3e-3
    steps: int = 200
    prompts_per_step: int = 8
    num_generations: int = 4
    learning_rate: float = 3e-4
    tau: float = 0.1
    eta: float = 2.0
    eval_prompts: int = 128
    eval_samples: int = 8
    seeds: int = 6  # RL seeds, all from the one pi_ref
    curve_every: int = 25  # steps between the training curves' points
    curve_prompts: int = 32
    seed: int = 0


QUICK_TABULAR = TabularSetup(sizes=(3, 10), games_per_size=1, iterations=10, seeds=2)
# eval shapes equal the training shapes, so the quick run compiles each program once
QUICK_LM = LMSetup(d_model=32, n_layers=1, n_heads=2, sft_steps=60, steps=2, prompts_per_step=4, eval_prompts=4,
                   eval_samples=4, seeds=1, curve_every=2, curve_prompts=4)


# ----------------------------------------------------------------------------- part 1: tabular


def ref_policy(n: int, rng) -> np.ndarray:
    return rng.dirichlet(np.full(n, 2.0))


def minimiser_identity(setup: TabularSetup) -> list[dict]:
    """Per size: max over games of |log argmin L - log omd_update| (and with the pi_t coefficient perturbed)."""
    from longhorizon.games import inpo, preference

    cfg = inpo.INPOConfig(tau=setup.tau, eta=setup.eta)
    # a wrong loss: the exponents of pi_t and pi_ref off by 0.05 (the identity must fail for it)
    wrong = inpo.INPOConfig(tau=setup.tau + 0.05 / setup.eta, eta=setup.eta)
    rows = []
    for n in setup.sizes:
        err, err_wrong = 0.0, np.inf
        for g in range(setup.games_per_size):
            rng = np.random.default_rng(1000 * n + g)
            P = preference.random_skew_game(n, int(rng.integers(2**31)))
            ref, pi_t = ref_policy(n, rng), ref_policy(n, rng)
            omd = np.log(preference.omd_update(pi_t, P, setup.tau, setup.eta, ref))
            err = max(err, float(np.abs(np.log(inpo.minimise_pairwise_loss(pi_t, ref, P, cfg)) - omd).max()))
            mis = np.log(inpo.minimise_pairwise_loss(pi_t, ref, P, wrong))
            err_wrong = min(err_wrong, float(np.abs(mis - omd).max()))
        rows.append({"n": n, "games": setup.games_per_size, "max_log_error": err, "perturbed_min_log_error": err_wrong})
    return rows


def convergence(setup: TabularSetup) -> dict:
    """KL(pi* || pi_t) per iteration: the exact OMD iterates and sampled-pairs INPO (per seed), n = 3 and 10."""
    from longhorizon.games import inpo, preference

    cfg = inpo.INPOConfig(tau=setup.tau, eta=setup.eta, pairs=setup.pairs, sgd_steps=setup.sgd_steps,
                          learning_rate=setup.learning_rate)
    games = {3: (preference.intransitive_3x3(), np.array([0.6, 0.3, 0.1])),
             10: (preference.random_skew_game(10, 7), ref_policy(10, np.random.default_rng(7)))}
    out = {}
    for n, (P, ref) in games.items():
        star = preference.regularised_nash(P, setup.tau, ref)
        pi, exact = ref, [inpo.kl(star, ref)]
        for _ in range(setup.iterations):
            pi = preference.omd_update(pi, P, setup.tau, setup.eta, ref)
            exact.append(inpo.kl(star, pi))
        sampled = np.stack([inpo.sampled_inpo(P, ref, star, cfg, setup.iterations, seed=s) for s in range(setup.seeds)])
        tail = max(1, setup.iterations // 8)
        out[n] = {"exact": exact, "sampled": sampled.tolist(), "kl0": exact[0],
                  "sampled_final_ratio": float(np.median(sampled[:, -tail:].mean(1)) / exact[0]),
                  "sampled_final_ratios": (sampled[:, -tail:].mean(1) / exact[0]).tolist()}
    return out


# ----------------------------------------------------------------------------- part 2: policy level


def task_config():
    from longhorizon.lm.tasks import TaskConfig

    return TaskConfig(digits=2, operators="+", const_max=9, names="split", fixed_width=True)


def reference_policy(setup: LMSetup, log=print):
    """pi_ref (module docstring): :func:`longhorizon.games.preference_lm.cached_reference_policy` with this setup's
    model, teacher-forcing settings and tag mix :data:`REF_TAGS`."""
    from longhorizon.games.preference_lm import cached_reference_policy

    return cached_reference_policy(task_config(), REF_TAGS, d_model=setup.d_model, n_layers=setup.n_layers,
                                   n_heads=setup.n_heads, steps=setup.sft_steps, batch_size=setup.sft_batch,
                                   learning_rate=setup.sft_lr, seed=setup.seed, log=log)


def make_trainer(arm: str, params, model_cfg, tokenizer, setup: LMSetup, oracle, seed: int = 0):
    """The arm's trainer; every arm shares the sampling settings and the KL weight tau."""
    from longhorizon.games import preference_lm as plm
    from longhorizon.lm.grpo import GRPOConfig
    from longhorizon.lm.tasks import max_lengths

    plen, clen = max_lengths("packed", 1, task_config())
    cfg = GRPOConfig(lr_scheduler_type="constant", num_generations=setup.num_generations, learning_rate=setup.learning_rate, beta=setup.tau,
                     loss_type="dr_grpo", scale_rewards="none", max_prompt_length=plen + 1, max_completion_length=clen + 2)
    if arm in plm.PAIR_LOSSES or arm == "inpo_x4":
        return plm.PairwiseTrainer(model_cfg, params, tokenizer, cfg, loss=arm.removesuffix("_x4"), oracle=oracle,
                                   tau=setup.tau, eta=setup.eta, inner_steps=4 if arm == "inpo_x4" else 1, seed=seed)
    if arm == "nash_mp_pg":
        return plm.NashMPTrainer(model_cfg, params, tokenizer, cfg, oracle=oracle, seed=seed)
    return plm.reward_model_trainer(model_cfg, params, tokenizer, cfg, seed=seed)


def policy_level(setup: LMSetup, log=print) -> dict:
    """Train every arm from pi_ref for each RL seed (module docstring); evaluate them against pi_ref and each other.
    Win rates are means over seeds; their standard error is over seeds (over held-out prompts with one seed)."""
    from longhorizon.games.preference_lm import Oracle, describe_samples, sample_completions, win_rate
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, ProblemStream, make_problems

    oracle = Oracle()
    params, model_cfg, tokenizer = reference_policy(setup, log)
    held = make_problems("packed", 1, setup.eval_prompts, setup.seed + HELD_OUT_OFFSET, task_config())
    evaluator = make_trainer("grpo_rm", params, model_cfg, tokenizer, setup, oracle, seed=setup.seed)
    names, per_seed, costs, curves = ["reference", *ARMS], [], {arm: [] for arm in ARMS}, {arm: [] for arm in ARMS}
    for seed in range(setup.seed, setup.seed + setup.seeds):
        policies = {"reference": params}
        for arm in ARMS:
            trainer = make_trainer(arm, params, model_cfg, tokenizer, setup, oracle, seed=seed)
            stream, t0 = ProblemStream("packed", task_config(), seed + 1), time.perf_counter()
            curve = [dict(step=0, **curve_point(evaluator, params, held[:setup.curve_prompts], setup))]
            for step in range(1, setup.steps + 1):
                trainer.step(stream.sample([1], setup.prompts_per_step))
                if step % setup.curve_every == 0:  # the tag mix's path during training
                    curve.append(dict(step=step, **curve_point(evaluator, trainer.params, held[:setup.curve_prompts], setup)))
            curves[arm].append(curve)
            policies[arm] = trainer.params
            costs[arm].append({"seconds": time.perf_counter() - t0, "generations": trainer.counters["generations"],
                               "optimizer_steps": trainer.counters["optimizer_steps"]})
            log(f"  seed {seed} {arm}: {setup.steps} steps in {costs[arm][-1]['seconds']:.0f} s")
        samples = {name: sample_completions(evaluator, p, held, setup.eval_samples) for name, p in policies.items()}
        wins = [[win_rate(oracle, held, samples[a]["texts"], samples[b]["texts"], same=a == b) for b in names] for a in names]
        per_seed.append({"matrix": [[m for m, _ in row] for row in wins], "matrix_se": [[e for _, e in row] for row in wins],
                         "policies": {n: describe_samples(held, samples[n]) for n in names}})
    return {**aggregate(names, per_seed), "per_seed": per_seed, "curves": curves,
            "costs": {arm: {"seconds": float(np.mean([c["seconds"] for c in cs])), "generations": cs[0]["generations"]}
                      for arm, cs in costs.items()}}


def aggregate(names: list[str], per_seed: list[dict]) -> dict:
    """Means over seeds of the win-rate matrix (standard error over seeds, over prompts with one seed) and of each
    policy's accuracy, KL, tag mix and tag exploitability (each seed's exploitability, then the mean: the
    exploitability of the seeds' mean mix would hide seeds that sit at different points of a cycle)."""
    M = np.asarray([r["matrix"] for r in per_seed])
    se = M.std(0, ddof=1) / np.sqrt(len(M)) if len(M) > 1 else np.asarray(per_seed[0]["matrix_se"])

    def mean_of(n, value):
        return float(np.mean([value(r["policies"][n]) for r in per_seed]))

    policies = {n: {"accuracy": mean_of(n, lambda p: p["accuracy"]), "kl_to_ref": mean_of(n, lambda p: p["kl_to_ref"]),
                    "exploitability": mean_of(n, lambda p: exploitability(p["tags"])),
                    "tags": {str(k): mean_of(n, lambda p: p["tags"][str(k)]) for k in (*REF_TAGS, None)}}
                for n in names}
    return {"names": names, "matrix": M.mean(0).tolist(), "matrix_se": se.tolist(), "policies": policies}


def curve_point(evaluator, params, problems, setup: LMSetup) -> dict:
    """Tag exploitability, accuracy and KL to pi_ref of a policy on a few held-out prompts (the training curves)."""
    from longhorizon.games.preference_lm import describe_samples, sample_completions

    d = describe_samples(problems, sample_completions(evaluator, params, problems, setup.eval_samples))
    return {"exploitability": exploitability(d["tags"]), "accuracy": d["accuracy"], "kl_to_ref": d["kl_to_ref"]}


IDENTITY_TOLERANCE = 1e-5  # |log argmin L - log OMD iterate|, stated before the run
CONVERGED = 0.1  # sampled INPO converges if its late KL(pi* || pi_t) is below this fraction of KL_0
CLAIMS = {"identity": "the full-expectation loss's minimiser is the OMD iterate (to 1e-5 in log space)",
          "convergence": "sampled-pairs INPO converges toward pi*_tau (KL falls below a tenth of KL_0)",
          "reference": "INPO's policy beats the reference (win rate > 1/2)",
          "tags": "INPO's tag mix is less exploitable than pi_ref's (it moves toward the cyclic part's Nash mix)"}


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers (``identity``, ``convergence``, ``policy_level``, ``setups``).
    Tabular: agreements within stated tolerances; sampled convergence: per-seed late KL / KL_0 below 0.1 (Student-t
    over seeds). Policy level: per-seed win rates against 1/2 and per-seed tag exploitability, over RL seeds; an arm
    judged must have moved away from pi_ref (KL), a rival must beat pi_ref (else it is a crippled baseline)."""
    identity, conv, pl, lm = L["identity"], L["convergence"], L["policy_level"], L["setups"]["lm"]
    miss = min(r["perturbed_min_log_error"] for r in identity)
    check = {"arm": "the identity check", "test": "a perturbed loss misses the OMD iterate by more than the tolerance",
             "miss": miss, "moved": miss > IDENTITY_TOLERANCE, "what": f"the identity check: a perturbed loss misses by only {miss:.1e}"}
    claims = [C.judge(CLAIMS["identity"], C.agreement([r["max_log_error"] for r in identity], 0.0, IDENTITY_TOLERANCE),
                      [check], quick=quick)]
    if all("sampled_final_ratios" in c for c in conv.values()):
        ruling = C.combine({f"n={n}": C.difference(c["sampled_final_ratios"], CONVERGED, higher_is_better=False)
                            for n, c in conv.items()}, "game")
    else:
        ruling = C.undecidable("per-seed KL ratios not recorded; median late KL / KL_0: " +
                               ", ".join(f"n={n}: {c['sampled_final_ratio']:.3g}" for n, c in conv.items()))
    claims.append(C.judge(CLAIMS["convergence"], ruling, quick=quick))
    names, seeds = pl["names"], pl["per_seed"]
    win = lambda a, b: [r["matrix"][names.index(a)][names.index(b)] for r in seeds]  # noqa: E731
    moved = {a: C.arm_signal(a, eval_start=[c[0]["kl_to_ref"] for c in pl["curves"][a]],
                             eval_end=[r["policies"][a]["kl_to_ref"] for r in seeds], what="KL to pi_ref") for a in ARMS}
    beats_ref = {a: C.baseline_signal(a, win(a, "reference"), 0.5, what="pi_ref (a win rate of 1/2)") for a in ARMS}
    claims.append(C.judge(CLAIMS["reference"], C.difference(win("inpo", "reference"), 0.5), [moved["inpo"]], quick=quick))
    for other in ("dpo", "ipo", "grpo_rm", "nash_mp_pg"):
        claims.append(C.judge(f"INPO's policy beats {other}'s head to head", C.difference(win("inpo", other), 0.5),
                              [moved["inpo"], beats_ref[other]], quick=quick))
    tags = {n: [exploitability(r["policies"][n]["tags"]) for r in seeds] for n in ("inpo", "reference")}
    claims.append(C.judge(CLAIMS["tags"], C.difference(tags["inpo"], tags["reference"], higher_is_better=False),
                          [moved["inpo"]], quick=quick))
    arms = {a: C.arm(lm["steps"], len(seeds), moved[a], beats_ref[a]) for a in ARMS}
    arms["sampled-pairs INPO (tabular)"] = C.arm(L["setups"]["tabular"]["iterations"], L["setups"]["tabular"]["seeds"],
                                                 C.not_applied("sampled-pairs INPO (tabular)", "its KL to pi* is the claim"))
    return claims, arms


def exploitability(tags: dict) -> float:
    """:func:`longhorizon.games.preference_lm.tag_exploitability` of a tag mix under the default oracle."""
    from longhorizon.games.preference_lm import Oracle, tag_exploitability

    return tag_exploitability(Oracle(), tags)


def nash_tags(tau: float) -> dict:
    """The regularised Nash tag mix of the cyclic part alone (equally correct completions), from pi_ref's tag mix."""
    from longhorizon.games.preference_lm import Oracle, nash_tag_mix

    return nash_tag_mix(Oracle(), tau, REF_TAGS)


# ----------------------------------------------------------------------------- the run and its report


def run(out_dir: str, quick: bool = False, tabular: TabularSetup | None = None, lm_setup: LMSetup | None = None) -> dict:
    from longhorizon.repro.inpo_report import plot, report
    from longhorizon.repro.report import write_run

    tabular = tabular or (QUICK_TABULAR if quick else TabularSetup())
    lm_setup = lm_setup or (QUICK_LM if quick else LMSetup())
    out, t0 = Path(out_dir), time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    identity = minimiser_identity(tabular)
    conv = convergence(tabular)
    print(f"tabular part in {time.perf_counter() - t0:.0f} s")
    lm = policy_level(lm_setup)
    tables = {"identity": identity,
              "convergence": {str(n): {k: c[k] for k in ("kl0", "sampled_final_ratio", "sampled_final_ratios")} for n, c in conv.items()},
              "policy_level": {k: lm[k] for k in ("names", "matrix", "matrix_se", "policies", "costs", "per_seed", "curves")},
              "nash_tags": nash_tags(lm_setup.tau), "setups": {"tabular": dataclasses.asdict(tabular), "lm": dataclasses.asdict(lm_setup)}}
    claims, arms = judge(tables, quick)
    summary = C.summary(paper=PAPER, claims=claims, arms=arms, scale=scale(tabular, lm_setup), quick=quick,
                        command="longhorizon repro inpo" + (" --quick" if quick else ""),
                        wall_seconds=time.perf_counter() - t0, **tables)
    curves = {a: [dict(p, seed=i) for i, c in enumerate(cs) for p in c] for a, cs in lm["curves"].items()}
    plot(out / "inpo.png", conv, {**lm, "nash_exploitability": exploitability(nash_tags(lm_setup.tau))})
    write_run(out, summary, report(summary, quick), curves)
    return summary


def scale(tabular: TabularSetup, lm: LMSetup) -> str:
    return (f"tabular: n in {list(tabular.sizes)}, {tabular.seeds} seeds of sampled pairs; policy level: a {lm.n_layers}-layer "
            f"d={lm.d_model} character model, {lm.steps} steps x {lm.prompts_per_step} prompts x {lm.num_generations} "
            f"completions per arm, {lm.seeds} RL seeds, {lm.eval_prompts} held-out prompts")
