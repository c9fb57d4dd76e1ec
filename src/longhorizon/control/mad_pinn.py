"""MAD-PINN (Tayal, Singh, Kolathaya & Bansal 2025): a physics-informed epigraph value, deployed decentralised.

1. **PINN** (DeepReach-style). An MLP ``N_theta`` gives the epigraph value (``control.epigraph``) with
   the terminal condition built in::

       V_theta(t, x, z) = B(t, x, z) + (T - t) / T * N_theta(t / T, x / box, z - C0(t, x)),
       B = max(phi(x) - z, g(x))  (``base="terminal"``, DeepReach)   or   max(C0(t, x) - z, g(x))  (``"free-cost"``),

   trained on the HJB-VI residual ``max(g - V, dV/dt + H(x, grad_x V, dV/dz))^2`` at uniformly sampled
   points, with a time curriculum (t drawn from ``[T - c T, T]``, ``c`` growing 0 -> 1 over the first
   ``curriculum`` share of the steps: the solution propagates backward from the known terminal value).
   Both bases equal the terminal value at t = T (``C0(T, x) = 0 = phi``). ``C0`` is the unconstrained
   optimal cost (``epigraph.free_cost``, closed form); the budget enters the network relative to it,
   the region where the value changes sign (**deviation**: the paper feeds z directly). The
   ``"free-cost"`` base is a lower bound of V whose HJB-VI residual is zero almost everywhere (it fails
   only on the kink of the max), so sampled residuals barely see the constraint's effect: it is kept
   as the measured negative result of docs/control.md, the default is DeepReach's.
   **Floor.** The trained network can fall below the value's known lower bound ``max(C0 - z, g)``
   (measured in docs/results/mad-pinn/): there budgets below the unconstrained cost look feasible, the
   controller's ``z*`` sinks to the bottom of its grid where the network extrapolates, and the agents stop
   short of their goals. The value as deployed is therefore ``max(V_theta, C0 - z, g)`` (``floor=True``);
   training fits the raw network (floored, the residual vanishes wherever the bound is active and those
   points would get no gradient: the ``"free-cost"`` base's failure).
2. **Controller.** For an observation x, the smallest budget with ``V(0, x, z) <= 0`` on a grid of z
   (``z*``, the learnt constrained optimal cost), then ``u = argmin_u grad_x V(0, x, z*) . f(x, u)``
   (``Navigation.optimal_control``); each agent applies its own component of the pair's joint control.
3. **Decentralised deployment.** Every agent observes its neighbours and goals. Candidates are the
   neighbours whose forward reachable sets over ``lookahead`` seconds can meet (single integrators:
   ``|p_i - p_j| - radius <= 2 speed lookahead``); among them the most safety-critical one is the
   one with the largest pair value at a generous budget ``V(0, o_ij, C0 + z_safe)`` (the learnt
   safety value). No candidate: straight to the goal. Goals farther than ``local_goal`` are seen at that
   distance (**deviation**, so that the value's training box stays small). **Deviation:** one neighbour (the 2-agent value);
   the paper also trains values on larger reduced systems. **Receding horizon:** the value (horizon T)
   is re-evaluated at t = 0 every control step, and only the first step of the plan is executed.
   The same rule deploys any pair controller (``decentralised_controller``; the independent-PPO baseline
   of ``control.pair_navigation`` uses it with this safety score).

The control-barrier-function baseline: ``u = argmin |u - u_nom|^2`` s.t. ``2 (p_i - p_j) . u >= -alpha h_ij / 2``
(``h_ij = |p_i - p_j|^2 - radius^2``, each agent taking half of the pair's responsibility) for every
candidate neighbour and an inscribed octagon of the speed disk, solved exactly by Hildreth's dual
coordinate ascent (jit, vmapped over agents).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from longhorizon.control.epigraph import Navigation, free_cost, hjb_vi_residual, min_budget, safe_norm
from longhorizon.core.nets import MLPTorso
from longhorizon.errors import UsageError


@dataclasses.dataclass(frozen=True)
class PinnConfig:
    hidden: tuple = (128, 128, 128)
    activation: str = "tanh"
    steps: int = 3000
    batch: int = 1024
    learning_rate: float = 1e-3
    curriculum: float = 0.5  # share of the steps over which the sampled time window grows to [0, T]
    box: tuple = (2.5, 2.5)  # |x_k| <= box_k: the sampled state region, one bound per state coordinate
    z_offset: tuple = (-0.5, 2.0)  # sampled budgets z - C0(t, x)
    base: str = "terminal"  # or "free-cost" (module docstring, 1)
    floor: bool = True  # the value as deployed is max(V_theta, C0 - z, g) (module docstring, 1)
    seed: int = 0

    def __post_init__(self):
        if self.base not in ("terminal", "free-cost"):
            raise UsageError(f"PinnConfig base must be 'terminal' or 'free-cost', got {self.base!r}; pick one of the two.")
        if self.steps < 1 or self.batch < 1 or self.learning_rate <= 0:
            raise UsageError("PinnConfig steps, batch and learning_rate must be positive; pass values > 0.")
        if not 0 <= self.curriculum <= 1:
            raise UsageError(f"PinnConfig curriculum must lie in [0, 1], got {self.curriculum}; it is a share of the steps.")
        if self.z_offset[0] >= self.z_offset[1] or any(b <= 0 for b in self.box):
            raise UsageError("PinnConfig needs z_offset low < high and positive box bounds; fix the sampling region.")


class ValueNet(nn.Module):
    hidden: tuple
    activation: str

    @nn.compact
    def __call__(self, features):
        return nn.Dense(1)(MLPTorso(self.hidden, self.activation)(features))[..., 0]


class PinnValue(NamedTuple):
    params: dict
    problem: Navigation
    config: PinnConfig
    losses: np.ndarray  # [steps] mean squared residual


def lower_bound(problem: Navigation, t, x, z):
    """max(C0(t, x) - z, g(x)): no budget below the unconstrained cost is feasible, and no state inside the
    constraint is safe, so every epigraph value lies above it; t, z [...], x [..., n] -> [...]."""
    return jnp.maximum(free_cost(problem, t, x) - z, problem.constraint(x))


def pinn_value(problem: Navigation, config: PinnConfig, params, t, x, z, raw: bool = False):
    """V_theta(t, x, z) for one point (t, z scalars, x [state_dim]) (module docstring, 1); floored at
    :func:`lower_bound` when ``config.floor`` and not ``raw`` (training fits the raw network)."""
    features = jnp.concatenate([jnp.array([t / problem.horizon]), x / jnp.asarray(config.box),
                                jnp.array([z - free_cost(problem, t, x)])])
    net = ValueNet(config.hidden, config.activation).apply(params, features)
    first = problem.terminal_cost(x) if config.base == "terminal" else free_cost(problem, t, x)
    base = jnp.maximum(first - z, problem.constraint(x))
    value = base + (problem.horizon - t) / problem.horizon * net
    return jnp.maximum(value, lower_bound(problem, t, x, z)) if config.floor and not raw else value


def sample_points(problem: Navigation, config: PinnConfig, key, window):
    """t [B] in [T - window T, T], x [B, n] uniform in the box, z [B] = C0(t, x) + U(z_offset)."""
    kt, kx, kz = jax.random.split(key, 3)
    t = problem.horizon * (1.0 - window * jax.random.uniform(kt, (config.batch,)))
    box = jnp.asarray(config.box)
    x = jax.random.uniform(kx, (config.batch, problem.state_dim), minval=-box, maxval=box)
    z = free_cost(problem, t, x) + jax.random.uniform(kz, (config.batch,), minval=config.z_offset[0],
                                                      maxval=config.z_offset[1])
    return t, x, z


def train_pinn(problem: Navigation, config: PinnConfig, chunks: int = 10, progress: Callable = print) -> PinnValue:
    """Adam on the mean squared HJB-VI residual (module docstring, 1); ``chunks`` progress lines."""
    if len(config.box) != problem.state_dim:
        raise UsageError(f"PinnConfig box has {len(config.box)} bounds but the state has {problem.state_dim} coordinates; "
                         "give one bound per coordinate.")
    key = jax.random.PRNGKey(config.seed)
    net = ValueNet(config.hidden, config.activation)
    params = net.init(key, jnp.zeros(problem.state_dim + 2))
    optimizer = optax.adam(optax.cosine_decay_schedule(config.learning_rate, config.steps, alpha=0.1))
    opt_state = optimizer.init(params)
    ramp = max(1.0, config.curriculum * config.steps)

    def loss_fn(params, t, x, z):
        value = lambda t, x, z: pinn_value(problem, config, params, t, x, z, raw=True)
        return jnp.mean(hjb_vi_residual(problem, value, t, x, z) ** 2)

    def step(carry, index):
        params, opt_state, key = carry
        key, sub = jax.random.split(key)
        t, x, z = sample_points(problem, config, sub, jnp.minimum(1.0, (index + 1) / ramp))
        loss, grads = jax.value_and_grad(loss_fn)(params, t, x, z)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, key), loss

    @jax.jit
    def run_chunk(carry, indices):
        return jax.lax.scan(step, carry, indices)

    carry, losses = (params, opt_state, jax.random.PRNGKey(config.seed + 1)), []
    for chunk in np.array_split(np.arange(config.steps), min(chunks, config.steps)):
        carry, chunk_losses = run_chunk(carry, jnp.asarray(chunk))
        losses.append(np.asarray(chunk_losses))
        progress(f"pinn step {chunk[-1] + 1}/{config.steps}: residual^2 {float(losses[-1].mean()):.3g}")
    return PinnValue(carry[0], problem, config, np.concatenate(losses))


def batched_value(model: PinnValue, raw: bool = False):
    """V(t, x, z) over batches: t [B], x [B, n], z [B] -> [B] (jitted); ``raw``: the network without the floor."""
    return jax.jit(jax.vmap(lambda t, x, z: pinn_value(model.problem, model.config, model.params, t, x, z, raw)))


# ---------------------------------------------------------------- checking a trained value
def grid_check(model: PinnValue, grid_value) -> dict:
    """Value error and safe-set agreement of the PINN against a grid solution of the same problem
    (``control.epigraph.solve_grid``) on the grid nodes inside the PINN's sampled region (budgets ``z`` within
    ``z_offset`` of the unconstrained cost): the value's mean absolute error and range, the share of nodes on the
    same side of 0 (also for the raw network, before the floor), the smallest feasible budget's error per state,
    and how many states the grid finds infeasible and which share of them the PINN does."""
    x, z = grid_value.points()
    exact = grid_value.values.ravel()
    learnt, raw = (np.asarray(batched_value(model, r)(jnp.zeros(len(z)), jnp.asarray(x, jnp.float32), jnp.asarray(z, jnp.float32)))
                   for r in (False, True))
    offset = z - np.asarray(free_cost(model.problem, 0.0, jnp.asarray(x, jnp.float32)))
    inside = (offset >= model.config.z_offset[0]) & (offset <= model.config.z_offset[1])
    budgets_exact = min_budget(grid_value.axes[-1], grid_value.values)
    budgets_learnt = min_budget(grid_value.axes[-1], learnt.reshape(grid_value.values.shape))
    both = np.isfinite(budgets_exact) & np.isfinite(budgets_learnt)
    infeasible = ~np.isfinite(budgets_exact)  # no safe budget on the axis (inside the obstacle, or too far)
    return {"value_mae": float(np.abs(learnt - exact)[inside].mean()), "value_range": float(np.ptp(exact[inside])),
            "safe_set_agreement": float(((learnt <= 0) == (exact <= 0))[inside].mean()),
            "raw_value_mae": float(np.abs(raw - exact)[inside].mean()),
            "raw_safe_set_agreement": float(((raw <= 0) == (exact <= 0))[inside].mean()),
            "budget_mae": float(np.abs(budgets_learnt[both] - budgets_exact[both]).mean()) if both.any() else float("nan"),
            "infeasible_states": int(infeasible.sum()),
            "infeasible_found": float((~np.isfinite(budgets_learnt))[infeasible].mean()) if infeasible.any() else float("nan"),
            "budget_exact": budgets_exact, "budget_learnt": budgets_learnt, "nodes": int(inside.sum())}


def bound_check(model: PinnValue, points: int = 4096) -> dict:
    """The pair value has no grid solution, but V >= max(C0 - z, g) always (:func:`lower_bound`; C0: the cost
    without the constraint): the share of sampled points (t = 0) where the raw network V_theta (before the deployed floor)
    falls below that bound by more than 0.05."""
    t, x, z = sample_points(model.problem, dataclasses.replace(model.config, batch=points), jax.random.PRNGKey(7), 0.0)
    t = jnp.zeros_like(t)
    z = free_cost(model.problem, t, x) + (z - free_cost(model.problem, model.problem.horizon, x))  # same offsets at t = 0
    gap = np.asarray(lower_bound(model.problem, t, x, z) - batched_value(model, raw=True)(t, x, z))
    return {"bound_violation_share": float((gap > 0.05).mean()), "bound_violation_mean": float(np.maximum(gap, 0).mean())}


# ---------------------------------------------------------------- decentralised deployment


@dataclasses.dataclass(frozen=True)
class DeployConfig:
    agents: int = 8
    circle: float = 2.0  # agents start on this circle and swap to the antipodal point
    jitter: float = 0.02  # start perturbation (std), the seed's randomness; 0.05 let two of 32 starts overlap
    dt: float = 0.05
    steps: int = 200
    goal_tolerance: float = 0.05
    lookahead: float = 0.5  # reachable-set horizon of the neighbour selection, seconds
    local_goal: float = 1.5  # goals farther than this are seen at this distance (in the value's training box)
    budgets: int = 24  # z grid of the controller: C0 + linspace(z_offset)
    z_safe: float = 2.0  # budget above C0 at which the pair value ranks neighbours by safety
    cbf_alpha: float = 4.0
    cbf_turn: float = 0.0  # radians the CBF's nominal control turns right while a neighbour is a candidate (deadlock breaking)

    def __post_init__(self):
        if self.agents < 2 or self.steps < 1 or self.dt <= 0 or self.budgets < 2:
            raise UsageError("DeployConfig needs agents >= 2, steps >= 1, dt > 0 and budgets >= 2; fix the scenario.")


def circle_swap(config: DeployConfig, key):
    """Starts on a circle (perturbed) and goals at the antipodes: positions, goals [N, 2]."""
    angles = 2 * jnp.pi * jnp.arange(config.agents) / config.agents
    ring = config.circle * jnp.stack([jnp.cos(angles), jnp.sin(angles)], -1)
    return ring + config.jitter * jax.random.normal(key, ring.shape), -ring


def candidate_mask(positions, speed: float, radius: float, lookahead: float):
    """[N, N] True where j != i and the reachable sets over ``lookahead`` can meet: |p_i - p_j| - radius <= 2 speed lookahead."""
    gaps = safe_norm(positions[:, None, :] - positions[None, :, :])
    return (gaps - radius <= 2 * speed * lookahead) & ~jnp.eye(len(positions), dtype=bool)


def select_neighbour(scores, mask):
    """The most safety-critical candidate per agent: argmax_j scores[i, j] over mask[i]; (index [N], found [N])."""
    masked = jnp.where(mask, scores, -jnp.inf)
    return jnp.argmax(masked, -1), mask.any(-1)


def pair_observations(positions, goals, local_goal: float):
    """o[i, j] = (e_i, e_j, p_j - p_i) [N, N, 6], the pair state of agent i with neighbour j; goal errors
    longer than ``local_goal`` are shortened to it (same heading: beyond the value's horizon only the
    direction to a far goal matters, and the value is trained on a small box)."""
    errors = positions - goals
    errors = errors * jnp.minimum(1.0, local_goal / safe_norm(errors))[:, None]
    n = len(positions)
    return jnp.concatenate([jnp.broadcast_to(errors[:, None], (n, n, 2)), jnp.broadcast_to(errors[None], (n, n, 2)),
                            positions[None] - positions[:, None]], -1)


def head_to_goal(positions, goals, speed: float, dt: float):
    """u = speed * (g - p) / |g - p|, shortened so that one step does not overshoot the goal."""
    to_goal = goals - positions
    distance = safe_norm(to_goal)[:, None]
    return to_goal / distance * jnp.minimum(speed, distance / dt)


def decentralised_controller(pair_control: Callable, safety_score: Callable, speed: float, radius: float,
                             config: DeployConfig):
    """Controls [N, 2] for every agent (module docstring, 3): among the reachable candidates the neighbour
    with the largest ``safety_score(o [6])``, then ``pair_control(o [6]) -> u [2]`` on that pair's
    observation; no candidate: straight to the goal. Any pair controller is deployed by this one rule."""

    def control(positions, goals):
        obs = pair_observations(positions, goals, config.local_goal)
        scores = jax.vmap(jax.vmap(safety_score))(obs)
        neighbour, found = select_neighbour(scores, candidate_mask(positions, speed, radius, config.lookahead))
        chosen = obs[jnp.arange(len(positions)), neighbour]
        nominal = head_to_goal(positions, goals, speed, config.dt)
        u = jnp.where(found[:, None], jax.vmap(pair_control)(chosen), nominal)
        # never overshoot the goal in one step (the value's control is bang-bang at full speed)
        distance = safe_norm(goals - positions)[:, None]
        return u * jnp.minimum(1.0, distance / (speed * config.dt))

    return control


def pinn_safety_score(model: PinnValue, config: DeployConfig):
    """The learnt safety value of a pair observation o [6]: V(0, o, C0(o) + z_safe) (module docstring, 3)."""
    return lambda o: pinn_value(model.problem, model.config, model.params, 0.0, o,
                                free_cost(model.problem, 0.0, o) + config.z_safe)


def pinn_controller(model: PinnValue, config: DeployConfig):
    """Controls [N, 2] for every agent from the pair value (module docstring, 2-3)."""
    problem, value_fn = model.problem, lambda t, x, z: pinn_value(model.problem, model.config, model.params, t, x, z)
    offsets = jnp.linspace(*model.config.z_offset, config.budgets)

    def act(o):
        values = jax.vmap(lambda z: value_fn(0.0, o, z))(free_cost(problem, 0.0, o) + offsets)
        first = jnp.argmax(values <= 0)  # smallest feasible budget; none feasible -> the largest
        z_star = free_cost(problem, 0.0, o) + jnp.where((values <= 0).any(), offsets[first], offsets[-1])
        return problem.optimal_control(jax.grad(value_fn, argnums=1)(0.0, o, z_star))[0]

    return decentralised_controller(act, pinn_safety_score(model, config), problem.speed, problem.radius, config)


def hildreth_qp(u_nominal, a, b, sweeps: int = 200):
    """min_u |u - u_nominal|^2 s.t. a u <= b, by Hildreth's dual coordinate ascent (exact in the limit)::

        u = u_nominal - a^T lambda,   lambda_k <- max(0, lambda_k + (a_k . u - b_k) / |a_k|^2)

    u_nominal [d], a [M, d], b [M] (rows with a_k = 0 are inactive) -> u [d].
    """
    norms = jnp.maximum(jnp.sum(a * a, -1), 1e-12)

    def coordinate(carry, k):
        u, lam = carry
        new = jnp.maximum(0.0, lam[k] + (a[k] @ u - b[k]) / norms[k])
        return (u - a[k] * (new - lam[k]), lam.at[k].set(new)), None

    def sweep(_, carry):
        return jax.lax.scan(coordinate, carry, jnp.arange(len(b)))[0]

    return jax.lax.fori_loop(0, sweeps, sweep, (u_nominal, jnp.zeros(len(b))))[0]


def cbf_constraints(positions, mask, speed: float, radius: float, alpha: float):
    """Per agent the rows (a [N, N + 8, 2], b [N, N + 8]) of a u <= b: one CBF row per candidate
    neighbour (``-2 (p_i - p_j) . u <= alpha h_ij / 2``) and an octagon inscribed in |u| <= speed."""
    diff = positions[:, None, :] - positions[None, :, :]
    h = jnp.sum(diff * diff, -1) - radius ** 2
    a_cbf = jnp.where(mask[..., None], -2 * diff, 0.0)
    b_cbf = jnp.where(mask, alpha * h / 2, 1.0)
    angles = 2 * jnp.pi * jnp.arange(8) / 8
    faces = jnp.stack([jnp.cos(angles), jnp.sin(angles)], -1)
    n = len(positions)
    a = jnp.concatenate([a_cbf, jnp.broadcast_to(faces, (n, 8, 2))], 1)
    b = jnp.concatenate([b_cbf, jnp.full((n, 8), speed * np.cos(np.pi / 8))], 1)
    return a, b


def cbf_controller(problem: Navigation, config: DeployConfig):
    def control(positions, goals):
        mask = candidate_mask(positions, problem.speed, problem.radius, config.lookahead)
        a, b = cbf_constraints(positions, mask, problem.speed, problem.radius, config.cbf_alpha)
        nominal = head_to_goal(positions, goals, problem.speed, config.dt)
        c, s = np.cos(config.cbf_turn), np.sin(config.cbf_turn)
        turned = nominal @ jnp.array([[c, -s], [s, c]], nominal.dtype)  # row vectors: rotation by -cbf_turn
        nominal = jnp.where(mask.any(-1)[:, None], turned, nominal)
        return jax.vmap(hildreth_qp)(nominal, a, b)

    return control


def rollout(control, positions, goals, config: DeployConfig):
    """Euler steps p <- p + dt u; agents within ``goal_tolerance`` of their goal stop.
    Returns positions [steps + 1, N, 2] and controls [steps, N, 2]."""
    def step(p, _):
        arrived = safe_norm(p - goals) <= config.goal_tolerance
        u = jnp.where(arrived[:, None], 0.0, control(p, goals))
        return p + config.dt * u, (p, u)

    final, (path, controls) = jax.lax.scan(step, positions, None, length=config.steps)
    return jnp.concatenate([path, final[None]]), controls


def episode_metrics(path, controls, goals, radius: float, config: DeployConfig) -> dict:
    """Collision rate (share of agents that ever come closer than ``radius - 1e-3`` to another), time to goal
    (first arrival; the episode length when never), success (arrived, never collided), arrival (arrived,
    collided or not), collision given arrival (the collision rate among the agents that arrived: safety of
    agents that did the task; NaN when none arrived), effort (mean over agents of sum_t |u_t|^2 dt), the
    smallest pair distance."""
    path, controls, goals = np.asarray(path), np.asarray(controls), np.asarray(goals)
    gaps = np.linalg.norm(path[:, :, None] - path[:, None], axis=-1) + np.eye(path.shape[1]) * 1e9
    collided = (gaps.min(-1) < radius - 1e-3).any(0)  # 1e-3: a CBF holds pairs exactly at contact
    arrived = np.linalg.norm(path - goals, axis=-1) <= config.goal_tolerance
    reached = arrived.any(0)
    first = np.where(reached, arrived.argmax(0), config.steps)
    return {"collision_rate": float(collided.mean()), "time_to_goal": float(first.mean() * config.dt),
            "success": float((reached & ~collided).mean()), "arrival": float(reached.mean()),
            "collision_given_arrival": float(collided[reached].mean()) if reached.any() else float("nan"),
            "effort": float((controls ** 2).sum((0, 2)).mean() * config.dt),
            "min_distance": float(gaps.min())}
