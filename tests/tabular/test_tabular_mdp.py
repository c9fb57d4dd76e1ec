"""The MDP type, BRIDGE .npz I/O (including malformed files) and the sticky-action transformation."""

import zipfile

import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.tabular import dp
from longhorizon.tabular.mdp import TabularMDP, load_npz, reachable, save_npz, sticky


def test_roundtrip_deterministic(tmp_path, three_state_mdp):
    path = tmp_path / "mdp.npz"
    save_npz(three_state_mdp, path)
    with np.load(path) as data:
        assert set(data.files) == {"transitions", "rewards", "horizon"}  # BRIDGE keys (+ horizon)
        assert data["transitions"].shape == (3, 2)
    back = load_npz(path)
    assert back.horizon == 2 and back.is_deterministic
    np.testing.assert_array_equal(back.transitions, three_state_mdp.transitions)
    np.testing.assert_allclose(back.rewards, three_state_mdp.rewards)


def test_roundtrip_stochastic(tmp_path, stochastic_mdp):
    path = tmp_path / "mdp.npz"
    save_npz(stochastic_mdp, path)
    back = load_npz(path)
    assert not back.is_deterministic
    assert dp.evaluate(back).random_return == pytest.approx(1.125)


def test_loads_bridge_fixture(key_corridor_path):
    mdp = load_npz(key_corridor_path)
    assert (mdp.num_states, mdp.num_actions) == (168, 6)
    assert mdp.horizon is None and mdp.resolve_horizon(100) == 100
    assert "screens" in mdp.extras and mdp.extras["screen_mapping"].shape == (168,)


def _write(path, **arrays):
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    "arrays, phrase",
    [
        (dict(rewards=np.zeros((2, 2))), "lacks the array(s) transitions"),
        (dict(transitions=np.array([[0, 5], [1, -1]]), rewards=np.zeros((2, 2))), "out of range"),
        (dict(transitions=np.array([[0, -2], [1, -1]]), rewards=np.zeros((2, 2))), "out of range"),
        (dict(transitions=np.array([[0, 1], [1, -1]]), rewards=np.array([[0, np.nan], [0, 0]])), "NaN or infinite"),
        (dict(transitions=np.array([[0, 1], [1, -1]]), rewards=np.array([[0, np.inf], [0, 0]])), "NaN or infinite"),
        (dict(transitions=np.array([[0, 1], [1, -1]]), rewards=np.zeros((2, 3))), "shape"),
        (dict(transitions=np.array([[0.5, 1], [1, -1]]), rewards=np.zeros((2, 2))), "integer"),
    ],
)
def test_malformed_files_raise_one_sentence(tmp_path, arrays, phrase):
    path = _write(tmp_path / "bad.npz", **arrays)
    with pytest.raises(UsageError) as info:
        load_npz(path)
    message = str(info.value)
    assert phrase in message
    assert str(path) in message and "re-create" in message
    assert message.count(". ") == 0 and message.endswith(".")  # one sentence


def test_truncated_and_non_npz_files(tmp_path, key_corridor_path):
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(key_corridor_path.read_bytes()[:5000])
    with pytest.raises(UsageError, match="not a readable .npz archive"):
        load_npz(truncated)
    text = tmp_path / "text.npz"
    text.write_text("hello")
    with pytest.raises(UsageError, match="not a readable .npz archive"):
        load_npz(text)
    empty = tmp_path / "empty.npz"
    with zipfile.ZipFile(empty, "w"):
        pass
    with pytest.raises(UsageError, match="holds no arrays"):
        load_npz(empty)
    with pytest.raises(UsageError, match="does not exist"):
        load_npz(tmp_path / "missing.npz")


def test_invalid_probabilities():
    with pytest.raises(UsageError, match="sum to 1"):
        TabularMDP(next_states=np.zeros((1, 1, 2), int), next_probs=np.full((1, 1, 2), 0.4), next_rewards=np.zeros((1, 1, 2)))


def test_sticky_by_hand():
    # One state: a0 loops with reward 1, a1 ends the episode with reward 0.
    base = TabularMDP.deterministic(np.array([[0, -1]]), np.array([[1.0, 0.0]]), horizon=2)
    mdp = sticky(base, 0.25)
    # States: (s0, none) and (s0, a0); (s0, a1) cannot occur because a1 ends the episode.
    assert mdp.num_states == 2
    assert list(mdp.info["prev_action"]) == [-1, 0]
    v = dp.evaluate(mdp)
    np.testing.assert_allclose(v.q_random[1, 1], [1.0, 0.25])  # a1 repeats a0 with probability 0.25
    np.testing.assert_allclose(v.q_optimal[0, 0], [2.0, 0.0])  # the first step is never sticky
    assert v.random_return == pytest.approx((1 + 0.625) / 2)
    assert sticky(base, 0.0) is base
    with pytest.raises(UsageError):
        sticky(base, 1.0)


def test_reachable(three_state_mdp):
    assert reachable(three_state_mdp).tolist() == [True, True, True]
    assert reachable(three_state_mdp, horizon=1).tolist() == [True, False, False]
