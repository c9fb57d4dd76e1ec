"""`longhorizon repro h1-smollm2`: h1 (composition curriculum) on SmolLM2-135M-Instruct; protocol and verdict rule in
:mod:`longhorizon.repro.real_model`."""

from longhorizon.repro.real_model import run_h1 as run

__all__ = ["run"]
