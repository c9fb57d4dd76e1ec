r"""GCIVL: goal-conditioned implicit V-learning (IQL's expectile regression on V only; OGBench, Park et al. 2024).

A value :math:`V(s, g)` learnt without actions or Q from the dataset's own transitions, then a policy
extracted by advantage-weighted regression:

    for each update:
        i ~ U(valid);  g_v ~ value goal mixture;  g_a ~ actor goal mixture (both at i)
        r = 1(s_i = g_v) - 1,  m = 1 - 1(s_i = g_v)
        value:  min_V  E sum_j |tau - 1(A < 0)| (r + gamma m Vbar_j(s_{i+1}, g_v) - V_j(s_i, g_v))^2
        actor:  max_pi E exp(alpha (V(s_{i+1}, g_a) - V(s_i, g_a))) log pi(a_i | s_i, g_a)
        Vbar <- (1 - tau) Vbar + tau V

(:func:`longhorizon.offline.nets.expectile_value_loss` has the exact form of A.)
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from longhorizon.offline.agents import ValueAgentConfig
from longhorizon.offline.nets import (GoalActor, GoalValue, TrainState, awr_loss, expectile_value_loss, gradient_step,
                                      init_state, unit_gaussian_log_prob)
from longhorizon.offline.samplers import GoalData, ValueBatch, mixture_goals, value_batch

NAME = "gcivl"


@dataclasses.dataclass(frozen=True)
class Config(ValueAgentConfig):
    expectile: float = 0.9
    alpha: float = 10.0  # AWR temperature

    def validate(self) -> None:
        super().validate()
        self._check_positive("alpha")


class Batch(NamedTuple):
    value: ValueBatch
    actor_goals: jax.Array  # [B, D]


def networks(config: Config, action_dim: int) -> tuple[GoalValue, GoalActor]:
    return GoalValue(config.hidden, config.layer_norm), GoalActor(action_dim, config.hidden)


def optimizer(config: Config) -> optax.GradientTransformation:
    return optax.adam(config.learning_rate)


def init(key, obs_dim: int, action_dim: int, config: Config) -> TrainState:
    k_value, k_actor, k_state = jax.random.split(key, 3)
    value, actor = networks(config, action_dim)
    obs = jnp.zeros((1, obs_dim))
    params = {"value": value.init(k_value, obs, obs), "actor": actor.init(k_actor, obs, obs)}
    return init_state(k_state, params, optimizer(config), target_names=("value",))


def sample(key, data: GoalData, config: Config) -> Batch:
    k_value, k_actor = jax.random.split(key)
    vb = value_batch(k_value, data, config.batch_size, config.value_goals(), config.discount)
    actor_goal = mixture_goals(k_actor, data, vb.idx, config.actor_goals(), config.discount)
    return Batch(vb, data.observations[actor_goal])


def learn(state: TrainState, batch: Batch, config: Config):
    value, actor = networks(config, batch.value.actions.shape[-1])
    b = batch.value

    def loss_fn(params):
        value_loss, value_info = expectile_value_loss(value.apply, params["value"], state.target["value"], b.observations,
                                                      b.next_observations, b.goals, b.rewards, b.masks,
                                                      config.discount, config.expectile)
        v = lambda s: jnp.mean(value.apply(state.params["value"], s, batch.actor_goals), axis=0)  # no gradient to V
        advantage = v(b.next_observations) - v(b.observations)
        mean = actor.apply(params["actor"], b.observations, batch.actor_goals)
        actor_loss, actor_info = awr_loss(unit_gaussian_log_prob(mean, b.actions), advantage, config.alpha)
        return value_loss + actor_loss, {"value_loss": value_loss, "actor_loss": actor_loss, **value_info, **actor_info}

    return gradient_step(state, loss_fn, optimizer(config), config.tau)


def agent_params(state: TrainState):
    return state.params


def values(params, obs, goals, config: Config):
    return jnp.mean(networks(config, 1)[0].apply(params["value"], obs, goals), axis=0)


def act(params, obs, goals, config: Config):
    action_dim = params["actor"]["params"]["Dense_0"]["bias"].shape[-1]
    return jnp.clip(networks(config, action_dim)[1].apply(params["actor"], obs, goals), -1.0, 1.0)
