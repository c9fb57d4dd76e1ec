"""`longhorizon repro sgpo-smollm2`: sGPO vs GRPO on SmolLM2-135M-Instruct; protocol and verdict rule in
:mod:`longhorizon.repro.real_model`."""

from longhorizon.repro.real_model import run_sgpo as run

__all__ = ["run"]
