"""Two-player general-sum finite-horizon Markov games, their policies, and exact best responses.

A game has horizon ``H``, states ``S``, actions ``A1, A2``, transitions ``P_h(s' | s, a1, a2)``, rewards
``r_{i,h}(s, a1, a2)`` for players ``i = 0, 1`` and an initial distribution ``mu(s)``. Two kinds of joint
play (the objects of Foster, Golowich & Kakade 2023):

* a **correlated Markov policy** ``sigma_h(a1, a2 | s)``: at every step a fresh joint action is drawn
  given the state (a Markov CCE is one);
* a **mixture of product policies** ``sum_k w_k (pi^k_1 x pi^k_2)``: one component ``k`` is drawn per
  episode and both players follow their Markov policies of that component for the whole episode
  (what ``T`` rounds of independent no-regret learning produce, with ``w_k = 1/T``).

A deviating player ``i`` plays its own policy against the others' part of the joint play,
``sigma_{-i}``. Two deviation classes:

* **Markov** deviations ``pi'_i(a | h, s)``: against a Markov opponent a DP; against a mixture the
  deviator does not know ``k``, so its value ``sum_k w_k V_i(pi'_i, pi^k_{-i})`` is linear in each
  ``pi'_i(. | h, s)`` separately (each ``(h, s)`` is visited at most once an episode), a deterministic
  policy attains the maximum, and :func:`markov_best_response` finds it by enumerating the
  deterministic choices of steps ``< H`` (the last step is chosen in closed form);
* **history-dependent** deviations: after ``(s_1, a_1, b_1, ..., s_h)`` the opponent's next action
  follows the posterior ``P(k | history) ∝ w_k prod_{t<h} pi^k_{-i,t}(b_t | s_t)`` (transitions and
  the deviator's own actions cancel), so :func:`history_best_response` is a DP over the tree of
  observed ``(s_t, b_t)`` sequences with that posterior at each node.

Players are indexed 0 and 1; all arrays are float64.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from longhorizon.errors import UsageError

# Largest array (elements) an exact best response may build; beyond it the game is not "tiny".
MAX_ELEMENTS = 2 * 10**7


@dataclasses.dataclass(frozen=True)
class MarkovGame:
    """``transition`` [H, S, A1, A2, S]; ``reward`` [2, H, S, A1, A2]; ``initial`` [S]."""

    transition: np.ndarray
    reward: np.ndarray
    initial: np.ndarray
    name: str = "game"

    def __post_init__(self):
        for field in ("transition", "reward", "initial"):
            object.__setattr__(self, field, np.asarray(getattr(self, field), np.float64))
        P, r, mu = self.transition, self.reward, self.initial
        if P.ndim != 5 or P.shape[1] != P.shape[4]:
            raise UsageError(f"transition has shape {P.shape}; give P_h(s'|s,a1,a2) as an [H, S, A1, A2, S] array.")
        if r.shape != (2, *P.shape[:4]):
            raise UsageError(f"reward has shape {r.shape}; give it as [2, H, S, A1, A2] = {(2, *P.shape[:4])}.")
        if mu.shape != (P.shape[1],):
            raise UsageError(f"initial has shape {mu.shape}; give a distribution over the {P.shape[1]} states.")
        if not (np.isfinite(r).all() and (P >= 0).all() and np.allclose(P.sum(-1), 1.0, atol=1e-12)
                and (mu >= 0).all() and np.isclose(mu.sum(), 1.0, atol=1e-12)):
            raise UsageError("transition rows and initial must be probability distributions and rewards finite; "
                             "fix the arrays.")

    @property
    def horizon(self) -> int:
        return self.transition.shape[0]

    @property
    def num_states(self) -> int:
        return self.transition.shape[1]

    @property
    def num_actions(self) -> tuple[int, int]:
        return self.transition.shape[2], self.transition.shape[3]

    def seen_by(self, player: int) -> tuple[np.ndarray, np.ndarray]:
        """The deviator's view: its reward [H, S, A_own, A_other] and transition [H, S, A_own, A_other, S]."""
        if player not in (0, 1):
            raise UsageError(f"player {player} does not exist; players are 0 and 1.")
        if player == 0:
            return self.reward[0], self.transition
        return self.reward[1].transpose(0, 1, 3, 2), self.transition.transpose(0, 1, 3, 2, 4)


