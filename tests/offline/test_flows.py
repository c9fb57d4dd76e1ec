"""Flow BC, QGF guidance, best-of-N, the IQL critic, FQL's loss and the toy task: hand-computed cases
and one short training on the toy task."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longhorizon.errors import UsageError
from longhorizon.offline import flows, fql, iql, toy


# ----------------------------------------------------------------------------- flow matching
def test_flow_matching_loss_matches_hand_value():
    # v(s, x, t) = 2 x.  Row 0: x_t = .5 [1, 0] + .5 [0, 1] = [.5, .5], target [1, -1], v [1, 1] -> errors 0, 2.
    # Row 1: x_t = .75 [1, 1] = [.75, .75], target [-1, -1], v [1.5, 1.5] -> errors 2.5, 2.5.
    velocity = lambda obs, x, t: 2.0 * x  # noqa: E731
    loss = flows.flow_matching_loss(velocity, jnp.zeros((2, 1)), jnp.array([[1.0, 0.0], [0.0, 0.0]]),
                                    jnp.array([[0.0, 1.0], [1.0, 1.0]]), jnp.array([0.5, 0.25]))
    assert float(loss) == pytest.approx((0 + 4 + 6.25 + 6.25) / 4)


def test_flow_matching_loss_is_zero_for_the_true_velocity_of_a_point_mass():
    # All data at a = c: the velocity field (c - x) / (1 - t) is exact on every path.
    c = jnp.array([0.3, -0.2])
    noise = jax.random.normal(jax.random.PRNGKey(0), (5, 2))
    t = jnp.linspace(0.0, 0.9, 5)
    loss = flows.flow_matching_loss(lambda o, x, t: (c - x) / (1 - t[:, None]), jnp.zeros((5, 1)),
                                    jnp.broadcast_to(c, (5, 2)), noise, t)
    assert float(loss) == pytest.approx(0.0, abs=1e-10)


# ----------------------------------------------------------------------------- sampling
def test_qgf_guided_euler_path_matches_hand_computation():
    # v(x, t) = 1 - x, Q(a) = -(a - 2)^2 / 2 (grad 2 - a), K = 2, w = 0.5, x_0 = 0:
    # k=0: t=0,  v=1,    a_hat=1,     g=1,     x_1 = 0 + .5 (1 + .5)         = 0.75
    # k=1: t=.5, v=.25,  a_hat=.875,  g=1.125, x_2 = .75 + .5 (.25 + .5625) = 1.15625
    # (with the true Jacobian d a_hat / d x = t the first step's guidance would vanish: x_2 = 0.9375.)
    velocity = lambda obs, x, t: 1.0 - x  # noqa: E731
    q = lambda obs, a: -0.5 * jnp.sum((a - 2.0) ** 2, axis=-1)  # noqa: E731
    out = flows.euler_sample(velocity, jnp.zeros((1, 1)), jnp.zeros((1, 1)), 2, flows.q_action_grad(q), 0.5,
                             low=-5.0, high=5.0)
    assert float(out[0, 0]) == pytest.approx(1.15625, abs=1e-6)
    plain = flows.euler_sample(velocity, jnp.zeros((1, 1)), jnp.zeros((1, 1)), 2, low=-5.0, high=5.0)
    assert float(plain[0, 0]) == pytest.approx(0.75, abs=1e-6)  # 0 + .5 * 1, then .5 + .5 * .5


def test_qgf_matches_a_closed_form_recurrence_in_2d():
    # Linear velocity v = A x + b t + c and quadratic critic Q = -(a - m)^T P (a - m) / 2, grad P (m - a):
    # x_{k+1} = x_k + (v_k + w P (m - x_k - (1 - t_k) v_k)) / K, written out in numpy.
    A = np.array([[-1.0, 0.3], [0.2, -0.5]])
    b, c, m = np.array([0.4, -0.1]), np.array([0.1, 0.2]), np.array([0.5, -0.4])
    P = np.array([[2.0, 0.5], [0.5, 1.0]])
    K, w = 7, 0.8
    x0 = np.array([[0.3, -0.7], [-1.1, 0.4], [0.0, 0.0]])
    x = x0.copy()
    for k in range(K):
        t = k / K
        v = x @ A.T + b * t + c
        a_hat = x + (1 - t) * v
        x = x + (v + w * (m - a_hat) @ P.T) / K
    velocity = lambda obs, x, t: x @ jnp.asarray(A.T) + jnp.asarray(b) * t[:, None] + jnp.asarray(c)  # noqa: E731
    q = lambda obs, a: -0.5 * jnp.einsum("bi,ij,bj->b", a - m, jnp.asarray(P), a - m)  # noqa: E731
    out = flows.euler_sample(velocity, jnp.zeros((3, 1)), jnp.asarray(x0, jnp.float32), K, flows.q_action_grad(q), w,
                             low=-10.0, high=10.0)
    np.testing.assert_allclose(np.asarray(out), x, atol=1e-5)
    clipped = flows.euler_sample(velocity, jnp.zeros((3, 1)), jnp.asarray(x0, jnp.float32), K, flows.q_action_grad(q),
                                 w, low=-0.1, high=0.1)
    np.testing.assert_allclose(np.asarray(clipped), np.clip(x, -0.1, 0.1), atol=1e-5)


def test_best_of_n_picks_the_argmax_per_state():
    candidates = jnp.array([[[0.0], [3.0]], [[0.9], [1.5]], [[2.5], [-1.0]]])  # [N=3, B=2, d=1]
    q = lambda obs, a: -jnp.sum((a - 1.0) ** 2, axis=-1)  # noqa: E731
    out = flows.best_of_n(q, jnp.zeros((2, 1)), candidates)
    np.testing.assert_allclose(np.asarray(out), [[0.9], [1.5]])


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([1, 5]), st.just(3), st.integers(0, 2**31 - 1))  # few shapes: each one compiles
def test_best_of_n_returns_the_candidate_with_the_highest_q(n, batch, seed):
    candidates = jax.random.normal(jax.random.PRNGKey(seed), (n, batch, 2))
    weights = jnp.array([1.0, -2.0])
    q = lambda obs, a: a @ weights  # noqa: E731
    out = np.asarray(flows.best_of_n(q, jnp.zeros((batch, 1)), candidates))
    values = np.asarray(candidates @ weights)
    expected = np.asarray(candidates)[values.argmax(axis=0), np.arange(batch)]
    np.testing.assert_allclose(out, expected)


def test_sample_is_bc_qgf_or_best_of_n_from_one_key():
    velocity = lambda o, x, t: -x + o  # noqa: E731
    q = lambda o, a: -jnp.sum((a - 0.5) ** 2, -1)  # noqa: E731
    obs, key = jnp.full((4, 2), 0.2), jax.random.PRNGKey(3)
    noise = jax.random.normal(key, (4, 2))
    np.testing.assert_array_equal(flows.sample("bc", velocity, q, obs, key, 5, 2), flows.euler_sample(velocity, obs, noise, 5))
    np.testing.assert_array_equal(flows.sample("qgf", velocity, q, obs, key, 5, 2, w=0.7),
                                  flows.euler_sample(velocity, obs, noise, 5, flows.q_action_grad(q), 0.7))
    np.testing.assert_array_equal(flows.sample("best_of_n", velocity, q, obs, key, 5, 2, n=3),
                                  flows.sample_best_of_n(velocity, q, obs, key, 3, 5, 2))
    with pytest.raises(UsageError, match="unknown sampling method 'fql'"):
        flows.sample("fql", velocity, q, obs, key, 5, 2)


def test_evaluations_per_action_counts():
    assert flows.evaluations_per_action("bc", 10)["total"] == 10
    assert flows.evaluations_per_action("qgf", 10) == {"velocity": 10, "critic": 10, "policy": 0, "total": 20}
    assert flows.evaluations_per_action("best_of_n", 10, n=4) == {"velocity": 40, "critic": 4, "policy": 0, "total": 44}
    assert flows.evaluations_per_action("fql")["total"] == 1
    with pytest.raises(UsageError, match="unknown sampling method"):
        flows.evaluations_per_action("beam")


# ----------------------------------------------------------------------------- IQL and FQL losses
def _constant_params(tree, biases: dict[str, float]):
    zero = jax.tree.map(jnp.zeros_like, tree)
    for name, value in biases.items():
        zero["params"][name]["bias"] = jnp.array([value])
    return zero


def test_iql_losses_match_hand_values():
    # Constant networks (zero weights, chosen output biases): Q = (1, 2), target Q = (1.5, .5), V = 1.
    # V loss: u = min(1.5, .5) - 1 = -.5, weight 1 - tau = .3 -> .075.
    # Q loss: targets r + gamma m V = (1 + .9, 0); rows (1.9-1)^2 + (1.9-2)^2 = .82 and 1 + 4 = 5 -> mean 2.91.
    config = iql.IQLConfig(hidden=(4,), expectile=0.7, discount=0.9)
    init, _ = iql.make_train(config, 1, 2)
    params = init(jax.random.PRNGKey(0))
    params = {"q": _constant_params(params["q"], {"Dense_0": 1.0, "Dense_1": 2.0}),
              "v": _constant_params(params["v"], {"Dense_0": 1.0})}
    target_q = _constant_params(params["q"], {"Dense_0": 1.5, "Dense_1": 0.5})
    batch = {"observations": jnp.zeros((2, 1)), "actions": jnp.ones((2, 2)), "rewards": jnp.array([1.0, 0.0]),
             "masks": jnp.array([1.0, 0.0]), "next_observations": jnp.zeros((2, 1))}
    total, metrics = iql.losses(config, params, target_q, batch)
    assert float(metrics["value_loss"]) == pytest.approx(0.075, rel=1e-5)
    assert float(metrics["q_loss"]) == pytest.approx(2.91, rel=1e-5)
    assert float(total) == pytest.approx(2.985, rel=1e-5)
    assert float(iql.q_value(config, params)(batch["observations"], batch["actions"])[0]) == pytest.approx(1.0)


def test_the_critic_uses_the_expectile_loss_by_hand():
    from longhorizon.core.losses import expectile_loss

    # u = Q - V: weight tau above V, 1 - tau below: (.9 * 4, .1 * 1, 0)
    np.testing.assert_allclose(np.asarray(expectile_loss(jnp.array([2.0, -1.0, 0.0]), 0.9)), [3.6, 0.1, 0.0], rtol=1e-6)


def test_fql_loss_matches_hand_value():
    # mu_omega = (.5, .5), flow target (0, 1), Q = a_0 + a_1 = 1, lambda = 1/|Q| = 1:
    # -1 * 1 + alpha * ((.5)^2 + (.5)^2) / 2 = -1 + 2 * .25 = -.5.
    config = fql.FQLConfig(alpha=2.0)
    policy = lambda obs, z: jnp.full((1, 2), 0.5)  # noqa: E731
    q = lambda obs, a: jnp.sum(a, axis=-1)  # noqa: E731
    total, metrics = fql.loss(config, policy, q, jnp.zeros((1, 1)), jnp.zeros((1, 2)), jnp.array([[0.0, 1.0]]))
    assert float(total) == pytest.approx(-0.5)
    assert float(metrics["distill_loss"]) == pytest.approx(0.25)
    assert float(fql.loss(config, policy, q, jnp.zeros((1, 1)), jnp.zeros((1, 2)), jnp.array([[0.0, 1.0]]),
                          alpha=0.0)[0]) == pytest.approx(-1.0)


# ----------------------------------------------------------------------------- toy task
def test_toy_reward_and_dataset():
    config = toy.ToyConfig()
    best = jnp.asarray(config.centers[0])
    # neighbours (modes 1 and 3) at squared distance .72, the opposite mode at 1.44; 2 sigma_r^2 = .18
    expected = 1.0 + (0.7 + 0.1) * math.exp(-4.0) + 0.4 * math.exp(-8.0)
    assert float(toy.reward(config, best)) == pytest.approx(expected, rel=1e-5)
    assert float(toy.success(config, best)) == 1.0 and float(toy.success(config, -best)) == 0.0
    data = toy.make_dataset(toy.ToyConfig(size=4000, seed=3))
    again = toy.make_dataset(toy.ToyConfig(size=4000, seed=3))
    assert all(np.array_equal(data[k], again[k]) for k in data)
    assert data["actions"].shape == (4000, 2) and data["observations"].shape == (4000, 1)
    assert np.all(data["masks"] == 0) and np.all(data["terminals"] == 1)
    np.testing.assert_allclose(data["rewards"], np.asarray(toy.reward(config, data["actions"])), rtol=1e-6)
    near = np.min(np.linalg.norm(data["actions"][:, None] - np.asarray(config.centers), axis=-1), axis=1) < 0.3
    assert 0.75 < near.mean() < 0.9  # 80% mode data (almost all within 0.3 of a centre), some bad data near too
    # off the data's support: farther than the radius from every dataset action
    support = jnp.asarray([[0.0, 0.0], [1.0, 0.0]])
    np.testing.assert_array_equal(toy.off_support(jnp.asarray([[0.05, 0.0], [0.5, 0.0], [1.0, 0.2]]), support, 0.1),
                                  [0.0, 1.0, 1.0])


@pytest.mark.parametrize("make", [
    lambda: flows.FlowConfig(num_steps=0), lambda: flows.FlowConfig(hidden=()), lambda: flows.FlowConfig(activation="x"),
    lambda: flows.FlowConfig(action_low=1.0, action_high=-1.0), lambda: iql.IQLConfig(expectile=1.5),
    lambda: iql.IQLConfig(discount=2.0), lambda: fql.FQLConfig(alpha=-1.0), lambda: fql.FQLConfig(num_updates=0),
    lambda: toy.ToyConfig(heights=(1.0,)), lambda: toy.ToyConfig(bad_fraction=1.0)])
def test_invalid_configs_are_usage_errors(make):
    with pytest.raises(UsageError):
        make()


def test_iql_without_rewards_is_a_usage_error():
    _, train = iql.make_train(iql.IQLConfig(hidden=(4,), num_updates=1), 1, 2)
    with pytest.raises(UsageError, match="rewards"):
        train(None, jax.random.PRNGKey(0), {"observations": jnp.zeros((3, 1)), "actions": jnp.zeros((3, 2))})


@pytest.mark.slow
def test_nan_in_the_data_is_a_usage_error_naming_the_update():
    init, train = flows.make_train(flows.FlowConfig(hidden=(8,), num_updates=3, batch_size=4), 1, 2)
    data = {"observations": jnp.zeros((4, 1)), "actions": jnp.full((4, 2), jnp.nan)}
    _, losses = flows.train_seeds(init, train, jax.random.split(jax.random.PRNGKey(0), 2), data)
    with pytest.raises(UsageError, match="update 0"):
        flows.check_finite(losses, "flow BC")
    flows.check_finite(jnp.zeros((2, 3)), "flow BC")  # finite losses pass


@pytest.fixture(scope="module")
def trained():
    """Flow BC and the IQL critic on a small toy dataset, with the sizes of ``repro qgf --quick`` (so the
    compiled training programs are shared through the persistent compilation cache)."""
    from longhorizon.repro.qgf import QUICK

    task = toy.ToyConfig(size=QUICK.dataset_size)
    data = {k: jnp.asarray(v) for k, v in toy.make_dataset(task).items()}
    flow_config = flows.FlowConfig(hidden=QUICK.hidden, num_updates=QUICK.flow_updates, num_steps=QUICK.num_steps)
    critic_config = iql.IQLConfig(hidden=QUICK.hidden, num_updates=QUICK.critic_updates)
    keys = jax.random.split(jax.random.PRNGKey(0), QUICK.seeds)
    flow_params, flow_losses = flows.train_seeds(*flows.make_train(flow_config, 1, 2), keys, data)
    critic_params, critic_metrics = flows.train_seeds(*iql.make_train(critic_config, 1, 2), keys, data)
    return task, data, flow_config, critic_config, flow_params, flow_losses, critic_params, critic_metrics


@pytest.mark.slow
def test_a_short_training_fits_the_modes_and_guidance_moves_samples_to_the_best(trained):
    task, data, flow_config, critic_config, flow_params, flow_losses, critic_params, critic_metrics = trained
    assert np.asarray(flow_losses)[:, -50:].mean() < 0.8 * np.asarray(flow_losses)[:, :10].mean()
    assert np.asarray(critic_metrics["q_loss"])[:, -50:].mean() < 0.2 * np.asarray(critic_metrics["q_loss"])[:, :10].mean()
    network = flows.velocity_network(flow_config, 2)
    obs, noise = jnp.zeros((1000, 1)), jax.random.normal(jax.random.PRNGKey(1), (1000, 2))
    untrained = flows.velocity_fn(network, flows.make_train(flow_config, 1, 2)[0](jax.random.PRNGKey(9)))
    centers = np.asarray(task.centers)

    def near_modes(actions):
        return (np.min(np.linalg.norm(np.asarray(actions)[:, None] - centers, axis=-1), axis=1) < 0.25).mean()

    for seed in range(len(flow_losses)):
        params = jax.tree.map(lambda x: x[seed], flow_params)
        velocity = flows.velocity_fn(network, params)
        bc = flows.euler_sample(velocity, obs, noise, flow_config.num_steps)
        shares = np.bincount(np.asarray(toy.mode_of(task, bc)), minlength=4) / 1000
        assert shares.min() > 0.12, shares  # every mode is covered
        before = near_modes(flows.euler_sample(untrained, obs, noise, 10))
        assert near_modes(bc) > max(2 * before, before + 0.1)  # 300 updates: about 0.2 vs 0.04 (the data: 0.8)
        q = iql.q_value(critic_config, jax.tree.map(lambda x: x[seed], critic_params))
        guided = flows.euler_sample(velocity, obs, noise, flow_config.num_steps, flows.q_action_grad(q), 1.0)
        assert float(toy.reward(task, guided).mean()) > float(toy.reward(task, bc).mean()) + 0.05
        assert float(toy.success(task, guided).mean()) > float(toy.success(task, bc).mean())
