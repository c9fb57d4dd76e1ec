"""`longhorizon repro sgpo-chain-base`: the sGPO reproduction from the base that also saw h=2 chains.

A labelled deviation (see :data:`longhorizon.repro.sgpo.CHAIN_BASE`): with the protocol's base,
fixed-group GRPO does not improve, so "sGPO matches it with fewer tokens" is vacuous; from a base
that solves h=2, GRPO has h=3 to learn.
"""

from __future__ import annotations

import dataclasses

from longhorizon.repro import sgpo


def run(out_dir: str, quick: bool = False) -> dict:
    setup = dataclasses.replace(sgpo.QUICK, base=sgpo.CHAIN_BASE.base) if quick else sgpo.CHAIN_BASE
    return sgpo.run(out_dir, quick=quick, setup=setup)
