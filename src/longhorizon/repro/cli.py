"""`longhorizon repro NAME`: run a paper-claim reproduction and write docs/results/NAME/.

`longhorizon repro board` writes the claims board, docs/claims.md, from every docs/results/*/summary.json."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Optional

import typer

from longhorizon.errors import UsageError

# name -> (module, one-line claim); each module exposes run(out_dir: str, quick: bool) -> dict
REPROS = {
    "h1": ("longhorizon.repro.h1", "a horizon curriculum (h=1 -> 5) beats fixed-horizon RL on long chained problems"),
    "h1-chain-base": ("longhorizon.repro.h1_chain_base",
                      "the same, from a base that was also shown h=2 chains (a labelled deviation): does RL reach h>=3?"),
    "sgpo": ("longhorizon.repro.sgpo", "per-query group sizes from a success-rate profile match GRPO with fewer tokens"),
    "sgpo-chain-base": ("longhorizon.repro.sgpo_chain_base",
                        "the same, from the base that also saw h=2 chains (a labelled deviation), so GRPO can improve"),
    "h1-smollm2": ("longhorizon.repro.h1_smollm2",
                   "h1 on a real pretrained model (SmolLM2-135M-Instruct, natural-language chains): curriculum vs fixed horizons"),
    "sgpo-smollm2": ("longhorizon.repro.sgpo_smollm2", "sGPO vs GRPO from SmolLM2-135M-Instruct: the same accuracy with fewer tokens"),
    "rhorizon-smollm2": ("longhorizon.repro.rhorizon_smollm2",
                         "R-HORIZON on SmolLM2-135M-Instruct: accuracy falls with composed problems; RL on composed data raises it"),
    "scaler-smollm2": ("longhorizon.repro.scaler_smollm2",
                       "SCALER on SmolLM2-135M-Instruct: difficulty kept near a target success beats a fixed mix at equal budget"),
    "es-smollm2": ("longhorizon.repro.es_smollm2",
                   "ES fine-tuning of SmolLM2-135M-Instruct matches GRPO (its learning rate chosen on validation) at "
                   "equal rollouts, with inference-only memory"),
    "ota": ("longhorizon.repro.ota", "an option-aware high-level value (OTA) keeps HIQL's advantage signs right far from the goal"),
    "qgf": ("longhorizon.repro.qgf", "test-time critic-gradient guidance of a flow BC policy raises return; vs best-of-N and FQL"),
    "hecrl": ("longhorizon.repro.hecrl", "factored subgoal diffusion raises a value-based agent's success on long multi-block tasks"),
    "trpo-agent": ("longhorizon.repro.trpo_agent",
                   "one trajectory-level advantage over all turns (Mobile-Agent-v3's TRPO) trains as well as per-turn credit"),
    "iterresearch": ("longhorizon.repro.iterresearch",
                     "a rebuilt workspace keeps an agent's context bounded over many rounds; EAPO's discount shortens episodes"),
    "asearcher": ("longhorizon.repro.asearcher",
                  "search agents use more turns as questions need more hops; a larger turn budget raises accuracy"),
    "treeopsd": ("longhorizon.repro.treeopsd",
                 "tree-branched rollouts with tree credit + a bounded self-teacher beat GRPO at equal sampled tokens"),
    "agents-a1": ("longhorizon.repro.agents_a1",
                  "on-policy distillation from teachers routed by domain beats one teacher and no distillation"),
    "router-r1": ("longhorizon.repro.router_r1",
                  "Router-R1: raising the cost weight of format + outcome - w cost lowers a router's cost (an accuracy-cost frontier)"),
    "fees": ("longhorizon.repro.fees", "feedback-enriched environments: structured feedback speeds up agent RL at equal tokens"),
    "canopy": ("longhorizon.repro.canopy",
               "CANOPY: with large same-task groups, a KL anchor keeps the agent near its start without losing success"),
    "nash-mp": ("longhorizon.repro.nash_mp",
                "Nash-MP's last iterate converges to the regularised Nash policy at (1+2 beta)^(-N/2), whatever the size"),
    "inpo": ("longhorizon.repro.inpo",
             "INPO's pairwise squared loss is minimised by the online-mirror-descent iterate; its policies beat DPO/IPO/GRPO"),
    "cce": ("longhorizon.repro.cce",
            "independent no-regret learners' mixtures approach a CCE against Markov deviations, not history-dependent ones"),
    "qarl": ("longhorizon.repro.qarl",
             "a bounded-rationality curriculum (QARL) gives a protagonist a better worst case than RARL"),
    "cams": ("longhorizon.repro.cams",
             "one-sided-information games: belief splitting over I prototypes matches CFR+ at a fraction of the cost"),
    "sequoia": ("longhorizon.repro.sequoia",
                "a Q-network embedded in a MILP (SEQUOIA) beats the best baseline on coupled restless bandits"),
    "eamod": ("longhorizon.repro.eamod",
              "graph RL with LP layers reaches a large fraction of the full-information LP optimum, far faster"),
    "shared-policy-collapse": ("longhorizon.repro.shared_policy_collapse",
                               "under a shared policy, cooperation collapses as exploration rises; independent networks keep it"),
    "ta-lpo": ("longhorizon.repro.ta_lpo",
               "a drift objective that sees the training horizon (TA-LPO) generalises across lifetimes better than LPO"),
    "es-finetune": ("longhorizon.repro.es_finetune",
                    "antithetic evolution strategies fine-tune an LM policy with inference-only memory; vs GRPO at equal rollouts"),
    "carl": ("longhorizon.repro.carl",
             "PPO on a summed shaped reward degrades as the minibatch grows; on CaRL's route-completion reward it does not"),
    "horizon-free-rfe": ("longhorizon.repro.horizon_free_rfe",
                         "reward-free exploration in linear mixture MDPs: HF-UCRL-RFE++ needs episodes flat in H, UCRL-RFE's grow"),
    "latent-mdp": ("longhorizon.repro.latent_mdp",
                   "latent-MDP regret is (nearly) horizon-free and much smaller on zero-variance instances"),
    "adversarial-linear": ("longhorizon.repro.adversarial_linear",
                           "log-barrier FTRL with an unbiased linear-Q estimator has sqrt(K) regret; Hedge with it is unstable"),
    "mbdpo": ("longhorizon.repro.mbdpo",
              "a diffusion policy over action sequences in a learned world model (MBDPO) vs MPPI planning and PPO"),
    "chunktrust": ("longhorizon.repro.chunktrust",
                   "choosing how much of an action chunk to execute from the sampler's trace beats any fixed horizon"),
    "mad-pinn": ("longhorizon.repro.mad_pinn",
                 "a PINN value for the epigraph HJB-VI, deployed decentralised, keeps many agents safe at low cost"),
    "pqn": ("longhorizon.repro.pqn",
            "LayerNorm + l2 keeps off-policy TD bounded on Baird's counterexample; PQN vs DQN on MinAtar in wall time"),
    "horizon-lm": ("longhorizon.repro.horizon_lm",
                   "Horizon-LM: the layer-streamed update's device memory is flat in depth, so a model whose resident "
                   "update exceeds the device trains within it"),
    "srl": ("longhorizon.repro.srl",
            "SRL: the Ray engine's throughput grows near-linearly with actors until the learner saturates, then "
            "the learner bounds it"),
    "mimo": ("longhorizon.repro.mimo",
             "MiMo / AReaL: asynchronous GRPO on Ray rollout workers trains faster than synchronous at equal samples "
             "and equal accuracy"),
    "effective-horizon": ("longhorizon.repro.effective_horizon",
                          "deep RL's sample complexity grows exponentially with the effective horizon; SQIRL succeeds where PPO/PQN do"),
}
# Reproductions whose run folders are large write under runs/ by default (their curated copy goes to docs/results/).
DEFAULT_OUT = {"effective-horizon": Path("runs") / "effective-horizon"}


BOARD = "board"


def _board(out: Optional[Path], quick: bool, dry_run: bool) -> None:
    """`longhorizon repro board`: docs/claims.md from docs/results/*/summary.json (run from the repository root)."""
    from longhorizon.repro import board
    from longhorizon.repro.papers import PAPERS

    if quick:
        raise UsageError("--quick cannot act on `repro board`: the board only reads docs/results; drop --quick.")
    results, page = Path("docs") / "results", out or Path("docs") / "claims.md"
    if not results.is_dir():
        raise UsageError(f"no {results}/ here: run `longhorizon repro board` from the repository root.")
    if dry_run:
        judged = sorted(folder for folder, s in board.load(results).items() if s)
        print(json.dumps({"board": str(page), "results": str(results), "papers": len(PAPERS), "judged": judged}, indent=2))
        return
    board.write(results, page)
    print(f"wrote {page}")


def register(app: typer.Typer) -> None:
    @app.command()
    def repro(
        name: str = typer.Argument(..., help=f"One of: {', '.join(REPROS)}; or board (write docs/claims.md)."),
        out: Optional[Path] = typer.Option(None, help="Output folder (default: docs/results/NAME; runs/NAME for effective-horizon; "
                                                      "for board, the page: docs/claims.md)."),
        quick: bool = typer.Option(False, help="A smaller, faster version (for smoke tests)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Check NAME and print what would run, as JSON; train and write nothing."),
    ) -> None:
        """Reproduce a paper's claim at small scale; writes a table, a plot and a verdict."""
        if name == BOARD:
            _board(out, quick, dry_run)
            return
        if name not in REPROS:
            raise UsageError(f"unknown reproduction '{name}'; choose one of: {', '.join(sorted(REPROS))}.")
        module_name, claim = REPROS[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name == module_name:
                raise UsageError(f"reproduction '{name}' is not part of this installation yet; see docs/ for the ones that are.") from None
            raise
        folder = out or DEFAULT_OUT.get(name, Path("docs") / "results" / name)
        if dry_run:
            print(json.dumps({"repro": name, "claim": claim, "module": module_name, "out": str(folder), "quick": quick},
                             indent=2))
            return
        from longhorizon.runner.command_line import setup_compilation_cache

        setup_compilation_cache()  # reruns (the quick mode, a second seed set) skip recompiling
        result = module.run(str(folder), quick=quick)
        for entry in (result.get("claims", []) if isinstance(result, dict) else []):  # the claims schema
            print(f"{entry['verdict']}: {entry['claim']}")
        print(f"results: {folder}")
