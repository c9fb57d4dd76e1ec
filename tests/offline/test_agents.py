"""The agents' mathematics against hand-computed values, short training runs that measurably learn,
and the training entry point's dry run, refusals, NaN stop and Ctrl-C save."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.core.losses import awr_weights, expectile_loss
from longhorizon.errors import TrainingDiverged, UsageError
from longhorizon.offline import agents, samplers as S
from longhorizon.offline import train as T
from longhorizon.offline.agents import hiql, ota
from longhorizon.offline.nets import expectile_value_loss, td_targets
from longhorizon.runner.interrupts import Interrupted

GAMMA = 0.9


def hand_dataset(lengths=(4, 3, 5)):
    """test_samplers' dataset: trajectories 0-3, 4-6, 7-11; observation i is [i, 10 * trajectory]."""
    traj = np.concatenate([np.full(n, k) for k, n in enumerate(lengths)])
    idx = np.arange(len(traj), dtype=np.float32)
    return {"observations": np.stack([idx, 10.0 * traj], 1), "next_observations": np.stack([idx + 1, 10.0 * traj], 1),
            "actions": np.ones((len(traj), 2), np.float32), "terminals": np.concatenate([np.eye(n)[-1] for n in lengths])}


DATA = S.goal_data(hand_dataset())


# --- losses by hand -------------------------------------------------------------------------------
def test_expectile_loss_by_hand():
    diff = jnp.array([2.0, -1.0, 0.5])
    np.testing.assert_allclose(expectile_loss(diff, 0.9), [0.9 * 4, 0.1 * 1, 0.9 * 0.25], rtol=1e-6)
    # weighted by another sign (HIQL: the target network's advantage)
    np.testing.assert_allclose(expectile_loss(diff, 0.7, sign=jnp.array([-1.0, 1.0, 0.0])), [0.3 * 4, 0.7, 0.7 * 0.25], rtol=1e-6)


def test_awr_weights_by_hand():
    np.testing.assert_allclose(awr_weights(jnp.array([0.0, 0.5, -1.0, 2.0]), 3.0),
                               [1.0, np.exp(1.5), np.exp(-3.0), 100.0], rtol=1e-6)  # exp(6) > 100 is clipped


def test_expectile_value_loss_by_hand():
    # V(s, g) looked up from a table; head 1 is head 0 + 1, and the target net is the online net + 0.5
    def value_fn(params, obs, goals):
        v = params + obs[:, 0] * 0.0 - obs[:, 0]
        return jnp.stack([v, v + 1.0])

    obs, next_obs, goals = jnp.array([[1.0], [2.0]]), jnp.array([[2.0], [3.0]]), jnp.zeros((2, 1))
    rewards, masks = jnp.array([-1.0, 0.0]), jnp.array([1.0, 0.0])
    loss, _ = expectile_value_loss(value_fn, 0.0, 0.5, obs, next_obs, goals, rewards, masks, GAMMA, 0.8)
    # target net: V'(2) = (-1.5, -0.5), V'(3) = (-2.5, -1.5); V'(1) = (-0.5, 0.5), V'(2) = (-1.5, -0.5)
    y = np.array([[-1 + GAMMA * -1.5, 0.0], [-1 + GAMMA * -0.5, 0.0]])
    adv = np.array([-1 + GAMMA * -1.5 - 0.0, 0.0 - (-1.0)])  # r + g m min_j V'(s') - mean_j V'(s)
    v = np.array([[-1.0, -2.0], [0.0, -1.0]])
    w = np.where(adv >= 0, 0.8, 0.2)
    np.testing.assert_allclose(loss, np.mean(np.sum(w * (y - v) ** 2, axis=0)), rtol=1e-6)


# --- the OTA target on the hand-built trajectory ---------------------------------------------------
def hand_value(params, obs, goals):
    """V(s, g) = -|g - s| in index units (obs[:, 0] is the index), two equal heads."""
    v = -jnp.abs(goals[:, 0] - obs[:, 0])
    return jnp.stack([v, v])


