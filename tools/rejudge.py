"""One-off migration: re-judge the summaries written before the claims schema, from their recorded numbers.

Nothing is re-run. For each folder in :data:`CONVERTERS`, the old ``summary.json`` (kept whole under
``legacy``) is read and its claims are judged by the reproduction module's own judging function (``judge``
of :mod:`longhorizon.repro.NAME`, the one its runs use, so a re-run and this migration apply one rule per
claim) on what was recorded: per-seed numbers where they were kept; a claim recorded from fewer than 3
seeds (or without its per-seed numbers) is ``inconclusive``; a claim whose arm did not move, whose
baseline is no better than its start, or whose agents do not do the task is ``no signal``, naming what
did not move. A converter here only finds the recorded numbers and states the old run's scale. Run from
the repository root: ``python tools/rejudge.py [FOLDER ...]``. It lives outside the package: it is the
record of how the verdicts of 2026-12-03 were derived, deleted folder by folder as each reproduction is
re-run under the claims module.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C

DATE = "2026-12-03"
REJUDGED = f"{DATE} from recorded numbers; not re-run"
NOTE = f"Verdicts re-judged under the claims module from the recorded numbers on {DATE}; not re-run."
COMMIT = "unknown (run before the claims schema)"
RESULTS = Path("docs") / "results"


def _agent_scale(setup: dict) -> str:
    return (f"tiny-random agent warm-started on {setup['demos']} scripted demos; {setup['steps']} RL steps x "
            f"{setup['prompts_per_step']} prompts x {setup['num_generations']} generations; {setup['seeds']} seed(s); "
            f"{setup['eval_tasks']} held-out tasks")


def _per_seed_curves(points) -> list[dict]:
    return [{"eval": i, "tokens": t, "success": s} for i, (t, s) in enumerate(points)]


# ----------------------------------------------------------------------------------------------- agents
def router_r1(L: dict, path: Path) -> dict:
    from longhorizon.repro import router_r1 as M

    claims, arms = M.judge(L)
    curves = {f"w={w:g}": [{"step": i + 1, "cost": c} for i, c in enumerate(L["train_cost_curves"][f"{w:g}"])]
              for w in L["weights"]}
    return dict(paper=M.PAPER, claims=claims, arms=arms, scale=_agent_scale(L["setup"]), curves=curves,
                command="longhorizon repro router-r1")


def asearcher(L: dict, path: Path) -> dict:
    from longhorizon.repro import asearcher as M

    claims, arms = M.judge(L)
    return dict(paper=M.PAPER, claims=claims, arms=arms, scale=_agent_scale(L["setup"]), command="longhorizon repro asearcher")


def agents_a1(L: dict, path: Path) -> dict:
    from longhorizon.repro import agents_a1 as M

    claims, arms = M.judge(L)
    return dict(paper=M.PAPER, claims=claims, arms=arms, scale=_agent_scale(L["setup"]),
                command="longhorizon repro agents-a1")


def canopy(L: dict, path: Path) -> dict:
    from longhorizon.repro import canopy as M

    claims, arms = M.judge(L)
    curves = {f"beta={b}": [{"step": i + 1, **{k: v[i] for k, v in c.items()}} for i in range(len(c["reward"]))]
              for b, c in L["training_curves"].items()}
    return dict(paper=M.PAPER, claims=claims, arms=arms, scale=_agent_scale(L["setup"]), curves=curves,
                command="longhorizon repro canopy")


def treeopsd(L: dict, path: Path) -> dict:
    from longhorizon.repro import treeopsd as M

    claims, arms = M.judge(L)
    curves = {a: _per_seed_curves(runs[0]) for a, runs in L["curves"].items()}
    return dict(paper=M.PAPER, claims=claims, arms=arms, scale=_agent_scale(L["setup"]), curves=curves,
                command="longhorizon repro treeopsd")


def iterresearch(L: dict, path: Path) -> dict:
    from longhorizon.repro import iterresearch as M

    claims, arms = M.judge(L)
    return dict(paper=M.PAPER, claims=claims, arms=arms, scale=_agent_scale(L["setup"]), command="longhorizon repro iterresearch")


def trpo_agent(L: dict, path: Path) -> dict:
    from longhorizon.repro import trpo_agent as M

    claims, arms = M.judge(L)
    return dict(paper=M.PAPER, claims=claims, arms=arms, scale=_agent_scale(L["setup"]), command="longhorizon repro trpo-agent")


def fees(L: dict, path: Path) -> dict:
    from longhorizon.repro import fees as M

    claims, arms = M.judge(L)
    curves = {a: _per_seed_curves(zip(*runs[0])) for a, runs in L["curves"].items()}
    return dict(paper=M.PAPER, claims=claims, arms=arms, scale=_agent_scale(L["setup"]), curves=curves,
                command="longhorizon repro fees")


# ----------------------------------------------------------------------------------------------- language models
def h1(L: dict, path: Path) -> dict:
    from longhorizon.repro import h1 as M

    runs, config = json.loads((path / "runs.json").read_text()), json.loads((path / "config.json").read_text())["setup"]
    claims, arms = M.judge(runs, config)
    curves = {a: [dict(c, seed=i) for i, seed in enumerate(cs) for c in seed] for a, cs in runs["curves"].items()}
    scale = (f"character model d={config['d_model']} x {config['n_layers']} layers; {config['rl_steps']} RL steps x "
             f"{config['prompts_per_step']} prompts x {config['num_generations']} generations per arm; {config['seeds']} seeds; "
             f"{config['eval_per_horizon']} held-out chains per horizon")
    return dict(paper="h1", claims=claims, arms=arms, scale=scale, curves=curves, command=f"longhorizon repro {path.name}")


def es_finetune(L: dict, path: Path) -> dict:
    from longhorizon.repro import es_finetune as M

    claims, arms = M.judge(L)
    setup = L["setup"]
    scale = (f"h1's character base; {setup['steps']} steps, {L['rollouts_per_arm']} rollouts per arm; {L['seeds']} seeds; "
             f"{setup['eval_per_horizon']} held-out chains per horizon")
    return dict(paper="ES fine-tuning", claims=claims, arms=arms, scale=scale, command="longhorizon repro es-finetune")


# ----------------------------------------------------------------------------------------------- control
def sgpo(L: dict, path: Path) -> dict:
    from longhorizon.repro import sgpo as M

    runs = json.loads((path / "runs.json").read_text())
    tolerance = json.loads((path / "config.json").read_text())["setup"]["tolerance"]
    claims, arms = M.judge(runs, tolerance)
    steps = runs[0]["grpo"]["curve"][-1]["step"]
    curves = {("GRPO" if a == "grpo" else "sGPO"): [dict(p, seed=i) for i, r in enumerate(runs) for p in r[a]["curve"]]
              for a in ("grpo", "sgpo")}
    scale = f"character model from h1's base; {steps} RL steps per arm; {len(runs)} seeds"
    return dict(paper="sGPO", claims=claims, arms=arms, scale=scale, curves=curves, command=f"longhorizon repro {path.name}")


def _smollm2_scale(setup: dict) -> str:
    return (f"SmolLM2-135M-Instruct; {setup['steps']} RL steps x {setup['prompts_per_step']} prompts x "
            f"{setup['num_generations']} generations; {setup['seeds']} seed(s); {setup['eval_per_horizon']} held-out problems per horizon")


def sgpo_smollm2(L: dict, path: Path) -> dict:
    claims, arms = judge_sgpo(L)
    return dict(paper="sGPO", claims=claims, arms=arms, scale=_smollm2_scale(L["setup"]), command="longhorizon repro sgpo-smollm2")

# ------------------------------------------------------------ legacy rules of re-run reproductions
# h1-smollm2, rhorizon-smollm2 and sgpo-smollm2 have new protocols and rules (repro/h1_smollm2.py, rhorizon_smollm2.py, sgpo_smollm2.py);
# their folders keep the re-judged verdicts of the old 4-step runs until re-run, judged by the old rules below.


def _long(by_h: dict, horizons) -> float:
    return float(np.mean([by_h[str(h)] for h in horizons]))


def judge_h1(L: dict, quick: bool = False) -> tuple[list, dict]:
    """h1-smollm2: per seed, the curriculum's accuracy at the long horizons against the best other arm's (by mean)."""
    setup = L["setup"]
    longs = [h for h in setup["eval_horizons"] if h >= max(setup["train_horizons"])]
    base = _long(L["base_by_horizon"], longs)
    long = {a: [_long(r[a]["by_horizon"], longs) for r in L["results"]] for a in L["results"][0]}
    sig = {a: C.arm_signal(a, eval_start=base, eval_end=long[a], what="long-chain accuracy") for a in long}
    best = max((a for a in long if a != "curriculum"), key=lambda a: np.mean(long[a]))
    claims = [C.judge("h1: a composition curriculum (h = 1 -> 3) beats fixed-horizon training on long chained problems",
                      C.difference(long["curriculum"], long[best]), [sig["curriculum"], sig[best]], quick=quick)]
    return claims, {a: C.arm(setup["steps"], setup["seeds"], sig[a]) for a in long}


def judge_rhorizon(L: dict, quick: bool = False) -> tuple[list, dict]:
    """rhorizon-smollm2: the base model's accuracy against n (one greedy evaluation: a slope without seeds); RL's
    mean accuracy at n >= 2 per seed against the base's."""
    setup, base, trained = L["setup"], L["base_by_n"], L["trained_by_n"]
    composed = [n for n in base if int(n) >= 2]
    sig = C.arm_signal("RL on composed problems", eval_start=[base[n] for n in composed],
                       eval_end=[t[n] for t in trained for n in composed], what="accuracy on composed problems (n >= 2)")
    claims = [
        C.judge("the base model's all-or-nothing accuracy falls as problems are composed",
                C.trend([int(n) for n in base], [list(base.values())], direction="decreasing"), quick=quick),
        C.judge("RL on composed problems raises accuracy at n >= 2",
                C.difference([np.mean([t[n] for n in composed]) for t in trained], float(np.mean([base[n] for n in composed]))),
                [sig], quick=quick),
    ]
    return claims, {"RL on composed problems": C.arm(setup["steps"], setup["seeds"], sig)}


