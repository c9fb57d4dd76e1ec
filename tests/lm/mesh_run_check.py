"""`lm rl --mesh` and `lm sft --mesh` end to end against the same run on one device, on virtual CPU devices;
prints one JSON object.

Run by tests/lm/test_lm_sharding.py in a subprocess (JAX fixes the device count at start-up)::

    XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu python tests/lm/mesh_run_check.py OUT MESH [rl|sft]

rl: two `lm rl` runs of tiny-random on examples/lm/chains.jsonl, one step each (the same rollout: generation
before the first update is the same program on the same parameters), rewarded by completion length so that groups
mix. sft: two `lm sft` runs of tiny-random on examples/lm/sft-chains.jsonl, two steps each. One run on one device,
one with ``--mesh MESH``. Prints both runs' last metrics, the largest parameter difference after training and the
mesh recorded in config.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
REWARD = "def by_length(prompts, completions, **kwargs):\n    return [float(len(str(c)) % 3) for c in completions]\n"


def main(out: Path, mesh: str, command: str = "rl") -> None:
    from longhorizon.cli import main as cli
    from longhorizon.lm.run_checkpoint import RunCheckpoints

    out.mkdir(parents=True, exist_ok=True)
    (out / "reward.py").write_text(REWARD)
    if command == "rl":
        common = ["lm", "rl", "--model", "tiny-random", "--dataset", str(ROOT / "examples/lm/chains.jsonl"),
                  "--reward-funcs", f"{out / 'reward.py'}:by_length", "--steps", "1", "--prompts-per-step", "4",
                  "--num-generations", "4", "--max-completion-length", "8", "--learning-rate", "1e-6",
                  "--lr-scheduler-type", "constant"]
        keys = ("reward", "loss", "grad_norm", "entropy")
    else:
        common = ["lm", "sft", "--model", "tiny-random", "--dataset", str(ROOT / "examples/lm/sft-chains.jsonl"),
                  "--max-steps", "2", "--per-device-train-batch-size", "4", "--learning-rate", "1e-6",
                  "--lr-scheduler-type", "constant"]
        keys = ("loss", "token_accuracy", "grad_norm")
    result = {}
    for name, extra in (("one", []), ("mesh", ["--mesh", mesh])):
        assert cli([*common, "--out", str(out / name), *extra]) == 0
        rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
        result[name] = {k: rows[-1][k] for k in keys}
        store = RunCheckpoints(out / name / "checkpoints")
        result[name + "_params"] = store.restore()[0]
        store.close()
    diffs = [float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
             for a, b in zip(jax.tree_util.tree_leaves(result.pop("one_params")), jax.tree_util.tree_leaves(result.pop("mesh_params")))]
    result["max_param_difference"] = max(diffs)
    result["config_mesh"] = json.loads((out / "mesh" / "config.json").read_text()).get("mesh")
    result["devices"] = jax.device_count()
    print(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