@pytest.mark.parametrize("n, idx, goal, expected", [
    (3, 7, 11, -1 + GAMMA * -1.0),  # tau = t + 3: s_tau = 10, one step short of the goal
    (3, 7, 8, -1.0),  # the goal is reached inside the option: tau = goal step, V(g, g) = 0
    (3, 10, 2, -1 + GAMMA * -10.0),  # goal in another trajectory: tau = T + 1, s_tau = next obs of 11 (12)
    (3, 9, 9, 0.0),  # the state is the goal: r = 0, m = 0
    (5, 7, 11, -1.0),  # n past the goal: tau = goal
    (1, 7, 11, -1 + GAMMA * -3.0),  # n = 1: HIQL's one-step target from next_observations[7] (8)
])
def test_ota_target_by_hand(n, idx, goal, expected):
    idx, goal = jnp.array([idx]), jnp.array([goal])
    reward, mask = S.goal_rewards(idx, goal)
    s_tau = DATA.next_observations[S.option_ends(DATA, idx, goal, n)]
    y = td_targets(hand_value(None, s_tau, DATA.observations[goal]), reward, mask, GAMMA)
    np.testing.assert_allclose(y, [[expected], [expected]], rtol=1e-6)


def test_ota_batches_bootstrap_from_the_option_end_and_n1_is_hiql():
    for n in (1, 3):
        config = ota.Config(batch_size=512, option_length=n, subgoal_steps=2)
        batch = ota.sample(jax.random.PRNGKey(0), DATA, config)
        v = batch.value
        ends = S.option_ends(DATA, v.idx, v.goal_idx, n)
        np.testing.assert_array_equal(batch.high_next, DATA.next_observations[ends])
        if n == 1:  # HIQL's batch, bit for bit, from the same key
            np.testing.assert_array_equal(batch.high_next, v.next_observations)
            same = hiql.sample(jax.random.PRNGKey(0), DATA, hiql.Config(batch_size=512, subgoal_steps=2))
            jax.tree.map(np.testing.assert_array_equal, batch, same)
        np.testing.assert_array_equal(batch.low_goals, DATA.observations[S.subgoals(DATA, v.idx, 2)])


# --- short training runs that learn ----------------------------------------------------------------
def line_dataset(trajectories=12, length=12, seed=0):
    """Points moving at constant speed along x (direction +-1 per trajectory), y fixed per trajectory."""
    rng = np.random.default_rng(seed)
    obs, nxt, act, term = [], [], [], []
    for _ in range(trajectories):
        d, x, y = rng.choice([-1.0, 1.0]), rng.uniform(-0.5, 0.5), rng.uniform(-1, 1)
        for t in range(length):
            obs.append([x + 0.1 * d * t, y]), nxt.append([x + 0.1 * d * (t + 1), y])
            act.append([d, 0.0]), term.append(float(t == length - 1))
    return {k: np.asarray(v, np.float32) for k, v in
            dict(observations=obs, next_observations=nxt, actions=act, terminals=term).items()}


LINE = line_dataset()
LENGTH = 12
SMALL = {"hidden": "64,64", "batch_size": "128", "learning_rate": "1e-3", "discount": str(GAMMA)}


def pairs():
    """Every (state, goal ahead in its trajectory) pair of LINE and its distance in steps."""
    i, j = np.triu_indices(LENGTH, 1)
    starts = np.arange(0, len(LINE["observations"]), LENGTH)[:, None]
    return (starts + i).ravel(), (starts + j).ravel(), np.tile(j - i, len(starts))


def value_error(agent, params, config, steps_per_unit=1):
    i, j, k = pairs()
    units = np.ceil(k / steps_per_unit)  # OTA's value counts options of n steps
    truth = -(1 - GAMMA**units) / (1 - GAMMA)
    v = agent.values(params, jnp.asarray(LINE["observations"][i]), jnp.asarray(LINE["observations"][j]), config)
    return float(np.mean(np.abs(np.asarray(v) - truth)))


