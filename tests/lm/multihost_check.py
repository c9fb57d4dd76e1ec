"""`lm rl --mesh fsdp=4` run by 2 processes of 2 virtual CPU devices each (jax.distributed over loopback, gloo
collectives) against the same run in one process of 4 devices; prints one JSON object.

Run by tests/lm/test_lm_multihost.py in a subprocess, which this script moves into a private network namespace
whose only interface is ``lo`` (the coordinator and gloo listen on TCP ports)::

    python tests/lm/multihost_check.py OUT [equal|resume|unreachable]

equal: both runs' last metrics (and process 1's), the largest parameter difference between the two-process
run's checkpoint and the one-process run's, what process 1's own folder holds. resume: a two-process run of
two steps in which only process 1 gets a Ctrl-C after step 1, resumed by one process of 4 devices, against two
steps straight in that process: exit codes, metrics, parameter difference. unreachable: process 1 alone, whose
coordinator never answers: its exit code, seconds and stderr.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REWARD = "def by_length(prompts, completions, **kwargs):\n    return [float(len(str(c)) % 3) for c in completions]\n"
KEYS = ("reward", "loss", "grad_norm", "entropy")


def command(out: Path, run: str) -> list[str]:
    return [sys.executable, "-m", "longhorizon", "lm", "rl", "--model", "tiny-random",
            "--dataset", str(ROOT / "examples/lm/chains.jsonl"), "--reward-funcs", f"{out / 'reward.py'}:by_length",
            "--steps", "2", "--prompts-per-step", "4", "--num-generations", "4", "--max-completion-length", "8",
            "--learning-rate", "1e-6", "--lr-scheduler-type", "constant", "--mesh", "fsdp=4", "--out", str(out / run)]


def environment(devices: int) -> dict:
    """``devices`` virtual CPU devices, compiled with less of LLVM's work (both runs alike), no compilation cache."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "LONGHORIZON_COMPILE_CACHE": "0",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices} --xla_backend_optimization_level=0 "
                        "--xla_llvm_disable_expensive_passes=true"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def last_metrics(folder: Path) -> dict:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return {k: rows[-1][k] for k in KEYS}


def params(folder: Path):
    """The parameters of ``folder``'s last checkpoint, read as ``--init`` reads them (into the model's own
    template: orbax reads a checkpoint saved on another topology only so)."""
    from longhorizon.lm.run import load_policy

    return load_policy(folder).params


def largest_difference(a, b) -> float:
    import jax
    import numpy as np

    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def equal(out: Path) -> dict:
    port = free_port()
    launch = ["--coordinator-address", f"127.0.0.1:{port}", "--num-processes", "2"]
    workers = [subprocess.Popen([*command(out, "multi"), *launch, "--process-id", str(i)], env=environment(2),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    logs = [w.communicate(timeout=600)[0] for w in workers]
    codes = [w.returncode for w in workers]
    if codes != [0, 0]:
        return {"codes": codes, "logs": [log[-3000:] for log in logs]}
    one = subprocess.run(command(out, "one"), env=environment(4), capture_output=True, text=True, timeout=600)
    if one.returncode:
        return {"codes": codes, "one_code": one.returncode, "logs": [one.stderr[-3000:]]}
    single = params(out / "one")
    return {"codes": codes, "multi": last_metrics(out / "multi"), "one": last_metrics(out / "one"),
            "process_1_metrics": last_metrics(out / "multi" / "process-1"),
            "process_1_folder": sorted(p.name for p in (out / "multi" / "process-1").iterdir()),
            "max_param_difference": largest_difference(params(out / "multi"), single),
            "config_has_launch": "process_id" in json.loads((out / "multi" / "config.json").read_text())["options"]}


def resume(out: Path) -> dict:
    """Two steps in one process of 4 devices, against the same run by 2 processes x 2 devices in which only process
    1 gets a Ctrl-C after step 1 (both must stop there and save it), resumed by one process of 4 devices."""
    steps = ["--checkpoint-every", "1"]
    straight = subprocess.run([*command(out, "straight"), *steps], env=environment(4), capture_output=True, text=True,
                              timeout=600)
    if straight.returncode:
        return {"straight_code": straight.returncode, "logs": [straight.stderr[-3000:]]}
    launch = ["--coordinator-address", f"127.0.0.1:{free_port()}", "--num-processes", "2"]
    workers = [subprocess.Popen([sys.executable, __file__, str(out), "cli", *command(out, "two")[3:], *steps, *launch,
                                 "--process-id", str(i)],
                                env={**environment(2), **({"MULTIHOST_CHECK_CTRL_C_AFTER_STEP": "1"} if i == 1 else {})},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    logs = [w.communicate(timeout=600)[0] for w in workers]
    codes = [w.returncode for w in workers]
    rows_after_stop = len((out / "two" / "metrics.jsonl").read_text().splitlines())
    resumed = subprocess.run([sys.executable, "-m", "longhorizon", "lm", "rl", "--resume", str(out / "two")],
                             env=environment(4), capture_output=True, text=True, timeout=600)
    report = {"codes": codes, "rows_after_stop": rows_after_stop, "resumed_code": resumed.returncode}
    if resumed.returncode:
        return {**report, "logs": [log[-3000:] for log in logs] + [resumed.stderr[-3000:]]}
    return {**report, "straight": last_metrics(out / "straight"), "resumed": last_metrics(out / "two"),
            "max_param_difference": largest_difference(params(out / "two"), params(out / "straight"))}


def ctrl_c_after_step(argv: list[str]) -> int:
    """``longhorizon`` with ``argv``; with MULTIHOST_CHECK_CTRL_C_AFTER_STEP=N, a SIGINT after the N-th step."""
    import signal

    from longhorizon.cli import main as cli
    from longhorizon.lm.grpo import GRPOTrainer

    after, original, done = int(os.environ.get("MULTIHOST_CHECK_CTRL_C_AFTER_STEP", "0")), GRPOTrainer.step, []

    def step(self, *args, **kwargs):
        metrics = original(self, *args, **kwargs)
        done.append(1)
        if len(done) == after:
            signal.raise_signal(signal.SIGINT)
        return metrics

    GRPOTrainer.step = step
    return cli(argv)


def unreachable(out: Path) -> dict:
    launch = ["--coordinator-address", f"127.0.0.1:{free_port()}", "--num-processes", "2", "--process-id", "1"]
    start = time.perf_counter()
    done = subprocess.run([*command(out, "lonely"), *launch], env={**environment(2), "LONGHORIZON_JOIN_TIMEOUT_S": "5"},
                          capture_output=True, text=True, timeout=300)
    return {"code": done.returncode, "seconds": time.perf_counter() - start, "stderr": done.stderr[-2000:]}


def main(out: Path, mode: str) -> None:
    if mode == "cli":  # one worker process of the resume check
        sys.exit(ctrl_c_after_step(sys.argv[3:]))
    sys.path.insert(0, str(ROOT / "src"))
    from longhorizon.engine.ray_loopback import enter_loopback_namespace

    enter_loopback_namespace()  # the coordinator and gloo listen on ports: reachable only from this namespace
    out.mkdir(parents=True, exist_ok=True)
    (out / "reward.py").write_text(REWARD)
    print(json.dumps({"equal": equal, "resume": resume, "unreachable": unreachable}[mode](out)))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "equal")
