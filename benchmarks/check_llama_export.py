"""Check that ``transformers`` loads what :func:`longhorizon.lm.llama.save_hf_folder` writes.

Each tiny fixture under ``tests/fixtures/hf/`` is loaded by longhorizon and saved again into a
scratch folder; ``AutoModelForCausalLM.from_pretrained`` then loads each copy in the benchmark venv
of ``make_llama_fixture.py`` and its logits are compared with the fixture's ``reference.npz``::

    .venv/bin/python benchmarks/check_llama_export.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hf"
HF_PYTHON = Path("/tmp/lh-hf-venv/bin/python")  # built by benchmarks/make_llama_fixture.py


def load_in_transformers(folder: Path) -> None:
    import numpy as np
    import torch
    import transformers

    for model_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval()
        ref = np.load(FIXTURES / model_dir.name / "reference.npz")
        error = 0.0
        with torch.no_grad():
            for ids, valid, logits in zip(ref["input_ids"], ref["valid"], ref["logits"], strict=True):
                out = model(torch.tensor(ids[valid][None].astype(np.int64))).logits[0].numpy()
                error = max(error, float(np.abs(out - logits[valid]).max()))
        print(f"{model_dir.name}: transformers loads it as {type(model).__name__}; max |logit - reference| = {error:.2e}")
        assert error < 1e-5, model_dir.name


def main() -> None:
    from longhorizon.lm import llama

    if not HF_PYTHON.exists():
        sys.exit(f"{HF_PYTHON} is missing; run `python3 benchmarks/make_llama_fixture.py` once to build it.")
    with tempfile.TemporaryDirectory() as scratch:
        for fixture in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
            cfg, params = llama.load_hf_folder(fixture)
            llama.save_hf_folder(Path(scratch) / fixture.name, params, cfg)
        subprocess.run([str(HF_PYTHON), __file__, "--load", scratch], check=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--load"]:
        load_in_transformers(Path(sys.argv[2]))
    else:
        main()
