"""Which h1 base does this machine train? Greedy held-out accuracy by horizon of ``h1.cached_base(H1Setup())``
on h1's and es-finetune's held-out chains, and the parameters' digest (docs/results/h1/NOTES.md).

Run from the repository root: ``python tools/h1_base_probe.py`` (about 4 minutes on 2 CPU cores when the
base is not cached yet)."""

import jax

from longhorizon.lm.evaluate import evaluate
from longhorizon.lm.tasks import HELD_OUT_OFFSET, make_problems, max_lengths
from longhorizon.repro import h1

setup = h1.H1Setup()
params, cfg, tok = h1.cached_base(setup)
task = h1.task_config()
for name, horizons, batch in (("h1", (1, 2, 3, 4, 5, 6, 7, 8), 256), ("es-finetune", (1, 2, 3, 4, 5), 64)):
    plen, clen = max_lengths("chain", max(horizons), task)
    held = make_problems("chain", horizons, 64 * len(horizons), HELD_OUT_OFFSET, task)
    ev = evaluate(params, cfg, tok, held, max_prompt_length=plen + 1, max_new_tokens=clen + 1, batch_size=batch)
    print(name, {h: round(a, 3) for h, a in ev["by_horizon"].items()})
print("params sha256", h1.params_digest(params), "jax", jax.__version__)
