"""`lm rl --mesh` and `lm sft --mesh` end to end against the same run on one device, on virtual CPU devices;
prints one JSON object.

Run by tests/lm/test_lm_sharding.py in a subprocess (JAX fixes the device count at start-up)::

    XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu python tests/lm/mesh_run_check.py OUT MESH [rl|sft]

rl: two `lm rl` runs of tiny-random on examples/lm/chains.jsonl, one step each (the same rollout: generation
before the first update is the same program on the same parameters), rewarded by completion length so that groups
mix. sft: two `lm sft` runs of tiny-random on examples/lm/sft-chains.jsonl, two steps each. agent: two `lm agent`
runs of tiny-random in the search environment, one step each, through the Python API so that every action token
gets a fixed non-zero advantage (tiny-random's episodes all score the same, so the outcome credit alone would give
a zero gradient). One run on one device, one with ``--mesh MESH``. Prints both runs' last metrics, the largest parameter difference after training and the
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
    if command in ("rl", "resume"):
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
    if command == "agent":
        return _agent(out, mesh)
    if command == "resume":
        return _resume_elsewhere(out, common, mesh)
    result = {}
    for name, extra in (("one", []), ("mesh", ["--mesh", mesh])):
        assert cli([*common, "--out", str(out / name), *extra]) == 0
        rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
        result[name] = {k: rows[-1][k] for k in keys}
        store = RunCheckpoints(out / name / "checkpoints")
        result[name + "_params"] = store.restore()[0]
        store.close()
    _report(out, result)


def _report(out: Path, result: dict) -> None:
    diffs = [float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
             for a, b in zip(jax.tree_util.tree_leaves(result.pop("one_params")), jax.tree_util.tree_leaves(result.pop("mesh_params")))]
    result["max_param_difference"] = max(diffs)
    result["config_mesh"] = json.loads((out / "mesh" / "config.json").read_text()).get("mesh")
    result["devices"] = jax.device_count()
    print(json.dumps(result))


def _resume_elsewhere(out: Path, common: list, mesh: str) -> None:
    """Two steps on ``fsdp=D`` straight, against one step on ``fsdp=D``, Ctrl-C, and the second step resumed on
    ``mesh``: the same parameters after both."""
    import signal

    from longhorizon.cli import main as cli
    from longhorizon.lm.grpo import GRPOTrainer
    from longhorizon.lm.run_checkpoint import RunCheckpoints

    common = [*common[:common.index("--steps")], "--steps", "2", *common[common.index("--steps") + 2:],
              "--checkpoint-every", "1", "--mesh", f"fsdp={jax.device_count()}"]
    assert cli([*common, "--out", str(out / "one")]) == 0
    original, calls = GRPOTrainer.step, []

    def step_then_ctrl_c(self, *args, **kwargs):
        metrics = original(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)
        return metrics

    GRPOTrainer.step = step_then_ctrl_c
    code = cli([*common, "--out", str(out / "mesh")])
    GRPOTrainer.step = original
    result = {"interrupted_exit": code}
    assert cli(["lm", "rl", "--resume", str(out / "mesh"), "--mesh", mesh]) == 0
    for name in ("one", "mesh"):
        rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
        result[name] = {k: rows[-1][k] for k in ("step", "reward", "loss", "grad_norm")}
        store = RunCheckpoints(out / name / "checkpoints")
        result[name + "_params"] = store.restore()[0]
        store.close()
    result["meshes_before"] = json.loads((out / "mesh" / "config.json").read_text()).get("meshes_before")
    _report(out, result)


def _fixed_advantages(trajectories, trainer):
    """+1 on the action tokens of even episodes, -1 on odd ones: a gradient whatever the episodes scored."""
    return [[np.full(len(seq.tokens), 1.0 if i % 2 == 0 else -1.0, np.float32) for seq in t.sequences]
            for i, t in enumerate(trajectories)]


def _agent(out: Path, mesh: str) -> None:
    import dataclasses

    from longhorizon.lm.agents.cli import agent_spec
    from longhorizon.lm.run import run_rl
    from longhorizon.lm.run_checkpoint import RunCheckpoints

    options = {"env": "search", "env_arg": ["hops=2"], "train_tasks": 8, "eval_tasks": 0, "model": "tiny-random",
               "steps": 1, "prompts_per_step": 2, "num_generations": 2, "beta": 0.0, "epsilon": 0.2,
               "loss_type": "dapo", "scale_rewards": "group", "learning_rate": 1e-6, "lr_scheduler_type": "constant",
               "temperature": 1.0, "max_turns": 2, "max_action_tokens": 8, "max_context_tokens": 512,
               "context": "full", "tool_format": "tags", "credit": "trajectory", "gamma": 1.0, "milestone_bonus": 0.0,
               "reward_weights": None, "latency": 0.0, "actors": 0, "eval_every": 0, "checkpoint_every": 0, "seed": 0}
    result = {}
    for name, chosen in (("one", None), ("mesh", mesh)):
        spec = agent_spec({**options, "mesh": chosen}, str(out / name))
        spec = dataclasses.replace(spec, agent=dataclasses.replace(spec.agent, token_advantages=_fixed_advantages))
        run_rl(spec, quiet=True)
        rows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
        result[name] = {k: rows[-1][k] for k in ("reward", "loss", "grad_norm")}
        store = RunCheckpoints(out / name / "checkpoints")
        result[name + "_params"] = store.restore()[0]
        store.close()
    _report(out, result)


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
