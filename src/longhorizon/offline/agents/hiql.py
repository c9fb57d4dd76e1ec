r"""HIQL: offline goal-conditioned RL with latent states as actions (Park, Ghosh, Eysenbach, Levine 2023).

One goal-conditioned value :math:`V(s, g) = f([s, \phi([s, g])])`, learnt as in GCIVL, and two
policies extracted from it by AWR. The high-level policy proposes a subgoal *representation*
:math:`z = \phi([s, s_{t+k}])` toward the goal; the low-level policy acts toward it:

    for each update:
        i ~ U(valid);  g_v ~ value goal mixture;  g_h ~ actor goal mixture (at i)
        w_l = s_{min(i+k, end)}                  (low-level goal: k steps ahead in the trajectory)
        w_h = s_{min(i+k, g_h, end)}             (high-level target)
        value:      expectile loss on r + gamma m Vbar(s_{i+1}, g_v) - V(s_i, g_v)            (eq. 5)
        low actor:  max E exp(beta_l (V(s_{i+1}, w_l) - V(s_i, w_l))) log pi_l(a_i | s_i, sg[phi([s_i, w_l])])
        high actor: max E exp(beta_h (V_h(w_h, g_h) - V_h(s_i, g_h))) log pi_h(sg[phi([s_i, w_h])] | s_i, g_h)

In HIQL V_h is V. OTA (:mod:`longhorizon.offline.agents.ota`) keeps everything and adds a separate
high-level value V_h trained on options (:func:`sample`'s ``option_length``); it shares this module.
Acting: z = mean pi_h(s, g), rescaled to norm sqrt(d) as phi's outputs are, then a = mean pi_l(s, z).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from longhorizon.offline.agents import ValueAgentConfig
from longhorizon.offline.nets import (GoalActor, GoalValue, TrainState, awr_loss, expectile_value_loss, gradient_step,
                                      init_state, length_normalize, unit_gaussian_log_prob)
from longhorizon.offline.samplers import GoalData, ValueBatch, mixture_goals, option_ends, subgoals, value_batch

NAME = "hiql"


@dataclasses.dataclass(frozen=True)
class Config(ValueAgentConfig):
    expectile: float = 0.7
    low_alpha: float = 3.0  # AWR temperatures
    high_alpha: float = 3.0
    subgoal_steps: int = 25  # k
    rep_dim: int = 10  # d, the size of a subgoal representation

    def validate(self) -> None:
        super().validate()
        self._check_positive("low_alpha", "high_alpha", "subgoal_steps", "rep_dim")


class Batch(NamedTuple):
    value: ValueBatch  # one-step transitions with value goals
    high_next: jax.Array  # [B, D] the state V_h bootstraps from: s_{i+1} (HIQL) or s_tau (OTA's option end)
    low_goals: jax.Array  # [B, D] w_l
    high_goals: jax.Array  # [B, D] g_h
    high_targets: jax.Array  # [B, D] w_h


def networks(config: Config, action_dim: int):
    """``(value with phi, low actor, high actor, high value)``; the last is used only by OTA."""
    return (GoalValue(config.hidden, config.layer_norm, rep_dim=config.rep_dim),
            GoalActor(action_dim, config.hidden), GoalActor(config.rep_dim, config.hidden),
            GoalValue(config.hidden, config.layer_norm))


def optimizer(config: Config) -> optax.GradientTransformation:
    return optax.adam(config.learning_rate)


def init(key, obs_dim: int, action_dim: int, config: Config, high_value: bool = False) -> TrainState:
    """HIQL's parameters (``value``, ``low_actor``, ``high_actor``), and ``high_value`` if asked (OTA)."""
    keys = jax.random.split(key, 5)
    value, low, high, value_h = networks(config, action_dim)
    obs, rep = jnp.zeros((1, obs_dim)), jnp.zeros((1, config.rep_dim))
    params = {"value": value.init(keys[0], obs, obs), "low_actor": low.init(keys[1], obs, rep),
              "high_actor": high.init(keys[2], obs, obs)}
    if high_value:
        params["high_value"] = value_h.init(keys[3], obs, obs)
    return init_state(keys[4], params, optimizer(config), target_names=tuple(n for n in params if "value" in n))


