"""Our Llama model on the real SmolLM2-135M-Instruct GGUF against ``transformers``' own loading of the same file.

Both sides read ``SmolLM2-135M-Instruct.Q4_1.gguf`` (``longhorizon lm fetch smollm2``) and dequantize
it to float32: ours with :func:`longhorizon.lm.checkpoints.read_gguf` + :func:`longhorizon.lm.llama.params_from_hf`
(in this process, ``.venv``), theirs with ``transformers.AutoModelForCausalLM.from_pretrained(folder,
gguf_file=name, dtype=float32)`` in the benchmark venv ``benchmarks/.venvs/trl-gguf`` (TRL's pinned
requirements of ``lm_throughput.py`` plus ``gguf``, built by ``peer_env`` on first use; a subprocess).

On 4 chat prompts (the file's ChatML template, our tokenizer's ids given to both):

* ``transformers`` decodes 16 greedy tokens (argmax of a full forward per token, no stop token) and
  returns the logits of the last forward, over prompt + 15 generated positions;
* we decode 16 greedy tokens with :func:`llama.greedy_generate` (KV cache) and compute the logits of
  the same token sequence with :func:`llama.forward`, once per prompt alone and once with the four
  prompts left-padded into one batch;
* reported: max |logit difference| per prompt and overall (the check asks <= 1e-3) and whether the
  greedy tokens are equal; also whether ``transformers``' GGUF tokenizer gives our ids.

    nice -n 10 .venv/bin/python benchmarks/check_smollm2_logits.py [--out benchmarks/out/smollm2_logits.json]

``--write-fixture tests/fixtures/smollm2`` instead writes the small reference of
``tests/lm/test_lm_smollm2_reference.py``: the outputs of a 2-layer model made of the file's first two
layers (plus its final norm and tied head), computed by ``transformers`` (see that folder's README).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))

PEER = "trl-gguf"  # TRL_REQUIREMENTS + gguf (transformers' GGUF loading needs it); own name, own marker
GGUF_VERSION = "gguf==0.17.1"  # the version in longhorizon's .venv
NEW_TOKENS = 16
TOLERANCE = 1e-3
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "What is 37 + 48? Answer with the number only."}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "system", "content": "You are a terse math tutor."},
     {"role": "user", "content": "Explain in one sentence why 7 is a prime number."}],
]
# The fixture: one short prompt through the first FIXTURE_LAYERS layers; logits kept at FIXTURE_VOCAB ids.
FIXTURE_TEXT = "<|im_start|>user\n2+3=<|im_end|>"
FIXTURE_LAYERS = 2
FIXTURE_VOCAB = 256


def peer_requirements() -> list[str]:
    from lm_throughput import TRL_REQUIREMENTS

    return [*TRL_REQUIREMENTS, GGUF_VERSION]


def peer_python() -> Path:
    from peer_env import peer_python as build

    return build(PEER, peer_requirements())


def run_peer(mode: str, job: dict) -> dict:
    """Run this file's ``--peer MODE`` in the transformers venv on ``job`` (JSON); returns its JSON reply."""
    with tempfile.TemporaryDirectory() as scratch:
        job_path = Path(scratch) / "job.json"
        job_path.write_text(json.dumps({**job, "out": scratch}))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        out = subprocess.run([str(peer_python()), __file__, "--peer", mode, str(job_path)], env=env,
                             capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"the transformers side failed:\n{out.stderr[-4000:]}")
        reply = json.loads(out.stdout.strip().splitlines()[-1])
        reply["arrays"] = {k: np.load(Path(scratch) / f"{k}.npy") for k in reply.pop("array_names")}
        return reply


# ----------------------------------------------------------------------------- transformers side (peer venv)


def _load_transformers(path: str, layers: int | None = None):
    import torch
    import transformers

    folder, name = os.path.split(path)
    t0 = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    load_s = time.perf_counter() - t0
    if layers is not None:  # the first `layers` decoder layers, then the final norm and the (tied) head
        model.model.layers = model.model.layers[:layers]
        model.config.num_hidden_layers = layers
    assert next(model.parameters()).dtype == torch.float32
    versions = f"transformers {transformers.__version__}, torch {torch.__version__}"
    return model, load_s, versions


