"""Evaluate a saved run and render one of its episodes (``longhorizon eval``)."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import numpy as np

from longhorizon.envs.gymnasium import is_host_env
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
    """Play one episode with seed 0's policy and save it as an animated GIF (gymnax's renderer; for
    gymnasium environments their ``rgb_array`` frames, as a GIF or an MP4)."""
    if is_host_env(run.env):
        return render_host_episode(run, state, out, greedy, max_frames)
    if out.suffix.lower() != ".gif":
        raise UsageError(f"--render {out}: gymnax environments render to GIF only; name the file with .gif.")
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


def render_host_episode(run: Run, state, out: Path, greedy: bool = True, max_frames: int = 1000) -> Path:
    """One episode of a gymnasium environment with seed 0's policy, drawn by its ``rgb_array``
    renderer, written as a GIF (Pillow) or MP4 (imageio with ffmpeg). The policy acts through the
    same wrappers as in training (e.g. SQIRL's time feature), on one env group of one copy."""
    import copy
    import importlib.util

    from longhorizon.envs import Wrapper, vectorize
    from longhorizon.envs.gymnasium import GROUPS, GymnasiumEnv

    suffix = out.suffix.lower()
    if suffix not in (".gif", ".mp4"):
        raise UsageError(f"--render {out}: name the file .gif or .mp4.")
    if suffix == ".mp4" and not any(importlib.util.find_spec(m) for m in ("imageio_ffmpeg", "av")):
        raise UsageError(f"writing {out} needs imageio with ffmpeg; `pip install 'longhorizon[video]'`, or render to .gif.")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws off-screen; no window, no sound device
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("MUJOCO_GL", "egl")

    def with_render_mode(env):  # the same wrapper chain around a copy that draws rgb_array frames
        if isinstance(env, Wrapper):
            outer = copy.copy(env)
            outer.env = with_render_mode(env.env)
            return outer
        return GymnasiumEnv(env.id, env.target, {**env.make_kwargs, "render_mode": "rgb_array"}, "sync")

    try:
        env = with_render_mode(run.env)
    except Exception as error:  # noqa: BLE001 (any renderer failure becomes one sentence)
        raise UsageError(f"environment '{run.env.id}' cannot render rgb_array frames ({type(error).__name__}: {error}); "
                         f"evaluate it without --render.") from None
    gym_env = env
    while isinstance(gym_env, Wrapper):
        gym_env = gym_env.env
    venv = vectorize(env, 1)
    params = jax.tree.map(lambda x: x[0], run.algo.agent_params(state))

    def step(obs, env_state, key):
        key, act_key, step_key = jax.random.split(key, 3)
        obs, env_state, _, _, _, info = venv.step(step_key, env_state, run.algo.act(params, obs, act_key, greedy))
        return obs, env_state, key, info["episode_done"][0]

    step = jax.jit(step)
    key, reset_key = jax.random.split(jax.random.PRNGKey(run.spec.seed))
    obs, env_state = jax.jit(venv.reset)(reset_key)

    def frame():
        inner = env_state.env_state
        while not hasattr(inner, "group"):
            inner = inner.env_state
        entry, _ = GROUPS.get(gym_env, 1, int(inner.group), int(inner.steps))
        return np.asarray(entry[0].render()[0])

    try:
        frames = [frame()]
        for _ in range(min(max_frames, env.max_episode_steps)):
            obs, env_state, key, done = step(obs, env_state, key)
            if bool(done):  # the copy has already reset to the next episode: its frame is not this one's
                break
            frames.append(frame())
    except Exception as error:  # noqa: BLE001
        raise UsageError(f"environment '{run.env.id}' failed to render ({type(error).__name__}: {error}); for MuJoCo set "
                         f"MUJOCO_GL=egl or osmesa to a backend this machine has, or evaluate without --render.") from None
    finally:
        GROUPS.close(gym_env)
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".gif":
        from PIL import Image

        images = [Image.fromarray(f) for f in frames]
        images[0].save(out, save_all=True, append_images=images[1:], duration=33, loop=0)
    else:
        try:
            import imageio.v2 as imageio

            imageio.mimwrite(out, frames, fps=30)
        except (ImportError, ValueError, RuntimeError) as error:
            raise UsageError(f"writing {out} needs imageio with ffmpeg ({type(error).__name__}); "
                             f"`pip install 'longhorizon[video]'`, or render to .gif.") from None
    return out
