"""HECRL in the push world (:mod:`longhorizon.offline.pushworld`): the factored subgoal diffusion model
(:mod:`longhorizon.offline.subgoal_diffusion`) trained by the offline loop, and episodes of a value-based
goal-conditioned agent (GCIVL, HIQL: :mod:`longhorizon.offline.agents`) that acts toward the goal itself or
toward subgoals the model proposes and the agent's value selects, re-planned every ``replan_every`` steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import TrainingDiverged
from longhorizon.offline import pushworld
from longhorizon.offline import subgoal_diffusion as sd
from longhorizon.offline.samplers import goal_data
from longhorizon.offline.train import train_in_memory


def train_diffusion(data: dict, config: sd.Config, seeds: int, updates: int, seed: int = 0):
    """The diffusion model trained by the offline loop's chunk (one chunk of ``updates``), seeds vmapped."""
    state, metrics = train_in_memory(sd, config, goal_data(data), seeds, updates, seed=seed + 1)
    if not np.all(np.asarray(metrics["finite"])):
        raise TrainingDiverged("NaN or Inf in the diffusion model's loss; lower its learning rate and run again.")
    return state.params, float(np.mean(metrics["diffusion_loss"]))


def make_rollout(env: pushworld.PushWorld, agent, agent_config, dconfig: sd.Config | None, episode_len: int):
    """``rollout(agent_params, diffusion_params, starts [M, E, 2], goals [M, D], key) -> (success [M], subgoal_rate [M])``:
    the agent acts toward the goal (``dconfig`` None) or toward a HECRL subgoal re-selected every
    ``replan_every`` steps; an episode stops counting once every block is on its goal."""
    every = dconfig.replan_every if dconfig else 1
    rounds = -(-episode_len // every)
    values = lambda p: (lambda o, g: agent.values(p, o, g, agent_config))
    snap = lambda obs: jnp.round(obs * (env.size - 1)) / (env.size - 1)  # candidates onto the grid's cells

    def one(params, dparams, start, goal, key):
        def plan(carry, k):
            positions, done = carry
            obs = env.observe(positions)
            if dconfig is None:
                target, used = goal, jnp.zeros((), bool)
            else:
                cands = snap(sd.propose(dparams, k, obs, goal, dconfig))
                cells = jnp.round(cands * (env.size - 1)).reshape(cands.shape[0], -1, 2)
                same = jnp.all(cells[:, :, None] == cells[:, None], -1)  # [N, E, E]: two entities on one cell
                valid = jnp.sum(same, axis=(1, 2)) == cells.shape[1]
                target, used = sd.select_subgoal(values(params), obs, goal, cands, dconfig.threshold, valid)

            def act(carry, _):
                positions, done = carry
                a = agent.act(params, env.observe(positions)[None], target[None], agent_config)[0]
                moved = env.move(positions, a)
                positions = jnp.where(done, positions, moved)
                return (positions, done | env.success(positions, goal)), None

            carry, _ = jax.lax.scan(act, (positions, done), None, every)
            return carry, used

        (_, done), used = jax.lax.scan(plan, (start, env.success(start, goal)), jax.random.split(key, rounds))
        return done, jnp.mean(used)

    return jax.jit(jax.vmap(one, in_axes=(None, None, 0, 0, 0)))
