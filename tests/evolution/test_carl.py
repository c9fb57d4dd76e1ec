"""The CaRL reproduction's claim rule (longhorizon.repro.carl.decide) and setup checks, by hand."""

import pytest

from longhorizon.errors import UsageError
from longhorizon.repro import carl


def claims(shaped, carl_rc):
    result = carl.decide({"shaped": shaped, "carl": carl_rc})
    return result[carl.CLAIM_SHAPED].split(" ")[0], result[carl.CLAIM_CARL].split(" ")[0]


def test_drop_and_its_standard_error():
    assert carl.drop((0.8, 0.03), (0.5, 0.04)) == pytest.approx((0.3, 0.05))


def test_rule_significant_shaped_drop_and_flat_carl_hold():
    # shaped: D = 0.3, SE_D = 0.05 -> beyond 2 SE; carl: D = 0.02, SE_D = 0.05 -> within, and learned
    assert claims([(0.8, 0.03), (0.5, 0.04)], [(0.7, 0.03), (0.68, 0.04)]) == ("holds", "holds")


def test_rule_contradictions():
    # shaped improves with B (D < 0); carl drops by D = 0.4 > 2 * 0.05
    assert claims([(0.5, 0.03), (0.6, 0.04)], [(0.8, 0.03), (0.4, 0.04)]) == ("contradicted", "contradicted")


def test_rule_inconclusive_cases():
    # shaped drop 0.05 within 2 SE (0.1); carl flat but never above LEARNED
    assert claims([(0.6, 0.03), (0.55, 0.04)], [(0.1, 0.03), (0.1, 0.04)]) == ("inconclusive", "inconclusive")
    # shaped never learned at the smallest minibatch: inconclusive whatever the drop
    assert claims([(0.15, 0.01), (0.0, 0.01)], [(0.7, 0.03), (0.7, 0.04)]) == ("inconclusive", "holds")


def test_setup_refuses_sizes_that_do_not_divide_the_batch_and_single_seeds():
    with pytest.raises(UsageError, match="does not divide"):
        carl.Setup(minibatch_sizes=(300,), num_envs=32, num_steps=64)
    with pytest.raises(UsageError, match="2 seeds"):
        carl.Setup(seeds=1)
    assert carl.Setup().overrides(4096)["num_minibatches"] == "4"
