"""The first two layers of the real SmolLM2-135M-Instruct GGUF through lm.llama, against stored transformers values.

``tests/fixtures/smollm2/reference.npz`` holds what ``transformers`` computed for one 8-token prompt
with a model made of the file's first two decoder layers, its final norm and tied head (the
residual stream after each layer, the logits at 256 fixed vocabulary ids, the log-sum-exp and the
argmax over the whole vocabulary); its README says how it was made. The whole 30-layer model is
compared with transformers by ``benchmarks/check_smollm2_logits.py``. Runs when the file is cached.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

from longhorizon.lm.checkpoints.fetch import model_path  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "smollm2"
SMOLLM2 = model_path("smollm2")


@pytest.mark.slow
@pytest.mark.skipif(not SMOLLM2.is_file(),
                    reason=f"SmolLM2 is not cached at {SMOLLM2} (`longhorizon lm fetch smollm2`)")
def test_first_two_layers_match_transformers():
    import jax
    import jax.numpy as jnp

    from longhorizon.lm import llama
    from longhorizon.lm.checkpoints.gguf_file import read_gguf
    from longhorizon.lm.model import causal_slot_mask, positions_from_valid

    meta = json.loads((FIXTURE / "reference.json").read_text())
    ref = np.load(FIXTURE / "reference.npz")
    assert SMOLLM2.stat().st_size == meta["model_bytes"], "the cached file is not the one the fixture was made from"
    ckpt = read_gguf(SMOLLM2)
    cfg = dataclasses.replace(llama.config_from_gguf_spec(ckpt.spec), n_layers=meta["layers"])
    params = llama.params_from_hf(ckpt.tensors, cfg)  # reads layers 0 and 1 only
    ids = jnp.asarray(ref["input_ids"][None])
    valid = jnp.ones_like(ids, bool)
    logits, _ = llama.Llama(cfg).apply({"params": params}, ids, positions_from_valid(valid), valid)
    # the residual stream after each layer, the layers run one by one (the model scans the same Block)
    x, hidden = params["embed"]["embedding"][ids], []
    for i in range(cfg.n_layers):
        x, _ = llama.Block(cfg).apply({"params": llama.layer(params, i)}, x, positions_from_valid(valid),
                                      causal_slot_mask(ids.shape[1], valid, None, 0), None, 0)
        hidden.append(np.asarray(x[0]))
    hidden = np.stack(hidden)
    logits = np.asarray(logits[0], np.float64)
    np.testing.assert_allclose(hidden, ref["hidden"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(logits[:, ref["vocab_ids"]], ref["logits_subset"], rtol=0, atol=1e-3)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    np.testing.assert_allclose(lse, ref["logsumexp"], rtol=0, atol=1e-3)
    np.testing.assert_array_equal(logits.argmax(-1), ref["argmax"])
    assert jax.tree_util.tree_leaves(params)[0].dtype == jnp.float32
