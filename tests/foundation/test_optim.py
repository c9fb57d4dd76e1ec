"""The single-pass RAdam against optax.radam and the equations by hand; the shared optimiser builder's
clipping, annealing and epsilon by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from longhorizon.core.optim import make_optimizer, radam


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
    for lr in (0.5, 0.375, 0.25, 0.125, 0.0):
        updates, state = opt.update(grads, state)
        np.testing.assert_allclose(updates["x"], [-0.6 * lr, 0.8 * lr], rtol=1e-6, atol=1e-12)


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
