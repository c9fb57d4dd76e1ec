"""The single-pass RAdam against optax.radam, and its first step against the equations by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from longhorizon.core.optim import radam


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