def _distributions(array, ndim: int, name: str, event_axes: int = 1) -> np.ndarray:
    """``array`` as float64 with ``ndim`` axes whose last ``event_axes`` hold probability distributions."""
    array = np.asarray(array, np.float64)
    total = array.sum(tuple(range(-event_axes, 0))) if array.ndim >= event_axes else None
    if array.ndim != ndim or not ((array >= 0).all() and np.allclose(total, 1.0, atol=1e-9)):
        raise UsageError(f"{name} must be a {ndim}-axis array of probability distributions over its last "
                         f"{event_axes} axis(es); fix it.")
    return array


@dataclasses.dataclass(frozen=True)
class CorrelatedPolicy:
    """A correlated Markov policy ``joint`` [H, S, A1, A2]: sigma_h(a1, a2 | s)."""

    joint: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "joint", _distributions(self.joint, 4, "joint", event_axes=2))

    def opponents(self, player: int) -> tuple[np.ndarray, np.ndarray]:
        """The other player's marginal as a one-component mixture: weights [1], policies [1, H, S, A_other]."""
        return np.ones(1), self.joint.sum(axis=2 + player)[None]  # sum out the player's own action


@dataclasses.dataclass(frozen=True)
class ProductMixture:
    """``sum_k weights[k] (first[k] x second[k])``: ``first`` [K, H, S, A1], ``second`` [K, H, S, A2]."""

    first: np.ndarray
    second: np.ndarray
    weights: np.ndarray

    def __post_init__(self):
        for field, ndim in (("first", 4), ("second", 4), ("weights", 1)):
            object.__setattr__(self, field, _distributions(getattr(self, field), ndim, field))
        same_components = len(self.first) == len(self.second) == len(self.weights)
        if not (same_components and self.first.shape[:3] == self.second.shape[:3]):
            raise UsageError(f"first {self.first.shape}, second {self.second.shape} and weights {self.weights.shape} "
                             "disagree; give [K, H, S, A1], [K, H, S, A2] and [K].")

    @classmethod
    def uniform(cls, first: np.ndarray, second: np.ndarray) -> "ProductMixture":
        return cls(first, second, np.full(len(first), 1.0 / len(first)))

    def prefix(self, count: int) -> "ProductMixture":
        """The uniform mixture of the first ``count`` components (the first ``count`` rounds of learning)."""
        return ProductMixture.uniform(self.first[:count], self.second[:count])

    def opponents(self, player: int) -> tuple[np.ndarray, np.ndarray]:
        return self.weights, (self.second if player == 0 else self.first)


def joint_values(game: MarkovGame, joint: np.ndarray) -> np.ndarray:
    """Values of a correlated Markov policy, [2, H+1, S]:

        V_{i,h}(s) = sum_{a1,a2} sigma_h(a1, a2 | s) (r_{i,h}(s, a1, a2) + sum_s' P_h(s'|s, a1, a2) V_{i,h+1}(s')),

    with ``V_{i,H} = 0``. ``joint`` may carry leading batch axes [..., H, S, A1, A2] (values [..., 2, H+1, S]).
    """
    batch = joint.shape[:-4]
    values = np.zeros((*batch, 2, game.horizon + 1, game.num_states))
    for h in reversed(range(game.horizon)):
        q = game.reward[:, h] + np.einsum("sabt,...it->...isab", game.transition[h], values[..., h + 1, :])
        values[..., h, :] = np.einsum("...sab,...isab->...is", joint[..., h, :, :, :], q)
    return values


def expected_returns(game: MarkovGame, play) -> np.ndarray:
    """Each player's expected return from ``mu`` under ``play`` (correlated policy or product mixture): [2]."""
    if isinstance(play, CorrelatedPolicy):
        return joint_values(game, play.joint)[:, 0] @ game.initial
    joints = np.einsum("khsa,khsb->khsab", play.first, play.second)
    return play.weights @ (joint_values(game, joints)[:, :, 0] @ game.initial)


def _against(game: MarkovGame, player: int, opponent: np.ndarray):
    """Per component, the deviator's expected reward [K, H, S, A] and transition [K, H, S, A, S]."""
    reward, transition = game.seen_by(player)
    return (np.einsum("khsb,hsab->khsa", opponent, reward), np.einsum("khsb,hsabt->khsat", opponent, transition))


