"""Epigraph HJB-VI, grid solver, neighbour selection, CBF-QP and the mad-pinn reproduction (issue 21, section 3)."""

import dataclasses
import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

from longhorizon.control import epigraph
from longhorizon.control.epigraph import GridConfig, Navigation, hjb_vi_residual, min_budget, solve_grid
from longhorizon.control import mad_pinn
from longhorizon.errors import UsageError


@dataclasses.dataclass(frozen=True)
class HalfLine:
    """dx/dt = u, |u| <= 1, l = 0, phi(x) = x, g(x) = x: V(t, x, z) = max(x - (T - t) - z, x)."""

    horizon: float = 1.0
    state_dim: int = 1

    def running_cost(self, x):
        return jnp.zeros(x.shape[:-1], x.dtype)

    def terminal_cost(self, x):
        return x[..., 0]

    def constraint(self, x):
        return x[..., 0]

    def hamiltonian(self, x, p, q):
        return -jnp.abs(p[..., 0]) - q * self.running_cost(x)

    def dynamics(self, u):
        return u[..., 0, :]

    def control_set(self, directions=0):
        return np.array([[[-1.0]], [[0.0]], [[1.0]]])


def exact_half_line(t, x, z, horizon=1.0):
    return jnp.maximum(x[0] - (horizon - t) - z, x[0])


def _points(seed=0, n=200):
    rng = np.random.default_rng(seed)
    t, x, z = rng.uniform(0, 1, n), rng.uniform(-2, 2, (n, 1)), rng.uniform(-2, 1, n)
    keep = np.abs(z + (1 - t)) > 1e-2  # away from the kink of the max, where V is not differentiable
    return jnp.asarray(t[keep]), jnp.asarray(x[keep]), jnp.asarray(z[keep])


def test_hjb_vi_residual_vanishes_for_the_exact_value_and_not_for_wrong_ones():
    problem, (t, x, z) = HalfLine(), _points()
    assert float(jnp.max(jnp.abs(hjb_vi_residual(problem, exact_half_line, t, x, z)))) < 1e-6
    ignores_constraint = lambda t, x, z: x[0] - (1.0 - t) - z
    ignores_time = lambda t, x, z: jnp.maximum(x[0] - z, x[0])
    for wrong in (ignores_constraint, ignores_time):
        assert float(jnp.max(jnp.abs(hjb_vi_residual(problem, wrong, t, x, z)))) > 0.5


def test_grid_solver_matches_the_analytic_value_in_one_dimension():
    grid = GridConfig(lower=(-3.0,), upper=(2.0,), points=51, z_range=(-2.0, 1.0), z_points=31, dt=0.1)
    value = solve_grid(HalfLine(), grid)
    x, z = value.points()
    exact = np.maximum(x[:, 0] - 1.0 - z, x[:, 0])
    interior = x[:, 0] >= -2.0  # lookups from x < -2 leave the box within the horizon
    np.testing.assert_allclose(value.values.ravel()[interior], exact[interior], atol=1e-9)


def test_epigraph_identity_against_enumerated_control_sequences():
    """V(x, z) <= 0 iff some safe control sequence costs <= z, and min_budget is that cheapest safe cost."""
    problem = Navigation(agents=1, dim=1, speed=1.0, radius=0.25, horizon=1.5, obstacle=(0.5,))
    dt, h = 0.25, 0.25  # moves land on nodes and budget shifts on z nodes: the DP is exact
    grid = GridConfig(lower=(-3.0,), upper=(3.0,), points=25, z_range=(-1.0, 5.0), z_points=97, dt=dt)
    value = solve_grid(problem, grid)
    xs, zs = value.axes
    starts = np.flatnonzero(np.abs(xs) <= 1.5)
    steps = int(round(problem.horizon / dt))
    for i in starts:
        best_safe = np.inf
        for moves in itertools.product((-h, 0.0, h), repeat=steps):
            path = xs[i] + np.concatenate([[0.0], np.cumsum(moves)])
            if np.max(0.25 - np.abs(path - 0.5)) <= 1e-9:
                best_safe = min(best_safe, dt * np.abs(path[:-1]).sum())
        feasible = value.values[i] <= 1e-5
        np.testing.assert_array_equal(feasible, best_safe <= zs + 1e-5)
        found = min_budget(zs, value.values[i][None] - 1e-5)[0]
        assert found == pytest.approx(best_safe, abs=1e-4) if np.isfinite(best_safe) else np.isinf(found)


