"""SEQUOIA: DQN whose greedy action and target max are MILPs over a Q-network (Xu et al. 2025), and baselines.

    a_t   = argmax_{a in A(s_t)} Q_theta(s_t, a)                       (MILP, :func:`milp_q.solve_q`)
    y     = r_t + gamma * max_{a' in A(s_{t+1})} Q_target(s_{t+1}, a')  (the same MILP at s_{t+1})
    loss  = mean (Q_theta(s_t, a_t) - y)^2 over a replay minibatch,

with epsilon-greedy exploration by a random feasible action. ``maximizer="enumerate"`` computes the same argmax
exactly by scoring every feasible action (the feasible set enumerated once per constraint set), for small action
spaces (at most ``MAX_ENUMERATED_BITS`` bits) where that is far cheaper than a MILP per state. Episodes end by time only (the bandit has no
terminal state), so every target bootstraps. Deviation, for CPU cost: the network that acts is a snapshot of
theta refreshed every ``policy_every`` steps, so that repeated states reuse memoised solves (the target network
is memoised the same way between its copies).

Baselines: ``random`` (a random feasible action), ``sampling`` (the same DQN with the max over K random feasible
actions and the myopic action instead of the MILP), ``myopic`` (the MILP of the expected immediate reward) and
``iterative`` (iterative myopic: add one action bit at a time, the feasible one with the largest immediate gain,
until no bit with positive gain keeps the action feasible).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from longhorizon.errors import UsageError
from longhorizon.structured import milp_q
from longhorizon.structured.restless import RestlessBandit, RestlessConfig

MAXIMIZERS = ("milp", "enumerate", "sampling")
MAX_ENUMERATED_BITS = 12  # 4096 candidate actions: enumeration beyond this is the MILP's job


@dataclasses.dataclass(frozen=True)
class SequoiaConfig:
    hidden: tuple = (16,)
    total_steps: int = 1000
    learning_rate: float = 3e-3
    gamma: float = 0.9
    batch_size: int = 32
    buffer_size: int = 5000
    learning_starts: int = 100
    train_every: int = 1
    target_every: int = 100
    policy_every: int = 25
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_fraction: float = 0.5
    maximizer: str = "milp"  # "enumerate": the same exact argmax by enumeration; "sampling": the sampled-actions baseline
    n_samples: int = 16
    time_limit: float = 5.0
    seed: int = 0

    def __post_init__(self):
        if self.maximizer not in MAXIMIZERS:
            raise UsageError(f"unknown maximizer '{self.maximizer}'; choose one of: {', '.join(MAXIMIZERS)}.")
        if not self.hidden or min(self.hidden) < 1:
            raise UsageError(f"SequoiaConfig.hidden must be a non-empty tuple of positive widths, got {self.hidden}.")
        for name in ("total_steps", "batch_size", "buffer_size", "train_every", "target_every", "policy_every", "n_samples"):
            if getattr(self, name) < 1:
                raise UsageError(f"SequoiaConfig.{name} must be >= 1, got {getattr(self, name)}; give a positive integer.")
        if not 0.0 <= self.gamma < 1.0:
            raise UsageError(f"SequoiaConfig.gamma must lie in [0, 1), got {self.gamma}; give a discount below 1.")
        if not (0.0 <= self.eps_end <= self.eps_start <= 1.0 and 0.0 < self.eps_fraction <= 1.0):
            raise UsageError("SequoiaConfig needs 0 <= eps_end <= eps_start <= 1 and 0 < eps_fraction <= 1; fix the schedule.")
        if self.time_limit <= 0:
            raise UsageError(f"SequoiaConfig.time_limit must be > 0 seconds, got {self.time_limit}.")


class Maximizer:
    """``max_a Q(s, a)`` over the feasible set: the memoised MILP, or the best of K sampled feasible actions."""

    def __init__(self, env: RestlessBandit, config: SequoiaConfig, rng: np.random.Generator):
        self.env, self.config, self.rng = env, config, rng
        self.milp = milp_q.MilpArgmax(time_limit=config.time_limit)
        self.myopic: dict = {}  # state bytes -> the myopic action (a deterministic function of the state)
        self.feasible_sets: dict = {}  # the constraint set's arrays (as bytes) -> every feasible action [K, n]
        if config.maximizer == "enumerate" and env.n_actions > MAX_ENUMERATED_BITS:
            raise UsageError(f"maximizer 'enumerate' scores all 2^{env.n_actions} actions; it takes at most "
                             f"{MAX_ENUMERATED_BITS} action bits. Use maximizer 'milp' for this action space.")

    def feasible_set(self, cons: milp_q.LinearConstraints) -> np.ndarray:
        """Every feasible action of ``cons`` (rows of 0/1), enumerated once per constraint set (keyed by all its
        arrays, so an environment whose rows or bounds change with the state gets its own sets, not a stale one)."""
        key = tuple(np.asarray(x, np.float64).tobytes() for x in (cons.matrix, cons.lb, cons.ub, cons.action_upper(),
                                                                  cons.aux_lower, cons.aux_upper, cons.aux_integer))
        if key not in self.feasible_sets:
            bits = np.array(list(itertools.product([0.0, 1.0], repeat=cons.n_actions)))
            self.feasible_sets[key] = bits[[_feasible(cons, a) for a in bits]]
        return self.feasible_sets[key]

    def myopic_action(self, obs: np.ndarray) -> np.ndarray:
        key = np.asarray(obs, np.float32).tobytes()
        if key not in self.myopic:
            self.myopic[key] = myopic_action(self.env, obs)
        return self.myopic[key]

    def __call__(self, net: list, version, obs: np.ndarray) -> tuple[np.ndarray, float]:
        if self.config.maximizer == "milp":
            solution = self.milp(net, version, obs, self.env.constraints(obs), self.env.expected_gain(obs))
            return solution.action, solution.value
        if self.config.maximizer == "enumerate":
            candidates = self.feasible_set(self.env.constraints(obs))
            q, _ = milp_q.forward(net, obs, candidates)
            best = int(np.argmax(q))
            return candidates[best], float(q[best])
        candidates = np.array([self.myopic_action(obs)] +
                              [self.env.sample_feasible(self.rng, obs) for _ in range(self.config.n_samples)])
        q, _ = milp_q.forward(net, obs, candidates)
        best = int(np.argmax(q))
        return candidates[best], float(q[best])


def myopic_action(env: RestlessBandit, obs: np.ndarray, lookahead: int = 1) -> np.ndarray:
    return milp_q.solve_linear(env.constraints(obs), env.expected_gain(obs, lookahead)).action


def iterative_myopic_action(env: RestlessBandit, obs: np.ndarray, feasible_cache: dict) -> np.ndarray:
    """Greedy: add the feasible bit of largest positive immediate gain until none is left (module docstring)."""
    cons, gain = env.constraints(obs), env.expected_gain(obs)
    action = np.zeros(env.n_actions)
    for bit in np.argsort(-gain):
        if gain[bit] <= 0:
            break
        trial = action.copy()
        trial[bit] = 1.0
        key = (trial.tobytes(), cons.action_upper().tobytes())
        if key not in feasible_cache:
            feasible_cache[key] = _feasible(cons, trial)
        if feasible_cache[key]:
            action = trial
    return action


def _feasible(cons: milp_q.LinearConstraints, action: np.ndarray) -> bool:
    if cons.n_aux:
        return cons.feasible(action)
    rows = cons.matrix @ action
    return bool(np.all(action <= cons.action_upper()) and np.all(rows >= cons.lb - 1e-9) and np.all(rows <= cons.ub + 1e-9))


def train(env_config: RestlessConfig, config: SequoiaConfig, progress=None) -> dict:
    """DQN with the configured maximizer; returns the final network (float64 layers) and training statistics."""
    env, rng = RestlessBandit(env_config), np.random.default_rng(config.seed)
    qnet, optimizer, update = _learner(config.hidden, config.learning_rate)
    params = qnet.init(jax.random.PRNGKey(config.seed), jnp.zeros((1, env.obs_dim + env.n_actions)))
    opt_state = optimizer.init(params)
    maximize = Maximizer(env, config, rng)
    buffer = {"x": np.zeros((config.buffer_size, env.obs_dim + env.n_actions), np.float32),
              "reward": np.zeros(config.buffer_size), "next": np.zeros((config.buffer_size, env.obs_dim))}
    snapshot = target = milp_q.layers(params, config.hidden)
    obs, episode_return, returns, losses = env.reset(rng), 0.0, [], []
    for t in range(config.total_steps):
        if t % config.policy_every == 0:
            snapshot = milp_q.layers(params, config.hidden)
        if t % config.target_every == 0:
            target = milp_q.layers(params, config.hidden)
        eps = max(config.eps_end, config.eps_start - (config.eps_start - config.eps_end) * t /
                  (config.eps_fraction * config.total_steps))
        if rng.random() < eps:
            action = env.sample_feasible(rng, obs)
        else:
            action, _ = maximize(snapshot, ("policy", t // config.policy_every), obs)
        next_obs, reward, done = env.step(rng, action)
        slot = t % config.buffer_size
        buffer["x"][slot], buffer["reward"][slot], buffer["next"][slot] = np.concatenate([obs, action]), reward, next_obs
        episode_return += reward
        obs = next_obs
        if done:
            returns.append(episode_return)
            obs, episode_return = env.reset(rng), 0.0
        if t >= config.learning_starts and t % config.train_every == 0:
            idx = rng.integers(0, min(t + 1, config.buffer_size), config.batch_size)
            version = ("target", t // config.target_every)
            next_max = np.array([maximize(target, version, s)[1] for s in buffer["next"][idx]])
            y = buffer["reward"][idx] + config.gamma * next_max
            params, opt_state, loss = update(params, opt_state, buffer["x"][idx], y.astype(np.float32))
            losses.append(float(loss))
        if progress and (t + 1) % max(1, config.total_steps // 5) == 0:
            progress(f"  step {t + 1}/{config.total_steps}: last returns {np.mean(returns[-5:]) if returns else 0:.2f}")
    milp = maximize.milp
    return {"net": milp_q.layers(params, config.hidden), "train_returns": returns, "losses": losses,
            "milp_solves": milp.solves, "milp_hits": milp.hits,
            "milp_seconds_per_solve": milp.solve_seconds / max(milp.solves, 1)}


@functools.lru_cache(maxsize=None)
def _learner(hidden: tuple, learning_rate: float):
    """The network, the optimiser and the jitted squared-TD step, shared by every run with these settings."""
    qnet, optimizer = milp_q.QNet(hidden), optax.adam(learning_rate)

    def loss_fn(params, x, y):
        return jnp.mean((qnet.apply(params, x) - y) ** 2)

    @jax.jit
    def update(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return qnet, optimizer, update


def evaluate(env_config: RestlessConfig, policy: str, episodes: int, seed: int, net: list | None = None,
             config: SequoiaConfig | None = None) -> dict:
    """Mean undiscounted episode return of a policy (``sequoia``, ``sampling``, ``random``, ``myopic``,
    ``iterative``) on ``episodes`` episodes drawn from ``seed`` (the same episodes' randomness for every policy);
    also the mean seconds per action choice."""
    import time

    env, rng = RestlessBandit(env_config), np.random.default_rng(seed)
    policy_rng = np.random.default_rng(seed + 1)  # the policies' own draws do not shift the episodes'
    config = config or SequoiaConfig()
    maximizer = "sampling" if policy == "sampling" else "milp" if config.maximizer == "sampling" else config.maximizer
    maximize = Maximizer(env, dataclasses.replace(config, maximizer=maximizer), policy_rng)
    feasible_cache: dict = {}
    returns, seconds, choices = [], 0.0, 0
    for _ in range(episodes):
        obs, done, total = env.reset(rng), False, 0.0
        while not done:
            t0 = time.perf_counter()
            if policy in ("sequoia", "sampling"):
                action, _ = maximize(net, "final", obs)
            elif policy == "random":
                action = env.sample_feasible(policy_rng, obs)
            elif policy == "myopic":
                action = maximize.myopic_action(obs)
            elif policy == "iterative":
                action = iterative_myopic_action(env, obs, feasible_cache)
            else:
                raise UsageError(f"unknown policy '{policy}'; choose sequoia, sampling, random, myopic or iterative.")
            seconds += time.perf_counter() - t0
            choices += 1
            obs, reward, done = env.step(rng, action)
            total += reward
        returns.append(total)
    return {"mean_return": float(np.mean(returns)), "returns": returns, "seconds_per_action": seconds / choices}