def peer_logits(job: dict) -> dict:
    import torch
    import transformers

    torch.manual_seed(0)
    model, load_s, versions = _load_transformers(job["path"])
    folder, name = os.path.split(job["path"])
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    same_ids = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) == text
                and tok(text, add_special_tokens=False)["input_ids"] == ids
                for c, text, ids in zip(job["conversations"], job["texts"], job["ids"])]
    arrays, greedy, seconds = {}, [], []
    with torch.no_grad():
        for i, ids in enumerate(job["ids"]):
            seq = list(ids)
            t0 = time.perf_counter()
            for _ in range(job["new_tokens"]):
                logits = model(torch.tensor([seq])).logits[0]
                seq.append(int(logits[-1].argmax()))
            seconds.append(time.perf_counter() - t0)
            greedy.append(seq[len(ids):])
            arrays[f"logits_{i}"] = logits.numpy().astype(np.float32)  # positions of prompt + 15 new tokens
    for k, v in arrays.items():
        np.save(Path(job["out"]) / f"{k}.npy", v)
    return {"greedy": greedy, "load_s": load_s, "greedy_s": seconds, "versions": versions,
            "class": type(model).__name__, "params": sum(p.numel() for p in model.parameters()),
            "tokenizer_same_ids": same_ids, "array_names": list(arrays)}


def peer_fixture(job: dict) -> dict:
    import torch

    model, _, versions = _load_transformers(job["path"], layers=job["layers"])
    captured = []
    for layer in model.model.layers:  # each decoder layer's output: the residual stream after it
        layer.register_forward_hook(lambda mod, args, out: captured.append(out[0] if isinstance(out, tuple) else out))
    with torch.no_grad():
        logits = model(torch.tensor([job["ids"]])).logits[0].numpy().astype(np.float64)
    hidden = np.stack([h[0].numpy() for h in captured]).astype(np.float32)
    vocab = np.asarray(job["vocab_ids"])
    arrays = {"hidden": hidden, "logits_subset": logits[:, vocab].astype(np.float32),
              "logsumexp": (np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)).astype(np.float32),
              "argmax": logits.argmax(-1).astype(np.int32)}
    for k, v in arrays.items():
        np.save(Path(job["out"]) / f"{k}.npy", v)
    return {"versions": versions, "array_names": list(arrays)}


# ----------------------------------------------------------------------------- our side (.venv)


