r"""GCBC: goal-conditioned behaviour cloning (Ghosh et al. 2021 in OGBench's form).

The policy imitates the dataset's action toward a goal drawn from the same trajectory (hindsight
relabelling): :math:`\max_\pi \mathbb E_{(s, a, g)}[\log \pi(a \mid s, g)]`, with :math:`\pi` a
unit-variance Gaussian, so the loss is a squared error to the action up to a constant.

    for each update:
        i ~ U(valid),  g = s_j  with j ~ actor goal mixture (default: uniform over i+1 .. end of trajectory)
        theta <- theta + lr * grad log pi(a_i | s_i, g)
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from longhorizon.offline.agents import AgentConfig
from longhorizon.offline.nets import GoalActor, TrainState, gradient_step, init_state, unit_gaussian_log_prob
from longhorizon.offline.samplers import GoalData, mixture_goals, start_indices

NAME = "gcbc"


@dataclasses.dataclass(frozen=True)
class Config(AgentConfig):
    pass


class Batch(NamedTuple):
    observations: jax.Array  # [B, D]
    actions: jax.Array  # [B, A]
    goals: jax.Array  # [B, D]


def actor(config: Config, action_dim: int) -> GoalActor:
    return GoalActor(action_dim, config.hidden)


def optimizer(config: Config) -> optax.GradientTransformation:
    return optax.adam(config.learning_rate)


def init(key, obs_dim: int, action_dim: int, config: Config) -> TrainState:
    k_actor, k_state = jax.random.split(key)
    obs = jnp.zeros((1, obs_dim))
    params = {"actor": actor(config, action_dim).init(k_actor, obs, obs)}
    return init_state(k_state, params, optimizer(config))


def sample(key, data: GoalData, config: Config) -> Batch:
    k_idx, k_goal = jax.random.split(key)
    idx = start_indices(k_idx, data, config.batch_size)
    goal = mixture_goals(k_goal, data, idx, config.actor_goals(), config.discount)
    return Batch(data.observations[idx], data.actions[idx], data.observations[goal])


def learn(state: TrainState, batch: Batch, config: Config):
    net = actor(config, batch.actions.shape[-1])

    def loss_fn(params):
        mean = net.apply(params["actor"], batch.observations, batch.goals)
        loss = -jnp.mean(unit_gaussian_log_prob(mean, batch.actions))
        return loss, {"actor_mse": jnp.mean(jnp.sum((mean - batch.actions) ** 2, axis=-1))}

    return gradient_step(state, loss_fn, optimizer(config))


def agent_params(state: TrainState):
    return state.params


def act(params, obs, goals, config: Config):
    action_dim = params["actor"]["params"]["Dense_0"]["bias"].shape[-1]
    return jnp.clip(actor(config, action_dim).apply(params["actor"], obs, goals), -1.0, 1.0)
