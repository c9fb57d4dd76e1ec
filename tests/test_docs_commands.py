"""Every `longhorizon ...` command in README.md and docs/*.md runs, so the documentation cannot drift.

Each command of a fenced code block (also the one after `&&` in the quick start, and the one after
`--` in a `ray job submit`) runs in-process with ``--dry-run`` appended: the CLI checks everything it
would check before compiling and exits 0. A command whose block shows ``error: ...`` on the next
line must fail with exit 2 and that message. Commands run in document order in a scratch folder
(with ``tests/`` linked in for the fixture files the docs name); after a command that writes a
results folder passes, that folder is laid out as the run would leave it (its config.json is the
dry run's output, plus a checkpoint index and a metrics row), so the commands that read it
(``--resume``, ``eval``, ``plot``, ``lm rl --init``) are checked against it.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from longhorizon.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").rglob("README.md"))]
# Commands that run as written: two only read, `lm demos` writes a small file the next commands read.
AS_IS = (("envs",), ("lm", "--help"), ("lm", "demos"))  # prefixes
# Folders the docs use as stand-ins for "some runs of yours": laid out like this documented run.
STAND_INS = {"runs/a": "runs/quickstart", "runs/b": "runs/quickstart"}
# one worker runs every documented command once (the module fixture `outcomes`), not one run per xdist worker
pytestmark = pytest.mark.xdist_group("docs-commands")


def doc_commands(path: Path) -> list[tuple[int, list[str], str | None]]:
    """``(line, argv after 'longhorizon', expected error or None)`` for each command in ``path``'s fenced blocks."""
    commands, in_block, pending, start = [], False, "", 0
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            continue
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical, pending = (pending + line).strip(), ""
        logical = logical[2:] if logical.startswith("$ ") else logical
        following = lines[number].strip() if number < len(lines) else ""
        expected = following[len("error:"):].strip() if following.startswith("error:") else None
        for segment in logical.split("&&"):
            words = shlex.split(segment, comments=True)
            if "--" in words and any(w.endswith("longhorizon") for w in words[words.index("--") + 1:][:1]):
                words = words[words.index("--") + 1:]  # `ray job submit ... -- longhorizon ...`
            if words and re.fullmatch(r"(\.venv/bin/)?longhorizon", words[0]):
                commands.append((start, words[1:], expected))
    return commands


ALL = [(path, line, argv, expected) for path in DOCS for line, argv, expected in doc_commands(path)]


def test_the_docs_show_commands_of_every_kind():
    """The extraction finds the commands (a parser that finds none would pass everything below)."""
    kinds = {tuple(argv[:2]) if argv[0] == "lm" else (argv[0],) for _, _, argv, _ in ALL}
    assert {("train",), ("eval",), ("plot",), ("horizon",), ("repro",), ("envs",), ("lm", "sft"), ("lm", "rl"),
            ("lm", "eval")} <= kinds
    assert any(argv[:2] == ["train", "ppo"] and "--out" in argv for path, _, argv, _ in ALL if path.name == "README.md")
    assert sum(1 for *_, expected in ALL if expected) >= 1


def _materialise(argv: list[str], plan: dict) -> None:
    """Lay out the results folder a documented run writes, from its dry run's output."""
    out = Path(plan.pop("out"))
    plan.pop("quiet", None)
    lm = argv[0] == "lm"
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(plan))
    if argv[:2] == ["lm", "rl"]:
        (out / "checkpoints" / "1").mkdir()  # an orbax step folder (lm.run_checkpoint)
    else:
        (out / "checkpoints" / "latest.json").write_text(json.dumps({"chunk": 1, "step": 1, "file": "chunk_000001.msgpack"}))
    row = {"step": 1, "reward": 0.0} if lm else {"chunk": 1, "env_steps": 1, "episode_return_mean": 1.0,
                                                  "episode_return_min": 1.0, "episode_return_max": 1.0}
    (out / "metrics.jsonl").write_text(json.dumps(row) + "\n")


def _writes_results(argv: list[str]) -> bool:
    return "--out" in argv and "--resume" not in argv and (
        argv[0] == "train" or argv[:2] in (["lm", "sft"], ["lm", "rl"], ["offline", "train"]))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """Run every documented command in order; ``{(file, line, argv): (argv run, exit code, stderr)}``."""
    import contextlib
    import io
    import os

    scratch = tmp_path_factory.mktemp("docs")
    (scratch / "tests").symlink_to(ROOT / "tests")
    (scratch / "examples").symlink_to(ROOT / "examples")  # the documented dataset and reward functions
    (scratch / "docs").symlink_to(ROOT / "docs")  # curated results that commands read (e.g. a saved drift)
    before = Path.cwd()
    os.chdir(scratch)
    results = {}
    try:
        for path, line, argv, _expected in ALL:
            for stand_in, documented in STAND_INS.items():
                if stand_in in argv and Path(documented).exists() and not Path(stand_in).exists():
                    _materialise(["train"], {"out": stand_in, **json.loads(Path(documented, "config.json").read_text())})
            full = argv if any(tuple(argv[:len(k)]) == k for k in AS_IS) else [*argv, "--dry-run"]
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = main(full)
            if code == 0 and _writes_results(argv):
                _materialise(argv, json.loads(stdout.getvalue()))
            results[(path.name, line, tuple(argv))] = (full, code, stderr.getvalue())
    finally:
        os.chdir(before)
    return results


@pytest.mark.parametrize("path, line, argv, expected", ALL, ids=[f"{p.name}:{line}" for p, line, _, _ in ALL])
def test_documented_command_runs(outcomes, path, line, argv, expected):
    full, code, stderr = outcomes[(path.name, line, tuple(argv))]
    if expected is None:
        assert code == 0, f"{path.name}:{line}: `longhorizon {' '.join(full)}` exited {code}: {stderr.strip()}"
    else:
        assert code == 2 and expected[:60] in stderr, f"{path.name}:{line}: expected `error: {expected}`, got {stderr!r}"


def test_dry_run_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "ppo", "--env", "CartPole-v1", "--out", "runs/x", "--dry-run"]) == 0
    assert json.loads(capsys.readouterr().out)["out"] == "runs/x"
    assert list(tmp_path.iterdir()) == []
