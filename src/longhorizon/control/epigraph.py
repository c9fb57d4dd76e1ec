"""The epigraph form of state-constrained optimal control, its HJB-VI, and a grid dynamic-programming solver.

The state-constrained problem (SC-OCP) over a horizon ``[t, T]``::

    min_u  C(t, x, u) = int_t^T l(x(s)) ds + phi(x(T))   s.t.  g(x(s)) <= 0 for all s in [t, T].

Its epigraph form (So & Fan 2023; Tayal et al., MAD-PINN 2025) adds a cost budget ``z`` with
``dz/ds = -l(x)`` and solves an unconstrained min-max problem::

    V(t, x, z) = min_u max( C(t, x, u) - z,  max_{s in [t, T]} g(x(s)) ),
    V(t, x, z) <= 0   iff   some control is safe and reaches cost <= z,
    C*(t, x) = min { z : V(t, x, z) <= 0 }    (the constrained optimal cost).

``V`` is the viscosity solution of the HJB variational inequality::

    max( g(x) - V,  dV/dt + H(x, grad_x V, dV/dz) ) = 0,   V(T, x, z) = max(phi(x) - z, g(x)),
    H(x, p, q) = min_u  p . f(x, u) - q l(x).

Agents are single integrators in ``dim`` dimensions, ``dx_i/dt = u_i`` with ``|u_i| <= speed``; the
running cost is the summed distance to the goals, ``l = sum_i |e_i|`` (``e_i`` = position minus goal),
so the Hamiltonian has the closed form ``H = -speed sum_i |coefficient of u_i| - q l`` and the optimal
control is ``u_i = -speed * coefficient / |coefficient|``. Two reductions:

* ``agents=2``: the pair, state ``x = (e_1, e_2, d)`` with ``d = p_2 - p_1`` (``dd/dt = u_2 - u_1``),
  ``g = radius - |d|``: the value each agent of a team uses with a neighbour (``mad_pinn``).
* ``agents=1``: one agent and a neighbour parked at ``obstacle`` (goal frame), ``x = e``,
  ``g = radius - |e - obstacle|``: low-dimensional enough (2-D state + z) for the grid solver.
"""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from scipy import ndimage

from longhorizon.errors import UsageError


def safe_norm(v, axis=-1):
    """|v| with a zero (not NaN) gradient at v = 0."""
    return jnp.sqrt(jnp.sum(v * v, axis=axis) + 1e-12)


