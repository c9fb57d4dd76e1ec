"""`longhorizon repro h1-chain-base`: the h1 protocol from a base that also saw supervised h=2 chains.

A labelled deviation from the paper's protocol (whose base sees single problems only, see
:mod:`longhorizon.repro.h1`): with 25% of the SFT data h=2 chains the base solves h=2 but not h=3,
which gives the RL arms the non-zero success rate at the next horizon that the curriculum needs.
"""

from __future__ import annotations

import dataclasses

from longhorizon.repro import h1


def run(out_dir: str, quick: bool = False) -> dict:
    setup = dataclasses.replace(h1.QUICK, sft_chain_fraction=h1.CHAIN_BASE.sft_chain_fraction,
                                sft_steps=h1.CHAIN_BASE.sft_steps) if quick else h1.CHAIN_BASE
    return h1.run(out_dir, quick=quick, setup=setup)