def judge_sgpo(L: dict, quick: bool = False) -> tuple[list, dict]:
    """sgpo-smollm2: per seed, sGPO's accuracy non-inferior to GRPO's (within 0.05) and its training tokens fewer."""
    setup, res = L["setup"], L["results"]
    sig = {a: C.arm_signal(a, eval_start=L["base_accuracy"], eval_end=[r[a]["accuracy"] for r in res], what="held-out accuracy")
           for a in ("grpo", "sgpo")}
    per = lambda a, k: [r[a][k] for r in res]  # noqa: E731
    ruling = C.combine({"accuracy": C.difference(per("sgpo", "accuracy"), per("grpo", "accuracy"), margin=-0.05),
                        "tokens": C.difference(per("sgpo", "tokens"), per("grpo", "tokens"), higher_is_better=False)}, "part")
    claims = [C.judge("sGPO reaches GRPO's accuracy (within 0.05) with fewer training tokens", ruling, list(sig.values()),
                      quick=quick)]
    return claims, {a: C.arm(setup["steps"], setup["seeds"], sig[a]) for a in sig}


def h1_smollm2(L: dict, path: Path) -> dict:
    claims, arms = judge_h1(L)
    return dict(paper="h1", claims=claims, arms=arms, scale=_smollm2_scale(L["setup"]), command="longhorizon repro h1-smollm2")


