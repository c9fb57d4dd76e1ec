"""Evaluate a saved run and render one of its episodes (``longhorizon eval``)."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.runner import checkpoint
from longhorizon.runner.evaluate import evaluate
from longhorizon.runner.run import Run, spec_from_results


def load_run(run_dir: str | os.PathLike):
    """The resolved run and its newest checkpointed state."""
    run = Run(spec_from_results(run_dir, quiet=True))
    state, _ = checkpoint.restore(run.results.checkpoints, run.engine.init(run.spec.seed))
    return run, state


def evaluate_run(run_dir: str | os.PathLike, episodes: int = 10, greedy: bool = True,
                 render: str | os.PathLike | None = None) -> tuple[list[float], Path | None]:
    if episodes < 1:
        raise UsageError(f"--episodes must be at least 1 (got {episodes}); pass 10 for example.")
    run, state = load_run(run_dir)
    returns = evaluate(run.algo, state, run.env, jax.random.PRNGKey(run.spec.seed + 20_000), episodes, greedy)
    gif = render_episode(run, state, Path(render), greedy) if render else None
    return returns, gif


def render_episode(run: Run, state, out: Path, greedy: bool = True, max_frames: int = 500) -> Path:
    """Play one episode with seed 0's policy and save it as an animated GIF (gymnax's renderer)."""
    inner = getattr(run.env, "inner", None)
    if inner is None:
        raise UsageError(f"environment '{run.spec.env}' has no renderer; evaluate it without --render.")
    params = jax.tree.map(lambda x: x[0], run.algo.agent_params(state))
    env = run.env
    key = jax.random.PRNGKey(run.spec.seed)
    key, reset_key = jax.random.split(key)
    obs, env_state = env.reset(reset_key)
    act = jax.jit(lambda o, k: run.algo.act(params, o[None], k, greedy)[0])
    step_raw = jax.jit(lambda k, s, a: inner.step_env(k, s, a, env.default_params))
    states, rewards, total = [env_state], [0.0], 0.0  # one cumulative reward per frame
    for _ in range(min(max_frames, env.max_episode_steps)):
        key, act_key, step_key = jax.random.split(key, 3)
        obs, env_state, reward, done, _ = step_raw(step_key, env_state, act(obs, act_key))
        total += float(reward)
        states.append(env_state)
        rewards.append(total)
        if bool(done) or bool(inner.is_truncated(env_state, env.default_params)):
            break
    # gymnax draws classic control through gymnasium/pygame: no window and no sound device here.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    try:
        from gymnax.visualize import Visualizer

        out.parent.mkdir(parents=True, exist_ok=True)
        Visualizer(inner, env.default_params, states, np.asarray(rewards)).animate(str(out))
    except Exception as error:  # gymnax renders only some environments
        raise UsageError(f"environment '{run.spec.env}' cannot be rendered by gymnax ({type(error).__name__}); evaluate it without --render.") from None
    return out
