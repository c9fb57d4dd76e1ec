"""Subgoal diffusion: the schedule, forward process, loss and samplers against hand-computed values and a
Gaussian whose exact noise predictor is known; the batch triples; HECRL's selection rule by hand."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.offline import pushworld
from longhorizon.offline import subgoal_diffusion as sd
from longhorizon.offline.samplers import goal_data


def test_cosine_schedule_by_hand():
    sched = sd.cosine_schedule(2)
    f = lambda t: math.cos((t / 2 + 0.008) / 1.008 * math.pi / 2) ** 2
    abar1 = f(1) / f(0)
    np.testing.assert_allclose(sched.alpha_bars[:2], [1.0, abar1], rtol=1e-5)
    np.testing.assert_allclose(sched.betas, [0.0, 1 - abar1, 0.999], rtol=1e-5)  # beta_2 = 1 - 0/abar_1, clipped
    np.testing.assert_allclose(sched.alpha_bars[2], abar1 * 0.001, rtol=1e-4)
    long = sd.cosine_schedule(50).alpha_bars
    assert np.all(np.diff(long) < 0) and float(long[-1]) < 1e-3


def test_forward_process_and_loss_by_hand():
    sched = sd.cosine_schedule(2)
    abar = float(sched.alpha_bars[1])
    x = sd.q_sample(sched, jnp.full((1, 2, 2), 1.0), jnp.array([1]), jnp.full((1, 2, 2), 1.0))
    np.testing.assert_allclose(x, math.sqrt(abar) + math.sqrt(1 - abar), rtol=1e-6)
    pred, noise = jnp.array([[1.0, 2.0], [0.0, 1.0]]), jnp.array([[0.0, 0.0], [0.0, 0.0]])
    assert float(sd.noise_loss(pred, noise)) == pytest.approx((5.0 + 1.0) / 2)  # summed over dims, mean over batch
    assert sd.reach_threshold(1, 0.99) == pytest.approx(-1.0)
    assert sd.reach_threshold(2, 0.5) == pytest.approx(-1.5)


@pytest.mark.parametrize("sampler", ["ddpm", "ddim"])
def test_samplers_recover_a_gaussian_with_its_exact_noise_predictor(sampler):
    # x0 ~ N(mu, sigma^2): E[eps | x_t] = sqrt(1 - abar) (x_t - sqrt(abar) mu) / (abar sigma^2 + 1 - abar)
    mu, sigma = 0.7, 0.3
    sched = sd.cosine_schedule(50)

    def eps(x, t):
        abar = sched.alpha_bars[t]
        return jnp.sqrt(1 - abar) * (x - jnp.sqrt(abar) * mu) / (abar * sigma**2 + 1 - abar)

    key = jax.random.PRNGKey(0)
    if sampler == "ddpm":
        x = jax.jit(lambda k: sd.ddpm_sample(k, eps, sched, (20_000,)))(key)
    else:
        # on every step: the deterministic sampler under-disperses on coarser grids (std 0.24 with 10 steps)
        x = jax.jit(lambda k: sd.ddim_sample(k, eps, sched, (20_000,), 50))(key)
    assert float(jnp.mean(x)) == pytest.approx(mu, abs=0.02)
    assert float(jnp.std(x)) == pytest.approx(sigma, abs=0.03)


def test_batch_triples_are_subgoals_k_ahead_capped_at_the_goal():
    # two trajectories whose observations are their own indices: s_i = i
    n = 20
    obs = np.arange(n, dtype=np.float32)[:, None].repeat(2, 1) / 100
    data = goal_data({"observations": obs, "next_observations": obs, "actions": np.zeros((n, 2), np.float32),
                      "terminals": np.eye(n, dtype=np.float32)[[9, 19]].sum(0)})
    config = sd.Config(entity_dim=2, subgoal_steps=3, batch_size=512)
    b = sd.sample(jax.random.PRNGKey(0), data, config)
    i, g, j = (np.rint(np.asarray(x)[:, 0] * 100).astype(int) for x in (b.observations, b.goals, b.subgoals))
    assert np.all(i // 10 == g // 10) and np.all(g >= i)  # a goal later in the same trajectory
    np.testing.assert_array_equal(j, np.minimum(i + 3, g))
    assert b.t.min() >= 1 and b.t.max() <= config.diffusion_steps and b.noise.shape == (512, 1, 2)


@pytest.mark.slow
def test_learning_lowers_the_noise_loss_from_its_start_value():
    data = goal_data(pushworld.make_dataset(1, trajectories=30, length=20, seed=0))
    config = sd.Config(d_model=32, heads=2, layers=1, batch_size=64, learning_rate=2e-3)
    state = sd.init(jax.random.PRNGKey(0), 4, 0, config)

    @jax.jit
    def update(state, key):
        return sd.learn(state, sd.sample(key, data, config), config)

    losses = []
    for k in jax.random.split(jax.random.PRNGKey(1), 100):
        state, metrics = update(state, k)
        losses.append(float(metrics["diffusion_loss"]))
    # the output layer starts at zero, so the first loss is E||eps||^2 = 2 tokens x 2 features = 4
    assert losses[0] == pytest.approx(4.0, rel=0.15)
    assert np.mean(losses[-20:]) < 0.6 * losses[0]


def test_selection_rule_by_hand():
    # V(s, g) = -10 |s - g| (1-D states): with threshold -2.5 a target within 0.25 counts as reachable
    values = lambda o, g: -10.0 * jnp.abs(o[:, 0] - g[:, 0])
    pick = lambda s, g, c: sd.select_subgoal(values, jnp.array([s]), jnp.array([g]), jnp.array(c), -2.5)
    target, used = pick(0.0, 0.2, [[0.1], [0.5]])
    assert float(target[0]) == pytest.approx(0.2) and not bool(used)  # the goal is itself within reach
    target, used = pick(0.0, 1.0, [[0.1], [0.2], [0.6], [-0.1]])
    assert float(target[0]) == pytest.approx(0.2) and bool(used)  # reachable, and closest to the goal
    target, used = pick(0.0, 1.0, [[0.9], [0.4], [-0.7]])
    assert float(target[0]) == pytest.approx(0.4) and bool(used)  # none reachable: the most reachable one
    target, used = sd.select_subgoal(values, jnp.array([0.0]), jnp.array([1.0]), jnp.array([[0.2], [0.1], [0.3]]), -2.5,
                                     jnp.array([False, True, False]))
    assert float(target[0]) == pytest.approx(0.1) and bool(used)  # impossible states are never chosen
    target, used = sd.select_subgoal(values, jnp.array([0.0]), jnp.array([1.0]), jnp.array([[0.2]]), -2.5, jnp.array([False]))
    assert float(target[0]) == pytest.approx(1.0) and not bool(used)  # no valid candidate: the goal


def test_invalid_config_is_one_sentence():
    with pytest.raises(UsageError, match="sample-steps"):
        sd.Config(sample_steps=60, diffusion_steps=50)
    with pytest.raises(UsageError, match="d-model"):
        sd.Config(d_model=30, heads=4)
    with pytest.raises(UsageError, match="discount"):
        sd.Config(discount=1.0)
    with pytest.raises(UsageError, match="num-candidates"):
        sd.Config(num_candidates=0)


def test_ddim_clipping_keeps_a_wrong_predictor_in_the_data_range():
    # eps = 0 claims x_T is all signal: x0_hat = x_T / sqrt(abar_T) ~ 1000 x_T, unless clipped to [-1, 1]
    sched = sd.cosine_schedule(50)
    zero = lambda x, t: jnp.zeros_like(x)
    raw = sd.ddim_sample(jax.random.PRNGKey(0), zero, sched, (1000,), 10)
    clipped = sd.ddim_sample(jax.random.PRNGKey(0), zero, sched, (1000,), 10, clip=1.0)
    assert float(jnp.max(jnp.abs(raw))) > 100.0
    assert float(jnp.max(jnp.abs(clipped))) <= 1.0 + 1e-5
