"""E-AMoD as a gymnasium environment, so the engine's algorithms train on it (``--engine host``).

    longhorizon train ppo --env gymnasium:longhorizon.structured.amod_gym:AMoDEnv

One step is one decision of :mod:`longhorizon.structured.amod`: the observation is the node features
after this step's matching LP (:func:`longhorizon.structured.amod_policy.features`, flattened), the
action is ``R C`` logits whose softmax is the desired distribution ``w`` over the space-charge nodes (a
logistic-normal policy under PPO's Gaussian head, in place of the Dirichlet), and the step solves the
rebalancing LP, advances the fleet, then samples the next step's requests and solves their matching
LP, all on the host (HiGHS). The reward is the step's profit over ``fleet x base fare``; the day ends
(terminated) after ``city.steps`` steps. ``lp_seconds`` accumulates the LP time (kept out of ``info``,
which must be a function of the seed and the actions).

The engine's PPO sees a flat vector, so unlike the graph policy it does not carry over to a city with
another number of regions.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.structured import amod
from longhorizon.structured.amod_policy import features

CITIES = {"A": amod.CITY_A, "B": amod.CITY_B}


def make_city(name: str) -> amod.City:
    if name not in CITIES:
        raise UsageError(f"unknown E-AMoD city {name!r}; use one of {sorted(CITIES)} (--env-arg city=A).")
    return CITIES[name]


class AMoDEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, city: str = "A", logit_bound: float = 5.0):
        self.net = amod.Network(make_city(city))
        self.scale = self.net.city.fleet * self.net.city.base_fare
        R, C = self.net.R, self.net.C
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (R * (C + 5),), np.float32)
        self.action_space = gym.spaces.Box(-logit_bound, logit_bound, (R * C,), np.float32)
        self.demand = None
        self.lp_seconds = 0.0

    def _decision_point(self) -> np.ndarray:
        """Match this step's requests; the observation the policy decides on."""
        self.matched, self.idle, self.seconds_match = amod.idle_after_matching(self.net, self.vehicles, self.demand[self.t])
        self.lp_seconds += self.seconds_match
        return features(self.net, self.t, self.idle).ravel()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.demand = self.net.demand(int(self.np_random.integers(1 << 31)))
        self.vehicles, self.t = self.net.initial_vehicles(), 0
        return self._decision_point(), {}

    def step(self, action):
        logits = np.asarray(action, np.float64).reshape(self.net.R, self.net.C)
        weights = np.exp(logits - logits.max())
        out = amod.finish_step(self.net, self.matched, self.idle, weights / weights.sum(), self.seconds_match)
        self.vehicles, self.t = out.vehicles, self.t + 1
        self.lp_seconds += out.seconds_rebalance
        done = self.t >= len(self.demand)
        # the day over, no next matching: the last observation is returned again (nothing bootstraps from it)
        obs = features(self.net, self.t - 1, self.idle).ravel() if done else self._decision_point()
        return obs, out.profit / self.scale, done, False, {"profit": out.profit}
