"""The single-pass RAdam against optax.radam and the equations by hand; the shared optimiser builder's
clipping, annealing and epsilon by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jax.flatten_util import ravel_pytree

from longhorizon.core.optim import flat_step, init_flat, learning_rate_at, make_optimizer, radam


@pytest.mark.slow
def test_radam_matches_optax_across_the_rectification_threshold():
    # rho_t >= 5 first holds at t = 6 for b2 = 0.999: 30 steps cover both branches.
    schedule = optax.linear_schedule(1e-2, 1e-3, 30)
    params = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4), "b": jnp.arange(5.0)}
    ours, reference = radam(schedule), optax.radam(schedule)
    s_ours, s_ref = ours.init(params), reference.init(params)
    p_ours = p_ref = params
    for step in range(30):
        grads = jax.tree.map(lambda x: jax.random.normal(jax.random.PRNGKey(step), x.shape), params)
        u, s_ours = ours.update(grads, s_ours, p_ours)
        p_ours = optax.apply_updates(p_ours, u)
        u, s_ref = reference.update(grads, s_ref, p_ref)
        p_ref = optax.apply_updates(p_ref, u)
        for a, b in zip(jax.tree.leaves(p_ours), jax.tree.leaves(p_ref)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_radam_first_step_is_momentum_sgd_by_hand():
    # t = 1: rho_1 = rho_inf - 2 b2 / (1 - b2) = 1 < 5, so u = -lr * m_hat = -lr * g.
    opt = radam(0.5)
    grads = {"x": jnp.array([2.0, -4.0])}
    updates, state = opt.update(grads, opt.init(grads))
    np.testing.assert_allclose(updates["x"], [-1.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(state.mu["x"], [0.2, -0.4], rtol=1e-6)
    np.testing.assert_allclose(state.nu["x"], [0.004, 0.016], rtol=1e-5)


def test_make_optimizer_clips_the_global_norm_then_anneals_linearly_to_zero():
    # RAdam's first 5 steps are momentum SGD (rho_t < 5), and with a constant gradient m_hat = g:
    # u_t = -lr_t * clip(g), clip([3, -4]) = [3, -4] / 5 (norm 5 > 1), lr_t = 0.5 * max(0, 1 - t/4).
    opt = make_optimizer(0.5, max_grad_norm=1.0, kind="radam", anneal_steps=4)
    grads = {"x": jnp.array([3.0, -4.0])}
    state = opt.init(grads)
    for t, lr in enumerate((0.5, 0.375, 0.25, 0.125, 0.0)):
        updates, state = opt.update(grads, state)
        np.testing.assert_allclose(updates["x"], [-0.6 * lr, 0.8 * lr], rtol=1e-6, atol=1e-12)
        assert float(learning_rate_at(0.5, t, anneal_steps=4)) == pytest.approx(lr)  # the rate PPO logs
    assert float(learning_rate_at(0.5, 9, anneal_steps=4)) == 0.0 and float(learning_rate_at(0.5, 9)) == 0.5


def test_make_optimizer_adam_passes_epsilon_and_keeps_a_constant_rate():
    # First Adam step: u = -lr * g / (|g| + eps). With g = 1e-5 and eps = 1e-5 that is -lr / 2.
    grads = {"x": jnp.array([1e-5])}
    for eps, expected in ((1e-5, -0.5), (1e-8, -1e-5 / (1e-5 + 1e-8))):
        opt = make_optimizer(1.0, max_grad_norm=10.0, kind="adam", eps=eps)
        state = opt.init(grads)
        for _ in range(3):  # no annealing: with a constant gradient every step is the same
            updates, state = opt.update(grads, state)
            np.testing.assert_allclose(updates["x"], [expected], rtol=1e-4)  # float32 moments


def test_make_optimizer_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="adam"):
        make_optimizer(1e-3, 1.0, kind="sgd")


def test_flat_step_by_hand_with_sgd_and_clipping():
    # loss = 0.5 ||w||^2 + b . [1, 2]: grads [3, 0] and [1, 2] at w = [3, 0]; global norm sqrt(14), clipped to 1:
    # step = -lr g / sqrt(14)
    params = {"w": jnp.array([3.0, 0.0]), "b": jnp.array([0.0, 0.0])}
    loss = lambda p, scale: (scale * (0.5 * jnp.sum(p["w"] ** 2) + p["b"] @ jnp.array([1.0, 2.0])), scale)  # noqa: E731
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.5))
    flat, unravel = ravel_pytree(params)
    flat, _, aux = flat_step(optimizer, loss, unravel)(flat, init_flat(optimizer, params), 1.0)
    new = unravel(flat)
    g_norm = np.sqrt(9.0 + 1.0 + 4.0)
    np.testing.assert_allclose(new["w"], [3.0 - 0.5 * 3.0 / g_norm, 0.0], rtol=1e-6)
    np.testing.assert_allclose(new["b"], [-0.5 * 1.0 / g_norm, -0.5 * 2.0 / g_norm], rtol=1e-6)
    assert aux == 1.0


@pytest.mark.parametrize("kind", ["adam", "radam"])
def test_flat_step_equals_stepping_the_weight_tree(kind):
    optimizer = make_optimizer(1e-2, 0.5, kind, anneal_steps=20)
    params = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4), "b": jnp.arange(4.0)}
    x = jax.random.normal(jax.random.PRNGKey(0), (8, 3))
    loss = lambda p, x: (jnp.mean(jnp.tanh(x @ p["w"] + p["b"]) ** 2), None)  # noqa: E731
    flat, unravel = ravel_pytree(params)
    step, flat_state = jax.jit(flat_step(optimizer, loss, unravel)), init_flat(optimizer, params)
    tree, tree_state = params, optimizer.init(params)
    for _ in range(20):
        flat, flat_state, _ = step(flat, flat_state, x)
        grads = jax.grad(lambda p: loss(p, x)[0])(tree)
        updates, tree_state = optimizer.update(grads, tree_state, tree)
        tree = optax.apply_updates(tree, updates)
    for a, b in zip(jax.tree.leaves(unravel(flat)), jax.tree.leaves(tree)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
