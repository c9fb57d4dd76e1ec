"""ChunkTrust (issue 21 section 2): the push-place task's dynamics and success test by hand, the demonstrator's
chunk windows, the chunk policy's sampling trace against the plain Euler sampler, flow BC on a tiny dataset,
the horizon selector's scores on constructed traces, the Beta posterior by hand, receding-horizon execution
and the --quick reproduction."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.control import chunk_policy, chunktrust, push_place
from longhorizon.errors import UsageError
from longhorizon.offline import flows
from longhorizon.repro import chunktrust as repro

# the --quick reproduction's settings, so its compiled programs are shared with these tests (compile cache)
ENV = push_place.PushPlaceConfig()
TRUST = chunktrust.ChunkTrustConfig()
TINY = repro.QUICK.policy()


def _state(effector, block, target=(0.5, 0.85), **kw):
    fields = dict(step=jnp.int32(0), nudge_step=jnp.int32(50), nudge=jnp.array([0.1, 0.0]), side=jnp.float32(1.0),
                  touched=jnp.bool_(False), nudged=jnp.bool_(False), success=jnp.bool_(False))
    fields.update(kw)
    return push_place.State(jnp.array(effector), jnp.array(block), jnp.array(target), **fields)


# ----------------------------------------------------------------------------- task
def test_free_motion_moves_by_max_speed_and_stops_at_the_walls():
    _, s, success, phase = push_place.step(_state([0.2, 0.2], [0.8, 0.8]), jnp.array([1.0, -0.5]), ENV)
    np.testing.assert_allclose(s.effector, [0.2 + 0.03, 0.2 - 0.015], atol=1e-7)
    np.testing.assert_allclose(s.block, [0.8, 0.8])
    assert not bool(success) and int(phase) == 0 and int(s.step) == 1
    _, s, _, _ = push_place.step(_state([0.99, 0.01], [0.5, 0.5]), jnp.array([5.0, -1.0]), ENV)  # action clipped
    np.testing.assert_allclose(s.effector, [1.0, 0.0], atol=1e-7)


def test_pushing_moves_the_block_out_of_penetration_along_the_contact_normal():
    # effector (0.5, 0.30) -> (0.5, 0.33); block at (0.5, 0.39) is 0.06 < R = 0.07 away -> block to (0.5, 0.40)
    _, s, _, _ = push_place.step(_state([0.5, 0.30], [0.5, 0.39]), jnp.array([0.0, 1.0]), ENV)
    np.testing.assert_allclose(s.block, [0.5, 0.40], atol=1e-6)
    assert bool(s.touched) and int(push_place.phase_of(s)) == 1
    # an oblique contact: offset (0.03, 0.04) has length 0.05 -> block at effector + 0.07 * (0.6, 0.8)
    block, contact = push_place.push(jnp.array([0.5, 0.5]), jnp.array([0.53, 0.54]), 0.07)
    np.testing.assert_allclose(block, [0.5 + 0.042, 0.5 + 0.056], atol=1e-6)
    assert bool(contact)


def test_success_freezes_the_episode_and_the_nudge_displaces_the_block_once():
    _, s, success, _ = push_place.step(_state([0.5, 0.73], [0.5, 0.79]), jnp.array([0.0, 1.0]), ENV)
    assert bool(success)  # block pushed to (0.5, 0.83): 0.02 < 0.05 from the target
    _, s2, _, _ = push_place.step(s, jnp.array([1.0, 1.0]), ENV)
    np.testing.assert_allclose(s2.effector, s.effector)
    assert int(s2.step) == int(s.step)
    nudged = _state([0.1, 0.1], [0.5, 0.4], step=jnp.int32(4), nudge_step=jnp.int32(5), touched=jnp.bool_(True))
    _, s, _, phase = push_place.step(nudged, jnp.zeros(2), ENV)
    np.testing.assert_allclose(s.block, [0.6, 0.4], atol=1e-6)
    assert bool(s.nudged) and not bool(s.touched) and int(phase) == 1 and int(push_place.phase_of(s)) == 2


def test_config_rejects_bad_values():
    with pytest.raises(UsageError, match="nudge_step_range"):
        push_place.PushPlaceConfig(nudge_step_range=(10, 80))
    with pytest.raises(UsageError, match="max_speed"):
        push_place.PushPlaceConfig(max_speed=0.0)
    with pytest.raises(UsageError, match="horizons"):
        chunktrust.ChunkTrustConfig(horizons=(4, 2))
    with pytest.raises(UsageError, match="threshold"):
        chunktrust.ChunkTrustConfig(threshold=1.0)
    with pytest.raises(UsageError, match="chunk length"):
        TRUST.check_chunk(8)
    with pytest.raises(UsageError, match="chunk"):
        chunk_policy.ChunkPolicyConfig(chunk=0)


@pytest.fixture(scope="module")
def demos():
    return push_place.demonstrations(jax.random.PRNGKey(0), ENV, repro.QUICK.demos, TINY.chunk)


@pytest.mark.slow
def test_demonstrator_succeeds_and_chunks_are_the_next_executed_actions(demos):
    assert float(demos["success"].mean()) >= 0.9  # the scripted expert solves the nudged task
    obs, acts = np.asarray(demos["observations"]), np.asarray(demos["actions"])
    assert acts.shape[1] == TINY.flat_dim and obs.shape[0] == acts.shape[0]
    # consecutive kept rows of one episode: the chunk at t+1 is the chunk at t shifted by one action
    same_episode = np.abs(obs[1:, :2] - obs[:-1, :2]).max(1) < 0.05
    np.testing.assert_allclose(acts[1:][same_episode, :-2], acts[:-1][same_episode, 2:], atol=1e-6)


# ----------------------------------------------------------------------------- policy
@pytest.fixture(scope="module")
def trained(demos):
    init, train = chunk_policy.make_train(TINY, 6)
    data = {"observations": demos["observations"], "actions": demos["actions"]}
    params, losses = flows.train_seeds(init, train, jax.random.split(jax.random.PRNGKey(1), repro.QUICK.seeds), data)
    return jax.tree.map(lambda x: x[0], params), np.asarray(losses[0])


@pytest.mark.slow
def test_flow_bc_loss_decreases_on_a_tiny_dataset(trained):
    _, losses = trained
    assert losses[-30:].mean() < 0.8 * losses[:10].mean()


def test_sample_trace_matches_the_plain_euler_sampler(trained):
    params, _ = trained
    obs = jnp.tile(jnp.array([[0.5, 0.6, 0.0, -2.0, 0.0, 0.45]]), (3, 1))  # start-like observations
    noise = jax.random.normal(jax.random.PRNGKey(2), (3, TINY.flat_dim))
    trace = chunk_policy.sample_trace(TINY, params, obs, noise)
    plain = flows.euler_sample(chunk_policy.velocity(TINY, params), obs, noise, TINY.flow.num_steps)
    np.testing.assert_allclose(trace.chunk.reshape(3, -1), plain, atol=1e-5)
    steps = trace.iterates[1:] - trace.iterates[:-1]
    np.testing.assert_allclose(steps, trace.velocities / TINY.flow.num_steps, atol=1e-5)
    np.testing.assert_allclose(trace.iterates[0].reshape(3, -1), noise)


# ----------------------------------------------------------------------------- selector
@pytest.mark.slow
def test_spectral_instability_by_hand():
    # N = 2, v = (1, 0.5): V_0 = 1.5, V_1 = 0.5, w = (0, 1) -> u = 0.25 / (2.25 + 0.25) = 0.1
    v = jnp.array([[[1.0, 0.0]], [[0.5, 0.0]]])  # [N=2, K=1, d=2]
    assert float(chunktrust.spectral_instability(v)[0]) == pytest.approx(0.1, abs=1e-6)
    n = 10
    constant = jnp.ones((n, 3, 2))
    alternating = jnp.array([(-1.0) ** i for i in range(n)])[:, None, None] * jnp.ones((n, 3, 2))
    np.testing.assert_allclose(chunktrust.spectral_instability(constant), 0.0, atol=1e-6)
    np.testing.assert_allclose(chunktrust.spectral_instability(alternating), 1.0, atol=1e-6)


def test_a_smooth_converging_trace_scores_stable_and_an_oscillating_one_unstable():
    n, target = 10, jnp.array([0.6, -0.4])
    x = target * (1 - 0.7 ** jnp.arange(n + 1))[:, None]  # x_n converges geometrically to the target
    y = target * (1 - (-0.7) ** jnp.arange(n + 1))[:, None]  # the same rate, overshooting back and forth
    smooth, wobble = jnp.diff(x, axis=0) * n, jnp.diff(y, axis=0) * n  # the Euler velocities
    # chunk of K = 2: position 0 settles smoothly, position 1 oscillates
    trace = jnp.stack([smooth, wobble], axis=1)  # [N, K, d]
    u = chunktrust.spectral_instability(trace)
    assert float(u[0]) < 0.2 and float(u[1]) > 0.5
    sigma = chunktrust.spectral_stability(trace, TRUST)
    assert float(sigma[0]) > 10 * float(sigma[1])
    # the prefix score is the running minimum
    np.testing.assert_allclose(chunktrust.prefix_stability(jnp.array([0.9, 0.5, 0.7, 0.2]), (1, 2, 3, 4)),
                               [0.9, 0.5, 0.5, 0.2])


def test_continuity_of_the_chunk_start_with_the_executed_history():
    config = dataclasses.replace(TRUST, continuity_window=1, continuity_scale=0.5)
    history = jnp.array([[0.3, 0.3], [0.2, 0.9]])
    continuous = jnp.array([[0.2, 0.9], [0.2, 1.0]])
    jump = jnp.array([[-0.8, 0.9], [-0.8, 0.9]])
    assert float(chunktrust.continuity(history, continuous, config)) == pytest.approx(1.0)
    assert float(chunktrust.continuity(history, jump, config)) == pytest.approx(math.exp(-2.0), rel=1e-5)
    # m = 2: mean of the last two executed (0.25, 0.6) vs the first two new (0.2, 0.95)
    config2 = dataclasses.replace(config, continuity_window=2)
    assert float(chunktrust.continuity(history, continuous, config2)) == pytest.approx(
        math.exp(-(0.05 ** 2 + 0.35 ** 2) / 0.5), rel=1e-5)


def test_evidence_weights_a_jump_more_against_long_horizons():
    config = dataclasses.replace(TRUST, horizons=(1, 2, 4))
    e = chunktrust.evidence(jnp.array([0.9, 0.8, 0.8, 0.5]), jnp.float32(0.25), config)
    np.testing.assert_allclose(e, [0.9 * 0.25 ** 0.25, 0.8 * 0.25 ** 0.5, 0.5 * 0.25], rtol=1e-5)


def test_beta_posterior_update_with_kernel_forgetting_by_hand():
    config = dataclasses.replace(TRUST, horizons=(1, 4), forgetting=8.0, prior=(1.0, 1.0))
    post = chunktrust.BetaPosterior(jnp.array([3.0, 1.0]), jnp.array([2.0, 5.0]))
    new = chunktrust.update(post, jnp.array([0.5, 1.0]), jnp.float32(8.0), config)
    keep = math.exp(-1.0)
    np.testing.assert_allclose(new.alpha, [1 + 2 * keep + 0.5, 1 + 0 * keep + 1.0], rtol=1e-6)
    np.testing.assert_allclose(new.beta, [1 + 1 * keep + 0.5, 1 + 4 * keep + 0.0], rtol=1e-6)
    # no elapsed time: nothing forgotten; very long: back to the prior before the evidence
    same = chunktrust.update(post, jnp.zeros(2), jnp.float32(0.0), config)
    np.testing.assert_allclose(same.alpha, post.alpha)
    gone = chunktrust.update(post, jnp.zeros(2), jnp.float32(1e4), config)
    np.testing.assert_allclose(gone.beta, [2.0, 2.0], rtol=1e-6)


def test_choose_takes_the_longest_trusted_horizon():
    config = dataclasses.replace(TRUST, horizons=(1, 2, 4, 8), threshold=0.5)
    pick = lambda a, b: int(chunktrust.choose(chunktrust.BetaPosterior(jnp.array(a), jnp.array(b)), config))  # noqa
    assert pick([3.0, 3.0, 1.0, 3.0], [1.0, 1.0, 3.0, 1.0]) == 8  # the longest with mean >= 0.5, not the first
    assert pick([3.0, 3.0, 1.0, 1.0], [1.0, 1.0, 3.0, 3.0]) == 2
    assert pick([1.0, 1.0, 1.0, 1.0], [3.0, 3.0, 3.0, 3.0]) == 1  # nothing trusted: the shortest


# ----------------------------------------------------------------------------- execution
@pytest.mark.slow
def test_fixed_horizons_replan_every_h_steps_and_the_selector_picks_candidates(trained):
    params, _ = trained
    run = chunktrust.make_rollout(TINY, ENV, TRUST)
    for h, latency in ((1, 0), (3, 0), (1, 1), (3, 2)):
        r = run(params, jax.random.PRNGKey(3), repro.QUICK.episodes, h, latency)
        active = np.asarray(r.active).sum(1)
        # a replan every h + latency steps (h executed, latency waited): ceil(active steps / (h + latency))
        np.testing.assert_array_equal(np.asarray(r.replans), -(-active // (h + latency)))
        np.testing.assert_array_equal(np.asarray(r.horizon), h)
    r = run(params, jax.random.PRNGKey(3), repro.QUICK.episodes, 0)
    assert set(np.unique(np.asarray(r.horizon))) <= set(TRUST.horizons)
    with pytest.raises(UsageError, match="fixed horizon"):
        run(params, jax.random.PRNGKey(3), 4, 13)
    with pytest.raises(UsageError, match="latency"):
        run(params, jax.random.PRNGKey(3), 4, 1, -1)


# ----------------------------------------------------------------------------- reproduction
@pytest.mark.slow
def test_quick_repro_writes_its_files_and_is_not_judged(tmp_path):
    from longhorizon.repro import claims as C

    summary = repro.run(str(tmp_path), quick=True)
    assert (tmp_path / "README.md").is_file() and (tmp_path / "horizons.png").is_file()
    assert (tmp_path / "curves" / "chunk_policy_flow_BC.csv").is_file()
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert C.validate_summary(saved) == [] and saved["quick"] is True and saved["claims"] == summary["claims"]
    assert {c["verdict"] for c in saved["claims"]} == {C.QUICK} and len(saved["claims"]) == 3
    assert "longhorizon repro chunktrust --quick" in (tmp_path / "README.md").read_text()


def _arm(success, replans, reach=None, rereach=None):
    return {"success": success, "replans": replans, "horizon_by_phase": {"reach": reach, "re-reach": rereach}}


def _recorded(per_arm, loss_last=0.1):
    seeds = len(per_arm["fixed h=1"])
    return {"setup": {"updates": 100, "seeds": seeds}, "loss_first": 1.0, "loss_last": loss_last,
            "settings": {"replan latency 0, 60 steps": {"per_arm": per_arm}}}


def test_claim_rules_by_hand():
    from longhorizon.repro import claims as C

    verdicts = lambda per_arm, **kw: [c.verdict for c in repro.judge(_recorded(per_arm, **kw))[0]]  # noqa: E731
    fixed = {"fixed h=1": [_arm(0.9, 60)] * 3, "fixed h=4": [_arm(0.8, 15)] * 3}
    better = {**fixed, "ChunkTrust (adaptive)": [_arm(0.96, 20, 8.0, 2.0), _arm(0.94, 22, 6.0, 1.5), _arm(0.95, 21, 7.0, 2.0)]}
    # success +0.05 +- small; replans 21 < 60 (h=4 is not as successful); horizon longer in reach for every seed
    assert verdicts(better) == [C.HOLDS] * 3
    tie = {**fixed, "ChunkTrust (adaptive)": [_arm(0.91, 70, 1.0, 2.0), _arm(0.89, 70, 3.0, 2.0), _arm(0.90, 71, 2.0, 2.0)]}
    assert verdicts(tie) == [C.INCONCLUSIVE, C.CONTRADICTED, C.INCONCLUSIVE]  # 70 replans > 60 at equal success
    worse = {**fixed, "ChunkTrust (adaptive)": [_arm(0.5, 10, 1.0, 2.0), _arm(0.6, 10, 1.0, 2.2), _arm(0.55, 10, 1.1, 2.0)]}
    assert verdicts(worse) == [C.CONTRADICTED, C.INCONCLUSIVE, C.CONTRADICTED]  # less successful than h=1: not comparable
    assert set(verdicts(better, loss_last=1.0)) == {C.NO_SIGNAL}  # the policy did not learn
    two = {k: v[:2] for k, v in better.items()}
    assert verdicts(two) == [C.INCONCLUSIVE] * 3  # 2 seeds never judge
    assert {c.verdict for c in repro.judge(_recorded(better), quick=True)[0]} == {C.QUICK}
