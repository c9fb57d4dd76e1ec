"""INPO: the pairwise loss's minimiser is the OMD iterate, its value by hand, the intransitive oracle, one step of
each policy-level loss by hand, and the quick reproduction writes its folder."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.games import inpo, preference
from longhorizon.games import preference_lm as plm
from longhorizon.lm.tasks import make_problems


def random_case(n, seed):
    rng = np.random.default_rng(seed)
    P = preference.random_skew_game(n, seed)
    return P, rng.dirichlet(np.full(n, 2.0)), rng.dirichlet(np.full(n, 2.0))


@pytest.mark.parametrize("n", [3, 10])
def test_minimiser_is_the_omd_iterate_and_a_perturbed_loss_is_not(n):
    P, ref, pi_t = random_case(n, n)
    cfg = inpo.INPOConfig(tau=0.1, eta=2.0)
    omd = np.log(preference.omd_update(pi_t, P, cfg.tau, cfg.eta, ref))
    assert np.abs(np.log(inpo.minimise_pairwise_loss(pi_t, ref, P, cfg)) - omd).max() < 1e-5
    # the loss with its pi_t / pi_ref exponents moved by 0.01, or with a different eta in the target: the identity fails
    for wrong in (inpo.INPOConfig(tau=0.105, eta=2.0), inpo.INPOConfig(tau=0.2, eta=1.0)):
        assert np.abs(np.log(inpo.minimise_pairwise_loss(pi_t, ref, P, wrong)) - omd).max() > 1e-3


def test_bernoulli_loss_equals_the_win_rate_regression_up_to_a_constant():
    P, ref, pi_t = random_case(10, 1)
    cfg = inpo.INPOConfig(tau=0.3, eta=1.5)
    rng = np.random.default_rng(2)
    gaps = [inpo.pairwise_loss(lp, np.log(pi_t), np.log(ref), P, cfg) - inpo.target_loss(lp, np.log(pi_t), np.log(ref), P, cfg)
            for lp in np.log(rng.dirichlet(np.ones(10), size=3))]
    assert np.ptp(gaps) < 1e-12 and abs(gaps[0]) > 1e-3  # constant, and not trivially zero


def test_loss_value_and_gradient_by_hand_on_two_responses():
    # pi_t = pi_ref = (1/2, 1/2): h(0, 1) = log pi(0)/pi(1); P(0 > 1) = 0.8
    P = np.array([[0.5, 0.8], [0.2, 0.5]])
    cfg = inpo.INPOConfig(tau=0.5, eta=1.0)
    half = np.log([0.5, 0.5])
    log_pi = np.log([0.75, 0.25])  # h(0, 1) = log 3
    h, eta = np.log(3.0), 1.0
    # ordered pairs (0,1) and (1,0) each with weight 1/4; (0,0), (1,1): h = 0 with P = 1/2 -> (eta/2)^2 each
    by_hand = 0.25 * (0.8 * (h - eta / 2) ** 2 + 0.2 * (h + eta / 2) ** 2) \
        + 0.25 * (0.2 * (-h - eta / 2) ** 2 + 0.8 * (-h + eta / 2) ** 2) + 0.5 * (eta / 2) ** 2
    assert inpo.pairwise_loss(log_pi, half, half, P, cfg) == pytest.approx(by_hand, rel=1e-12)
    eps = 1e-6
    numeric = [(inpo.pairwise_loss(log_pi + eps * e, half, half, P, cfg) - inpo.pairwise_loss(log_pi - eps * e, half, half, P, cfg))
               / (2 * eps) for e in np.eye(2)]
    np.testing.assert_allclose(inpo.pairwise_loss_grad(log_pi, half, half, P, cfg), numeric, atol=1e-8)
    # the minimiser: h = eta (P(0 > pi_t) - P(1 > pi_t)) = 0.65 - 0.35 = 0.3
    best = inpo.minimise_pairwise_loss(np.array([0.5, 0.5]), np.array([0.5, 0.5]), P, cfg)
    assert np.log(best[0] / best[1]) == pytest.approx(0.3, abs=1e-12)


def test_sampled_pairs_move_toward_the_regularised_nash_policy():
    P, ref = preference.intransitive_3x3(), np.array([0.6, 0.3, 0.1])
    cfg = inpo.INPOConfig(tau=0.1, eta=2.0, pairs=1024, sgd_steps=50, learning_rate=1.0)
    kls = inpo.sampled_inpo(P, ref, preference.regularised_nash(P, 0.1, ref), cfg, iterations=10, seed=0)
    assert kls[-3:].mean() < 0.1 * kls[0]


def test_bad_inpo_settings_are_refused():
    with pytest.raises(UsageError, match="eta \\* tau"):
        inpo.INPOConfig(tau=0.5, eta=3.0)
    with pytest.raises(UsageError, match="positive"):
        inpo.INPOConfig(tau=0.0)
    with pytest.raises(UsageError, match="P \\+ P\\^T = 1"):
        inpo.minimise_pairwise_loss(np.array([0.5, 0.5]), np.array([0.5, 0.5]), np.array([[0.5, 0.9], [0.9, 0.5]]),
                                    inpo.INPOConfig())


# ----------------------------------------------------------------------------- the oracle


PROBLEM = make_problems("packed", 1, 1, seed=3)[0]
RIGHT = PROBLEM.target  # "w=NN;"
WRONG = f"{PROBLEM.final}={dict(PROBLEM.answers)[PROBLEM.final] + 1};"


def test_oracle_is_a_preference_with_a_cyclic_triple():
    oracle = plm.Oracle()
    texts = [RIGHT + "r", RIGHT + "p", RIGHT + "s", RIGHT, WRONG + "r", WRONG + "p", "garbage"]
    P = oracle.matrix(PROBLEM, texts, texts)
    np.testing.assert_allclose(P + P.T, 1.0)
    assert P.min() >= 0 and P.max() <= 1
    r, p, s = 0, 1, 2
    assert P[r, s] == P[s, p] == P[p, r] == pytest.approx(0.9)  # r > s > p > r: a cycle, no scalar reward orders it
    assert P[r, 4] == P[2, 5] == 1.0  # correctness first, whatever the tags
    assert P[3, r] == 0.5 and P[4, 6] == 0.5  # no tag: the cyclic part ties
    with pytest.raises(UsageError, match="cyclic_margin"):
        plm.Oracle(cyclic_margin=0.7)


def test_win_rate_rewards_by_hand():
    oracle = plm.Oracle()
    rows = [PROBLEM] * 4
    texts = [RIGHT + "r", RIGHT + "s", WRONG + "p", RIGHT + "r"]
    # row 0 vs rows 1, 2, 3: 0.9 (r beats s), 1.0 (correct vs wrong), 0.5 (same) -> 0.8
    got = plm.win_rates_in_group(oracle, rows, texts, group_size=4)
    np.testing.assert_allclose(got, [(0.9 + 1 + 0.5) / 3, (0.1 + 1 + 0.1) / 3, 0.0, (0.5 + 0.9 + 1) / 3])
    against = plm.win_rates_against(oracle, rows, texts, [RIGHT + "p"] * 4, group_size=4)
    np.testing.assert_allclose(against, [0.1, 0.9, 0.0, 0.1])  # p beats r, s beats p
    # Nash-MP's policy-gradient step pushes up exactly the completions that beat their group on average
    from longhorizon.lm.grpo import group_advantages

    np.testing.assert_allclose(group_advantages(got, [0] * 4, "none"), got - got.mean(), atol=1e-6)
    assert (np.sign(group_advantages(got, [0] * 4, "none")) == [1, -1, -1, 1]).all()


def test_tag_mix_helpers_by_hand():
    # describe_samples: two problems, two samples each; accuracy, tag shares (None: no tag) and the mean log-ratio
    sample = {"texts": [[RIGHT + "r", WRONG + "p"], [RIGHT + "r", RIGHT]], "log_ratio": np.array([0.1, 0.3, 0.2, 0.2])}
    d = plm.describe_samples([PROBLEM, PROBLEM], sample)
    assert d["accuracy"] == 0.75 and d["kl_to_ref"] == pytest.approx(0.2)
    assert d["tags"] == {"r": 0.5, "p": 0.25, "s": 0.0, "None": 0.25}
    # tagged: every target gets one tag of the mix, in the mix's proportions
    mix = {"r": 0.6, "p": 0.3, "s": 0.1}
    data = plm.tagged([PROBLEM] * 2000, np.random.default_rng(0), mix)
    shares = {t: np.mean([p.target == PROBLEM.target + t for p in data]) for t in mix}
    assert all(abs(shares[t] - mix[t]) < 0.04 for t in mix)
    # nash_tag_mix: with a vanishing KL weight the cyclic game's Nash mix is uniform; a large one keeps the reference
    assert list(plm.nash_tag_mix(plm.Oracle(), 1e-3, mix).values()) == pytest.approx([1 / 3] * 3, abs=0.02)
    assert list(plm.nash_tag_mix(plm.Oracle(), 1e3, mix).values()) == pytest.approx(list(mix.values()), abs=0.01)


# ----------------------------------------------------------------------------- policy-level losses


def test_pair_losses_and_their_gradients_by_hand():
    lw, ll, rw, rl, ow, ol = (jnp.array([v]) for v in (-1.0, -2.0, -1.5, -1.5, -1.2, -1.8))
    tau, eta = 0.25, 2.0
    # INPO: h = (1) - 0.5 (0) - 0.5 (0.6) = 0.7; loss (0.7 - 1)^2 = 0.09; d/dlogp_w = 2 (h - eta/2) = -0.6 (< 0: raise the winner)
    value, grad = jax.value_and_grad(lambda w: plm.pair_loss("inpo", w, ll, rw, rl, ow, ol, tau=tau, eta=eta).sum())(lw)
    assert float(value) == pytest.approx(0.09, abs=1e-6) and float(grad[0]) == pytest.approx(-0.6, abs=1e-6)
    # DPO: margin 1; loss -log sigmoid(0.25); d/dlogp_w = -tau sigmoid(-tau margin)
    value, grad = jax.value_and_grad(lambda w: plm.pair_loss("dpo", w, ll, rw, rl, tau=tau).sum())(lw)
    assert float(value) == pytest.approx(np.log1p(np.exp(-0.25)), abs=1e-6)
    assert float(grad[0]) == pytest.approx(-0.25 / (1 + np.exp(0.25)), abs=1e-6)
    # IPO: (1 - 1/(2 tau))^2 = (1 - 2)^2 = 1; d/dlogp_w = 2 (1 - 2) = -2
    value, grad = jax.value_and_grad(lambda w: plm.pair_loss("ipo", w, ll, rw, rl, tau=tau).sum())(lw)
    assert float(value) == pytest.approx(1.0, abs=1e-6) and float(grad[0]) == pytest.approx(-2.0, abs=1e-6)
    with pytest.raises(UsageError, match="unknown"):
        plm.pair_loss("kto", lw, ll, rw, rl, tau=tau)


def test_unknown_pairwise_loss_is_refused_before_anything_is_built():
    with pytest.raises(UsageError, match="unknown"):
        plm.PairwiseTrainer(None, None, None, None, loss="kto", oracle=plm.Oracle(), tau=0.1)
    with pytest.raises(UsageError, match="inner_steps"):
        plm.PairwiseTrainer(None, None, None, None, loss="inpo", oracle=plm.Oracle(), tau=0.1, inner_steps=0)


def test_all_pairs_within_groups():
    np.testing.assert_array_equal(plm.all_pairs(3, 2), [[0, 1], [0, 2], [1, 2], [3, 4], [3, 5], [4, 5]])


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    from longhorizon.repro import inpo as repro

    out = tmp_path_factory.mktemp("inpo")
    summary = repro.run(str(out), quick=True)
    return out, summary


@pytest.mark.slow
def test_one_pairwise_step_raises_the_winners_margin(quick_run):
    """One INPO optimiser step on a fixed batch from the quick run's reference: the pair loss falls."""
    from longhorizon.repro import inpo as repro

    setup = repro.QUICK_LM
    params, model_cfg, tokenizer = repro.reference_policy(setup)
    trainer = repro.make_trainer("inpo", params, model_cfg, tokenizer, setup, plm.Oracle())
    problems = make_problems("packed", 1, setup.prompts_per_step, seed=5, cfg=repro.task_config())
    ro = trainer.rollout(problems)
    batch = plm.grouped_batch(ro, setup.num_generations, tokenizer.pad_id)
    batch["ref_seq"] = batch["old_seq"]  # pi_t = pi_ref here
    pairs = plm.all_pairs(setup.num_generations, len(problems))
    batch.update(winner=pairs[:, 0].astype(np.int32), loser=pairs[:, 1].astype(np.int32),
                 which=np.eye(3, dtype=np.float32)[0], tau=np.float32(setup.tau), eta=np.float32(setup.eta))
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    old = np.asarray(batch["old_seq"])
    sequence_logprobs = jax.jit(plm.sequence_logprobs, static_argnums=2)
    np.testing.assert_allclose(sequence_logprobs(trainer.params, batch, model_cfg), old, atol=1e-4)  # scores what was drawn

    def loss(seq):  # pi_t = pi_ref: h_t = log pi(w)/pi_t(w) - log pi(l)/pi_t(l), 0 before the step
        gain = seq - old
        return float(np.mean((gain[pairs[:, 0]] - gain[pairs[:, 1]] - setup.eta / 2) ** 2))

    params, _, metrics = plm.pair_update(trainer.params, trainer.opt_state, batch, model_cfg=model_cfg,
                                         optimizer=trainer.optimizer)
    assert float(metrics["loss"]) == pytest.approx(setup.eta**2 / 4, rel=1e-4)
    assert loss(np.asarray(sequence_logprobs(params, batch, model_cfg))) < setup.eta**2 / 4


