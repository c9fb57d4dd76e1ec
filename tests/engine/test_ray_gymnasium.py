"""Ray actors step gymnasium environments: each actor process builds the vector environments of the
env groups it is handed (from the group and its step count), so a synchronous Ray run over two
actors is the same run as the host engine's in one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("gymnasium")

from longhorizon.runner import checkpoint  # noqa: E402
from longhorizon.runner.run import RunSpec, train  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")  # the one Ray instance of the test session (tests/engine/conftest.py)

TINY = {"total_steps": "256", "num_envs": "2", "num_steps": "32", "num_minibatches": "2", "update_epochs": "1"}


def _curve(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in ("steps_per_second", "wall_seconds", "time")} for row in rows]


@pytest.mark.slow
def test_ray_sync_over_gymnasium_matches_the_host_engine(ray_session, tmp_path):
    runs = {}
    for engine, extra in (("host", {}), ("ray", {"actors": 2})):
        out = tmp_path / engine
        summary = train(RunSpec(algo="ppo", env="gymnasium:CartPole-v1", config_overrides=TINY, seeds=2, num_chunks=2,
                                out=str(out), quiet=True, engine=engine, **extra))
        meta = checkpoint.latest_meta(out / "checkpoints")
        runs[engine] = (summary["status"], _curve(out), (out / "checkpoints" / meta["file"]).read_bytes())
    assert runs["host"][0] == runs["ray"][0] == "completed"
    assert runs["ray"][1] == runs["host"][1]  # the same episodes, losses and returns, chunk by chunk
    assert runs["ray"][2] == runs["host"][2]  # parameters, optimiser, env groups (group, steps), keys