def test_free_cost_is_the_grid_value_without_an_obstacle():
    problem = Navigation(agents=1, dim=1, radius=0.25, horizon=1.0, obstacle=(50.0,))
    grid = GridConfig(lower=(-3.0,), upper=(3.0,), points=61, z_range=(-1.0, 3.0), z_points=41, dt=0.1)
    value = solve_grid(problem, grid)
    free = np.asarray(epigraph.free_cost(problem, 0.0, jnp.asarray(value.axes[0][:, None])))
    inside = np.abs(value.axes[0]) <= 2.0
    # the grid's Euler sum is a left Riemann sum: O(dt) above the continuous cost
    np.testing.assert_allclose(min_budget(value.axes[1], value.values)[inside], free[inside], atol=0.06)


def test_pinn_value_has_the_terminal_condition_built_in():
    problem = Navigation(agents=2, radius=0.3)
    x = jnp.array([1.0, -0.5, 0.2, 0.3, 0.1, -0.2])
    for base in ("terminal", "free-cost"):
        config = mad_pinn.PinnConfig(hidden=(8,), box=(2.0,) * 6, base=base)
        params = mad_pinn.ValueNet(config.hidden, config.activation).init(jax.random.PRNGKey(0), jnp.zeros(8))
        for z in (-1.0, 0.0, 2.0):
            expected = max(-z, 0.3 - float(np.hypot(0.1, 0.2)))
            assert float(mad_pinn.pinn_value(problem, config, params, problem.horizon, x, z)) == pytest.approx(expected, abs=1e-6)


def test_deployed_value_is_floored_at_its_lower_bound_and_training_sees_the_raw_network():
    problem = Navigation(agents=2, radius=0.3)
    config = mad_pinn.PinnConfig(hidden=(8,), box=(2.0,) * 6)
    params = mad_pinn.ValueNet(config.hidden, config.activation).init(jax.random.PRNGKey(0), jnp.zeros(8))
    # the last layer's bias pushes the raw network 5 below everything
    params = jax.tree_util.tree_map_with_path(
        lambda path, v: v - 5.0 if jax.tree_util.keystr(path) == "['params']['Dense_0']['bias']" else v, params)
    x = jnp.array([1.0, 0.0, 0.0, 0.5, 0.2, 0.0])  # |e| = 1, 0.5; gap 0.2 < radius: g = 0.1
    for t, z in ((0.0, 0.0), (0.0, 3.0), (0.5, 0.2)):
        tau = 1.0 - t
        c0 = sum(r * tau - tau ** 2 / 2 if r >= tau else r ** 2 / 2 for r in (1.0, 0.5))  # closed form, speed 1
        bound = max(c0 - z, 0.3 - 0.2)
        assert float(mad_pinn.lower_bound(problem, t, x, z)) == pytest.approx(bound, abs=1e-6)
        raw = float(mad_pinn.pinn_value(problem, config, params, t, x, z, raw=True))
        assert raw < bound - 1.0
        assert float(mad_pinn.pinn_value(problem, config, params, t, x, z)) == pytest.approx(bound, abs=1e-6)
        unfloored = dataclasses.replace(config, floor=False)
        assert float(mad_pinn.pinn_value(problem, unfloored, params, t, x, z)) == pytest.approx(raw, abs=1e-6)


def test_bound_check_counts_a_raw_network_below_the_lower_bound():
    problem = Navigation(agents=2, radius=0.3)
    config = mad_pinn.PinnConfig(hidden=(8,), box=(2.0,) * 6)
    params = mad_pinn.ValueNet(config.hidden, config.activation).init(jax.random.PRNGKey(0), jnp.zeros(8))
    below = jax.tree_util.tree_map_with_path(  # the raw network 5 below everything, as above
        lambda path, v: v - 5.0 if jax.tree_util.keystr(path) == "['params']['Dense_0']['bias']" else v, params)
    check = mad_pinn.bound_check(mad_pinn.PinnValue(below, problem, config, np.zeros(1)), points=256)
    assert check["bound_violation_share"] == 1.0 and check["bound_violation_mean"] > 1.0


