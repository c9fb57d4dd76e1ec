"""Horizon-LM's memory reproduction: lm.offload.device_memory against bytes counted by hand, and the two claims'
rules on recorded numbers made up to hit each verdict."""

from __future__ import annotations

import json

import pytest

from longhorizon.lm.grpo import GRPOConfig, batch_shapes
from longhorizon.lm.llama import LlamaConfig
from longhorizon.lm.offload import device_memory
from longhorizon.repro import claims as C
from longhorizon.repro import horizon_lm

ROWS, PROMPT, COMPLETION, D = 2, 8, 8, 32


def _batch():
    return batch_shapes(ROWS, PROMPT, COMPLETION)


def _memory(layers: int) -> dict:
    model = LlamaConfig(vocab_size=64, d_model=D, n_layers=layers, n_heads=2, n_kv_heads=1, d_ff=64, tie_embeddings=False)
    cfg = GRPOConfig(lr_scheduler_type="constant", max_prompt_length=PROMPT, max_completion_length=COMPLETION,
                     bucket_completions=False)
    return device_memory(model, cfg, _batch())


def test_device_memory_counts_the_prefetched_block_by_hand_and_is_flat_in_depth():
    """One block of d=32 (2 query heads and 1 key/value head of 16, SwiGLU 64): two norms 2 x 32, q and o 2 x 32 x 32,
    k and v 2 x 32 x 16, gate, up and down 3 x 32 x 64 = 9,280 floats; its input 2 rows x 16 tokens x 32. The
    streamed step's programs are the same at 1 and 3 layers; the resident step grows by two blocks' parameters, AdamW
    moments and gradient at least (4 copies of 9,280 floats each)."""
    one, three = _memory(1), _memory(3)
    block = 2 * D + 2 * D * D + 2 * D * 16 + 3 * D * 64
    assert block == 9_280
    assert one["prefetched"] == (block + ROWS * (PROMPT + COMPLETION) * D) * 4
    assert one["parameters"] == 64 * D + block + D + D * 64  # embedding, one block, final norm, untied head
    assert three["streamed"] == one["streamed"] and three["pieces"] == one["pieces"]
    assert three["resident"] - one["resident"] >= 4 * 2 * block * 4


def _recorded(streamed, resident, budget_gib=1.0):
    depths = list(range(1, len(streamed) + 1))
    setup = {**json.loads(json.dumps(horizon_lm.dataclasses.asdict(horizon_lm.Setup()))), "depths": depths,
             "budget_gib": budget_gib}
    rows = [{"depth": d, "streamed": s, "resident": r, "parameters": 1e6} for d, s, r in zip(depths, streamed, resident)]
    return {"setup": setup, "depth_sweep": rows, "width_sweep": []}


GIB = 2 ** 30


@pytest.mark.parametrize("streamed, resident, verdicts", [
    ([0.5 * GIB, 0.51 * GIB, 0.52 * GIB], [1 * GIB, 2 * GIB, 4 * GIB], [C.HOLDS, C.HOLDS]),
    ([0.5 * GIB, 0.6 * GIB, 0.9 * GIB], [1 * GIB, 2 * GIB, 4 * GIB], [C.CONTRADICTED, C.HOLDS]),  # grows 80%
    ([0.5 * GIB, 0.5 * GIB, 1.5 * GIB], [1 * GIB, 2 * GIB, 4 * GIB], [C.CONTRADICTED, C.CONTRADICTED]),  # over budget
    ([0.1 * GIB] * 3, [0.2 * GIB, 0.25 * GIB, 0.3 * GIB], [C.NO_SIGNAL, C.NO_SIGNAL]),  # resident neither grows nor exceeds
])
def test_the_claims_rules(streamed, resident, verdicts):
    """Flat within 5% and within the budget hold; growth or an overrun contradicts; a resident step that neither
    doubles over the depths nor exceeds the budget leaves no signal (the range cannot tell)."""
    claims, arms = horizon_lm.judge(_recorded(streamed, resident))
    assert [c.verdict for c in claims] == verdicts
    assert horizon_lm.judge(_recorded(streamed, resident), quick=True)[0][0].verdict == C.QUICK


@pytest.mark.slow
def test_quick_run_writes_its_files(tmp_path):
    summary = horizon_lm.run(str(tmp_path), quick=True)
    assert {p.name for p in tmp_path.iterdir()} >= {"README.md", "summary.json", "memory_vs_depth.png", "curves"}
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(saved) == [] and saved["quick"] is True
    assert [c["verdict"] for c in summary["claims"]] == [C.QUICK, C.QUICK]
    assert "longhorizon repro horizon-lm --quick" in (tmp_path / "README.md").read_text()