def rhorizon_smollm2(L: dict, path: Path) -> dict:
    claims, arms = judge_rhorizon(L)
    return dict(paper="R-HORIZON", claims=claims, arms=arms, scale=_smollm2_scale(L["setup"]), command="longhorizon repro rhorizon-smollm2")



CONVERTERS = {"router-r1": router_r1, "asearcher": asearcher, "agents-a1": agents_a1, "canopy": canopy,
              "treeopsd": treeopsd, "iterresearch": iterresearch, "trpo-agent": trpo_agent, "fees": fees, "h1": h1,
              "h1-chain-base": h1, "es-finetune": es_finetune, "sgpo": sgpo, "sgpo-chain-base": sgpo,
              "sgpo-smollm2": sgpo_smollm2, "h1-smollm2": h1_smollm2, "rhorizon-smollm2": rhorizon_smollm2}


# ----------------------------------------------------------------------------------------------- writing
def convert(folder: str, legacy: dict, results: Path = RESULTS) -> tuple[dict, dict]:
    """``(summary, curves)`` for ``folder`` from its legacy summary."""
    out = CONVERTERS[folder](legacy, results / folder)
    wall = next((legacy[k] for k in ("wall_seconds", "wall_s") if isinstance(legacy.get(k), (int, float))), None)
    if wall is None and isinstance(legacy.get("seconds"), dict) and "total" in legacy["seconds"]:
        wall = legacy["seconds"]["total"]
    summary = {"paper": out["paper"], "claims": [c.to_dict() for c in out["claims"]], "arms": C._plain(out["arms"]),
               "scale": out["scale"], "quick": bool(legacy.get("quick") or False), "command": out["command"],
               "commit": COMMIT, "wall_seconds": None if wall is None else float(wall), "rejudged": REJUDGED,
               "legacy": legacy}
    problems = C.validate_summary(summary)
    if problems:
        raise ValueError(f"{folder}: " + "; ".join(problems))
    return summary, out.get("curves", {})


