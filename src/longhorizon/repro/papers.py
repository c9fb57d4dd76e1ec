"""The project's 40 seed papers and where each one's claims are judged (the rows of ``docs/claims.md``).

Each entry: a short name, what the paper is (authors/venue where the reproduction's docstring states
them), the reproduction folders under ``docs/results/`` that judge its claims (empty: none yet), and a
note for the board. The two Effective Horizon papers are judged by one reproduction.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Paper:
    name: str
    about: str
    folders: tuple[str, ...] = ()
    note: str = ""
    survey: bool = False


PAPERS: tuple[Paper, ...] = (
    # online deep RL
    Paper("PQN", "Simplifying Deep Temporal Difference Learning (Gallici et al., 2024)", ("pqn",)),
    Paper("CaRL", "simple rewards keep PPO working at large minibatches (Jaeger et al., 2025)", ("carl",)),
    Paper("TA-LPO", "temporally-aware discovered policy objectives (Jackson et al., 2024)", ("ta-lpo",)),
    Paper("ES fine-tuning", "evolution strategies fine-tune an LM policy with inference-only memory",
          ("es-finetune", "es-smollm2")),
    # horizon analysis
    Paper("Effective Horizon", "the effective horizon and GORP (Laidlaw, Russell, Dragan, NeurIPS 2023)", ("effective-horizon",)),
    Paper("SQIRL", "the effective horizon in stochastic environments (Laidlaw, Zhu, Russell, Dragan, ICLR 2024)",
          ("effective-horizon",)),
    # offline goal-conditioned
    Paper("OTA", "option-aware temporally abstracted values for offline GCRL (Ahn et al., 2025)", ("ota",)),
    Paper("QGF", "test-time gradient guidance of flow policies", ("qgf",)),
    Paper("HECRL", "factored subgoal diffusion for multi-entity GCRL (Haramati et al., ICLR 2026)", ("hecrl",)),
    # language-model policies
    Paper("h1", "a horizon curriculum bootstraps long-horizon reasoning (Motwani et al., 2025)",
          ("h1", "h1-chain-base", "h1-smollm2")),
    Paper("R-HORIZON", "composed queries expose and train long-horizon reasoning", ("rhorizon-smollm2",)),
    Paper("sGPO", "group sizes from a success-rate profile (Sudalairaj et al., 2026)", ("sgpo", "sgpo-chain-base", "sgpo-smollm2")),
    Paper("SCALER", "adaptive difficulty toward a target success rate", ("scaler-smollm2",)),
    Paper("SLCA-GRPO", "segment-level credit assignment for GRPO",
          note="implemented (`lm rl --advantage segment`); no claim reproduction yet"),
    Paper("TreeOPSD", "tree-structured credit with a bounded self-teacher", ("treeopsd",)),
    Paper("CANOPY", "large same-task groups with a KL anchor to the initial policy", ("canopy",)),
    Paper("Nash-MP", "Nash mirror prox for preference games (Tiapkin et al., 2025)", ("nash-mp",)),
    Paper("INPO", "Iterative Nash Policy Optimization (Zhang et al., 2024)", ("inpo",)),
    Paper("MiMo", "MiMo-7B's RL infrastructure: rollouts decoupled from training (Xiaomi, 2025)", ("mimo",)),
    Paper("Horizon-LM", "a RAM-centric architecture for LLM training", ("horizon-lm",)),
    # agents
    Paper("Mobile-Agent-v3", "trajectory-aware relative policy optimisation (TRPO) for multi-turn agents", ("trpo-agent",)),
    Paper("IterResearch", "a rebuilt workspace bounds the context; EAPO's discounted outcome", ("iterresearch",)),
    Paper("ASearcher", "long-horizon search agents with asynchronous RL (Gao et al., 2025)", ("asearcher",)),
    Paper("Agents-A1", "on-policy distillation from teachers routed by domain", ("agents-a1",)),
    Paper("Router-R1", "a cost-weighted reward traces an accuracy-cost frontier", ("router-r1",)),
    Paper("FEEs", "feedback-enriched environments as scaffolds for agent RL", ("fees",)),
    # scale
    Paper("SRL", "scalable RL dataflow of actors, learners and streams (Mei et al., ICLR 2024)", ("srl",),
          note="its actor/learner streams shape the Ray engine (docs/ray.md)"),
    # games, theory, structure
    Paper("Horizon-free RFE", "horizon-free reward-free exploration in linear mixture MDPs (Zhang, Zhang, Gu, 2023)",
          ("horizon-free-rfe",)),
    Paper("Latent MDPs", "horizon-free, variance-dependent regret in latent MDPs (Zhou, Wang, Du, 2023)", ("latent-mdp",)),
    Paper("Adversarial linear MDPs", "refined regret with linear function approximation (Dai, Luo, Wei, Zimmert, ICML 2023)",
          ("adversarial-linear",)),
    Paper("Sparse CCE", "hardness of independent learning and sparse equilibria (Foster, Golowich, Kakade, 2023)", ("cce",)),
    Paper("QARL", "a bounded-rationality curriculum for robust RL (Reddi et al., 2023)", ("qarl",)),
    Paper("CAMS", "belief splitting in one-sided-information games (Ghimire et al., 2025)", ("cams",)),
    Paper("Shared-policy collapse", "how exploration breaks cooperation in shared-policy MARL (Lee & Weng, 2026)",
          ("shared-policy-collapse",)),
    Paper("SEQUOIA", "Q-networks embedded in MILPs for coupled restless bandits (Xu et al., 2025)", ("sequoia",)),
    Paper("E-AMoD", "graph RL with LP layers for electric mobility-on-demand", ("eamod",)),
    # control
    Paper("MBDPO", "diffusion policy optimisation in a learned world model (Cheng et al., 2026)", ("mbdpo",)),
    Paper("ChunkTrust", "adaptive execution horizons for action-chunk policies", ("chunktrust",)),
    Paper("MAD-PINN", "decentralised multi-agent safety with a PINN value (Tayal et al., 2025)", ("mad-pinn",)),
    # the survey
    Paper("RL thesis", "a thesis surveying RL over long horizons", note="a survey: no claim to reproduce", survey=True),
)
