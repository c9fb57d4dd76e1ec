"""The agent reproductions' --quick modes write their folder (README table, plot, summary with claims) from the data."""

import json

import pytest

# no xdist group: each builds its own warm start; the two workers share compiled programs through the
# persistent compilation cache (tests/conftest.py), and spreading them keeps the suite's critical path short


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LONGHORIZON_CACHE", str(tmp_path / "cache"))  # warm starts made here, not in the user's cache


def _check(out, png, claims):
    """The folder of a --quick run: the plot, a README with its verdicts, a summary in the claims schema whose
    claims are the module's and are not judged, and each arm's training curve."""
    from longhorizon.repro import claims as C

    summary = json.loads((out / "summary.json").read_text())
    readme = (out / "README.md").read_text()
    assert (out / png).is_file() and "## Verdict" in readme and "QUICK" in readme and C.QUICK in readme
    assert C.validate_summary(summary) == [] and summary["quick"] is True
    assert [c["claim"] for c in summary["claims"]] == list(claims)
    assert {c["verdict"] for c in summary["claims"]} == {C.QUICK}
    assert list((out / "curves").glob("*.csv")), "each arm's training curve is kept"
    return summary


@pytest.mark.slow
def test_trpo_agent_quick(tmp_path):
    from longhorizon.repro import trpo_agent

    summary = trpo_agent.run(str(tmp_path / "t"), quick=True)
    s = _check(tmp_path / "t", "trpo_agent.png", [trpo_agent.CLAIM])
    assert set(s["final_success"]) == set(trpo_agent.ARMS) and summary["claims"] == s["claims"]


@pytest.mark.slow
def test_iterresearch_quick(tmp_path):
    from longhorizon.repro import iterresearch

    iterresearch.run(str(tmp_path / "i"), quick=True)
    s = _check(tmp_path / "i", "iterresearch.png", ["the workspace keeps the context bounded while the full history grows",
                                                    "the workspace agent learns no worse than the full-history agent",
                                                    "EAPO keeps success and shortens episodes"])
    ctx = s["context_tokens"]  # measured from expert episodes
    assert ctx["full"]["16"] > 2 * ctx["full"]["2"] and ctx["workspace"]["16"] < 1.25 * ctx["workspace"]["2"]
    assert all(v == 1.0 for v in s["expert_success"].values())


@pytest.mark.slow
def test_asearcher_quick(tmp_path):
    from longhorizon.repro import asearcher

    asearcher.run(str(tmp_path / "a"), quick=True)
    s = _check(tmp_path / "a", "asearcher.png", ["agents use more turns and succeed less as questions need more hops",
                                                 "a larger turn budget never lowers accuracy and raises it on the "
                                                 "hardest questions",
                                                 "RL with a generous budget raises accuracy over the warm start"])
    assert set(s["accuracy"]) == {"tight (k+1)", "raised (2k+2)"} and set(s["accuracy"]["tight (k+1)"]) == {"1", "2", "3", "4"}
