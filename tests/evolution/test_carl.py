"""The CaRL reproduction's claim rules (longhorizon.repro.carl.judge) and setup (equal gradient steps), by hand."""

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


def test_rule_no_signal_when_the_smallest_minibatch_did_not_learn():
    from longhorizon.repro import claims as C

    L = {"setup": {"minibatch_sizes": [256, 1024], "rewards": ["shaped", "carl"], "updates": 4, "seeds": 3}, "runs": {}}
    for r in ("shaped", "carl"):
        flat = [[1.0, 1.1, 0.9]] * 4  # [points, seeds]: the training return never rose
        rising = [[0.0, 0.1, -0.1], [1.0, 1.1, 0.9], [2.0, 2.2, 1.9], [3.0, 3.1, 2.8]]
        L["runs"][r] = {"256": {"rc_per_seed": [0.8, 0.82, 0.78], "train_return": flat if r == "carl" else rising},
                        "1024": {"rc_per_seed": [0.5, 0.52, 0.49], "train_return": rising}}
    found, arms = carl.judge(L)
    assert [c.verdict for c in found] == [C.HOLDS, C.NO_SIGNAL]
    assert "training return did not rise" in found[1].evidence["did_not_move"][0]
    assert arms["carl, B=256"]["signal"]["moved"] is False and arms["shaped, B=256"]["signal"]["moved"] is True
    L["runs"]["carl"]["256"]["rc_start_per_seed"] = [0.0, 0.01, 0.0]  # its greedy route completion rose from its start
    found, arms = carl.judge(L)
    assert [c.verdict for c in found] == [C.HOLDS, C.CONTRADICTED] and arms["carl, B=256"]["signal"]["moved"] is True


def test_setup_takes_equal_gradient_steps_at_every_minibatch_and_refuses_bad_sizes():
    setup = carl.Setup()
    for b in setup.minibatch_sizes:
        o = {k: int(float(v)) for k, v in setup.overrides(b).items()}
        batch = o["num_envs"] * o["num_steps"]
        assert batch // o["num_minibatches"] == b  # the minibatch is B
        assert o["total_steps"] // batch == setup.updates  # the same updates, so the same gradient steps
        assert o["total_steps"] == setup.samples(b) == setup.updates * setup.num_minibatches * b
    assert setup.overrides(4096)["num_envs"] == "256" and setup.gradient_steps == 80 * 4 * 4
    with pytest.raises(UsageError, match="whole number"):
        carl.Setup(minibatch_sizes=(300,))
    with pytest.raises(UsageError, match="2 seeds"):
        carl.Setup(seeds=1)
