"""Every bad input a new user met (issue 36) ends in one sentence with exit code 2, and nothing saved is lost.

Each case builds what it needs in a scratch folder (a finished tiny run is shared by the cases that need
one), runs the CLI in-process and checks: exit code 2, one line on stderr naming the problem, and that
every file of the shared run is byte-for-byte what it was. Ctrl-C at start-up (exit 130) is tested with
real signals in ``test_new_user_defects.py``.
"""

import shutil

import pytest

from longhorizon.cli import main
from longhorizon.runner.run import RunSpec, train

TINY = {"num_envs": "4", "num_steps": "16", "num_minibatches": "2", "update_epochs": "1", "total_steps": "256",
        "hidden": "8"}
TINY_FLAGS = [arg for k, v in TINY.items() for arg in (f"--{k.replace('_', '-')}", v)]


pytestmark = pytest.mark.xdist_group("bad-inputs")  # the finished run (module fixture) is trained once, on one xdist worker


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad-inputs") / "run"
    train(RunSpec(algo="ppo", env="CartPole-v1", config_overrides=dict(TINY), seeds=1, out=str(out), num_chunks=2,
                  eval_episodes=2, quiet=True))
    return out


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".lock"}


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _copy_run(run, scratch, damage=None):
    """A copy of the finished run, its checkpoint files damaged by ``damage(bytes) -> bytes``."""
    copy = scratch / "copy"
    shutil.copytree(run, copy)
    if damage is not None:
        for file in (copy / "checkpoints").glob("chunk_*.msgpack"):
            file.write_bytes(damage(file.read_bytes()))
    (copy / "summary.json").unlink()  # an unfinished run, so --resume would read the checkpoints
    return copy


def zeroed(data):
    middle = len(data) // 2
    return data[:middle] + bytes(min(2048, len(data) - middle)) + data[middle + 2048:]


def ff_filled(data):
    return data[:64] + b"\xff" * 4096 + data[64 + 4096:]