def test_episode_metrics_by_hand():
    """Three agents, two steps of dt 0.5: agent 0 arrives at step 1, agent 1 touches agent 2 at step 1 and
    arrives at step 2, agent 2 never arrives."""
    config = mad_pinn.DeployConfig(agents=3, steps=2, dt=0.5, goal_tolerance=0.05)
    goals = np.array([[1.0, 0.0], [5.0, 1.0], [9.0, 9.0]])
    path = np.array([[[0.0, 0.0], [5.0, 0.0], [5.0, 2.0]],
                     [[1.0, 0.0], [5.0, 0.5], [5.0, 0.6]],
                     [[1.0, 0.0], [5.0, 1.0], [5.0, 2.0]]])
    controls = np.array([[[2.0, 0.0], [0.0, 1.0], [0.0, -2.8]], [[0.0, 0.0], [0.0, 1.0], [0.0, 2.8]]])
    m = mad_pinn.episode_metrics(path, controls, goals, radius=0.25, config=config)
    assert m["collision_rate"] == pytest.approx(2 / 3)  # agents 1 and 2 came 0.1 apart
    assert m["arrival"] == pytest.approx(2 / 3) and m["success"] == pytest.approx(1 / 3)
    assert m["collision_given_arrival"] == pytest.approx(1 / 2)  # of the arrived agents 0 and 1, agent 1 collided
    assert m["time_to_goal"] == pytest.approx((1 + 2 + 2) / 3 * 0.5)
    assert m["effort"] == pytest.approx((4 * 0.5 + 2 * 0.5 + 2 * 2.8 ** 2 * 0.5) / 3)
    assert m["min_distance"] == pytest.approx(0.1)
    none = mad_pinn.episode_metrics(path[:1].repeat(3, 0) * 0 + 7.0, controls, goals, 0.25, config)
    assert np.isnan(none["collision_given_arrival"]) and none["arrival"] == 0.0


def test_neighbour_selection_keeps_reachable_neighbours_and_picks_the_most_critical():
    positions = jnp.array([[0.0, 0.0], [0.5, 0.0], [3.0, 0.0], [0.0, 0.8], [10.0, 10.0]])
    mask = mad_pinn.candidate_mask(positions, speed=1.0, radius=0.3, lookahead=0.5)  # reach: gap <= 1.3
    assert mask[0].tolist() == [False, True, False, True, False]
    assert not mask[4].any()
    scores = jnp.zeros((5, 5)).at[0, 3].set(1.0).at[0, 2].set(5.0)  # agent 2 scores highest but is out of reach
    neighbour, found = mad_pinn.select_neighbour(scores, mask)
    assert int(neighbour[0]) == 3 and bool(found[0]) and not bool(found[4])
    neighbour, _ = mad_pinn.select_neighbour(scores.at[0, 1].set(2.0), mask)
    assert int(neighbour[0]) == 1


@pytest.mark.slow
def test_cbf_qp_satisfies_its_constraints_and_matches_scipy():
    rng = np.random.default_rng(1)
    positions = jnp.asarray(rng.uniform(-0.6, 0.6, (5, 2)))
    mask = mad_pinn.candidate_mask(positions, 1.0, 0.2, 0.5)
    a, b = mad_pinn.cbf_constraints(positions, mask, 1.0, 0.2, alpha=4.0)
    nominal = mad_pinn.head_to_goal(positions, -positions, 1.0, 0.05)
    u = np.asarray(jax.vmap(mad_pinn.hildreth_qp)(nominal, a, b))
    for i in range(5):
        ai, bi = np.asarray(a[i]), np.asarray(b[i])
        assert np.all(ai @ u[i] <= bi + 1e-6)
        plain = minimize(lambda v: np.sum((v - np.asarray(nominal[i])) ** 2), np.zeros(2), method="SLSQP",
                         constraints=[{"type": "ineq", "fun": lambda v: bi - ai @ v}], options={"ftol": 1e-12})
        np.testing.assert_allclose(u[i], plain.x, atol=1e-4)


def test_bad_configurations_are_refused_with_one_sentence():
    for make in (lambda: Navigation(agents=3), lambda: Navigation(dim=3), lambda: mad_pinn.PinnConfig(curriculum=2.0), lambda: mad_pinn.PinnConfig(base="zero"),
                 lambda: mad_pinn.DeployConfig(agents=1), lambda: GridConfig(lower=(1.0,), upper=(0.0,))):
        with pytest.raises(UsageError):
            make()
    with pytest.raises(UsageError, match="state axes"):
        solve_grid(Navigation(agents=1), GridConfig(lower=(0.0,), upper=(1.0,)))
    with pytest.raises(UsageError, match="box"):
        mad_pinn.train_pinn(Navigation(agents=1), mad_pinn.PinnConfig(box=(1.0,)))


