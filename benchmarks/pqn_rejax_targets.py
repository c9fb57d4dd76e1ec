"""Q(lambda) targets of one hand-made rollout: longhorizon's vs rejax 0.1.3's PQN (in its own venv).

Rollout (one environment, T = 5, gamma 0.9, lambda 0.5): rewards 1..5, a termination at t = 1 and
``max_a Q(s'_t, a) = 10, 20, 30, 40, 50`` where ``s'_t = s_{t+1}`` is the state after step t. By hand:

    G_4 = 5 + .9 * 50 = 50
    G_3 = 4 + .9 * (.5 * 40 + .5 * 50) = 44.5
    G_2 = 3 + .9 * (.5 * 30 + .5 * 44.5) = 36.525
    G_1 = 2                                (terminated)
    G_0 = 1 + .9 * (.5 * 10 + .5 * 2) = 6.4

    .venv/bin/python benchmarks/pqn_rejax_targets.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

HAND = [6.4, 2.0, 36.525, 44.5, 50.0]

REJAX = r"""
import jax.numpy as jnp
from rejax import PQN
from rejax.algos.pqn import Trajectory

algo = PQN.create(env="CartPole-v1", td_lambda=0.5, gamma=0.9)
max_q = jnp.asarray([10.0, 20.0, 30.0, 40.0, 50.0])
# rejax stores next_q = Q(next_obs) per step; the second action's value is lower, so max picks max_q.
next_q = jnp.stack([max_q, max_q - 1.0], -1)[:, None, :]
trajectory = Trajectory(obs=jnp.zeros((5, 1, 4)), action=jnp.zeros((5, 1), int), next_q=next_q,
                        reward=jnp.arange(1.0, 6.0)[:, None], done=jnp.asarray([0, 1, 0, 0, 0], bool)[:, None])
print([round(float(x), 4) for x in algo.calculate_targets(trajectory, jnp.asarray([50.0]))[:, 0]])
"""


def main() -> None:
    import jax.numpy as jnp

    from longhorizon.core.returns import lambda_returns
    from peer_env import peer_python

    column = lambda xs: jnp.asarray(xs, jnp.float32)[:, None]  # noqa: E731
    done = column([0, 1, 0, 0, 0])
    ours = lambda_returns(column([1, 2, 3, 4, 5]), column([10, 20, 30, 40, 50]), done, done, 0.9, 0.5)[:, 0]
    python = peer_python("rejax", ["rejax==0.1.3", "gymnax<1.0"])
    theirs = subprocess.run([str(python), "-c", REJAX], capture_output=True, text=True, check=True,
                            env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}).stdout.strip().splitlines()[-1]
    print(f"by hand     : {HAND}")
    print(f"longhorizon : {[round(float(x), 4) for x in ours]}")
    print(f"rejax 0.1.3 : {theirs}")


if __name__ == "__main__":
    main()
