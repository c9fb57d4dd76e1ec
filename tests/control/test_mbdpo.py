"""MBDPO: the world model's losses, the imagined return, the flow sampler, the improvement weights and MPPI by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.control import mbdpo
from longhorizon.control import world_model as wm
from longhorizon.errors import UsageError

RNG = np.random.default_rng(0)


def linear_model() -> wm.Bound:
    """A world model of hand-checkable functions: h(s) = 2s, d(z, a) = z/2 + a, R = sum z + sum a, V = sum z."""
    return wm.Bound(encode=lambda s: 2.0 * s, dynamics=lambda z, a: 0.5 * z + a,
                    reward=lambda z, a: z.sum(-1) + a.sum(-1), value=lambda z: z.sum(-1))


def test_td_targets_and_window_mask_by_hand():
    r = jnp.array([[1.0, 2.0, 3.0]])
    term = jnp.array([[0.0, 1.0, 0.0]])
    v = jnp.array([[10.0, 20.0, 30.0]])
    np.testing.assert_allclose(wm.td_targets(r, term, v, 0.9), [[1 + 9.0, 2.0, 3 + 27.0]], rtol=1e-6)
    done = jnp.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    np.testing.assert_array_equal(wm.window_mask(done), [[1, 1, 0, 0], [1, 1, 1, 1]])


def test_world_model_loss_matches_a_manual_unroll():
    cfg = wm.WorldModelConfig(unroll=3, gamma=0.9, rho=0.5, consistency_coef=2.0, reward_coef=0.5, value_coef=0.25)
    B, U, o = 2, 3, 2
    obs, next_obs = RNG.normal(size=(B, U, o)), RNG.normal(size=(B, U, o))
    actions, rewards = RNG.normal(size=(B, U, o)), RNG.normal(size=(B, U))
    term = np.zeros((B, U))
    done = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    window = wm.Window(*(jnp.asarray(x, jnp.float32) for x in (obs, actions, rewards, next_obs, term, done)))
    online = linear_model()
    target = online._replace(encode=lambda s: 3.0 * s, value=lambda z: 2.0 * z.sum(-1))  # a different "EMA" net
    loss, metrics = jax.jit(lambda w: wm.world_model_loss(online, target, w, cfg))(window)
    cons = rew = val = 0.0
    for b in range(B):
        z, alive = 2.0 * obs[b, 0], 1.0
        for t in range(U):
            w = 0.5 ** t * alive
            target_z = 3.0 * next_obs[b, t]
            y = rewards[b, t] + 0.9 * 2.0 * target_z.sum()
            rew += w * (z.sum() + actions[b, t].sum() - rewards[b, t]) ** 2
            val += w * (z.sum() - y) ** 2
            z = 0.5 * z + actions[b, t]
            cons += w * np.mean((z - target_z) ** 2)
            alive *= 1.0 - done[b, t]
    cons, rew, val = cons / B, rew / B, val / B
    np.testing.assert_allclose(metrics["consistency_loss"], cons, rtol=1e-5)
    np.testing.assert_allclose(metrics["reward_loss"], rew, rtol=1e-5)
    np.testing.assert_allclose(metrics["value_loss"], val, rtol=1e-5)
    np.testing.assert_allclose(loss, 2.0 * cons + 0.5 * rew + 0.25 * val, rtol=1e-5)


def test_world_model_loss_gradients_skip_the_target():
    cfg = wm.WorldModelConfig(unroll=2)
    x = lambda *s: jnp.asarray(RNG.normal(size=s), jnp.float32)  # noqa: E731
    window = wm.Window(x(5, 2, 3), x(5, 2, 3), x(5, 2), x(5, 2, 3), jnp.zeros((5, 2)), jnp.zeros((5, 2)))

    def loss(online_scale, target_scale):
        online = linear_model()._replace(encode=lambda s: online_scale * s)
        target = linear_model()._replace(encode=lambda s: target_scale * s, value=lambda z: target_scale * z.sum(-1))
        return wm.world_model_loss(online, target, window, cfg)[0]

    d_online, d_target = jax.jit(jax.grad(loss, argnums=(0, 1)))(2.0, 3.0)
    assert float(d_target) == 0.0 and abs(float(d_online)) > 0.0
    target, online = {"w": jnp.array([1.0, 2.0])}, {"w": jnp.array([3.0, 6.0])}
    np.testing.assert_allclose(wm.ema(target, online, 0.25)["w"], [1.5, 3.0], rtol=1e-6)


@pytest.mark.slow
def test_imagined_return_equals_a_manual_rollout_of_the_latent_model():
    model = wm.WorldModel(4, (8,))
    params = model.init(jax.random.PRNGKey(1), jnp.zeros((1, 3)), jnp.zeros((1, 2)))
    bound = wm.bind(model, params)
    z0 = jnp.asarray(RNG.normal(size=(3, 4)), jnp.float32)
    actions = jnp.asarray(RNG.uniform(-1, 1, size=(3, 5, 2)), jnp.float32)
    got = jax.jit(lambda z, a: wm.imagined_return(bound, z, a, 0.9))(z0, actions)

    @jax.jit
    def manual(z, actions):  # the rollout written out step by step (a Python loop, not the scan)
        total = jnp.zeros(3)
        for h in range(5):
            total = total + 0.9 ** h * bound.reward(z, actions[:, h])
            z = bound.dynamics(z, actions[:, h])
        return total + 0.9 ** 5 * bound.value(z)

    expected = manual(z0, actions)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(wm.imagined_return(linear_model(), jnp.ones((1, 2)), jnp.ones((1, 1, 2)), 0.5),
                               [2.0 + 2.0 + 0.5 * 3.0], rtol=1e-6)  # R(1,1)=4, z1 = 0.5 + 1 -> V = 3


@pytest.mark.slow
def test_flow_sampler_one_step_is_a_hand_euler_step():
    cfg = mbdpo.Config(horizon=3, flow_steps=1, policy_hidden=(8,))
    network = mbdpo.policy_network(cfg, action_dim=2)
    params = network.init(jax.random.PRNGKey(2), jnp.zeros((1, 4)), jnp.zeros((1, 6)), jnp.zeros((1,)))
    z = jnp.asarray(RNG.normal(size=(5, 4)), jnp.float32)
    key = jax.random.PRNGKey(3)
    got = mbdpo.sample_sequences(network, params, z, key, cfg, 2)
    noise = jax.random.normal(key, (5, 6))
    expected = jnp.clip(noise + network.apply(params, z, noise, jnp.zeros(5)), -1, 1).reshape(5, 3, 2)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_improvement_weights_and_resampling_by_hand():
    returns = jnp.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]])
    w = np.asarray(mbdpo.sequence_weights(returns, 0.5))
    std = np.std([1.0, 2.0, 3.0])
    logits = (np.array([-1.0, 0.0, 1.0]) / (std + 1e-6)) / 0.5
    np.testing.assert_allclose(w[0], np.exp(logits) / np.exp(logits).sum(), rtol=1e-5)
    np.testing.assert_allclose(w[1], [1 / 3] * 3, rtol=1e-6)  # equal returns: the old policy unchanged
    candidates = jnp.arange(2 * 3 * 2, dtype=jnp.float32).reshape(2, 3, 2)
    picked = mbdpo.resample(jax.random.PRNGKey(0), candidates, jnp.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))
    np.testing.assert_array_equal(picked, [candidates[0, 2], candidates[1, 1]])


def test_mppi_update_by_hand():
    samples = jnp.asarray(RNG.normal(size=(6, 2, 1)), jnp.float32)
    returns = jnp.array([0.0, 3.0, 1.0, 2.0, -1.0, 2.5])
    mean, std = mbdpo.mppi_update(samples, returns, num_elites=3, temperature=2.0, min_std=0.05, max_std=2.0)
    elite = [1, 5, 3]
    w = np.exp(2.0 * (np.array([3.0, 2.5, 2.0]) - 3.0))
    w /= w.sum()
    s = np.asarray(samples)[elite]
    m = np.einsum("e,eha->ha", w, s)
    np.testing.assert_allclose(mean, m, rtol=1e-5)
    np.testing.assert_allclose(std, np.clip(np.sqrt(np.einsum("e,eha->ha", w, (s - m) ** 2)), 0.05, 2.0), rtol=1e-5)


@pytest.mark.slow
def test_policy_loss_is_flow_matching_on_targets_plus_beta_times_behaviour():
    cfg = mbdpo.Config(horizon=2, policy_hidden=(8,))
    network = mbdpo.policy_network(cfg, 1)
    params = network.init(jax.random.PRNGKey(4), jnp.zeros((1, 3)), jnp.zeros((1, 2)), jnp.zeros((1,)))
    z = jnp.asarray(RNG.normal(size=(4, 3)), jnp.float32)
    seq = jnp.asarray(RNG.uniform(-1, 1, size=(4, 2, 1)), jnp.float32)
    key = jax.random.PRNGKey(5)
    zero_beta = mbdpo.policy_loss(network, params, z, seq, seq, key, 0.0)
    both = mbdpo.policy_loss(network, params, z, seq, seq, key, 1.0)
    k = jax.random.split(key, 4)
    noise, t = jax.random.normal(k[2], (4, 2)), jax.random.uniform(k[3], (4,))
    x_t = (1 - t[:, None]) * noise + t[:, None] * seq.reshape(4, 2)
    behaviour = jnp.mean((network.apply(params, z, x_t, t) - (seq.reshape(4, 2) - noise)) ** 2)
    np.testing.assert_allclose(both - zero_beta, behaviour, rtol=1e-5)


@pytest.mark.parametrize("overrides, words", [
    ({"method": "sac"}, "unknown MBDPO method"),
    ({"mppi_elites": 500}, "mppi_elites"),
    ({"horizon": 0}, "horizon"),
    ({"total_steps": 100, "learning_starts": 100}, "total_steps"),
    ({"min_std": 3.0}, "min_std"),
])
def test_bad_configs_are_usage_errors(overrides, words):
    with pytest.raises(UsageError, match=words):
        mbdpo.Config(**overrides)
    with pytest.raises(UsageError, match="rho"):
        wm.WorldModelConfig(rho=0.0)


def test_discrete_actions_are_refused():
    from longhorizon.envs.registry import make

    with pytest.raises(UsageError, match="continuous action space"):
        mbdpo.check_env(make("CartPole-v1"), mbdpo.Config())
    with pytest.raises(UsageError, match="policy-batch"):
        mbdpo.Config(batch_size=8, policy_batch=16)


TINY = dict(num_envs=2, total_steps=400, learning_starts=42, updates_per_step=4, batch_size=16, horizon=3,
            flow_steps=2, policy_batch=8, num_candidates=4, latent_dim=8, wm_hidden=(16,), unroll=2, policy_hidden=(16,))


@pytest.mark.slow
def test_engine_chunks_prefill_then_reduce_the_world_model_loss():
    """Chunk 1 is the random prefill (parameters untouched), chunk 2 learns: on a fixed replay sample the world-model
    loss of chunk 2's parameters is below chunk 1's, and the policy has moved."""
    from longhorizon.engine.fused import FusedEngine
    from longhorizon.envs.registry import make

    config = mbdpo.Config(**TINY)
    engine = FusedEngine(mbdpo, make("Pendulum-v1"), config, num_seeds=1, updates_per_chunk=20)  # 40 steps: all random
    start = engine.init(0)
    prefilled, first = engine.run_chunk(start)
    trained, second = engine.run_chunk(prefilled)
    one = lambda s: jax.tree.map(lambda x: x[0], s)  # noqa: E731  the only seed
    start, prefilled, trained = one(start), one(prefilled), one(trained)
    assert float(first["learning"][0]) == 0.0 and float(second["learning"][0]) == 1.0
    assert int(prefilled.buffer.size) == 20 and int(trained.buffer.size) == 40 and int(trained.env_steps) == 80
    assert jax.tree.all(jax.tree.map(jnp.array_equal, start.agent.wm_params, prefilled.agent.wm_params))
    assert not jax.tree.all(jax.tree.map(jnp.array_equal, prefilled.agent.policy_params, trained.agent.policy_params))
    data = mbdpo.replay.sample(trained.buffer, jax.random.PRNGKey(7), 64, config.unroll)
    window = wm.Window(data.obs, data.action, data.reward, data.next_obs, data.terminated, data.done)
    model = mbdpo.world_model_network(config)

    def loss(state):
        return float(wm.world_model_loss(wm.bind(model, state.agent.wm_params), wm.bind(model, state.wm_target),
                                         window, config.world_model)[0])

    assert loss(trained) < 0.8 * loss(prefilled)
    assert np.isfinite(second["world_model_loss"]).all() and bool(second["finite"][0])


def test_registered_for_the_runner():
    from longhorizon import algos

    algo = algos.get("mbdpo")
    assert algo.module is mbdpo and algo.steps_per_update(mbdpo.Config(num_envs=3, num_steps=2)) == 6
    from longhorizon.config import apply_overrides, config_overrides

    overrides = config_overrides(mbdpo.Config(**TINY), mbdpo.Config())
    assert overrides["wm_hidden"] == "16" and apply_overrides(mbdpo.Config(), overrides) == mbdpo.Config(**TINY)


def test_claim_rules_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro import mbdpo as repro

    def run(final, start=-1500.0):
        return {"returns": [[start] * len(final), list(final)], "steps": [10, 20], "final": list(final)}

    def verdicts(mb, mppi, ppo, widths=None):
        runs = {"mbdpo-64": run(mb), "mppi": run(mppi), "ppo": run(ppo)}
        runs.update({f"mbdpo-{w}": run(f) for w, f in (widths or {}).items()})
        L = {"setup": {"total_steps": 20, "seeds": 3, "width": 64, "widths": [64, *(widths or {})]},
             "runs": {"Pendulum-v1": runs}}
        return [c.verdict for c in repro.judge(L)[0]]

    good, bad = [-200.0, -210.0, -190.0], [-900.0, -950.0, -920.0]
    assert verdicts(good, bad, bad) == [C.HOLDS, C.HOLDS]
    assert verdicts(bad, good, good) == [C.CONTRADICTED, C.CONTRADICTED]
    assert verdicts(good, bad, [-1300.0, -1250.0, -1400.0])[1] == C.NO_SIGNAL  # PPO no better than a random policy
    stopped = {"mbdpo-64": run([30.0, 25.0, 40.0]), "mppi": run([60.0, 50.0, 70.0], -30.0), "ppo": run([-0.05, -0.1, -0.01], -1.0)}
    L = {"setup": {"total_steps": 20, "seeds": 3, "width": 64, "widths": [64]}, "runs": {"MountainCarContinuous-v0": stopped}}
    found = repro.judge(L)[0]  # PPO learned only to stop pushing: no better than the zero-action policy (0)
    assert [c.verdict for c in found] == [C.CONTRADICTED, C.NO_SIGNAL] and "zero-action" in found[1].evidence["did_not_move"][0]
    rising = {128: [-150.0, -160.0, -140.0], 256: [-100.0, -110.0, -90.0]}
    assert verdicts(good, bad, bad, rising)[2] == C.HOLDS  # the return rises with log2 width
    assert verdicts(good[:2], bad[:2], bad[:2])[0] == C.INCONCLUSIVE  # two seeds never judge


def test_steps_to_reach_reads_the_first_point_whose_mean_reaches_the_target():
    from longhorizon.repro import mbdpo as repro

    arm = {"steps": [100, 200, 300], "returns": [[-900.0, None], [-500.0, -300.0], [-200.0, -100.0]]}
    assert repro.steps_to_reach(arm, -400.0) == 200  # mean of (-500, -300)
    assert repro.steps_to_reach(arm, -900.0) == 100  # the seed without an episode is left out
    assert repro.steps_to_reach(arm, -100.0) is None


def test_a_learning_ppo_arm_gets_its_own_signal_and_steps():
    from longhorizon.repro import mbdpo as repro

    def run(final, steps=20):
        return {"returns": [[-1500.0] * 3, list(final)], "steps": [steps // 2, steps], "final": list(final)}

    runs = {"mbdpo-64": run([-200.0, -210.0, -190.0]), "mppi": run([-900.0, -950.0, -920.0]),
            "ppo": run([-1300.0, -1250.0, -1400.0]), "ppo-400k": run([-150.0, -160.0, -170.0], 400_000)}
    L = {"setup": {"total_steps": 20, "seeds": 3, "width": 64, "widths": [64]}, "runs": {"Pendulum-v1": runs}}
    _, arms = repro.judge(L)
    assert arms["ppo-400k (Pendulum-v1)"]["steps"] == 400_000 and arms["ppo-400k (Pendulum-v1)"]["signal"]["moved"]
    assert not arms["ppo (Pendulum-v1)"]["signal"]["moved"]  # at random-policy level


@pytest.mark.slow  # three compiled training programs (about 30 s of CPU each on 2 cores)
def test_quick_repro_writes_its_files(tmp_path):
    import json

    from longhorizon.repro import mbdpo as repro

    summary = repro.run(str(tmp_path), quick=True)
    for name in ("README.md", "summary.json", "mbdpo.png"):
        assert (tmp_path / name).is_file()
    saved = json.loads((tmp_path / "summary.json").read_text())
    from longhorizon.repro import claims as C

    assert C.validate_summary(saved) == [] and saved["quick"] is True and saved["claims"] == summary["claims"]
    assert [c["verdict"] for c in saved["claims"]] == [C.QUICK] * 2
    readme = (tmp_path / "README.md").read_text()
    assert "## Verdict" in readme and "longhorizon repro mbdpo --quick" in readme and "mbdpo.png" in readme
    arms = saved["runs"]["Pendulum-v1"]
    assert set(arms) == {"mbdpo-16", "mppi", "ppo", "ppo-4k"}
    assert sorted(p.name for p in (tmp_path / "arms").iterdir()) == sorted(f"Pendulum-v1-{a}.json" for a in arms)
    assert all(np.isfinite(arm["final"]).all() for arm in arms.values())
