"""Environments: the functional gymnax-1.0 API, wrappers and the registry."""

import copy

from longhorizon.envs.api import Environment, GymnaxEnv, SpaceInfo, space_info, true_next_obs
from longhorizon.envs.registry import env_name, family, list_env_ids, make, recorded_env_id
from longhorizon.envs.wrappers import (AutoReset, EpisodeStatistics, NormalizeObservation, NormalizeReward, TimeFeature,
                                       VecEnv, Wrapper)


def vectorize(env: Environment, num_envs: int) -> Environment:
    """The training stack every algorithm uses: episode statistics per copy, then ``vmap``.

    An environment stepped on the host (gymnasium) is vectorised natively instead: its wrappers are
    rebuilt around one env group of ``num_envs`` copies, under episode statistics per copy.
    """
    if hasattr(env, "vectorized"):
        return EpisodeStatistics(_natively_vectorized(env, num_envs))
    return VecEnv(EpisodeStatistics(env), num_envs)


def _natively_vectorized(env: Environment, num_envs: int) -> Environment:
    if not isinstance(env, Wrapper):
        return env.vectorized(num_envs)
    outer = copy.copy(env)  # the same wrapper (batch-aware), now around the vectorised inner env
    outer.env = _natively_vectorized(env.env, num_envs)
    return outer


__all__ = ["Environment", "GymnaxEnv", "SpaceInfo", "space_info", "true_next_obs", "env_name", "family", "list_env_ids", "make", "recorded_env_id", "AutoReset",
           "EpisodeStatistics", "NormalizeObservation", "NormalizeReward", "TimeFeature", "VecEnv", "Wrapper", "vectorize"]
