"""`longhorizon lm agent`: a run through the LM spine writes its results folder; Ctrl-C + --resume is bit-exact."""

import json

import pytest

from longhorizon.lm.agents.trainer import AgentTrainer
from longhorizon.lm.resume import INTERRUPTED_EXIT

from test_lm_resume import _assert_same_tree, _final_state, _invoke, _rows, _sigint_after  # noqa: E402

pytestmark = pytest.mark.xdist_group("lm_agent_run")

AGENT = ["lm", "agent", "--model", "tiny-random", "--env", "research", "--env-arg", "items=2", "--tool-format", "tags",
         "--steps", "4", "--prompts-per-step", "2", "--num-generations", "2", "--max-turns", "3",
         "--max-action-tokens", "16", "--max-context-tokens", "768", "--train-tasks", "8", "--eval-tasks", "2",
         "--eval-every", "2", "--beta", "0.04", "--learning-rate", "1e-4", "--checkpoint-every", "100"]


@pytest.mark.slow
def test_agent_run_writes_its_folder_and_resumes_bit_exactly(tmp_path, monkeypatch):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    r = _invoke([*AGENT, "--out", straight])
    assert "held-out: reward" in r.output
    for name in ("config.json", "metrics.jsonl", "summary.json", "curve.png"):
        assert (straight / name).is_file(), name
    config = json.loads((straight / "config.json").read_text())
    assert config["agent"]["env"] == "research" and config["agent"]["agent"]["tool_format"] == "tags"
    rows = [json.loads(x) for x in (straight / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and "eval_success" in rows[0]  # the held-out episodes of the starting policy
    rows = rows[1:]
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and [r["version"] for r in rows] == [1, 2, 3, 4]
    assert "eval_success" in rows[1] and "eval_success" not in rows[0]
    with monkeypatch.context() as m:
        _sigint_after(m, AgentTrainer, "step", 3)
        _invoke([*AGENT, "--out", resumed], code=INTERRUPTED_EXIT)
    assert _final_state(resumed)[0]["step"] == 3
    _invoke(["lm", "agent", "--resume", resumed])
    (meta_a, state_a), (meta_b, state_b) = _final_state(straight), _final_state(resumed)
    assert meta_a["counters"] == meta_b["counters"] and meta_a["sampler"] == meta_b["sampler"]
    _assert_same_tree(state_a, state_b)
    keys = ("step", "reward", "loss", "kl", "turns", "eval_reward")
    assert _rows(straight, keys) == _rows(resumed, keys)