def truncated(data):
    return data[: len(data) // 3]


# (name, argv builder (run, scratch) -> argv, needle)
CASES = [
    ("unknown env", lambda r, s: ["train", "ppo", "--env", "CartPol-v1"], "did you mean CartPole-v1"),
    ("unknown algorithm", lambda r, s: ["train", "ppx", "--env", "CartPole-v1"], "unknown algorithm 'ppx'"),
    ("misspelled field", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--lerning-rate", "3e-4"],
     "did you mean --learning-rate"),
    ("negative learning rate", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--learning-rate", "-0.1"],
     "--learning-rate must be positive"),
    ("wrong type", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--num-envs", "many"], "type int"),
    ("gamma out of range", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--gamma", "1.5"], "--gamma"),
    ("minibatches that do not divide", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--num-minibatches", "7"],
     "does not divide"),
    ("zero seeds", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--seeds", "0", "--dry-run"],
     "--seeds must be at least 1"),
    ("zero chunks", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--chunks", "0", "--dry-run"],
     "--chunks must be at least 1"),
    ("negative eval-every", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--eval-every", "-1"],
     "--eval-every must be 0 or more"),
    ("target without evaluations", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--target-return", "400"],
     "--target-return"),
    ("fewer steps than one update", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--total-steps", "10",
                                                  "--dry-run"], "less than one update"),
    ("more chunks than updates", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", *TINY_FLAGS, "--chunks", "99",
                                               "--dry-run"], "more chunks than"),
    ("host engine on an XLA env", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--engine", "host"],
     "drop --engine host"),
    ("ray options without ray", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--actors", "2"],
     "--engine ray only"),
    ("bad env-arg", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--env-arg", "horizon"], "is not KEY=VALUE"),
    ("unknown env setting", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--env-arg", "wind=3"],
     "'wind' is not a setting"),
    ("missing mdp file", lambda r, s: ["train", "sqirl", "--env", "no/such/mdp.npz", "--env-arg", "horizon=10"],
     "does not exist"),
    ("unimportable import path", lambda r, s: ["train", "ppo", "--env", "no_such_package.envs:make_env"],
     "no_such_package"),
    ("missing attribute in an import path", lambda r, s: ["train", "ppo", "--env", "json:no_such_factory"],
     "no_such_factory"),
    ("a factory that raises", lambda r, s: ["train", "ppo", "--env", "json:dumps"], "TypeError"),
    ("a factory that returns no environment", lambda r, s: ["train", "ppo", "--env", "os:getcwd"],
     "not a gymnax-style environment"),
    ("unknown gymnasium id", lambda r, s: ["train", "ppo", "--env", "gymnasium:NoSuchEnv-v0"], "NoSuchEnv-v0"),
    ("missing config file", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--config", str(s / "none.yaml")],
     "does not exist"),
    ("bad YAML", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--config",
                               str(_write(s / "bad.yaml", "learning_rate: [1e-4,\n"))], "is not valid YAML"),
    ("config that is not a mapping", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--config",
                                                   str(_write(s / "list.yaml", "- 1\n- 2\n"))], "must hold a mapping"),
    ("unknown key in a config", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--config",
                                              str(_write(s / "typo.yaml", "lerning_rate: 0.001\n"))],
     "neither a run option"),
    ("resume of a missing folder", lambda r, s: ["train", "--resume", str(s / "nothing")], "not a longhorizon results folder"),
    ("resume of a malformed config", lambda r, s: ["train", "--resume",
                                                   str(_write(s / "m" / "config.json", "{not json").parent)], "malformed"),
    ("resume of a config missing keys", lambda r, s: ["train", "--resume",
                                                      str(_write(s / "k" / "config.json", '{"algo": "ppo"}').parent)],
     "malformed"),
    ("resume with a changed setting", lambda r, s: ["train", "--resume", str(r), "--seeds", "3"],
     "cannot be changed when resuming"),
    ("a new run in a folder holding one", lambda r, s: ["train", "ppo", "--env", "CartPole-v1", "--out", str(r)],
     "already holds a run"),
    ("resume with no checkpoint", lambda r, s: ["train", "--resume",
                                                str(_no_checkpoints(r, s))], "no checkpoint"),
    ("resume with zeroed checkpoints", lambda r, s: ["train", "--resume", str(_copy_run(r, s, zeroed))], "damaged"),
    ("resume with 0xFF-filled checkpoints", lambda r, s: ["train", "--resume", str(_copy_run(r, s, ff_filled))],
     "damaged"),
    ("resume with truncated checkpoints", lambda r, s: ["train", "--resume", str(_copy_run(r, s, truncated))],
     "damaged"),
    ("eval of damaged checkpoints", lambda r, s: ["eval", str(_copy_run(r, s, zeroed)), "--episodes", "1"], "damaged"),
    ("eval of a missing folder", lambda r, s: ["eval", str(s / "nothing")], "not a longhorizon results folder"),
    ("eval with zero episodes", lambda r, s: ["eval", str(r), "--episodes", "0", "--dry-run"], "--episodes"),
    ("plot of a folder without metrics", lambda r, s: ["plot", str(s)], "has no metrics.jsonl"),
    ("sweep over a host-stepped env", lambda r, s: ["sweep", "ppo", "--env", "gymnasium:CartPole-v1", "--grid",
                                                    "learning_rate=1e-4,3e-4", "--out", str(s / "sw")],
     "stepped on the host"),
    ("sweep without a grid", lambda r, s: ["sweep", "ppo", "--env", "CartPole-v1"], "has no grid"),
    ("sweep over an unknown field", lambda r, s: ["sweep", "ppo", "--env", "CartPole-v1", "--grid", "lr=1,2"],
     "is not a setting of ppo"),
    ("evolve with bad lifetimes", lambda r, s: ["evolve", "drift", "--lifetimes", "8,x", "--dry-run"],
     "is not a comma-separated list"),
]


def _no_checkpoints(run, scratch):
    copy = scratch / "nockpt"
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "checkpoints")
    (copy / "metrics.jsonl").unlink()
    return copy


@pytest.mark.parametrize("name, argv, needle", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_sentence_exit_2_and_loses_nothing(name, argv, needle, finished_run, tmp_path, capsys):
    before = _snapshot(finished_run)
    args = argv(finished_run, tmp_path)
    if any(a.startswith("gymnasium:") for a in args):
        pytest.importorskip("gymnasium")
    capsys.readouterr()
    assert main(args) == 2, name
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and err.count("\n") == 0 and "Traceback" not in err, err
    assert needle in err, err
    assert _snapshot(finished_run) == before  # nothing already saved was touched
