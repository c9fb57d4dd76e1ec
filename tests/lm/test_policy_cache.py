"""A cached policy is trained once per settings, saved whole, and read back into the template's structure."""

import numpy as np

from longhorizon.lm.policy_cache import cache_folder, cache_path, load_or_train


def test_one_training_per_settings_and_the_same_parameters_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("LONGHORIZON_CACHE", str(tmp_path))
    template = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    trained = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32)}
    calls = []

    def train():
        calls.append(1)
        return trained

    path = cache_path("lm", "toy_", {"steps": 10, "sizes": (2, 3)})
    assert path.parent == cache_folder("lm") == tmp_path / "lm" and path.name.startswith("toy_")
    assert path == cache_path("lm", "toy_", {"sizes": [2, 3], "steps": 10})  # key order and tuple/list do not matter
    assert path != cache_path("lm", "toy_", {"steps": 11, "sizes": (2, 3)})
    first = load_or_train(path, template, train)
    logged = []
    again = load_or_train(path, template, train, log=logged.append)
    assert len(calls) == 1 and str(path) in logged[0]
    for key in trained:
        np.testing.assert_array_equal(first[key], trained[key])
        np.testing.assert_array_equal(again[key], trained[key])
    assert not path.with_suffix(".tmp").exists()