def first_seed(tree):
    return jax.tree.map(lambda x: x[0], tree)


def run(tmp_path, agent, overrides, updates=300, seeds=1, chunks=2, **kw):
    spec = T.OfflineSpec(agent, LINE, {**SMALL, **overrides}, seeds=seeds, num_updates=updates, num_chunks=chunks,
                         out=str(tmp_path / agent), quiet=True, **kw)
    return spec, T.train(spec)


@pytest.mark.slow
def test_gcbc_matches_the_dataset_actions(tmp_path):
    _, summary = run(tmp_path, "gcbc", {})
    assert summary["status"] == "completed"
    gcbc = agents.get("gcbc")
    config, i, j = gcbc.Config(hidden=(64, 64)), *pairs()[:2]
    obs, goals = jnp.asarray(LINE["observations"][i]), jnp.asarray(LINE["observations"][j])
    error = lambda params: float(np.mean(np.sum((gcbc.act(params, obs, goals, config) - LINE["actions"][i]) ** 2, -1)))
    before, after = error(gcbc.init(jax.random.PRNGKey(0), 2, 2, config).params), error(first_seed(summary["state"].params))
    assert after < 0.1 < 0.9 < before, (before, after)


@pytest.mark.slow
@pytest.mark.parametrize("agent, overrides", [("gcivl", {}), ("ota", {"subgoal_steps": "3", "option_length": "3"})])
def test_value_agents_learn_the_goal_conditioned_value(tmp_path, agent, overrides):
    """GCIVL's V and OTA's two values: V (HIQL's, one step per unit; OTA trains it exactly as HIQL does,
    so this run covers HIQL's value, and test_repro_ota trains HIQL itself) and V^h (one option of 3 steps per unit)."""
    module = agents.get(agent)
    # a faster target network (tau 0.05, not 0.005) so the values propagate within a few hundred updates
    spec, summary = run(tmp_path, agent, {**overrides, "tau": "0.05"}, updates=800, seeds=2 if agent == "ota" else 1)
    config = T.OfflineRun(spec).config
    untrained, trained = module.init(jax.random.PRNGKey(0), 2, 2, config).params, first_seed(summary["state"].params)
    checks = [(module, 1, lambda p: p)]
    if agent == "ota":  # hiql.values reads V when the parameters hold no high value
        checks = [(module, 3, lambda p: p), (hiql, 1, lambda p: {k: v for k, v in p.items() if k != "high_value"})]
    for values_of, unit, pick in checks:
        before, after = value_error(values_of, pick(untrained), config, unit), value_error(values_of, pick(trained), config, unit)
        assert after < 0.35 * before, (agent, unit, before, after)
    assert np.isfinite(summary["updates_per_second"])


