r"""A networked iterated Prisoner's Dilemma as a pure-JAX multi-agent environment.

``N`` agents sit on the nodes of a graph: a ``side x side`` lattice torus with von Neumann neighbours
(degree 4), a random ``degree``-regular graph or an Erdos-Renyi graph ``G(N, p)`` (both generated
deterministically from ``graph_seed``). Every step each agent picks C (action 0) or D (action 1) and
plays it against all its neighbours; its reward is the *mean* payoff over its neighbours

.. math::
    r_i = \frac{1}{|\mathcal N_i|} \sum_{j \in \mathcal N_i} U[a_i, a_j], \qquad
    U = \begin{pmatrix} R & S \\ T & P \end{pmatrix} = \begin{pmatrix} 1 & -D_r \\ 1 + D_g & 0 \end{pmatrix},

the dilemma-strength parametrisation (Wang et al. 2015): ``dg`` is the gamble-intending strength
(temptation T = 1 + Dg), ``dr`` the risk-averting one (sucker's payoff S = -Dr); both > 0 is a
Prisoner's Dilemma, and larger values are a harsher game. Mutual cooperation (R = 1) is payoff dominant.

Observations are local, ``[2]`` per agent: own last action is C (1.0 / 0.0) and the fraction of
neighbours that cooperated last step. An episode lasts ``max_steps`` steps (a time limit, not a
termination); the first "last actions" are drawn C with probability 1/2.

Two interfaces over the same arrays:

* the JaxMARL conventions: ``agents`` (names), ``observation_spaces`` / ``action_spaces`` (dicts),
  ``reset(key) -> (obs dict, state)``, ``step(key, state, actions dict) -> (obs, state, rewards,
  dones, infos)`` with ``dones["__all__"]`` and an automatic reset at the end of an episode;
* the array fast path for hundreds or thousands of agents: ``reset_arrays`` / ``step_arrays`` with all
  agents on one leading axis (obs ``[N, 2]``, actions ``[N]``, rewards ``[N]``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from longhorizon.errors import UsageError

COOPERATE, DEFECT = 0, 1
GRAPHS = ("lattice", "random_regular", "erdos_renyi")
OBS_DIM = 2


@dataclasses.dataclass(frozen=True)
class DilemmaConfig:
    graph: str = "lattice"
    side: int = 10  # lattice: N = side ** 2
    num_agents: int = 100  # random graphs
    degree: int = 4  # random_regular
    edge_prob: float = 0.04  # erdos_renyi
    graph_seed: int = 0
    dg: float = 0.2  # T = 1 + dg
    dr: float = 0.2  # S = -dr
    max_steps: int = 100

    def __post_init__(self):
        if self.graph not in GRAPHS:
            raise UsageError(f"graph '{self.graph}' is unknown; choose one of: {', '.join(GRAPHS)}.")
        if self.graph == "lattice" and self.side < 3:
            raise UsageError(f"a lattice torus needs side >= 3 (got {self.side}); pass side=3 or more.")
        if self.graph != "lattice" and self.num_agents < 2:
            raise UsageError(f"a random graph needs num_agents >= 2 (got {self.num_agents}); pass 2 or more.")
        if self.graph == "random_regular" and not (0 < self.degree < self.num_agents and self.num_agents * self.degree % 2 == 0):
            raise UsageError(f"a {self.degree}-regular graph on {self.num_agents} nodes does not exist; "
                             "pass 0 < degree < num_agents with num_agents * degree even.")
        if self.graph == "erdos_renyi" and not 0.0 < self.edge_prob <= 1.0:
            raise UsageError(f"edge_prob must lie in (0, 1] (got {self.edge_prob}); pass e.g. edge_prob=0.04.")
        if self.dg < 0 or self.dr < 0:
            raise UsageError(f"dilemma strengths must not be negative (got dg={self.dg}, dr={self.dr}); pass dg, dr >= 0.")
        if self.max_steps < 1:
            raise UsageError(f"max_steps must be positive (got {self.max_steps}); pass e.g. max_steps=100.")

    @property
    def size(self) -> int:
        return self.side ** 2 if self.graph == "lattice" else self.num_agents


def payoff_matrix(dg, dr) -> jax.Array:
    """``U[a_i, a_j]`` ``[2, 2]`` (rows: own action C, D): ((R, S), (T, P)) = ((1, -dr), (1 + dg, 0))."""
    dg, dr = jnp.asarray(dg, jnp.float32), jnp.asarray(dr, jnp.float32)
    return jnp.stack([jnp.stack([jnp.ones_like(dg), -dr]), jnp.stack([1.0 + dg, jnp.zeros_like(dg)])])


# ----------------------------------------------------------------------------- graphs
def lattice_neighbours(side: int) -> np.ndarray:
    """``[side**2, 4]``: node ``r * side + c``'s up, down, left, right neighbours on the torus."""
    r, c = np.divmod(np.arange(side * side), side)
    return np.stack([((r - 1) % side) * side + c, ((r + 1) % side) * side + c,
                     r * side + (c - 1) % side, r * side + (c + 1) % side], axis=1)