def test_claim_rules_decide_from_the_measured_values():
    from longhorizon.repro import claims as C
    from longhorizon.repro.mad_pinn import judge

    jitter = np.array([-0.01, 0.0, 0.01])

    def verdicts(grid, pinn_collisions, cbf_collisions, pinn_time, cbf_time, success=0.9, ppo_arrival=0.5, cbf_success=0.9):
        dep = {str(n): {"MAD-PINN": {"collision_rate": list(pc + jitter), "time_to_goal": list(pinn_time + jitter),
                                     "success": [success] * 3},
                        "CBF-QP": {"collision_rate": list(cc - jitter), "time_to_goal": list(cbf_time - jitter),
                                   "success": [cbf_success] * 3},
                        "independent PPO": {"collision_rate": list(cc - jitter), "time_to_goal": list(cbf_time - jitter)}}
               for n, pc, cc in zip((8, 16), pinn_collisions, cbf_collisions)}
        L = {"grid_check": grid, "deployment": dep,
             "ppo_training": {"steps": 64, "episode_return": [0.0] * 3, "pair_arrival_rate": [ppo_arrival] * 3}}
        return [c.verdict for c in judge(L)[0]]

    good = {"safe_set_agreement": 0.95, "value_mae": 0.05, "value_range": 2.0}
    assert verdicts(good, (0.05, 0.05), (0.3, 0.4), 5.0, 8.0) == [C.HOLDS] * 5
    bad = verdicts({**good, "safe_set_agreement": 0.7}, (0.3, 0.9), (0.0, 0.0), 9.0, 8.0)
    assert bad == [C.CONTRADICTED] * 5
    assert verdicts(good, (0.05, 0.05), (0.3, 0.4), 5.0, 8.0, success=0.05)[1:] == [C.NO_SIGNAL] * 4  # no agent arrives
    assert verdicts(good, (0.05, 0.05), (0.3, 0.4), 5.0, 8.0, success=0.75)[1:] == [C.NO_SIGNAL] * 4  # below the 0.8 floor
    assert verdicts(good, (0.3, 0.3), (0.0, 0.0), 5.0, 8.0, cbf_success=0.0)[1] == C.NO_SIGNAL  # a deadlocked CBF is safe for free
    assert verdicts(good, (0.05, 0.05), (0.3, 0.4), 5.0, 8.0, ppo_arrival=0.0)[4] == C.NO_SIGNAL  # PPO never arrives


@pytest.mark.slow
def test_quick_reproduction_writes_its_files(tmp_path):
    from longhorizon.repro import mad_pinn as repro

    summary = repro.run(str(tmp_path), quick=True)
    assert {p.name for p in tmp_path.iterdir()} >= {"README.md", "summary.json", "mad_pinn.png"}
    from longhorizon.repro import claims as C

    saved = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(saved) == [] and saved["quick"] is True and saved["claims"] == summary["claims"]
    assert [c["verdict"] for c in saved["claims"]] == [C.QUICK] * 5
    readme = (tmp_path / "README.md").read_text()
    assert "## Verdict" in readme and "longhorizon repro mad-pinn --quick" in readme and "mad_pinn.png" in readme
    assert "| 4 | independent PPO |" in readme and "independent PPO" in summary["deployment"]["4"]
    assert len(summary["ppo_training"]["pair_collision_rate"]) == 1
    assert summary["ppo_training"]["steps"] == 64 and all(np.isfinite(summary["deployment"]["4"]["independent PPO"]["effort"]))


# ---------------------------------------------------------------- the independent-PPO baseline's environment


def _pair_state(position, goal, neighbour, neighbour_goal, time=0):
    from longhorizon.control.pair_navigation import PairState

    return PairState(*(jnp.asarray(v, jnp.float32) for v in (position, goal, neighbour, neighbour_goal)), jnp.int32(time))