def sample(key, data: GoalData, config: Config, option_length: int = 1) -> Batch:
    """HIQL's batch; ``option_length`` n > 1 sets ``high_next`` to the option's end s_tau (OTA)."""
    k_value, k_actor = jax.random.split(key)
    vb = value_batch(k_value, data, config.batch_size, config.value_goals(), config.discount)
    high_goal = mixture_goals(k_actor, data, vb.idx, config.actor_goals(), config.discount)
    high_next = vb.next_observations if option_length == 1 else \
        data.next_observations[option_ends(data, vb.idx, vb.goal_idx, option_length)]
    return Batch(vb, high_next, data.observations[subgoals(data, vb.idx, config.subgoal_steps)],
                 data.observations[high_goal], data.observations[subgoals(data, vb.idx, config.subgoal_steps, high_goal)])


def learn(state: TrainState, batch: Batch, config: Config):
    value, low, high, value_h = networks(config, batch.value.actions.shape[-1])
    b = batch.value
    has_high_value = "high_value" in state.params  # OTA: a separate option-level value

    # the actors' advantages and targets use the current values, without gradient (mean over heads)
    v = lambda obs, goals: jnp.mean(value.apply(state.params["value"], obs, goals), axis=0)
    v_high = (lambda obs, goals: jnp.mean(value_h.apply(state.params["high_value"], obs, goals), axis=0)) \
        if has_high_value else v
    phi = lambda obs, goals: value.apply(state.params["value"], obs, goals, method=GoalValue.represent)

    def loss_fn(params):
        value_loss, info = expectile_value_loss(value.apply, params["value"], state.target["value"], b.observations,
                                                b.next_observations, b.goals, b.rewards, b.masks,
                                                config.discount, config.expectile)
        info = {"value_loss": value_loss, **info}
        loss = value_loss
        if has_high_value:  # OTA: V^h on options, b.high_next = s_tau
            high_value_loss, high_info = expectile_value_loss(
                value_h.apply, params["high_value"], state.target["high_value"], b.observations, batch.high_next,
                b.goals, b.rewards, b.masks, config.discount, config.expectile)
            loss += high_value_loss
            info.update(high_value_loss=high_value_loss, high_v_mean=high_info["v_mean"])

        # low level: act toward the subgoal k steps ahead, weighted by V's one-step advantage
        low_adv = v(b.next_observations, batch.low_goals) - v(b.observations, batch.low_goals)
        low_mean = low.apply(params["low_actor"], b.observations, phi(b.observations, batch.low_goals))
        low_loss, low_info = awr_loss(unit_gaussian_log_prob(low_mean, b.actions), low_adv, config.low_alpha)

        # high level: propose phi([s, w_h]), weighted by V_h's advantage of reaching w_h toward g_h
        high_adv = v_high(batch.high_targets, batch.high_goals) - v_high(b.observations, batch.high_goals)
        high_mean = high.apply(params["high_actor"], b.observations, batch.high_goals)
        target_rep = phi(b.observations, batch.high_targets)
        high_loss, high_info = awr_loss(unit_gaussian_log_prob(high_mean, target_rep), high_adv, config.high_alpha)

        info.update(low_actor_loss=low_loss, high_actor_loss=high_loss, low_adv_mean=low_info["adv_mean"],
                    high_adv_mean=high_info["adv_mean"],
                    low_actor_mse=jnp.mean(jnp.sum((low_mean - b.actions) ** 2, axis=-1)))
        return loss + low_loss + high_loss, info

    return gradient_step(state, loss_fn, optimizer(config), config.tau)


def agent_params(state: TrainState):
    return state.params


def values(params, obs, goals, config: Config):
    """The value the high-level policy is trained against, ``[B]``: V (HIQL) or V_h (OTA)."""
    value, _, _, value_h = networks(config, 1)
    if "high_value" in params:
        return jnp.mean(value_h.apply(params["high_value"], obs, goals), axis=0)
    return jnp.mean(value.apply(params["value"], obs, goals), axis=0)


def act(params, obs, goals, config: Config):
    action_dim = params["low_actor"]["params"]["Dense_0"]["bias"].shape[-1]
    _, low, high, _ = networks(config, action_dim)
    z = length_normalize(high.apply(params["high_actor"], obs, goals))
    return jnp.clip(low.apply(params["low_actor"], obs, z), -1.0, 1.0)
