"""offline.hecrl.make_rollout on a hand-made push-world task: an agent that pushes the block onto its goal
succeeds, one that walks into the wall does not; without a subgoal model no subgoal is used."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.offline import pushworld
from longhorizon.offline.hecrl import make_rollout


def test_rollout_counts_an_episode_as_success_once_the_block_is_on_its_goal():
    env = pushworld.PushWorld(1, 5)
    start = jnp.asarray([[[0, 2], [1, 2]]] * 2, jnp.int32)  # agent left of the block
    goal = env.observe(jnp.asarray([[2, 2], [2, 2]]))[None].repeat(2, 0)  # block one cell to the right
    direction = np.asarray(pushworld.DIRECTIONS[0], np.float32)
    success = {}
    for name, action in (("push", direction), ("away", -direction)):
        agent = SimpleNamespace(act=lambda p, o, g, c, a=action: jnp.asarray(a)[None], values=None)
        rollout = make_rollout(env, agent, None, None, episode_len=3)
        done, used = rollout(None, None, start, goal, jax.random.split(jax.random.PRNGKey(0), 2))
        success[name] = np.asarray(done).tolist()
        assert float(np.mean(used)) == 0.0
    assert success == {"push": [True, True], "away": [False, False]}
