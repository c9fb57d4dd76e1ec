"""The CaRL reproduction's claim rules (longhorizon.repro.carl.judge) and setup checks, by hand."""

import pytest

from longhorizon.errors import UsageError
from longhorizon.repro import carl


def claims(shaped, carl_rc):
    """Verdicts from per-seed route completion at minibatch sizes 256 and 1024 (``[[seed values] per size]``)."""
    runs = {r: {str(b): {"rc_per_seed": v} for b, v in zip((256, 1024), rc)} for r, rc in (("shaped", shaped), ("carl", carl_rc))}
    L = {"setup": {"minibatch_sizes": [256, 1024], "rewards": ["shaped", "carl"], "updates": 4, "seeds": 3}, "runs": runs}
    return tuple(c.verdict for c in carl.judge(L)[0])


def test_rule_falling_shaped_and_rising_carl_hold():
    assert claims([[0.8, 0.82, 0.78], [0.5, 0.52, 0.49]], [[0.6, 0.62, 0.6], [0.7, 0.73, 0.71]]) == ("holds", "holds")


def test_rule_contradictions():
    # shaped improves with B; carl drops
    assert claims([[0.5, 0.52, 0.49], [0.6, 0.63, 0.61]], [[0.8, 0.82, 0.79], [0.4, 0.42, 0.41]]) == ("contradicted",) * 2


def test_rule_inconclusive_and_no_signal_cases():
    from longhorizon.repro import claims as C

    # a noisy drop: the slope's interval contains 0
    assert claims([[0.6, 0.5, 0.7], [0.55, 0.6, 0.52]], [[0.6, 0.5, 0.7], [0.55, 0.6, 0.52]]) == (C.INCONCLUSIVE,) * 2
    # a policy that never learned to drive (route completion below LEARNED at the smallest minibatch)
    assert claims([[0.15, 0.1, 0.12], [0.0, 0.01, 0.0]], [[0.1, 0.1, 0.1], [0.1, 0.1, 0.1]]) == (C.NO_SIGNAL,) * 2
    assert claims([[0.8, 0.82], [0.5, 0.52]], [[0.6, 0.62], [0.7, 0.73]]) == (C.INCONCLUSIVE,) * 2  # two seeds


def test_setup_refuses_sizes_that_do_not_divide_the_batch_and_single_seeds():
    with pytest.raises(UsageError, match="does not divide"):
        carl.Setup(minibatch_sizes=(300,), num_envs=32, num_steps=64)
    with pytest.raises(UsageError, match="2 seeds"):
        carl.Setup(seeds=1)
    assert carl.Setup().overrides(4096)["num_minibatches"] == "4"
