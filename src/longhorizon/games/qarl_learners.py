"""Temperature-conditioned learners on the wind corridor: RARL, a linear schedule and QARL's teacher.

All three train the same two agents from samples (one environment per seed, seeds vmapped) for the
same number of steps; they differ only in how the adversary's temperature ``tau`` is chosen:

* ``rarl``:   ``tau = tau_min`` (a near fully rational adversary) from the first step;
* ``linear``: ``tau`` falls linearly from the teacher's initial mean to ``tau_min`` over
  ``linear_fraction`` of the steps (held per chunk), then stays there;
* ``qarl``:   each episode draws ``tau ~ Gamma(shape, scale)`` (clipped to ``[tau_min, tau_max]``); after each chunk the teacher
  (:func:`longhorizon.games.qarl.teacher_step`) moves ``(shape, scale)`` toward the target by a
  KL-constrained step, only if the chunk's mean discounted return reached the threshold.

Agents. Both are soft Q-learners whose values are a function of the temperature: a tabular base plus a
piecewise-linear correction in ``log tau``, ``Q(tau, s, .) = sum_j h_j(tau) W[j, s, .]`` with
``h_0 = 1`` and ``h_1..K`` the hat functions on a log-spaced grid of ``tau``. The protagonist acts by
``softmax(Q_p / alpha_p)`` and learns ``Q_p(s, a) <- r + gamma alpha_p logsumexp(Q_p(s') / alpha_p)``; the
adversary acts by ``softmax(-Q_a / tau)`` and learns ``Q_a(s, b) <- r - gamma tau logsumexp(-Q_a(s') / tau)``
(each agent's own entropy bonus only). Both also take a uniform action with probability ``exploration``.
Updates alternate as in RARL: ``alternate`` steps of protagonist updates, then as many of adversary
updates (both act throughout). Semi-gradient TD: ``W[j, s, a] += lr h_j delta``.

Evaluation (exact, float64): the protagonist's policy at ``tau_eval`` (the target's mean) against a
best-responding adversary (:func:`longhorizon.games.qarl.worst_case_value`) after every chunk.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.games.qarl import MOVES, WINDS, GammaTeacher, WindCorridor, teacher_step, worst_case_value

CURRICULA = ("rarl", "linear", "qarl")


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    curriculum: str = "qarl"
    steps: int = 60_000
    chunk: int = 2_000  # steps between teacher updates and evaluations
    alternate: int = 500  # steps per protagonist / adversary update phase
    learning_rate: float = 0.1
    protagonist_temperature: float = 0.005
    exploration: float = 0.1
    time_limit: int = 60
    temperature_min: float = 0.01
    temperature_max: float = 3.0
    temperature_knots: int = 5
    linear_fraction: float = 0.6
    teacher: GammaTeacher = GammaTeacher()

    def __post_init__(self) -> None:
        if self.curriculum not in CURRICULA:
            raise UsageError(f"unknown curriculum '{self.curriculum}'; choose one of: {', '.join(CURRICULA)}.")
        if self.steps < self.chunk or self.steps % self.chunk:
            raise UsageError(f"steps ({self.steps}) must be a positive multiple of chunk ({self.chunk}); round steps to one.")
        if not 0 < self.temperature_min < self.temperature_max:
            raise UsageError(f"need 0 < temperature_min < temperature_max, got {self.temperature_min} and "
                             f"{self.temperature_max}; pass an increasing pair.")
        if not 0.0 <= self.exploration < 1.0:
            raise UsageError(f"exploration must be in [0, 1), got {self.exploration}; pass e.g. 0.1.")
        for name in ("learning_rate", "protagonist_temperature"):
            if not getattr(self, name) > 0:
                raise UsageError(f"LearnerConfig.{name} must be > 0, got {getattr(self, name)}; pass a positive number.")
        if self.temperature_knots < 2:
            raise UsageError(f"temperature_knots must be >= 2, got {self.temperature_knots}; pass e.g. 5.")
        if not 0 < self.linear_fraction <= 1:
            raise UsageError(f"linear_fraction must be in (0, 1], got {self.linear_fraction}; pass e.g. 0.6.")

    @property
    def temperature_eval(self) -> float:
        return float(np.clip(self.teacher.target_shape * self.teacher.target_scale, self.temperature_min, self.temperature_max))


def temperature_features(tau, config: LearnerConfig, xp=jnp):
    """``h(tau) [1 + K]``: a constant and the hat functions of ``log tau`` on ``K`` log-spaced knots
    (they sum to 1 on ``[tau_min, tau_max]``; ``tau`` is clipped to that range). ``xp``: jax.numpy or numpy."""
    knots = xp.linspace(np.log(config.temperature_min), np.log(config.temperature_max), config.temperature_knots)
    z = xp.log(xp.clip(tau, config.temperature_min, config.temperature_max))
    hats = xp.clip(1.0 - xp.abs(z - knots) / (knots[1] - knots[0]), 0.0, 1.0)
    return xp.concatenate([xp.ones(1), hats])


def _draw(u, probs):
    """Inverse-CDF draw from ``probs [n]`` with one uniform ``u`` (one random call per step keeps the compile small)."""
    return jnp.minimum(jnp.sum(jnp.cumsum(probs) <= u), probs.shape[-1] - 1)


def _act(u_explore, u_draw, logits, exploration):
    """A uniform action with probability ``exploration``, else one drawn from ``softmax(logits)``."""
    probs = jax.nn.softmax(logits)
    return _draw(u_draw, jnp.where(u_explore < exploration, jnp.full_like(probs, 1.0 / probs.shape[-1]), probs))


def _chunk(carry, taus, config: LearnerConfig, game: WindCorridor):
    """``config.chunk`` steps of one run. ``taus [chunk]``: the temperatures of the episodes that start in
    the chunk, in order (drawn on the host). Returns the carry with (sum, count) of the discounted returns
    of the episodes that ended in the chunk."""
    arrays = game.arrays()
    P, reward, terminal = (jnp.asarray(arrays[k], jnp.float32) for k in ("P", "reward", "terminal"))
    gamma, alpha = game.discount, config.protagonist_temperature

    def step(c, _):
        key, k_step = jax.random.split(c["key"])
        u = jax.random.uniform(k_step, (5,))
        s, tau = c["state"], c["tau"]
        h = temperature_features(tau, config)
        q_p, q_a = h @ c["W_p"][:, s], h @ c["W_a"][:, s]
        a = _act(u[0], u[1], q_p / alpha, config.exploration)
        b = _act(u[2], u[3], -q_a / tau, config.exploration)
        nxt = _draw(u[4], P[s, a, b])
        r, term = reward[nxt], terminal[nxt] > 0
        trunc = c["t"] + 1 >= config.time_limit
        v_p = alpha * jax.nn.logsumexp(h @ c["W_p"][:, nxt] / alpha)
        v_a = -tau * jax.nn.logsumexp(-(h @ c["W_a"][:, nxt]) / tau)
        delta_p = r + gamma * (1.0 - term) * v_p - q_p[a]
        delta_a = r + gamma * (1.0 - term) * v_a - q_a[b]
        protagonist_phase = (c["step"] // config.alternate) % 2 == 0
        W_p = c["W_p"].at[:, s, a].add(config.learning_rate * h * delta_p * protagonist_phase)
        W_a = c["W_a"].at[:, s, b].add(config.learning_rate * h * delta_a * (1 - protagonist_phase))
        ret = c["ret"] + c["disc"] * r
        done = term | trunc
        new = {"key": key, "W_p": W_p, "W_a": W_a, "step": c["step"] + 1, "episode": c["episode"] + done,
               "state": jnp.where(done, game.start, nxt), "t": jnp.where(done, 0, c["t"] + 1),
               "tau": jnp.where(done, taus[jnp.minimum(c["episode"], config.chunk - 1)], tau),
               "ret": jnp.where(done, 0.0, ret), "disc": jnp.where(done, 1.0, c["disc"] * gamma),
               "sum": c["sum"] + jnp.where(done, ret, 0.0), "count": c["count"] + done}
        return new, None

    carry = {**carry, "sum": jnp.zeros(()), "count": jnp.zeros((), jnp.int32), "episode": jnp.zeros((), jnp.int32)}
    carry, _ = jax.lax.scan(step, carry, None, length=config.chunk)
    return carry


@partial(jax.jit, static_argnames=("config", "game"))
def _train_runs(carry, taus, config: LearnerConfig, game: WindCorridor):
    """:func:`_chunk` for every run at once (``carry`` and ``taus [runs, chunk]`` batched)."""
    return jax.vmap(lambda c, t: _chunk(c, t, config, game))(carry, taus)


def init_carry(key, tau, config: LearnerConfig, game: WindCorridor) -> dict:
    features = config.temperature_knots + 1
    return {"key": key, "W_p": jnp.zeros((features, game.num_states, len(MOVES))),
            "W_a": jnp.zeros((features, game.num_states, len(WINDS))),
            "step": jnp.zeros((), jnp.int32), "state": jnp.asarray(game.start, jnp.int32), "t": jnp.zeros((), jnp.int32),
            "tau": jnp.asarray(tau, jnp.float32), "ret": jnp.zeros(()), "disc": jnp.ones(()),
            "sum": jnp.zeros(()), "count": jnp.zeros((), jnp.int32), "episode": jnp.zeros((), jnp.int32)}


def protagonist_policy(W_p: np.ndarray, tau: float, config: LearnerConfig) -> np.ndarray:
    """``softmax(Q_p(tau, s, .) / alpha_p)`` ``[S, A]`` in float64 from the weights ``W_p [1 + K, S, A]``."""
    from scipy import special

    h = temperature_features(np.float64(tau), config, xp=np)
    return special.softmax(np.einsum("j,jsa->sa", h, np.asarray(W_p, np.float64)) / config.protagonist_temperature, -1)


def train(game: WindCorridor, config: LearnerConfig, seeds: int, seed: int = 0) -> dict:
    """Train ``seeds`` independent runs; per chunk: the exact worst-case value at the start state of each
    run's protagonist (``worst_case [seeds, chunks]``), the chunk's mean training return, the temperature
    distribution's mean and (QARL) the teacher's parameters and gate decisions."""
    teacher = config.teacher
    mean0 = teacher.init_shape * teacher.init_scale
    shape, scale = np.full(seeds, teacher.init_shape), np.full(seeds, teacher.init_scale)
    rng = np.random.default_rng(seed)
    arrays = game.arrays()
    # one compiled chunk for every curriculum: the fields that only the host loop reads are normalised away
    chunk_config = dataclasses.replace(config, curriculum=CURRICULA[0], steps=config.chunk, linear_fraction=1.0,
                                       teacher=GammaTeacher())
    keys = jax.random.split(jax.random.PRNGKey(seed), seeds)
    carry = jax.vmap(lambda k: init_carry(k, 1.0, config, game))(keys)
    history = {"steps": [], "worst_case": [], "train_return": [], "temperature_mean": [], "shape": [], "scale": [], "gated": []}
    for c in range(config.steps // config.chunk):
        if config.curriculum == "qarl":
            # clipped to the range the value functions are defined on (a draw near 0 would overflow -Q / tau)
            taus = np.clip(rng.gamma(shape[:, None], scale[:, None], size=(seeds, config.chunk)),
                           config.temperature_min, config.temperature_max)
            history["temperature_mean"].append((shape * scale).tolist())
        else:  # rarl: tau_min; linear: the schedule's value at the chunk's start
            share = 1.0 if config.curriculum == "rarl" else min(1.0, c * config.chunk / (config.linear_fraction * config.steps))
            taus = np.full((seeds, config.chunk), mean0 + share * (config.temperature_min - mean0))
            history["temperature_mean"].append(taus[:, 0].tolist())
        if c == 0:  # the first episode's temperature
            carry["tau"] = jnp.asarray(taus[:, -1], jnp.float32)
        carry = _train_runs(carry, jnp.asarray(taus, jnp.float32), config=chunk_config, game=game)
        returns = np.asarray(carry["sum"]) / np.maximum(np.asarray(carry["count"]), 1)
        gated = np.zeros(seeds, bool)
        if config.curriculum == "qarl":
            for i in range(seeds):
                shape[i], scale[i], info = teacher_step(teacher, shape[i], scale[i], returns[i])
                gated[i] = info["gated"]
        W_p = np.asarray(carry["W_p"])
        worst = [worst_case_value(game, protagonist_policy(W_p[i], config.temperature_eval, config), arrays)[0][game.start]
                 for i in range(seeds)]
        history["steps"].append((c + 1) * config.chunk)
        history["worst_case"].append(worst)
        history["train_return"].append(returns.tolist())
        history["shape"].append(shape.tolist())
        history["scale"].append(scale.tolist())
        history["gated"].append(gated.tolist())
    out = {k: np.asarray(v).T.tolist() if k not in ("steps",) else v for k, v in history.items()}
    out["final_weights"] = np.asarray(carry["W_p"])
    return out
