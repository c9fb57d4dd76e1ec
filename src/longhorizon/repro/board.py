"""The claims board, ``docs/claims.md``: one row per seed paper, its claims and their verdicts, from every
``docs/results/*/summary.json`` (``longhorizon repro board`` writes it; a test fails when it is stale)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from longhorizon.repro.claims import QUICK, VERDICTS, validate_summary
from longhorizon.repro.papers import PAPERS

NOT_JUDGED = "not yet judged under the claims module"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def load(results: Path) -> dict[str, dict | None]:
    """``{folder: summary}`` for every folder the papers name; None where there is no summary in the schema."""
    out = {}
    for paper in PAPERS:
        for folder in paper.folders:
            path = Path(results) / folder / "summary.json"
            s = json.loads(path.read_text()) if path.exists() else None
            out[folder] = s if s is not None and not validate_summary(s) else None
    return out


def _seeds(summary: dict) -> str:
    seeds = sorted({arm["seeds"] for arm in summary["arms"].values()})
    return "-" if not seeds else str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"


def render(results: Path) -> str:
    """The board's markdown for the summaries under ``results`` (docs/results)."""
    summaries = load(results)
    counts = Counter(c["verdict"] for s in summaries.values() if s for c in s["claims"])
    unjudged = sum(1 for p in PAPERS if not p.survey and not any(summaries.get(f) for f in p.folders))
    lines = [
        "# Claims board",
        "",
        "Every seed paper, each claim its reproduction checks, and the verdict. Written by `longhorizon repro board`",
        "from every `docs/results/*/summary.json`; do not edit by hand (a test fails when this page is out of date).",
        "",
        "Verdicts (`longhorizon.repro.claims`): **holds** / **contradicted** need at least 3 seeds and a 95%",
        "Student-t interval on one side of the claim's margin (a trend: a fitted slope with its interval; a",
        "numerical agreement: a tolerance stated before the run); **no signal**: an arm the claim depends on did",
        "not move (a flat training curve, groups with equal rewards, a baseline at its initial level, agents that",
        "do not do the task), so the run cannot speak to the claim; **inconclusive**: anything else. A folder",
        "marked *re-judged* was judged by these rules from its recorded numbers, not re-run.",
        "",
        "| verdict | claims |",
        "|---|---|",
        *[f"| {v} | {counts.get(v, 0)} |" for v in (*VERDICTS, QUICK)],
        f"| papers {NOT_JUDGED} | {unjudged} |",
        "",
        "| # | paper | claims and verdicts | scale | seeds | results |",
        "|---|---|---|---|---|---|",
    ]
    for i, paper in enumerate(PAPERS, 1):
        claims, scales, seeds, links = [], [], [], []
        for folder in paper.folders:
            s = summaries[folder]
            links.append(f"[{folder}](results/{folder}/)")
            prefix = f"`{folder}`: " if len(paper.folders) > 1 else ""
            if s is None:
                claims.append(f"{prefix}{NOT_JUDGED}")
                continue
            marker = " *(re-judged)*" if s.get("rejudged") else ""
            claims += [f"{prefix}**{c['verdict']}**{marker}: {_cell(c['claim'])}" for c in s["claims"]]
            scales.append(prefix + _cell(s["scale"]))
            seeds.append(prefix + _seeds(s))
        if not paper.folders:
            claims.append(paper.note)
        name = f"{paper.name} (survey)" if paper.survey else paper.name
        lines.append(f"| {i} | **{_cell(name)}**: {_cell(paper.about)} | {'<br>'.join(claims)} | "
                     f"{'<br>'.join(scales) or '-'} | {'<br>'.join(seeds) or '-'} | {', '.join(links) or '-'} |")
    return "\n".join(lines) + "\n"


def write(results: Path, out: Path) -> str:
    text = render(results)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
    return text