@pytest.mark.slow
def test_quick_repro_writes_its_folder(quick_run):
    from longhorizon.repro import inpo as repro

    out, summary = quick_run
    readme = (out / "README.md").read_text()
    assert "longhorizon repro inpo --quick" in readme and "## Verdict" in readme and "|---|" in readme
    assert (out / "inpo.png").stat().st_size > 1000
    from longhorizon.repro import claims as C

    saved = json.loads((out / "summary.json").read_text())
    assert C.validate_summary(saved) == [] and saved["quick"] is True and saved["claims"] == summary["claims"]
    assert {c["verdict"] for c in saved["claims"]} == {C.QUICK}
    assert saved["claims"][0]["evidence"]["error"] < repro.IDENTITY_TOLERANCE  # the identity's numbers are kept
    assert (out / "curves" / "inpo.csv").exists()
    names = saved["policy_level"]["names"]
    assert names[0] == "reference" and len(saved["policy_level"]["matrix"]) == len(names) == 1 + len(repro.ARMS)


def _recorded(inpo_vs=(0.6, 0.62, 0.58), rival_vs_ref=0.55, ratios=(0.01, 0.02, 0.03), kl=0.5):
    """Recorded numbers of three RL seeds: INPO's win rate against every other policy, each rival's against pi_ref."""
    from longhorizon.repro import inpo as repro

    names = ["reference", *repro.ARMS]
    seeds = []
    for w in inpo_vs:
        m = np.full((len(names), len(names)), 0.5)
        m[1, :] = w
        m[2:, 0] = rival_vs_ref
        policies = {n: {"kl_to_ref": 0.0 if n == "reference" else kl, "tags": {"r": 0.6, "p": 0.3, "s": 0.1}} for n in names}
        policies["inpo"]["tags"] = {"r": 1 / 3, "p": 1 / 3, "s": 1 / 3}
        seeds.append({"matrix": m.tolist(), "policies": policies})
    return {"identity": [{"n": 3, "max_log_error": 1e-14, "perturbed_min_log_error": 1e-2}],
            "convergence": {"3": {"kl0": 1.0, "sampled_final_ratio": 0.02, "sampled_final_ratios": list(ratios)}},
            "policy_level": {"names": names, "per_seed": seeds,
                             "curves": {a: [[{"step": 0, "kl_to_ref": 0.0}]] * 3 for a in repro.ARMS}},
            "setups": {"tabular": {"iterations": 10, "seeds": 3}, "lm": {"steps": 2}}}