def random_regular_neighbours(n: int, degree: int, seed: int, tries: int = 10_000) -> np.ndarray:
    """``[n, degree]``: a simple ``degree``-regular graph by the configuration model (pair ``n * degree``
    stubs uniformly at random; redraw when a self-loop or a double edge appears)."""
    rng = np.random.default_rng(seed)
    stubs = np.repeat(np.arange(n), degree)
    for _ in range(tries):
        a, b = rng.permutation(stubs).reshape(-1, 2).T
        edges = np.sort(np.stack([a, b], 1), axis=1)
        if np.all(a != b) and len(np.unique(edges, axis=0)) == len(edges):
            return _adjacency_lists(n, edges, degree)[0]
    raise UsageError(f"no simple {degree}-regular graph on {n} nodes was drawn in {tries} tries; pass a smaller degree.")


def erdos_renyi_neighbours(n: int, edge_prob: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``G(n, p)``: each pair is an edge with probability ``p``; neighbour lists padded to the largest
    degree, ``([n, K] indices, [n, K] mask)`` (padding points at the node itself, mask False)."""
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random((n, n)) < edge_prob, k=1)
    edges = np.argwhere(upper)
    degrees = np.bincount(edges.ravel(), minlength=n)
    if degrees.min() == 0:
        raise UsageError(f"the Erdos-Renyi graph (n={n}, p={edge_prob}, seed={seed}) has an isolated node; "
                         "raise edge_prob or change graph_seed.")
    return _adjacency_lists(n, edges, int(degrees.max()))


def _adjacency_lists(n: int, edges: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    both = np.concatenate([edges, edges[:, ::-1]])
    both = both[np.lexsort((both[:, 1], both[:, 0]))]
    neighbours = np.tile(np.arange(n)[:, None], (1, width))
    mask = np.zeros((n, width), bool)
    slot = np.arange(len(both)) - np.searchsorted(both[:, 0], both[:, 0])
    neighbours[both[:, 0], slot], mask[both[:, 0], slot] = both[:, 1], True
    return neighbours, mask


# ----------------------------------------------------------------------------- environment
@struct.dataclass
class DilemmaState:
    last_actions: jax.Array  # [N] int32, 0 = C, 1 = D
    time: jax.Array  # [] int32, steps taken in this episode
    payoff: jax.Array  # [2, 2] U[a_i, a_j] (a leaf, so a sweep over dilemma strengths is one vmapped program)


class NetworkedDilemma:
    """The environment (module docstring); ``neighbours`` ``[N, K]`` and ``mask`` ``[N, K]`` hold the graph.
    An explicit graph (``neighbours`` and optionally ``mask``) replaces the configured one."""

    def __init__(self, config: DilemmaConfig = DilemmaConfig(), neighbours=None, mask=None):
        self.config = config
        n = config.size if neighbours is None else len(neighbours)
        if neighbours is not None:
            neighbours = np.asarray(neighbours)
            mask = np.ones(neighbours.shape, bool) if mask is None else np.asarray(mask, bool)
            if neighbours.ndim != 2 or mask.shape != neighbours.shape or not mask.any(1).all():
                raise UsageError("an explicit graph needs neighbours [N, K] and a mask of the same shape with "
                                 "at least one neighbour per node; pass both as arrays of that shape.")
        elif config.graph == "lattice":
            neighbours, mask = lattice_neighbours(config.side), np.ones((n, 4), bool)
        elif config.graph == "random_regular":
            neighbours = random_regular_neighbours(n, config.degree, config.graph_seed)
            mask = np.ones_like(neighbours, bool)
        else:
            neighbours, mask = erdos_renyi_neighbours(n, config.edge_prob, config.graph_seed)
        self.neighbours, self.mask = jnp.asarray(neighbours, jnp.int32), jnp.asarray(mask)
        self.degree = jnp.asarray(mask.sum(1), jnp.float32)  # [N]
        self.num_agents = n
        self.agents = [f"agent_{i}" for i in range(n)]
        from gymnax.environments import spaces

        self.observation_spaces = {a: spaces.Box(0.0, 1.0, (OBS_DIM,), jnp.float32) for a in self.agents}
        self.action_spaces = {a: spaces.Discrete(2) for a in self.agents}

    # --- array fast path: every agent on one leading axis
    def observe(self, last_actions: jax.Array) -> jax.Array:
        """``[N, 2]``: (own last action is C, fraction of neighbours that cooperated)."""
        cooperated = (last_actions == COOPERATE).astype(jnp.float32)
        neighbour_share = (cooperated[self.neighbours] * self.mask).sum(1) / self.degree
        return jnp.stack([cooperated, neighbour_share], axis=1)

    def rewards(self, actions: jax.Array, payoff: jax.Array) -> jax.Array:
        """``[N]``: r_i = mean over neighbours j of U[a_i, a_j]."""
        games = payoff[actions[:, None], actions[self.neighbours]]  # [N, K]
        return (games * self.mask).sum(1) / self.degree

    def reset_arrays(self, key: jax.Array, payoff: jax.Array | None = None) -> tuple[jax.Array, DilemmaState]:
        payoff = payoff_matrix(self.config.dg, self.config.dr) if payoff is None else jnp.asarray(payoff, jnp.float32)
        last = jax.random.bernoulli(key, 0.5, (self.num_agents,)).astype(jnp.int32)
        return self.observe(last), DilemmaState(last, jnp.zeros((), jnp.int32), payoff)

    def step_arrays(self, key: jax.Array, state: DilemmaState, actions: jax.Array):
        """``(obs [N, 2], state, rewards [N], done [], info)``; after the last step of an episode the
        returned obs and state are a fresh episode's and ``info["final_obs"]`` holds the true last obs."""
        actions = jnp.asarray(actions, jnp.int32)
        rewards = self.rewards(actions, state.payoff)
        time = state.time + 1
        done = time >= self.config.max_steps
        final_obs = self.observe(actions)
        reset_obs, reset_state = self.reset_arrays(key, state.payoff)
        next_state = jax.tree.map(lambda fresh, kept: jnp.where(done, fresh, kept), reset_state,
                                  DilemmaState(actions, time, state.payoff))
        obs = jnp.where(done, reset_obs, final_obs)
        info = {"final_obs": final_obs, "cooperation": jnp.mean(actions == COOPERATE), "truncated": done}
        return obs, next_state, rewards, done, info

    # --- JaxMARL conventions: dicts keyed by agent name
    def reset(self, key: jax.Array, payoff: jax.Array | None = None) -> tuple[dict, DilemmaState]:
        obs, state = self.reset_arrays(key, payoff)
        return self._to_dict(obs), state

    def step(self, key: jax.Array, state: DilemmaState, actions: dict):
        obs, state, rewards, done, info = self.step_arrays(key, state, jnp.stack([actions[a] for a in self.agents]))
        dones = {a: done for a in self.agents} | {"__all__": done}
        return self._to_dict(obs), state, self._to_dict(rewards), dones, info

    def _to_dict(self, array: jax.Array) -> dict:
        return {a: array[i] for i, a in enumerate(self.agents)}