def test_pair_navigation_step_by_hand():
    from longhorizon.control.pair_navigation import PairNavigation, PairNavigationParams

    env = PairNavigation(PairNavigationParams(max_steps_in_episode=10))
    key, step = jax.random.PRNGKey(0), jax.jit(env.step)  # one compilation for the four cases
    # free step: action (3, 4) is clipped to the speed disk, (0.6, 0.8); the neighbour heads down to its goal
    state = _pair_state([0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [1.0, -0.5])
    obs, new, reward, terminated, truncated, info = step(key, state, jnp.array([3.0, 4.0]))
    np.testing.assert_allclose(new.position, [0.03, 0.04], atol=1e-6)
    np.testing.assert_allclose(new.neighbour, [1.0, 0.95], atol=1e-6)
    assert float(reward) == pytest.approx(-np.hypot(0.97, 0.04) * 0.05, abs=1e-6)
    assert not bool(terminated) and not bool(truncated) and int(new.time) == 1
    np.testing.assert_allclose(obs, [-0.97, 0.04, 0.0, 1.45, 0.97, 0.91], atol=1e-6)  # (e, e_neighbour, q - p)
    # collision: the neighbour ends 0.2 < radius 0.3 away; -|e| dt - 10, terminated, the next episode starts
    state = _pair_state([0.0, 0.0], [2.0, 0.0], [0.3, 0.0], [0.3, 2.0])
    obs, new, reward, terminated, truncated, info = step(key, state, jnp.array([1.0, 0.0]))
    assert bool(info["collision"]) and bool(terminated) and not bool(info["arrival"])
    assert float(reward) == pytest.approx(-1.95 * 0.05 - 10.0, abs=1e-5)
    assert int(new.time) == 0 and float(jnp.linalg.norm(new.position)) == pytest.approx(2.0, abs=1e-5)
    np.testing.assert_allclose(info["final_obs"][4:], [0.3 - 0.05, 0.05], atol=1e-6)
    # arrival: 0.03 from the goal, full speed is shortened so the step lands on it (no overshoot)
    state = _pair_state([1.97, 0.0], [2.0, 0.0], [-1.0, 1.0], [-1.0, -1.0])
    _, _, reward, terminated, _, info = step(key, state, jnp.array([1.0, 0.0]))
    np.testing.assert_allclose(info["final_obs"][:2], [0.0, 0.0], atol=1e-6)
    assert bool(info["arrival"]) and bool(terminated) and float(reward) == pytest.approx(0.0, abs=1e-5)
    # time limit: truncated, not terminated
    state = _pair_state([0.0, 0.0], [2.0, 0.0], [-1.0, 1.0], [-1.0, -1.0], time=9)
    _, _, _, terminated, truncated, _ = step(key, state, jnp.array([0.0, 1.0]))
    assert bool(truncated) and not bool(terminated)


@pytest.mark.slow
def test_pair_navigation_observation_is_the_pinns_pair_feature_and_reset_is_a_circle_swap():
    from longhorizon.control.pair_navigation import PairNavigation, make_pair_navigation

    env = PairNavigation()
    state = _pair_state([0.5, -1.0], [-2.5, 1.0], [0.2, 0.4], [0.2, -0.1])
    expected = mad_pinn.pair_observations(jnp.stack([state.position, state.neighbour]),
                                          jnp.stack([state.goal, state.neighbour_goal]), 1.5)[0, 1]
    np.testing.assert_allclose(env.observation(env.default_params, state), expected, atol=1e-6)
    assert float(jnp.linalg.norm(expected[:2])) == pytest.approx(1.5, abs=1e-5)  # the far goal is seen at 1.5
    obs, state = env.reset(jax.random.PRNGKey(3))
    for p, g in ((state.position, state.goal), (state.neighbour, state.neighbour_goal)):
        assert float(jnp.linalg.norm(p)) == pytest.approx(2.0, abs=1e-5)
        np.testing.assert_allclose(g, -p, atol=1e-6)
    # heading straight to the goal meets the scripted neighbour at the centre in every episode
    from longhorizon.control.pair_navigation import episode_outcomes

    collided, arrived = episode_outcomes(env, lambda o: -o[:2] / jnp.linalg.norm(o[:2]), jax.random.PRNGKey(1), 16)
    assert bool(collided.all()) and not bool(arrived.any())
    collided, arrived = episode_outcomes(env, lambda o: jnp.zeros(2), jax.random.PRNGKey(1), 16)
    assert not bool(arrived.any()) and float(collided.mean()) < 0.5
    with pytest.raises(UsageError):
        make_pair_navigation(radius=-1.0)
    with pytest.raises(UsageError, match="not a setting"):
        make_pair_navigation(size=3)


def test_policy_controller_maps_the_pair_policy_over_agents_with_the_neighbour_rule():
    from longhorizon.control.pair_navigation import PairNavigation, policy_controller, velocity

    positions = jnp.array([[0.0, 0.0], [0.5, 0.0], [0.0, 0.7], [5.0, 5.0]])
    goals = jnp.array([[2.0, 0.0], [-2.0, 0.0], [0.0, -2.0], [5.0, 7.0]])
    config = mad_pinn.DeployConfig(agents=4)
    policy = lambda o: -2.0 * o[4:6]  # away from the chosen neighbour (twice: clipped by the speed disk)
    score = lambda o: -jnp.linalg.norm(o[4:6])  # the nearest candidate is the most critical
    u = np.asarray(jax.jit(policy_controller(policy, score, PairNavigation(), config))(positions, goals))
    obs = mad_pinn.pair_observations(positions, goals, 1.5)
    for i, j in ((0, 1), (1, 0), (2, 0)):
        np.testing.assert_allclose(u[i], velocity(policy(obs[i, j]), positions[i], goals[i], 1.0, 0.05), atol=1e-6)
    np.testing.assert_allclose(u[0], [-1.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(u[3], [0.0, 1.0], atol=1e-6)  # no candidate within reach: straight to the goal
