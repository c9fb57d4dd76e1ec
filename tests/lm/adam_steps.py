"""Comparing two computations of one AdamW step by the weights' moves, where the move is well conditioned.

Adam's first step moves a weight by ``lr g / (|g| + eps)``: ``~lr`` where ``|g| >> eps``, while where ``g``
is within a few rounding errors of 0 the rounding of ``g`` (a different summation order) decides the move.
So two computations of the same step agree to ``tolerance x lr`` where the reference move is at least
``0.9 lr`` (``|g| >= 9 eps``), every move is bounded by ``lr``, weights with no gradient stay put in both, and
the well-conditioned weights must be nearly all of those that move (else the check says little).
"""

import jax
import numpy as np


def assert_adam_steps_close(got, want, start, lr: float, tolerance: float = 1e-3) -> None:
    counts = np.zeros(2)
    for a, b, s in zip(*(jax.tree_util.tree_leaves(t) for t in (got, want, start))):
        move, want_move = np.asarray(a, np.float64) - np.asarray(s), np.asarray(b, np.float64) - np.asarray(s)
        conditioned = np.abs(want_move) >= 0.9 * lr
        np.testing.assert_allclose(move[conditioned], want_move[conditioned], rtol=0, atol=tolerance * lr)
        assert np.all(np.abs(move) <= 1.01 * lr) and np.all(move[want_move == 0] == 0)
        counts += conditioned.sum(), (want_move != 0).sum()
    assert counts[0] > 0.9 * counts[1], counts