@pytest.mark.slow
def test_hiql_learns_and_its_high_level_uses_v(tmp_path):
    """HIQL's own update on a tiny dataset: finite, every loss reported, and V learns (fewer updates)."""
    spec, summary = run(tmp_path, "hiql", {"subgoal_steps": "3", "tau": "0.05"}, updates=800)
    config = T.OfflineRun(spec).config
    before = value_error(hiql, hiql.init(jax.random.PRNGKey(0), 2, 2, config).params, config)
    assert value_error(hiql, first_seed(summary["state"].params), config) < 0.35 * before
    row = json.loads((tmp_path / "hiql" / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"value_loss", "low_actor_loss", "high_actor_loss"} <= set(row) and "high_value_loss" not in row


# --- the entry point: dry run, refusals, NaN, Ctrl-C -----------------------------------------------
def test_dry_run_returns_the_plan_and_writes_nothing(tmp_path):
    spec = T.OfflineSpec("ota", "pointmaze-giant-stitch-v0", {"option_length": "10"}, preset="paper", seeds=3,
                         num_updates=1000, num_chunks=3, out=str(tmp_path / "run"))
    plan = T.dry_run(spec)
    assert plan["config"]["option_length"] == 10 and plan["config"]["hidden"] == (512, 512, 512)
    assert plan["config"]["batch_size"] == 1024 and plan["updates_per_chunk"] == 334 and plan["num_chunks"] == 3
    assert plan["eval_env"] == "pointmaze-giant-stitch-v0" and not (tmp_path / "run").exists()


@pytest.mark.parametrize("spec, words", [
    (dict(agent="hiqll"), "did you mean 'hiql'"),
    (dict(config_overrides={"option_lenght": "3"}), "did you mean --option-length"),
    (dict(config_overrides={"option_length": "0"}), "--option-length must be positive"),
    (dict(config_overrides={"discount": "1.5"}), "--discount must lie strictly between 0 and 1"),
    (dict(config_overrides={"value_p_random": "0.9"}), "sum to 1"),
    (dict(config_overrides={"hidden": "abc"}), "expects a value of type"),
    (dict(dataset="pointmaze-gaint-stitch-v0"), "unknown dataset"),
    (dict(dataset="/nonexistent/data.npz"), "does not exist"),
    (dict(preset="tpu"), "unknown preset"),
    (dict(seeds=0), "--seeds must be at least 1"),
    (dict(eval_every=2), "--eval-every needs --eval-episodes"),
    (dict(dataset="/tmp/x.npz", eval_episodes=2), "--eval-env"),
])
def test_bad_input_is_one_sentence_usage_error(tmp_path, spec, words):
    base = dict(agent="ota", dataset="pointmaze-giant-stitch-v0", out=str(tmp_path / "run"))
    with pytest.raises(UsageError, match=words):
        T.dry_run(T.OfflineSpec(**{**base, **spec}))
    assert not (tmp_path / "run").exists()


def test_a_folder_holding_a_run_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(UsageError, match="already holds a run"):
        T.dry_run(T.OfflineSpec("gcbc", LINE, out=str(tmp_path / "run")))


def test_nan_stops_naming_the_chunk_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    real = agents.update

    def poisoned(agent, config, state, data):  # the loss turns NaN from update 150 on
        new, metrics = real(agent, config, state, data)
        return new, {**metrics, "loss": jnp.where(state.step >= 150, jnp.nan, metrics["loss"])}

    monkeypatch.setattr(agents, "update", poisoned)
    with pytest.raises(TrainingDiverged, match="during chunk 2"):
        run(tmp_path, "gcbc", {})
    meta = json.loads((tmp_path / "gcbc" / "checkpoints" / "latest.json").read_text())
    assert meta["chunk"] == 1 and meta["step"] == 150
    assert json.loads((tmp_path / "gcbc" / "summary.json").read_text())["status"] == "diverged"


def test_ctrl_c_saves_the_last_finished_chunk_and_resume_continues(tmp_path, monkeypatch):
    calls = []
    from longhorizon.runner.progress import ChunkProgress

    real = ChunkProgress.update

    def interrupt_after_first(self, completed, row):
        real(self, completed, row)
        calls.append(completed)
        if len(calls) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(ChunkProgress, "update", interrupt_after_first)
    spec = T.OfflineSpec("gcbc", LINE, SMALL, num_updates=300, num_chunks=2, out=str(tmp_path / "run"), quiet=True)
    with pytest.raises(Interrupted, match="chunk 1 of 2 is saved"):
        T.train(spec)
    assert json.loads((tmp_path / "run" / "checkpoints" / "latest.json").read_text())["chunk"] == 1
    summary = T.train(spec, resume=True)
    assert summary["status"] == "completed" and summary["updates"] == 300 and calls == [150, 300]
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [150, 300]


def test_spec_from_cli_strings():
    spec = T.spec_from_cli("ota", "pointmaze-large-stitch-v0", ["option-length=10", "hidden=128,128"], seeds=3)
    plan = T.dry_run(spec)
    assert plan["config"]["option_length"] == 10 and plan["config"]["hidden"] == (128, 128) and plan["seeds"] == 3
    with pytest.raises(UsageError, match="KEY=VALUE"):
        T.spec_from_cli("ota", "pointmaze-large-stitch-v0", ["option_length"])