@dataclasses.dataclass(frozen=True)
class Navigation:
    """Single-integrator agents reaching goals without collisions (module docstring)."""

    agents: int = 2
    dim: int = 2
    speed: float = 1.0
    radius: float = 0.4  # collision distance between agent centres
    horizon: float = 1.0
    obstacle: tuple = (1.0, 0.0)  # agents=1: the parked neighbour's position in the goal frame

    def __post_init__(self):
        if self.agents not in (1, 2):
            raise UsageError(f"Navigation agents must be 1 or 2, got {self.agents}; use 1 (grid reduction) or 2 (pair).")
        if self.dim not in (1, 2):
            raise UsageError(f"Navigation dim must be 1 or 2, got {self.dim}; agents move on a line or in the plane.")
        if self.speed <= 0 or self.radius <= 0 or self.horizon <= 0:
            raise UsageError("Navigation speed, radius and horizon must be positive; pass values > 0.")
        if self.agents == 1 and len(self.obstacle) != self.dim:
            raise UsageError(f"Navigation obstacle must have {self.dim} coordinates for dim={self.dim}; pass a matching tuple.")

    @property
    def state_dim(self) -> int:
        return self.dim * (1 if self.agents == 1 else 3)

    def _split(self, x):
        """x [..., state_dim] -> (errors [..., agents, dim], d [..., dim] or None)."""
        if self.agents == 1:
            return x[..., None, :], None
        return jnp.stack([x[..., : self.dim], x[..., self.dim: 2 * self.dim]], -2), x[..., 2 * self.dim:]

    def running_cost(self, x):
        """l(x) = sum_i |e_i|; x [..., state_dim] -> [...]."""
        return jnp.sum(safe_norm(self._split(x)[0]), -1)

    def terminal_cost(self, x):
        return jnp.zeros(x.shape[:-1], x.dtype)

    def constraint(self, x):
        """g(x) = radius - distance to the neighbour (<= 0 is safe); [..., state_dim] -> [...]."""
        errors, d = self._split(x)
        gap = errors[..., 0, :] - jnp.asarray(self.obstacle, x.dtype) if d is None else d
        return self.radius - safe_norm(gap)

    def control_coefficients(self, p):
        """The vector multiplying u_i in p . f(x, u): p [..., state_dim] -> [..., agents, dim]."""
        if self.agents == 1:
            return p[..., None, :]
        p1, p2, pd = p[..., : self.dim], p[..., self.dim: 2 * self.dim], p[..., 2 * self.dim:]
        return jnp.stack([p1 - pd, p2 + pd], -2)  # dd/dt = u_2 - u_1

    def hamiltonian(self, x, p, q):
        """H = min_u p . f(x, u) - q l(x) = -speed sum_i |c_i(p)| - q l(x); p [..., state_dim], q [...]."""
        return -self.speed * jnp.sum(safe_norm(self.control_coefficients(p)), -1) - q * self.running_cost(x)

    def optimal_control(self, p):
        """u_i = -speed c_i / |c_i|, the minimiser of the Hamiltonian; p [..., state_dim] -> [..., agents, dim]."""
        c = self.control_coefficients(p)
        return -self.speed * c / safe_norm(c)[..., None]

    def dynamics(self, u):
        """f(x, u) for joint controls u [..., agents, dim] -> [..., state_dim]."""
        if self.agents == 1:
            return u[..., 0, :]
        return jnp.concatenate([u[..., 0, :], u[..., 1, :], u[..., 1, :] - u[..., 0, :]], -1)

    def control_set(self, directions: int = 12) -> np.ndarray:
        """Finite joint controls for the grid solver [M, agents, dim]: each agent still or at full speed."""
        if self.dim == 1:
            single = np.array([[-1.0], [0.0], [1.0]])
        else:
            angles = 2 * np.pi * np.arange(directions) / directions
            single = np.concatenate([np.zeros((1, 2)), np.stack([np.cos(angles), np.sin(angles)], -1)])
        joint = [np.stack(c) for c in itertools.product(single, repeat=self.agents)]
        return self.speed * np.array(joint)


def free_cost(problem, t, x):
    """The optimal cost without the constraint, in closed form: each agent heads straight to its goal,
    so with r = |e_i| and time to go tau = T - t, ``C0 = sum_i (r tau - speed tau^2 / 2 if r >= speed tau
    else r^2 / (2 speed))``; t [...], x [..., state_dim] -> [...]. ``V(t, x, z) >= C0 - z`` always."""
    r = safe_norm(problem._split(x)[0])
    tau = (problem.horizon - jnp.asarray(t))[..., None]
    s = problem.speed
    return jnp.sum(jnp.where(r >= s * tau, r * tau - s * tau ** 2 / 2, r ** 2 / (2 * s)), -1)


def terminal_value(problem, x, z):
    """V(T, x, z) = max(phi(x) - z, g(x)); x [..., n], z [...]."""
    return jnp.maximum(problem.terminal_cost(x) - z, problem.constraint(x))


def hjb_vi_residual(problem, value_fn, t, x, z):
    """max(g(x) - V, dV/dt + H(x, grad_x V, dV/dz)) at a batch of points.

    ``value_fn(t, x, z) -> V`` for one point (t scalar, x [n], z scalar); t [B], x [B, n], z [B] -> [B].
    Zero wherever ``value_fn`` solves the HJB-VI (and is differentiable there).
    """
    def one(t, x, z):
        v, (v_t, v_x, v_z) = jax.value_and_grad(value_fn, argnums=(0, 1, 2))(t, x, z)
        return jnp.maximum(problem.constraint(x) - v, v_t + problem.hamiltonian(x, v_x, v_z))

    return jax.vmap(one)(t, x, z)