def check(out_path: Path) -> dict:
    import jax
    import jax.numpy as jnp

    from longhorizon.lm import llama
    from longhorizon.lm.checkpoints import read_gguf, smollm2_path
    from longhorizon.lm.hf_tokenizer import from_gguf

    path = smollm2_path()
    tok = from_gguf(path)
    texts = [tok.apply_chat_template(c) for c in CONVERSATIONS]
    ids = [tok.encode(t) for t in texts]
    t0 = time.perf_counter()
    theirs = run_peer("logits", {"path": str(path), "conversations": CONVERSATIONS, "texts": texts, "ids": ids,
                                 "new_tokens": NEW_TOKENS})
    peer_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    ckpt = read_gguf(path)
    cfg = llama.config_from_gguf_spec(ckpt.spec)
    params = llama.params_from_hf(ckpt.tensors, cfg)
    load_s = time.perf_counter() - t0
    forward = jax.jit(lambda p, t, v: llama.forward(p, cfg, t, v))
    rows, seqs = [], []
    for i, prompt in enumerate(ids):
        p = jnp.asarray([prompt], jnp.int32)
        t0 = time.perf_counter()
        ours_greedy = [int(t) for t in llama.greedy_generate(params, cfg, p, jnp.ones_like(p, bool), NEW_TOKENS)[0]]
        greedy_s = time.perf_counter() - t0
        seq = prompt + theirs["greedy"][i][:-1]  # the sequence of transformers' last forward
        seqs.append(seq)
        s = jnp.asarray([seq], jnp.int32)
        ours = np.asarray(forward(params, s, jnp.ones_like(s, bool))[0])
        ref = theirs["arrays"][f"logits_{i}"]
        diff = np.abs(ours - ref)
        rows.append({"prompt_tokens": len(prompt), "positions": len(seq), "max_abs_diff": float(diff.max()),
                     "max_abs_diff_prompt": float(diff[: len(prompt)].max()), "max_abs_logit": float(np.abs(ref).max()),
                     "greedy_equal": ours_greedy == theirs["greedy"][i], "greedy_ours": ours_greedy,
                     "greedy_transformers": theirs["greedy"][i], "answer": tok.decode(ours_greedy),
                     "our_greedy_s": greedy_s, "transformers_greedy_s": theirs["greedy_s"][i]})
    # The four sequences left-padded into one batch (padding slots masked): same logits on the real positions.
    width = max(map(len, seqs))
    batch = np.zeros((len(seqs), width), np.int32)
    valid = np.zeros((len(seqs), width), bool)
    for i, seq in enumerate(seqs):
        batch[i, width - len(seq):], valid[i, width - len(seq):] = seq, True
    padded = np.asarray(forward(params, jnp.asarray(batch), jnp.asarray(valid)))
    padded_diff = max(float(np.abs(padded[i, width - len(seq):] - theirs["arrays"][f"logits_{i}"]).max())
                      for i, seq in enumerate(seqs))
    overall = max(r["max_abs_diff"] for r in rows)
    report = {
        "model": path.name, "config": {k: getattr(cfg, k) for k in ("n_layers", "d_model", "n_heads", "n_kv_heads",
                                                                     "d_ff", "vocab_size", "rope_base", "rms_eps")},
        "params_ours": int(sum(x.size for x in jax.tree_util.tree_leaves(params))), "params_transformers": theirs["params"],
        "transformers_class": theirs["class"], "new_tokens": NEW_TOKENS, "tolerance": TOLERANCE,
        "max_abs_diff": overall, "max_abs_diff_left_padded_batch": padded_diff,
        "greedy_all_equal": all(r["greedy_equal"] for r in rows),
        "transformers_tokenizer_same_ids": theirs["tokenizer_same_ids"],
        "passed": overall <= TOLERANCE and padded_diff <= TOLERANCE and all(r["greedy_equal"] for r in rows),
        "prompts": rows, "our_load_s": load_s, "transformers_load_s": theirs["load_s"], "transformers_process_s": peer_s,
        "versions": {"ours": f"jax {jax.__version__}", "transformers": theirs["versions"]},
        "load_average": os.getloadavg(),
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=2) + "\n")
    for i, r in enumerate(rows):
        print(f"prompt {i}: {r['prompt_tokens']} tokens + {NEW_TOKENS - 1} generated positions; max |diff| "
              f"{r['max_abs_diff']:.2e} (prompt positions {r['max_abs_diff_prompt']:.2e}; |logits| up to "
              f"{r['max_abs_logit']:.1f}); greedy equal: {r['greedy_equal']}  {r['answer']!r}")
    print(f"overall max |diff| {overall:.2e}, left-padded batch {padded_diff:.2e} (tolerance {TOLERANCE:g}); "
          f"greedy tokens all equal: {report['greedy_all_equal']}; transformers' tokenizer gives our ids: "
          f"{all(theirs['tokenizer_same_ids'])}; {report['versions']}")
    print(f"{'PASSED' if report['passed'] else 'FAILED'}; wrote {out_path}")
    return report


def write_fixture(folder: Path) -> None:
    from longhorizon.lm.checkpoints import smollm2_path
    from longhorizon.lm.hf_tokenizer import from_gguf

    path = smollm2_path()
    tok = from_gguf(path)
    ids = tok.encode(FIXTURE_TEXT)
    vocab_ids = sorted(set(np.random.default_rng(0).choice(tok.vocab_size, FIXTURE_VOCAB, replace=False).tolist()))
    theirs = run_peer("fixture", {"path": str(path), "ids": ids, "layers": FIXTURE_LAYERS, "vocab_ids": vocab_ids})
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "reference.npz", input_ids=np.asarray(ids, np.int32), vocab_ids=np.asarray(vocab_ids, np.int32),
             **theirs["arrays"])
    (folder / "reference.json").write_text(json.dumps({
        "model": path.name, "model_bytes": path.stat().st_size, "text": FIXTURE_TEXT, "input_ids": ids, "layers": FIXTURE_LAYERS,
        "versions": theirs["versions"],
        "arrays": {k: [list(v.shape), str(v.dtype)] for k, v in theirs["arrays"].items()},
    }, indent=2) + "\n")
    print(f"wrote {folder / 'reference.npz'} ({(folder / 'reference.npz').stat().st_size:,} bytes) with "
          f"{theirs['versions']}: {len(ids)} tokens, {FIXTURE_LAYERS} layers")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE / "out" / "smollm2_logits.json"))
    parser.add_argument("--write-fixture", default=None, metavar="FOLDER")
    parser.add_argument("--peer", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        mode, job = args.peer
        fn = {"logits": peer_logits, "fixture": peer_fixture}[mode]
        print(json.dumps(fn(json.loads(Path(job).read_text()))), flush=True)
    elif args.write_fixture:
        write_fixture(Path(args.write_fixture))
    else:
        report = check(Path(args.out))
        sys.exit(0 if report["passed"] else 1)


if __name__ == "__main__":
    main()
