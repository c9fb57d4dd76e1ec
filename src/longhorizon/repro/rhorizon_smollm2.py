"""`longhorizon repro rhorizon-smollm2`: R-HORIZON (composed queries, all-or-nothing) on SmolLM2-135M-Instruct; protocol and verdict rule in
:mod:`longhorizon.repro.real_model`."""

from longhorizon.repro.real_model import run_rhorizon as run

__all__ = ["run"]
