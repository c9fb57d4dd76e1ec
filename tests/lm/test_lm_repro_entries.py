"""The `longhorizon repro` entries of the LM reproductions resolve to the intended setups."""

from longhorizon.repro import h1


def test_h1_chain_base_runs_the_protocol_from_the_labelled_deviation(monkeypatch, tmp_path):
    from longhorizon.cli import main

    seen = {}
    monkeypatch.setattr(h1, "run", lambda out, quick=False, setup=None: seen.update(out=out, quick=quick, setup=setup) or {})
    assert main(["repro", "h1-chain-base", "--out", str(tmp_path / "r")]) == 0
    assert seen["setup"] == h1.CHAIN_BASE and seen["setup"].sft_chain_fraction == 0.25 and not seen["quick"]
    assert main(["repro", "h1-chain-base", "--quick", "--out", str(tmp_path / "q")]) == 0
    assert seen["quick"] and seen["setup"].rl_steps == h1.QUICK.rl_steps and seen["setup"].sft_chain_fraction == 0.25
    assert h1.H1Setup().sft_chain_fraction == 0.0  # the protocol itself stays on single problems


def test_sgpo_chain_base_runs_from_the_chain_base(monkeypatch, tmp_path):
    from longhorizon.cli import main
    from longhorizon.repro import sgpo

    seen = {}
    monkeypatch.setattr(sgpo, "run", lambda out, quick=False, setup=None: seen.update(setup=setup) or {})
    assert main(["repro", "sgpo-chain-base", "--out", str(tmp_path / "r")]) == 0
    assert seen["setup"].base.sft_chain_fraction == h1.CHAIN_BASE.sft_chain_fraction
    assert seen["setup"].base.sft_steps == h1.CHAIN_BASE.sft_steps  # the same cached base as h1-chain-base
