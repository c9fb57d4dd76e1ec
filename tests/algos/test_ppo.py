"""PPO: the loss, the off-policy corrections and the advantages on hand-computed numbers; continuous
log-probabilities and entropies against jax.scipy.stats; action clipping; observation normalisation."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnax.environments import spaces
from jax.scipy.stats import norm

from longhorizon.algos import ppo
from longhorizon.core.nets import ActorCritic, PolicyOutput
from longhorizon.core.normalize import RunningMeanStd
from longhorizon.envs import Environment, make

LN2 = math.log(2.0)


class Ramp(Environment):
    """obs = [t]; reward 1 per step; truncated after 4 steps (auto-resets to t = 0); two actions."""

    id = "Ramp"
    default_params = None

    def reset(self, key, params=None):
        return jnp.zeros((1,), jnp.float32), jnp.zeros((), jnp.int32)

    def step(self, key, state, action, params=None):
        t = state + 1
        truncated = t >= 4
        final_obs = jnp.full((1,), t, jnp.float32)
        obs = jnp.where(truncated, jnp.zeros((1,), jnp.float32), final_obs)
        return obs, jnp.where(truncated, 0, t), jnp.float32(1.0), jnp.asarray(False), truncated, {"final_obs": final_obs}

    def observation_space(self, params=None):
        return spaces.Box(0.0, 4.0, (1,), jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(2)


def _uniform_agent(continuous=False, action_dim=2):
    """A network whose every output is 0: logits 0 (uniform policy), mean 0, log_std 0, value 0."""
    network = ActorCritic(obs_shape=(1,), action_dim=action_dim, continuous=continuous, hidden=(4,))
    weights = jax.tree.map(jnp.zeros_like, network.init(jax.random.PRNGKey(0), jnp.zeros((1,))))
    return ppo.AgentParams(weights, RunningMeanStd.create((1,)), network)


def _rows(**overrides):
    # Row 0: pi = 1/2, pi_old = 1/4 -> ratio 2 (clipped to 1.2); row 1: ratio 1. Value V = 0 in both.
    rows = dict(obs=jnp.zeros((2, 1)), action=jnp.array([0, 1]), old_log_prob=jnp.log(jnp.array([0.25, 0.5])),
                old_value=jnp.array([1.0, 0.0]), advantage=jnp.array([1.0, -2.0]), target=jnp.array([0.1, 3.0]),
                weight=jnp.array([0.5, 1.0]))
    return ppo.Rows(**{**rows, **overrides})


def _loss(rows=None, drift=None, progress=0.0, **config):
    settings = dict(num_envs=1, num_steps=2, num_minibatches=1, clip_eps=0.2, vf_coef=0.5, ent_coef=0.01,
                    normalize_advantages=False)
    agent = _uniform_agent()
    total, metrics = ppo.loss(agent, agent.weights, rows or _rows(), ppo.Config(**{**settings, **config}), drift, progress)
    return float(total), {k: float(v) for k, v in metrics.items()}


@pytest.mark.slow
def test_loss_by_hand():
    # policy: -mean(min(2 * 1, 1.2 * 1), min(1 * -2, 1 * -2)) = -mean(1.2, -2) = 0.4
    # value:  0.5 * mean((0 - 0.1)^2, (0 - 3)^2) = 0.5 * 9.01 / 2 = 2.2525
    # entropy of the uniform two-action policy: ln 2
    total, metrics = _loss()
    assert metrics["policy_loss"] == pytest.approx(0.4, abs=1e-6)
    assert metrics["value_loss"] == pytest.approx(2.2525, rel=1e-6)
    assert metrics["entropy"] == pytest.approx(LN2, rel=1e-6)
    assert total == pytest.approx(0.4 + 0.5 * 2.2525 - 0.01 * LN2, rel=1e-6)
    assert metrics["clipfrac"] == pytest.approx(0.5)  # |2 - 1| > 0.2 in row 0 only
    assert metrics["approx_kl"] == pytest.approx((1 - LN2) / 2, rel=1e-5)  # mean((r - 1) - ln r), r = 2, 1
    assert metrics["old_approx_kl"] == pytest.approx(-LN2 / 2, rel=1e-5)  # mean(-ln r)


def test_loss_options_by_hand():
    # Normalised advantages: [1, -2] has mean -0.5 and std 1.5 -> [1, -1]; policy -mean(1.2, -1) = -0.1.
    assert _loss(normalize_advantages=True)[1]["policy_loss"] == pytest.approx(-0.1, abs=1e-6)
    # clip_value: row 0 V_clip = 1 + clip(0 - 1, -0.2, 0.2) = 0.8, max((0 - 0.1)^2, (0.8 - 0.1)^2) = 0.49;
    # row 1 V_old = V, so 9.  0.5 * (0.49 + 9) / 2 = 2.3725.
    assert _loss(clip_value=True)[1]["value_loss"] == pytest.approx(2.3725, rel=1e-6)
    # Decoupled: advantages times w = [0.5, 1]: -mean(min(2 * 0.5, 1.2 * 0.5), -2) = -mean(0.6, -2) = 0.7.
    assert _loss(correction="decoupled")[1]["policy_loss"] == pytest.approx(0.7, abs=1e-6)
    # V-trace ignores the weights in the loss (they are inside its advantages already).
    assert _loss(correction="vtrace")[1]["policy_loss"] == pytest.approx(0.4, abs=1e-6)


def test_learned_drift_replaces_the_clipped_surrogate_by_hand(tmp_path):
    from longhorizon.errors import UsageError
    from longhorizon.core import drift as lpo

    # TA-LPO drift whose g = tanh(n/N): w1 reads the progress feature only, so f = (r-1)^2 softplus(tanh(n/N)).
    w1 = np.zeros((7, 1), np.float32)
    w1[5, 0] = 1.0
    lpo.save_drift(tmp_path / "d.npz", {"w1": w1, "b1": np.zeros(1), "w2": np.ones(1), "b2": np.zeros(())})
    drift = jax.tree.map(jnp.asarray, lpo.load_drift(tmp_path / "d.npz"))
    # ratios [2, 1], advantages [1, -2]: objective mean(2 - softplus(tanh(p)), -2) = -softplus(tanh(p)) / 2
    for p in (0.0, 0.5):
        _, metrics = _loss(drift=drift, progress=p)
        assert metrics["policy_loss"] == pytest.approx(math.log1p(math.exp(math.tanh(p))) / 2, rel=1e-5)
    assert _loss()[1]["policy_loss"] == pytest.approx(0.4, abs=1e-6)  # no drift: PPO-clip, as before
    (tmp_path / "bad.npz").write_text("not a drift")
    with pytest.raises(UsageError, match="is not a drift file"):
        ppo.Config(drift=str(tmp_path / "bad.npz")).validate()
    with pytest.raises(UsageError, match="does not exist"):
        ppo.Config(drift=str(tmp_path / "missing.npz")).validate()


def _batch(behaviour_log_prob):
    # t:  0      1 (terminated)   2 (rollout end)
    column = lambda xs, dtype=jnp.float32: jnp.asarray(xs, dtype)[:, None]  # noqa: E731  [T, N=1]
    return ppo.Batch(obs=None, next_obs=None, action=None, log_prob=column(behaviour_log_prob),
                     value=column([0.0, 0.0, 0.0]), reward=column([1.0, 2.0, 3.0]),
                     terminated=column([0, 1, 0], bool), truncated=column([0, 0, 0], bool),
                     episode_return=None, episode_done=None, episode_length=None)


NEXT_VALUES = jnp.array([[1.0], [1.5], [2.0]])  # V(s'_t)
PROX_VALUES = jnp.array([[0.5], [1.0], [1.5]])  # V(s_t) under the proximal (current) network
BEHAVIOUR = [-2.0, -1.0, -1.0]
PROX_LOG_PROB = jnp.array([[-2.0 + LN2], [-1.0 - LN2], [-1.0]])  # pi_prox / mu = 2, 1/2, 1


@pytest.mark.parametrize("correction, advantages, targets, weights", [
    # GAE on the behaviour values (all 0), gamma 0.9, lambda 0.5:
    # delta = [1 + .9, 2, 3 + .9 * 2] = [1.9, 2, 4.8]; A2 = 4.8, A1 = 2 (terminated), A0 = 1.9 + .45 * 2 = 2.8
    ("none", [2.8, 2.0, 4.8], [2.8, 2.0, 4.8], [1.0, 1.0, 1.0]),
    # V-trace: rho = min(1, [2, .5, 1]) = [1, .5, 1], c = .5 * min(1, ratio) = [.5, .25, .5]
    # delta = rho * (r + .9 (1 - term) V' - V) = [1.4, .5 * (2 - 1), 3.3]; v - V: [1.4 + .9 * .5 * .5, .5, 3.3]
    # vs = [2.125, 1.5, 4.8]; A = rho (r + .9 (1 - term) vs_next - V): [1 + .9 * 1.5 - .5, .5 * (2 - 1), 3 + 1.8 - 1.5]
    ("vtrace", [1.85, 0.5, 3.3], [2.125, 1.5, 4.8], [1.0, 0.5, 1.0]),
    # Decoupled: GAE on the proximal values: delta = [1.4, 1, 3.3]; A = [1.4 + .45 * 1, 1, 3.3]; targets A + V
    ("decoupled", [1.85, 1.0, 3.3], [2.35, 2.0, 4.8], [1.0, 0.5, 1.0]),
])
def test_advantages_targets_and_corrections_by_hand(correction, advantages, targets, weights):
    config = ppo.Config(gamma=0.9, gae_lambda=0.5, rho_clip=1.0, correction=correction)
    adv, tgt, w = ppo.advantages_and_targets(_batch(BEHAVIOUR), NEXT_VALUES, PROX_LOG_PROB, PROX_VALUES, config)
    np.testing.assert_allclose(adv[:, 0], advantages, rtol=1e-5)
    np.testing.assert_allclose(tgt[:, 0], targets, rtol=1e-5)
    np.testing.assert_allclose(w[:, 0], weights, rtol=1e-5)


def test_continuous_log_prob_and_entropy_match_scipy_stats():
    agent = _uniform_agent(continuous=True, action_dim=3)
    mean = jnp.array([[0.0, 1.0, -2.0], [0.5, 0.5, 0.5]])
    log_std = jnp.array([[0.0, -1.0, 0.7], [0.2, 0.2, -0.3]])
    action = jnp.array([[0.3, 0.9, -4.0], [-1.0, 2.0, 0.5]])
    log_prob, entropy = ppo._log_prob_entropy(agent, PolicyOutput(mean, log_std, jnp.zeros(2)), action)
    np.testing.assert_allclose(log_prob, norm.logpdf(action, mean, jnp.exp(log_std)).sum(-1), rtol=1e-5)
    # Differential entropy -int p log p, integrated numerically per dimension on a wide grid.
    grid = jnp.linspace(-30.0, 30.0, 200_001)
    step = 60.0 / 200_000  # in Python: grid[1] - grid[0] in float32 is 0.5% off
    per_dim = [[float(-jnp.sum(norm.pdf(grid, m, jnp.exp(s)) * norm.logpdf(grid, m, jnp.exp(s))) * step)
                for m, s in zip(row_m, row_s)] for row_m, row_s in zip(mean, log_std)]
    np.testing.assert_allclose(entropy, np.sum(per_dim, axis=1), rtol=1e-4)


def _pendulum_state(bias):
    config = ppo.Config(num_envs=2, num_steps=4, num_minibatches=1, hidden=(4,), total_steps=64)
    state = ppo.init(jax.random.PRNGKey(0), make("Pendulum-v1"), config)
    params = jax.tree.map(lambda x: x, state.agent.weights["params"])
    params["Dense_0"] = {"kernel": jnp.zeros_like(params["Dense_0"]["kernel"]), "bias": jnp.array([bias])}
    return state.replace(agent=state.agent.replace(weights={"params": params}))


@pytest.mark.slow
def test_continuous_actions_are_clipped_to_the_bounds_only_for_the_environment():
    obs, key = jnp.zeros((5, 3)), jax.random.PRNGKey(1)
    for bias, expected in ((10.0, 2.0), (-10.0, -2.0), (0.5, 0.5)):  # Pendulum's torque lies in [-2, 2]
        agent = _pendulum_state(bias).agent
        np.testing.assert_allclose(ppo.act(agent, obs, key, greedy=True), expected, rtol=1e-6)
    # Sampling from N(10, 1): the environment gets 2, the batch keeps the sampled action and its log-probability.
    _, batch = jax.jit(ppo.collect)(_pendulum_state(10.0))
    assert float(batch.action.min()) > 2.0
    np.testing.assert_allclose(batch.log_prob, norm.logpdf(batch.action, 10.0, 1.0)[..., 0], rtol=1e-5)
    assert np.all(ppo.act(_pendulum_state(10.0).agent, obs, key) == 2.0)


@pytest.mark.slow
def test_observation_statistics_move_once_per_rollout_after_acting():
    config = ppo.Config(num_envs=2, num_steps=4, num_minibatches=1, hidden=(4,), normalize_observations=True,
                        total_steps=64)
    state = ppo.init(jax.random.PRNGKey(0), Ramp(), config)
    # init: merge the two reset observations (both 0) into (mean 0, var 1, count 1e-4): mean 0, var ~5e-5
    assert float(state.agent.obs_rms.mean[0]) == 0.0 and float(state.agent.obs_rms.var[0]) < 1e-4
    state, batch = jax.jit(ppo.collect)(state)
    # The rollout acted on t = 0..3 normalised by the statistics from before it: 0, then clipped at +10.
    np.testing.assert_allclose(batch.obs[..., 0], [[0, 0], [10, 10], [10, 10], [10, 10]], atol=1e-6)
    # Afterwards the statistics hold all ten observations {0, 0} + {0, 1, 2, 3} x 2: mean 1.2, var 1.36.
    np.testing.assert_allclose(state.agent.obs_rms.mean, [1.2], rtol=1e-4)
    np.testing.assert_allclose(state.agent.obs_rms.var, [1.36], rtol=1e-4)
    # Without normalisation the policy sees the raw observations.
    plain = ppo.init(jax.random.PRNGKey(0), Ramp(), ppo.Config(num_envs=2, num_steps=4, num_minibatches=1,
                                                                 hidden=(4,), total_steps=64))
    _, raw = jax.jit(ppo.collect)(plain)
    np.testing.assert_allclose(raw.obs[..., 0], [[0, 0], [1, 1], [2, 2], [3, 3]])


@pytest.mark.slow
def test_learn_reports_the_importance_weight_only_under_a_correction():
    config = ppo.Config(num_envs=2, num_steps=4, num_minibatches=2, update_epochs=1, hidden=(4,), total_steps=64)
    state = ppo.init(jax.random.PRNGKey(0), Ramp(), config)
    _, batch = jax.jit(ppo.collect)(state)
    _, metrics = jax.jit(ppo.learn)(state, batch)
    assert "importance_weight" not in metrics
    corrected = state.replace(config=dataclasses.replace(config, correction="decoupled"))
    # Acting policy 4x as likely as the learner's on every action: w = min(1, 1/4) everywhere.
    _, metrics = jax.jit(ppo.learn)(corrected, batch.replace(log_prob=batch.log_prob + math.log(4.0)))
    assert float(metrics["importance_weight"]) == pytest.approx(0.25, rel=1e-5)


@pytest.mark.slow
def test_learn_reports_cleanrls_learning_rate_and_explained_variance():
    from longhorizon.core.losses import explained_variance

    # 64 steps / 8 per update = 8 updates of 2 epochs x 2 minibatches: the rate anneals to 0 over N = 32
    # optimiser steps and update u starts at step 4u, so lr_u = 0.01 (1 - 4u / 32).
    config = ppo.Config(num_envs=2, num_steps=4, num_minibatches=2, update_epochs=2, hidden=(4,), total_steps=64,
                        learning_rate=0.01)
    state = ppo.init(jax.random.PRNGKey(0), Ramp(), config)
    collect, learn = jax.jit(ppo.collect), jax.jit(ppo.learn)
    for u in range(3):
        state, batch = collect(state)
        next_values = ppo.bootstrap_values(state.agent, batch, batch.value, ppo.max_truncations(config, state.env))
        targets = ppo.advantages_and_targets(batch, next_values, batch.log_prob, batch.value, config)[1]
        state, metrics = learn(state, batch)
        assert float(metrics["learning_rate"]) == pytest.approx(0.01 * (1 - 4 * u / 32), rel=1e-6)
        # The rollout's values against their targets, 1 - Var[G - V] / Var[G], once per update.
        assert float(metrics["explained_variance"]) == pytest.approx(float(explained_variance(batch.value, targets)),
                                                                     rel=1e-5, abs=1e-6)
    constant = dataclasses.replace(config, anneal_lr=False)
    _, metrics = learn(ppo.init(jax.random.PRNGKey(0), Ramp(), constant), collect(state)[1])
    assert float(metrics["learning_rate"]) == pytest.approx(0.01)


@pytest.mark.slow
@pytest.mark.parametrize("env_id, overrides", [("CartPole-v1", {"max_steps_in_episode": 3}), ("Ramp", {})])
def test_bootstrap_values_equal_the_critic_on_every_next_observation(env_id, overrides):
    # V(s'_t) = values[t + 1] where the episode goes on, the critic on the final observation where it was
    # truncated. CartPole declares its 3-step limit (the gathered rows suffice: at most ceil(8 / 3) per env);
    # Ramp truncates every 4 steps but declares no limit, so the bound of one per env is exceeded and
    # every row gets the critic.
    env = Ramp() if env_id == "Ramp" else make(env_id, **overrides)
    config = ppo.Config(num_envs=3, num_steps=8, num_minibatches=1, hidden=(8,), total_steps=96)
    state, batch = jax.jit(ppo.collect)(ppo.init(jax.random.PRNGKey(2), env, config))
    limit = ppo.max_truncations(config, state.env)
    assert limit == (9 if env_id == "CartPole-v1" else 3)
    assert int(batch.truncated.sum()) == 6  # CartPole: steps 3 and 6; Ramp: steps 4 and 8
    every = state.agent.network.apply(state.agent.weights, batch.next_obs, value_only=True)
    got = jax.jit(ppo.bootstrap_values, static_argnums=3)(state.agent, batch, batch.value, limit)
    goes_on = ~np.asarray(batch.terminated)
    np.testing.assert_allclose(np.asarray(got)[goes_on], np.asarray(every)[goes_on], rtol=1e-5, atol=1e-6)
    # Too few gathered rows for the truncations present: every row gets the critic instead.
    fallback = jax.jit(ppo.bootstrap_values, static_argnums=3)(state.agent, batch, batch.value, 1)
    np.testing.assert_allclose(np.asarray(fallback)[goes_on], np.asarray(every)[goes_on], rtol=1e-5, atol=1e-6)
