"""The treeopsd and agents-a1 reproductions' --quick modes write their folder (README table, plot, summary with claims)."""

import pytest
from test_agent_repros import _check as _check_folder
from test_agent_repros import _private_cache  # noqa: F401  (warm starts in tmp, not in the user's cache)

# no xdist group: each builds its own warm start; the two workers share compiled programs through the
# persistent compilation cache (tests/conftest.py), and spreading them keeps the suite's critical path short


def _check(out, png, claims):
    summary = _check_folder(out, png, claims)
    assert summary["claims"][0]["claim"] in (out / "README.md").read_text()
    return summary


@pytest.mark.slow
def test_treeopsd_quick(tmp_path):
    import numpy as np

    from longhorizon.repro import treeopsd

    treeopsd.run(str(tmp_path / "t"), quick=True)
    s = _check(tmp_path / "t", "treeopsd.png", [treeopsd.CLAIM])
    # computed from the data: the comparison point is the smaller arm's token count, the values read off its curves
    assert s["equal_tokens"] == min(s["final_tokens"].values()) > 0
    for arm, curves in s["curves"].items():
        (tokens, success), = [zip(*c) for c in curves]
        assert tokens[0] == 0 and success[0] == s["warm_start_success"]
        assert s["success_at_equal_tokens"][arm][0] == pytest.approx(np.interp(s["equal_tokens"], tokens, success))
    # the tree shares its prefixes, so at equal episodes it samples no more tokens than independent episodes
    assert s["final_tokens"][treeopsd.TREE] <= s["final_tokens"][treeopsd.GRPO]


@pytest.mark.slow
def test_agents_a1_quick(tmp_path):
    import numpy as np

    from longhorizon.repro import agents_a1

    agents_a1.run(str(tmp_path / "a"), quick=True)
    s = _check(tmp_path / "a", "agents_a1.png", [agents_a1.CLAIM])
    assert set(s["success"]) == {agents_a1.ROUTED, agents_a1.SINGLE, agents_a1.NONE}
    for arm, runs in s["success"].items():
        assert set(runs[0]) == set(agents_a1.DOMAINS)
        assert s["success_mean"][arm] == pytest.approx(np.mean([np.mean(list(r.values())) for r in runs]))
    assert set(s["teacher_success"]) == set(agents_a1.DOMAINS) and s["held_out_tasks"] == {"1-hop": 1, "2-hop": 1}


def test_mixed_domain_rows_carry_their_domain():
    from longhorizon.repro import agents_a1

    rows = agents_a1.SETUP.rows(6, seed=1)
    assert [r["domain"] for r in rows] == ["1-hop", "2-hop"] * 3 and [r["hops"] for r in rows] == [1, 2] * 3