@dataclasses.dataclass(frozen=True)
class GridConfig:
    """The grid for ``solve_grid``: a box per state coordinate, a budget range, and the time step."""

    lower: tuple = (-2.5, -2.5)
    upper: tuple = (2.5, 2.5)
    points: int = 41  # per state coordinate
    z_range: tuple = (0.0, 3.0)
    z_points: int = 31
    dt: float = 0.025
    directions: int = 12  # full-speed headings per agent (plus standing still)

    def __post_init__(self):
        if len(self.lower) != len(self.upper) or any(lo >= hi for lo, hi in zip(self.lower, self.upper)):
            raise UsageError("GridConfig lower and upper must have equal lengths with lower < upper; fix the box.")
        if self.points < 3 or self.z_points < 3 or self.dt <= 0 or self.z_range[0] >= self.z_range[1]:
            raise UsageError("GridConfig needs points >= 3, z_points >= 3, dt > 0 and z_range low < high; fix the grid.")

    def axes(self) -> list[np.ndarray]:
        return [np.linspace(lo, hi, self.points) for lo, hi in zip(self.lower, self.upper)] + \
            [np.linspace(*self.z_range, self.z_points)]


@dataclasses.dataclass(frozen=True)
class GridValue:
    axes: list  # state axes then the z axis, each [P]
    values: np.ndarray  # V(0, x, z) on the grid [P_1, ..., P_n, P_z], float64

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """Every grid node as (x [K, n], z [K]) in the order of ``values.ravel()``."""
        mesh = np.stack(np.meshgrid(*self.axes, indexing="ij"), -1).reshape(-1, len(self.axes))
        return mesh[:, :-1], mesh[:, -1]


def solve_grid(problem, grid: GridConfig) -> GridValue:
    """Discrete-time dynamic programming for the epigraph value, float64, multilinear interpolation::

        V_N(x, z) = max(phi(x) - z, g(x)),
        V_k(x, z) = max( g(x), min_u V_{k+1}(x + dt f(x, u), z - dt l(x)) ),   N = round(T / dt),

    over the finite controls ``problem.control_set``. State lookups outside the box clamp to its edge (so
    values near the box edges are less accurate); budgets below the z axis extend it by
    ``V(x, z) = V(x, z_lo) + z_lo - z`` (exact once the cost term C - z is the active one, as it is for
    low enough z). Returns V_0 = V(0, x, z).
    """
    if len(grid.lower) != problem.state_dim:
        raise UsageError(f"the grid has {len(grid.lower)} state axes but the problem's state has {problem.state_dim}; "
                         "give one box bound per state coordinate.")
    axes = grid.axes()
    steps = int(round(problem.horizon / grid.dt))
    with jax.enable_x64(True):
        x, z = GridValue(axes, np.zeros(0)).points()
        cost = np.asarray(problem.running_cost(jnp.asarray(x)), np.float64)
        g = np.asarray(problem.constraint(jnp.asarray(x)), np.float64)
        moves = np.asarray(problem.dynamics(jnp.asarray(problem.control_set(grid.directions))), np.float64)
        values = np.asarray(terminal_value(problem, jnp.asarray(x), jnp.asarray(z)), np.float64)
    shape = tuple(len(a) for a in axes)
    origin = np.array([a[0] for a in axes])
    spacing = np.array([a[1] - a[0] for a in axes])
    z_next = z - grid.dt * cost
    overdraft = np.maximum(axes[-1][0] - z_next, 0.0)
    for _ in range(steps):
        table = values.reshape(shape)
        best = np.full(len(x), np.inf)
        for move in moves:
            target = np.concatenate([x + grid.dt * move, z_next[:, None]], -1)
            coords = ((target - origin) / spacing).T
            best = np.minimum(best, ndimage.map_coordinates(table, coords, order=1, mode="nearest") + overdraft)
        values = np.maximum(g, best)
    return GridValue(axes, values.reshape(shape))


def min_budget(z_axis: np.ndarray, values: np.ndarray) -> np.ndarray:
    """C*(x) = min{z : V(x, z) <= 0} from values [..., P_z] on an increasing z axis (linear between nodes);
    inf where V > 0 on the whole axis."""
    nonpositive = values <= 0
    first = np.argmax(nonpositive, -1)
    found = nonpositive.any(-1)
    lo = np.clip(first - 1, 0, None)
    v_lo, v_hi = np.take_along_axis(values, lo[..., None], -1)[..., 0], np.take_along_axis(values, first[..., None], -1)[..., 0]
    frac = np.where((first > 0) & (v_lo != v_hi), v_lo / np.where(v_lo != v_hi, v_lo - v_hi, 1.0), 0.0)
    z = z_axis[lo] + frac * (z_axis[first] - z_axis[lo])
    return np.where(found, np.where(first == 0, z_axis[0], z), np.inf)