def markov_best_response(game: MarkovGame, player: int, weights: np.ndarray, opponent: np.ndarray):
    """``max over Markov pi' of sum_k w_k V_i(pi', pi^k_{-i})`` and a deterministic maximiser [H, S].

    ``weights`` [K], ``opponent`` [K, H, S, A_other]. One component: backward induction
    ``V_h(s) = max_a E_b[r + P V_{h+1}]``. Several: the value is multilinear in the per-``(h, s)``
    choices (module docstring), so the maximum over deterministic policies is exact; steps ``< H`` are
    enumerated layer by layer (``A^S`` choices a layer, component state distributions carried along),
    the last step is ``sum_s max_a sum_k w_k d^k_H(s) rbar^k_H(s, a)``.
    """
    rbar, pbar = _against(game, player, opponent)
    H, S, A = rbar.shape[1:]
    if len(weights) == 1:
        value, policy = np.zeros(S), np.zeros((H, S), int)
        for h in reversed(range(H)):
            q = rbar[0, h] + pbar[0, h] @ value
            policy[h], value = q.argmax(-1), q.max(-1)
        return float(game.initial @ value), policy
    layer = np.array(list(itertools.product(range(A), repeat=S)))  # [C, S]: every deterministic choice of a step
    if len(layer) ** (H - 1) * len(weights) * S > MAX_ELEMENTS:  # the last layer's reach [P, K, S]
        raise UsageError(f"a Markov best response against {len(weights)} components needs {A}^{S * (H - 1)} policies; "
                         "use a smaller game or fewer components.")
    states = np.arange(S)
    reach = np.broadcast_to(game.initial, (1, len(weights), S))  # [P, K, S]: P(s_h = s | component k) per prefix
    collected = np.zeros(1)  # [P]: expected reward of steps < h per prefix
    for h in range(H - 1):
        step_reward = rbar[:, h][:, states, layer].transpose(1, 0, 2)  # [C, K, S]
        step_transition = pbar[:, h][:, states, layer].transpose(1, 0, 2, 3)  # [C, K, S, S']
        step_value = np.einsum("pks,cks,k->pc", reach, step_reward, weights)
        reach = np.einsum("pks,ckst->pckt", reach, step_transition).reshape(-1, len(weights), S)
        collected = (collected[:, None] + step_value).reshape(-1)
    last = np.einsum("pks,ksa,k->psa", reach, rbar[:, H - 1], weights)
    totals = collected + last.max(-1).sum(-1)
    best = int(totals.argmax())
    choices = np.unravel_index(best, (len(layer),) * (H - 1)) if H > 1 else ()
    policy = np.stack([layer[c] for c in choices] + [last[best].argmax(-1)])
    return float(totals[best]), policy


def history_best_response(game: MarkovGame, player: int, weights: np.ndarray, opponent: np.ndarray) -> float:
    """``max over history-dependent pi' of sum_k w_k V_i(pi', pi^k_{-i})``, exactly.

    A node at step ``h`` is an observed sequence ``(s_1, b_1, ..., s_h)`` with the posterior
    ``beta(k) ∝ w_k prod_{t<h} pi^k_t(b_t | s_t)`` [K]; backward over the tree,

        V(node) = max_a sum_b p(b | node) (r_h(s, a, b) + sum_s' P_h(s'|s, a, b) V(node + (b, s'))),
        p(b | node) = sum_k beta(k) pi^k_h(b | s).

    The tree has ``S^H A_other^(H-1)`` leaves; the deviator's own past actions need no branch, since
    they change only the transition probabilities, not the posterior.
    """
    reward, transition = game.seen_by(player)
    H, S, A, B = reward.shape
    K = len(weights)
    if S**H * B ** (H - 1) * K > MAX_ELEMENTS:
        raise UsageError(f"the history tree has {S**H * B ** (H - 1)} leaves x {K} components; "
                         "use a smaller game or fewer components.")
    states, beliefs = [np.arange(S)], [np.broadcast_to(weights, (S, K))]
    for h in range(H - 1):  # children of a node: one per (b, s'), in that order
        likelihood = opponent[:, h, states[h], :].transpose(1, 2, 0)  # [N, B, K]
        child = beliefs[h][:, None, :] * likelihood
        child = child / np.maximum(child.sum(-1, keepdims=True), 1e-300)  # rescaled: only ratios matter
        beliefs.append(np.repeat(child, S, axis=1).reshape(-1, K))
        states.append(np.tile(np.arange(S), len(states[h]) * B))
    value = np.zeros((len(states[-1]), B, S))
    for h in reversed(range(H)):
        s, beta = states[h], beliefs[h]
        posterior = beta / np.maximum(beta.sum(-1, keepdims=True), 1e-300)
        predicted = np.einsum("nk,knb->nb", posterior, opponent[:, h, s, :])  # p(b | node) [N, B]
        q = reward[h, s] + np.einsum("nabt,nbt->nab", transition[h, s], value)  # [N, A, B]
        node_value = np.einsum("nb,nab->na", predicted, q).max(-1)
        value = node_value.reshape(-1, B, S) if h > 0 else node_value
    return float(game.initial @ value)