BEGIN, END = "<!-- claims-module verdicts -->", "<!-- /claims-module verdicts -->"


def readme_block(summary: dict) -> str:
    lines = [BEGIN, "", NOTE, "", "Verdicts (`longhorizon.repro.claims`; the rule and numbers of each are in `summary.json`):", ""]
    for c in summary["claims"]:
        reason = c["evidence"].get("did_not_move") or c["evidence"].get("reason")
        why = "; ".join(reason) if isinstance(reason, list) else reason
        lines.append(f"- {c['claim']}: **{c['verdict']}**" + (f" ({why})" if why else ""))
    return "\n".join([*lines, "", END])


SUPERSEDED = " (as first written; superseded by the re-judged verdicts above)"


def update_readme(path: Path, summary: dict) -> None:
    """Put the re-judged verdicts under the README's title; mark its old verdict headings as superseded."""
    text = path.read_text() if path.exists() else f"# {path.parent.name}\n"
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head.rstrip("\n") + "\n\n" + rest.split(END, 1)[1].lstrip("\n")
    title, _, body = text.partition("\n")
    body = re.sub(r"^(## Verdicts?|\*\*Verdicts?\*\*)(?! \(as first written)", lambda m: m.group(1) + SUPERSEDED, body,
                  flags=re.MULTILINE)
    path.write_text(f"{title}\n\n{readme_block(summary)}\n\n{body.lstrip()}")


def migrate(folder: str, results: Path = RESULTS) -> dict:
    path = results / folder / "summary.json"
    current = json.loads(path.read_text())
    legacy = current.get("legacy", current) if "paper" in current else current
    summary, curves = convert(folder, legacy, results)
    for arm, rows in curves.items():
        C.write_curve(results / folder, arm, rows)
    path.write_text(json.dumps(summary, indent=2) + "\n")
    update_readme(results / folder / "README.md", summary)
    return summary


def main(argv: list[str]) -> None:
    for folder in argv or list(CONVERTERS):
        s = migrate(folder)
        print(folder, ", ".join(c["verdict"] for c in s["claims"]))


if __name__ == "__main__":
    main(sys.argv[1:])
