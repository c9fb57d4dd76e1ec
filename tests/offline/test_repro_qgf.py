"""`longhorizon repro qgf --quick`: the files, and claims computed from the measured rows."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from longhorizon.errors import UsageError
from longhorizon.repro import qgf


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("qgf")
    return out, qgf.run(str(out), quick=True)


@pytest.mark.slow
def test_quick_run_writes_the_report(quick):
    from longhorizon.repro import claims as C

    out, result = quick
    assert (out / "qgf.png").stat().st_size > 10_000
    readme = (out / "README.md").read_text()
    assert "| method | setting | evaluations / action" in readme and "## Verdict" in readme and "cube-single" in readme
    summary = json.loads((out / "summary.json").read_text())
    assert C.validate_summary(summary) == [] and summary["quick"] is True and summary["claims"] == result["claims"]
    assert len(summary["claims"]) == 4 and {c["verdict"] for c in summary["claims"]} == {C.QUICK}
    assert len(summary["setup"]["weights"]) == len(qgf.QUICK.weights)
    methods = {(r["split"], r["method"]) for r in summary["rows"]}
    assert {("report", m) for m in ("bc", "qgf", "best_of_n", "fql")} <= methods
    assert all(len(r["return"]) == qgf.QUICK.seeds for r in summary["rows"])
    curve = (out / "curves" / "flow_BC.csv").read_text().splitlines()
    assert curve[0] == "step,seed,loss" and len(curve) == 1 + qgf.QUICK.seeds * 50  # 300 updates in 50 blocks of 6
    assert {a["signal"]["moved"] for a in summary["arms"].values()} == {True}  # every trained network's loss fell


@pytest.mark.slow
def test_claims_are_judged_from_the_rows(quick):
    from longhorizon.repro import claims as C

    _, result = quick
    assert [c.to_dict() for c in qgf.judge(result, quick=True)[0]] == result["claims"]
    # the chosen w is the best guided weight on the selection samples
    select = [r for r in result["rows"] if r["split"] == "select" and r["method"] == "qgf"]
    assert result["chosen"]["w"] == max(select, key=lambda r: np.mean(r["return"]))["setting"]["w"]
    # guidance is the mechanism under test: at the quick scale (3 seeds) it already raises the return over BC
    assert qgf.judge(result)[0][0].verdict == C.HOLDS
    # lowering the guided returns below BC's contradicts the first claim: the verdict follows the data
    low = [{**r, "return": [v - 1.0 for v in r["return"]]} if r["method"] == "qgf" else r for r in result["rows"]]
    assert qgf.judge({**result, "rows": low})[0][0].verdict == C.CONTRADICTED


@pytest.mark.slow
def test_loss_blocks_and_unmoved_networks_are_no_signal(quick):
    from longhorizon.repro import claims as C

    curve = qgf.blocks([[4.0, 2.0, 3.0, 1.0, 9.0]], points=2)  # blocks of 2 updates; the fifth is dropped
    assert curve == {"step": [2, 4], "loss": [[3.0, 2.0]]}
    _, result = quick
    flat = {k: {**v, "loss": [[1.0] * len(v["step"])] * qgf.QUICK.seeds} for k, v in result["training"].items()}
    claims = qgf.judge({**result, "training": flat})[0]
    assert [c.verdict for c in claims] == [C.NO_SIGNAL] * 4  # a critic whose loss never fell guides nothing
    # BC no better than a random action: the comparisons against BC and FQL cannot speak
    lucky = {**result, "random_return": [10.0] * qgf.QUICK.seeds}
    assert [c.verdict for c in qgf.judge(lucky)[0]] == [C.NO_SIGNAL] * 4


def test_invalid_setup_and_dry_run():
    with pytest.raises(UsageError, match="seeds"):
        qgf.Setup(seeds=1)
    with pytest.raises(UsageError, match="weights"):
        qgf.Setup(weights=(1.0, 2.0, 3.0))
    from longhorizon.cli import app

    result = CliRunner().invoke(app, ["repro", "qgf", "--quick", "--dry-run"])
    assert result.exit_code == 0 and json.loads(result.output)["module"] == "longhorizon.repro.qgf"