@dataclasses.dataclass(frozen=True)
class DeviationReport:
    """Each player's return under the play and its best deviation in each class: three [2] arrays."""

    value: np.ndarray
    markov: np.ndarray
    history: np.ndarray

    @property
    def markov_gap(self) -> float:
        """``max(0, max_i max_{Markov pi'} V_i(pi', sigma_{-i}) - V_i(sigma))``: the smallest eps of an eps-CCE."""
        return float(max(0.0, (self.markov - self.value).max()))

    @property
    def history_gap(self) -> float:
        """The same against history-dependent deviations (>= markov_gap: a Markov policy is one of them)."""
        return float(max(0.0, (self.history - self.value).max()))


def deviation_report(game: MarkovGame, play) -> DeviationReport:
    """How far ``play`` (a :class:`CorrelatedPolicy` or :class:`ProductMixture`) is from a CCE, both classes."""
    markov, history = np.zeros(2), np.zeros(2)
    for player in (0, 1):
        weights, opponent = play.opponents(player)
        markov[player] = markov_best_response(game, player, weights, opponent)[0]
        history[player] = history_best_response(game, player, weights, opponent)
    return DeviationReport(expected_returns(game, play), markov, history)


def pennies_game(horizon: int = 2, states: int = 1) -> MarkovGame:
    """A general-sum matching-pennies cycle repeated ``horizon`` times: player 0 wants to match, player 1
    to mismatch (unique, fully mixed stage equilibrium, so no-regret iterates cycle). With 2 states the
    next state records whether the actions matched, and in state 1 the payoffs are the other way round."""
    if horizon < 1 or states not in (1, 2):
        raise UsageError(f"pennies_game(horizon={horizon}, states={states}) is undefined; "
                         "use horizon >= 1 and 1 or 2 states.")
    stage = np.array([[[1.0, 0.0], [0.0, 0.5]], [[0.0, 1.0], [0.75, 0.25]]])  # [player, a1, a2]
    reward = np.stack([stage, stage[:, ::-1, ::-1]][:states], axis=1)  # [2, S, A1, A2]
    matched = np.eye(2)  # [a1, a2]: 1 where the actions match
    transition = np.zeros((states, 2, 2, states))  # [S, A1, A2, S']
    if states == 1:
        transition[..., 0] = 1.0
    else:
        transition[..., 0], transition[..., 1] = 1.0 - matched, matched
    return MarkovGame(np.repeat(transition[None], horizon, axis=0), np.repeat(reward[:, None], horizon, axis=1),
                      np.eye(states)[0], name=f"pennies-H{horizon}-S{states}")


def random_game(horizon: int, states: int, actions: int, seed: int) -> MarkovGame:
    """Rewards uniform on [0, 1], transition rows Dirichlet(1), start in state 0."""
    rng = np.random.default_rng(seed)
    transition = rng.dirichlet(np.ones(states), size=(horizon, states, actions, actions))
    reward = rng.uniform(size=(2, horizon, states, actions, actions))
    return MarkovGame(transition, reward, np.eye(states)[0], name=f"random-H{horizon}-S{states}-A{actions}-seed{seed}")
