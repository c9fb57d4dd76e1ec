"""The algorithm registry: the protocol is checked once by ``get``, optional hooks are always present."""

import types

import pytest

from longhorizon import algos
from longhorizon.envs import TimeFeature, make
from longhorizon.errors import UsageError


def _module(name, **attrs):
    module = types.ModuleType(name)
    for required in algos.REQUIRED:
        setattr(module, required, lambda *args, **kwargs: None)
    for key, value in attrs.items():
        setattr(module, key, value)
    module.NAME = name
    return module


def test_get_returns_the_module_with_default_hooks():
    ppo = algos.get("ppo")
    assert isinstance(ppo, algos.Algorithm) and ppo.__name__ == "longhorizon.algos.ppo"
    assert ppo.init is ppo.module.init and ppo.Config is ppo.module.Config  # the module's own functions
    assert ppo == algos.get("ppo") and hash(ppo) == hash(algos.get("ppo")) and ppo != algos.get("pqn")
    env, config = make("CartPole-v1"), ppo.default_config("CartPole-v1")
    assert not ppo.has("check_env") and not ppo.has("wrap_env")
    ppo.check_env(env, config)  # default: accepts
    assert ppo.resolve_config(env, config) is config and ppo.wrap_env(env, config) is env


def test_hooks_a_module_defines_are_its_own():
    sqirl, pqn = algos.get("sqirl"), algos.get("pqn")
    env = make("CartPole-v1")
    config = sqirl.resolve_config(env, sqirl.Config())
    assert (config.horizon, config.stride) == (500, 16)  # 500-step limit in ceil(500 / 32) = 16-step blocks
    assert isinstance(sqirl.wrap_env(env, config), TimeFeature)
    with pytest.raises(UsageError, match="discrete action space"):
        pqn.check_env(make("Pendulum-v1"), pqn.Config())


def test_staleness_comes_from_the_hook_the_constant_or_nothing():
    assert algos.get("pqn").max_staleness(algos.get("pqn").Config())[0] == 1
    ppo = algos.get("ppo")
    assert ppo.max_staleness(ppo.Config())[0] == 0 and ppo.max_staleness(ppo.Config(correction="vtrace"))[0] == 8
    tolerance, why = algos.get("dqn").max_staleness(None)  # dqn has no with_agent_params
    assert tolerance == -1 and "with_agent_params" in why
    constant = algos.as_algorithm(_module("constant", with_agent_params=lambda s, p: s, MAX_STALENESS=3))
    assert constant.max_staleness(None) == (3, "(its declared MAX_STALENESS)")
    silent = algos.as_algorithm(_module("silent", with_agent_params=lambda s, p: s))
    assert silent.max_staleness(None)[0] == -1
    with pytest.raises(UsageError, match="--mode sync"):
        algos.as_algorithm(_module("sync_only")).with_agent_params(None, None)


def test_a_module_missing_required_functions_is_refused_at_get(monkeypatch):
    incomplete = _module("incomplete")
    del incomplete.learn, incomplete.act
    monkeypatch.setitem(__import__("sys").modules, "incomplete_algo", incomplete)
    monkeypatch.setitem(algos.ALGORITHMS, "incomplete", "incomplete_algo")
    with pytest.raises(UsageError, match="lacks learn, act; define them"):
        algos.get("incomplete")
    ppo = algos.get("ppo")
    assert algos.as_algorithm(ppo) is ppo and algos.as_algorithm(ppo.module).module is ppo.module


def test_unknown_algorithm_suggests_the_closest_name():
    with pytest.raises(UsageError, match="did you mean 'pqn'"):
        algos.get("pqm")
