"""Branching rollouts (lm/agents/branching.py): prefixes replayed into fresh environments, b continuations, records."""

import jax
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.agents import envs
from longhorizon.lm.agents.branching import BranchConfig, BranchingRollout, TreeRollouts, tree_shape, turn_actions
from longhorizon.lm.agents.rollout import AgentConfig, MultiTurnRollout
from longhorizon.lm.agents.tree import build_tree, node_advantages
from longhorizon.lm.policy import tiny_random

AGENT = AgentConfig(tool_format="tags", describe_tools=False, max_turns=3, max_action_tokens=40, max_context_tokens=1024)


pytestmark = pytest.mark.xdist_group("agent-branching")  # the tiny policy (module fixture) is built once, on one xdist worker


@pytest.fixture(scope="module")
def tiny():
    return tiny_random()


class Script:
    """Turn 0: a search; later turns: the answer, right on every other call (so siblings differ), or
    (``finish_first``) an answer at turn 0 for episode 0. Counts the tokens it emits."""

    def __init__(self, tokenizer, finish_first=False):
        self.tok, self.calls, self.emitted, self.finish_first = tokenizer, 0, 0, finish_first

    def __call__(self, params, contexts, key, episodes):
        out = []
        for e in episodes:
            if not e.turns and not (self.finish_first and e.index == 0):
                text = "<search>" + e.row["prompt"].split("of ")[-1].rstrip("?") + " made by</search>"
            else:
                text = f"<answer>{e.row['answer'] if self.calls % 2 == 0 else 'nobody'}</answer>"
                self.calls += 1
            ids = list(self.tok.encode(text)) + [self.tok.eos_ids[0]]
            self.emitted += len(ids)
            out.append((ids, [-0.5] * len(ids)))
        return out


def _rollout(tiny, script, cls=envs.search.SearchEnv, cfg=BranchConfig(branch_turn=1, branches=2)):
    base = MultiTurnRollout(tiny.cfg, tiny.tokenizer, cls, AGENT, policy=script)
    return BranchingRollout(base, cfg)


def test_tree_rollouts_branch_the_trainers_own_rollout(tiny):
    from types import SimpleNamespace

    base = MultiTurnRollout(tiny.cfg, tiny.tokenizer, envs.search.SearchEnv, AGENT, policy=Script(tiny.tokenizer))
    cfg = BranchConfig(branch_turn=1, branches=2)
    rollout = TreeRollouts(cfg)(SimpleNamespace(rollout=base))
    assert isinstance(rollout, BranchingRollout) and rollout.base is base and rollout.cfg == cfg
    assert repr(TreeRollouts(cfg)) == f"TreeRollouts(cfg={cfg!r})"  # what config.json records


@pytest.mark.slow
def test_roots_branch_from_replayed_prefixes_with_records_and_masked_copies(tiny):
    rows = envs.search.make_tasks(2, seed=3, hops=1)
    script = Script(tiny.tokenizer)
    rollout = _rollout(tiny, script)
    trajs = rollout.run(None, rows, 4, jax.random.PRNGKey(0))
    # 2 tasks x 2 roots x 2 continuations, grouped by task; continuation 1 records (continuation 0, 1 turn)
    assert [t.group for t in trajs] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert rollout.branched_from == [None, (0, 1), None, (2, 1), None, (4, 1), None, (6, 1)]
    for j in (0, 2, 4, 6):
        a, b = trajs[j], trajs[j + 1]
        assert a.turns[0].action == b.turns[0].action and a.turns[0].observation == b.turns[0].observation
        assert a.turns[0].observation and not a.turns[0].error  # a real search result, replayed into a fresh environment
        assert a.turns[1].action != b.turns[1].action and {a.reward, b.reward} == {0.0, 1.0}
        # the copy's prefix is out of the loss; its continuation is in
        assert turn_actions(b, 0)[0] == [] and len(turn_actions(a, 0)[0]) > 0 and len(turn_actions(b, 1)[0]) > 0
        np.testing.assert_array_equal(a.sequences[0].tokens[a.sequences[0].turn == 0],
                                      b.sequences[0].tokens[b.sequences[0].turn == 0])
    # every sampled token counted once: the script's own emissions (replayed turns are not sampled again)
    assert rollout.sampled_tokens == sum(t.action_tokens for t in trajs) == script.emitted
    assert tree_shape(trajs, rollout.branched_from) == {"trajectories": 8, "tasks": 2, "branching_nodes": 6,
                                                        "mean_children": 2.0}


@pytest.mark.slow
def test_tree_credit_from_the_records_by_hand(tiny):
    rows = envs.search.make_tasks(1, seed=4, hops=1)
    rollout = _rollout(tiny, Script(tiny.tokenizer))
    trajs = rollout.run(None, rows, 4, jax.random.PRNGKey(0))
    rewards = [t.reward for t in trajs]
    assert rewards == [1.0, 0.0, 1.0, 0.0]  # the script answers right on every other call
    adv = node_advantages(build_tree(trajs, rollout.branched_from))
    # V(leaf) = R; V(prefix) = mean(1, 0) = 0.5 for both roots; V(task) = 0.5: the prefixes get 0, the answers +-0.5
    for a, r in zip(adv, rewards):
        np.testing.assert_allclose(a, [0.0, r - 0.5])


def test_a_root_that_ends_before_the_branch_turn_is_kept_unbranched(tiny):
    rows = envs.search.make_tasks(1, seed=5, hops=1)
    rollout = _rollout(tiny, Script(tiny.tokenizer, finish_first=True))
    trajs = rollout.run(None, rows, 4, jax.random.PRNGKey(0))
    assert len(trajs) == 3 and trajs[0].n_turns == 1 and trajs[0].finished
    assert rollout.branched_from == [None, None, (1, 1)]


class Drifting(envs.search.SearchEnv):
    """Not deterministic given row and calls: every instance answers differently."""

    made = 0

    def reset(self, **row):
        Drifting.made += 1
        self._n = Drifting.made
        return super().reset(**row)

    def search(self, query: str) -> str:
        """Search."""
        return f"result {self._n}"


def test_a_replay_that_differs_is_refused(tiny):
    rollout = _rollout(tiny, Script(tiny.tokenizer), cls=Drifting)
    with pytest.raises(UsageError, match="different observation at turn 0"):
        rollout.run(None, envs.search.make_tasks(1, seed=3, hops=1), 2, jax.random.PRNGKey(0))


def test_invalid_settings_are_refused(tiny):
    with pytest.raises(UsageError, match="branches=1"):
        BranchConfig(branches=1)
    with pytest.raises(UsageError, match="branch_turn=0"):
        BranchConfig(branch_turn=0)
    with pytest.raises(UsageError, match="leaves no turn"):
        _rollout(tiny, Script(tiny.tokenizer), cfg=BranchConfig(branch_turn=3))
    with pytest.raises(UsageError, match="not a multiple"):
        _rollout(tiny, Script(tiny.tokenizer)).run(None, envs.search.make_tasks(1, seed=3, hops=1), 3, jax.random.PRNGKey(0))