def test_claim_rules_by_hand():
    from longhorizon.repro import claims as C
    from longhorizon.repro import inpo as repro

    verdicts = lambda **kw: [c.verdict for c in repro.judge(_recorded(**kw))[0]]  # noqa: E731
    identity, conv, ref, *heads, tags = verdicts()
    assert (identity, conv, ref, tags) == (C.HOLDS,) * 4 and heads == [C.HOLDS] * 4
    assert verdicts(inpo_vs=(0.4, 0.42, 0.38))[2] == C.CONTRADICTED
    assert verdicts(inpo_vs=(0.6, 0.4, 0.5))[2] == C.INCONCLUSIVE
    assert verdicts(inpo_vs=(0.6, 0.62))[2] == C.INCONCLUSIVE  # 2 seeds never judge
    assert verdicts(ratios=(0.3, 0.4, 0.35))[1] == C.CONTRADICTED
    assert verdicts(rival_vs_ref=0.5)[3:7] == [C.NO_SIGNAL] * 4  # rivals no better than pi_ref: crippled baselines
    assert set(verdicts(kl=0.0)[2:]) == {C.NO_SIGNAL}  # INPO never left pi_ref
    bad = _recorded()
    bad["identity"][0]["max_log_error"] = 1e-3
    assert repro.judge(bad)[0][0].verdict == C.CONTRADICTED
    bad["identity"][0]["perturbed_min_log_error"] = 1e-6  # the check cannot tell
    assert repro.judge(bad)[0][0].verdict == C.NO_SIGNAL
    del bad["convergence"]["3"]["sampled_final_ratios"]  # a summary without per-seed ratios
    assert repro.judge(bad)[0][1].verdict == C.INCONCLUSIVE
    assert {c.verdict for c in repro.judge(_recorded(), quick=True)[0]} == {C.QUICK}
    assert repro.exploitability({"r": 1 / 3, "p": 1 / 3, "s": 1 / 3}) == pytest.approx(0.0, abs=1e-12)
    assert repro.exploitability({"r": 0.5, "p": 0.0, "s": 0.0, "None": 0.5}) == pytest.approx(0.4)  # p beats pure r
    assert dataclasses.is_dataclass(repro.QUICK_LM)
