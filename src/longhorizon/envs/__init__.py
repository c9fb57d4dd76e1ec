"""Environments: the functional gymnax-1.0 API, wrappers and the registry."""

from longhorizon.envs.api import Environment, GymnaxEnv, SpaceInfo, space_info, true_next_obs
from longhorizon.envs.registry import family, list_env_ids, make
from longhorizon.envs.wrappers import (AutoReset, EpisodeStatistics, NormalizeObservation, NormalizeReward, TimeFeature,
                                       VecEnv, Wrapper)


def vectorize(env: Environment, num_envs: int) -> VecEnv:
    """The training stack every algorithm uses: episode statistics per copy, then ``vmap``."""
    return VecEnv(EpisodeStatistics(env), num_envs)


__all__ = ["Environment", "GymnaxEnv", "SpaceInfo", "space_info", "true_next_obs", "family", "list_env_ids", "make", "AutoReset",
           "EpisodeStatistics", "NormalizeObservation", "NormalizeReward", "TimeFeature", "VecEnv", "Wrapper", "vectorize"]
