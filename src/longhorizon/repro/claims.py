"""One way to judge a paper's claim: four verdicts, the rules that give them, and the summary schema.

Verdicts (no others): ``holds``, ``contradicted``, ``inconclusive``, ``no signal``; a ``--quick`` run gets
``quick run: not judged`` for every claim.

* ``no signal``: an arm the claim depends on did not move (:func:`arm_signal`, :func:`group_signal`,
  :func:`task_floor`, :func:`baseline_signal`), so the run cannot speak to the claim. :func:`judge` names
  what did not move. Never ``contradicted`` from a collapse, never ``holds`` against a crippled baseline.
* ``holds`` / ``contradicted`` need >= 3 seeds and a 95% Student-t interval on one side of the claim's
  margin (:func:`difference`, :func:`trend`), or a numerical agreement within a tolerance stated before
  the run (:func:`agreement`). Anything else is ``inconclusive``, with the reason in the evidence.

Every reproduction's ``summary.json`` has the keys of :data:`SCHEMA_KEYS` (:func:`summary` builds one,
:func:`validate_summary` checks one); each arm's training curve is kept beside it (:func:`write_curve`).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
import subprocess
from pathlib import Path

import numpy as np

HOLDS, CONTRADICTED, INCONCLUSIVE, NO_SIGNAL = "holds", "contradicted", "inconclusive", "no signal"
VERDICTS = (HOLDS, CONTRADICTED, INCONCLUSIVE, NO_SIGNAL)
QUICK = "quick run: not judged"
LEVEL = 0.95  # every interval is a two-sided 95% interval
MIN_SEEDS = 3  # holds / contradicted need at least this many seeds
EPS = 1e-9  # "above" in the signal tests means by more than rounding (a mean of equal floats can differ by 1 ulp)
TASK_FLOOR = 0.1  # the default task floor: agents succeeding in under 10% of held-out tasks do not do the task
SCHEMA_KEYS = ("paper", "claims", "arms", "scale", "quick", "command", "commit", "wall_seconds")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim and its judgement: the claim's text, the verdict, the rule that gave it, the numbers."""

    claim: str
    verdict: str
    rule: str
    evidence: dict

    def to_dict(self) -> dict:
        return {"claim": self.claim, "verdict": self.verdict, "rule": self.rule, "evidence": _plain(self.evidence)}


def _plain(value):
    """numpy scalars and arrays -> Python numbers and lists (NaN -> None), so the summary is plain JSON."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(float(value)) else float(value)
    return value


def t_quantile(df: float, level: float = LEVEL) -> float:
    """The two-sided Student-t critical value ``t_{(1 + level) / 2, df}`` (4.303 at df = 2, level 0.95)."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, df))


def t_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
    """``(mean, low, high)``: ``mean -+ t_{0.975, n-1} * sd / sqrt(n)`` over ``n >= 2`` values (sd with ddof 1);
    low = high = NaN for fewer than 2 values."""
    v = np.asarray(values, np.float64).ravel()
    mean = float(v.mean())
    if v.size < 2:
        return mean, float("nan"), float("nan")
    half = t_quantile(v.size - 1, level) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return mean, mean - half, mean + half


def _side(low: float, high: float, margin: float, seeds: int) -> tuple[str, str]:
    """The verdict of an interval against a one-sided margin, and why."""
    span = f"the interval [{low:.3g}, {high:.3g}]"
    if seeds < MIN_SEEDS:
        return INCONCLUSIVE, f"{seeds} seed(s): holds or contradicted need at least {MIN_SEEDS}"
    if low > margin:
        return HOLDS, f"{span} lies above the margin {margin:g}"
    if high < margin:
        return CONTRADICTED, f"{span} lies below the margin {margin:g}"
    return INCONCLUSIVE, f"{span} contains the margin {margin:g}"


def difference(a, b, *, margin: float = 0.0, paired: bool = True, higher_is_better: bool = True) -> Claim:
    """The claim "a is better than b by more than ``margin``", over seeds.

    ``d = a - b`` per seed (``b - a`` when lower is better), so a positive ``d`` favours ``a``. Paired (``a``
    and ``b`` share seeds): the Student-t interval of the per-seed differences, ``n - 1`` degrees of
    freedom. Unpaired: Welch's interval, ``se = sqrt(s_a^2/n_a + s_b^2/n_b)`` with Welch-Satterthwaite
    degrees of freedom. ``b`` may be one number (a fixed reference such as a win rate of 1/2): the
    one-sample interval of ``a - b``. ``holds`` if the 95% interval lies above ``margin``,
    ``contradicted`` if below, else ``inconclusive``; fewer than 3 seeds in either arm is
    ``inconclusive``. A non-inferiority claim ("at least as good") is a negative ``margin``."""
    sign = 1.0 if higher_is_better else -1.0
    a = np.asarray(a, np.float64).ravel()
    fixed = np.ndim(b) == 0
    b = np.asarray(b, np.float64).ravel()
    if paired and not fixed and a.size != b.size:
        raise ValueError(f"a paired difference needs one value per seed in each arm; got {a.size} and {b.size}.")
    if fixed or paired:
        d = sign * (a - b)
        seeds = d.size
        mean, low, high = t_interval(d)
        kind = "one-sample" if fixed else "paired"
    else:
        seeds = min(a.size, b.size)
        mean = sign * float(a.mean() - b.mean())
        low = high = float("nan")
        if seeds >= 2:
            va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
            se = math.sqrt(va + vb)
            df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1)) if se > 0 else a.size + b.size - 2
            half = t_quantile(df) * se
            low, high = mean - half, mean + half
        kind = "Welch"
    verdict, reason = _side(low, high, margin, seeds)
    rule = (f"difference ({kind} Student-t 95% over seeds, {'higher' if higher_is_better else 'lower'} is better): "
            f"holds if the interval of the difference lies above {margin:g}, contradicted if below; >= {MIN_SEEDS} seeds")
    return Claim("", verdict, rule, {"a": a, "b": b, "difference": mean, "interval": [low, high], "margin": margin,
                                     "seeds": seeds, "reason": reason})


def trend(x, y_per_seed, *, direction: str = "increasing", margin: float = 0.0) -> Claim:
    """The claim that ``y`` rises (falls, or stays flat) with ``x``: a fitted slope with its interval.

    Each seed's least-squares slope of ``y`` on ``x`` (``y_per_seed [seeds, len(x)]``), and the Student-t
    95% interval of those slopes over seeds. ``increasing`` (slope > ``margin``): holds if the interval
    lies above ``margin``, contradicted if below. ``decreasing`` (slope < ``margin``): holds if the
    interval lies below ``margin``, contradicted if above. ``flat`` (|slope| < ``margin``): holds if the
    interval lies inside ``(-margin, margin)``, contradicted if wholly outside it. Fewer than 3 seeds is
    inconclusive. A flat relation never holds as a rising or falling trend: its interval contains 0."""
    x = np.asarray(x, np.float64)
    y = np.atleast_2d(np.asarray(y_per_seed, np.float64))
    if y.shape[1] != x.size or x.size < 2:
        raise ValueError(f"trend needs y_per_seed [seeds, {x.size}] and at least 2 x values; got {y.shape}.")
    dx = x - x.mean()
    slopes = (y - y.mean(1, keepdims=True)) @ dx / (dx @ dx)  # least squares, exactly 0 on a constant row
    mean, low, high = t_interval(slopes)
    seeds = len(slopes)
    cases = {"increasing": (low > margin, high < margin, f"slope > {margin:g}"),
             "decreasing": (high < margin, low > margin, f"slope < {margin:g}"),
             "flat": (-margin < low and high < margin, low > margin or high < -margin, f"|slope| < {margin:g}")}
    if direction not in cases:
        raise ValueError(f"direction must be increasing, decreasing or flat; got {direction!r}.")
    holds, against, claimed = cases[direction]
    span = f"the slope's interval [{low:.3g}, {high:.3g}]"
    verdict, reason = ((INCONCLUSIVE, f"{seeds} seed(s): holds or contradicted need at least {MIN_SEEDS}") if seeds < MIN_SEEDS
                       else (HOLDS, f"{span} lies where the claim puts it ({claimed})") if holds
                       else (CONTRADICTED, f"{span} lies wholly against the claim ({claimed})") if against
                       else (INCONCLUSIVE, f"{span} straddles the claim's bound ({claimed})"))
    rule = (f"trend ({claimed}): per-seed least-squares slopes, Student-t 95% interval over seeds; "
            f">= {MIN_SEEDS} seeds")
    return Claim("", verdict, rule, {"x": x, "slopes": slopes, "slope": mean, "interval": [low, high],
                                     "margin": margin, "seeds": seeds, "reason": reason})


def bootstrap_interval(low: float, high: float, bound: float, *, below: bool, seeds: int, how: str) -> Claim:
    """A trend whose 95% interval the run computed by a bootstrap over seeds (``how`` says of what), against
    ``bound``: the claim is that the slope lies below (``below``) or above it. Holds if the interval lies on the
    claim's side, contradicted if wholly on the other; fewer than 3 seeds (or no interval) is inconclusive."""
    if seeds < MIN_SEEDS or not (np.isfinite(low) and np.isfinite(high)):
        verdict = INCONCLUSIVE
    elif (high < bound) if below else (low > bound):
        verdict = HOLDS
    elif (low > bound) if below else (high < bound):
        verdict = CONTRADICTED
    else:
        verdict = INCONCLUSIVE
    rule = (f"trend: {how}, 95% bootstrap interval over seeds (recorded by the run); holds if it lies "
            f"{'below' if below else 'above'} {bound:g}, contradicted if wholly on the other side; >= {MIN_SEEDS} seeds")
    return Claim("", verdict, rule, {"interval": [low, high], "bound": bound, "seeds": seeds})


def agreement(value, reference, tolerance: float, side: str = "both") -> Claim:
    """A numerical-agreement claim on computed (not sampled) numbers, with the tolerance stated before the run
    (in the reproduction's code), never fitted to the result. ``both``: holds if ``max |value - reference| <=
    tolerance``; ``below`` (value at most the reference): ``max(value - reference) <= tolerance``; ``above``:
    ``max(reference - value) <= tolerance``. Otherwise contradicted."""
    gap = np.asarray(value, np.float64) - np.asarray(reference, np.float64)
    error = float(np.max({"both": np.abs(gap), "below": gap, "above": -gap}[side]))
    verdict = HOLDS if error <= tolerance else CONTRADICTED
    what = {"both": "|value - reference|", "below": "value - reference", "above": "reference - value"}[side]
    return Claim("", verdict, f"agreement: max {what} <= {tolerance:g} (tolerance stated before the run)",
                 {"value": value, "reference": reference, "error": error, "tolerance": tolerance})


def arm_signal(arm: str, curve_per_seed=None, *, eval_start=None, eval_end=None, window: int | None = None,
               higher_is_better: bool = True, what: str = "training reward") -> dict:
    """Did arm ``arm`` learn? It did not when its training curve's last-window mean is not above its
    first-window mean by a Student-t 95% interval over seeds (one seed: not above at all), and its
    evaluation ``eval_end`` (mean over seeds) is not above its start ``eval_start``.

    ``curve_per_seed [seeds, points]`` (or one curve); ``window`` points at each end (default a quarter).
    Lower-is-better curves (a loss, a cost) set ``higher_is_better=False``. Returns the numbers the
    test used, ``moved`` and ``what`` (the sentence :func:`judge` quotes when it did not move)."""
    sign = 1.0 if higher_is_better else -1.0
    out: dict = {"arm": arm, "test": f"last vs first window of the {what}; evaluation vs its start"}
    curve_moved = eval_moved = False
    said = []
    if curve_per_seed is not None:
        c = np.atleast_2d(np.asarray(curve_per_seed, np.float64))
        w = window or max(1, c.shape[1] // 4)
        change = sign * (c[:, -w:].mean(1) - c[:, :w].mean(1))
        mean, low, high = t_interval(change)
        curve_moved = bool(low > EPS) if c.shape[0] >= 2 else bool(change[0] > EPS)
        out.update(first_window=float(c[:, :w].mean()), last_window=float(c[:, -w:].mean()), change=mean,
                   interval=[low, high], window=w, seeds=c.shape[0], curve_moved=curve_moved)
        said.append(f"its {what} did not {'rise' if higher_is_better else 'fall'} (last minus first {w}-point window "
                    + (f"{mean:+.3g}, 95% interval [{low:.3g}, {high:.3g}])" if c.shape[0] >= 2 else f"{mean:+.3g}, one seed)"))
    if eval_end is not None:
        start, end = float(np.mean(eval_start)), float(np.mean(eval_end))
        eval_moved = sign * (end - start) > EPS
        out.update(eval_start=start, eval_end=end, eval_moved=eval_moved)
        said.append(f"its evaluation {end:.3g} is not {'above' if higher_is_better else 'below'} its start {start:.3g}")
    out.update(moved=curve_moved or eval_moved, what=f"{arm}: " + " and ".join(said))
    return _plain(out)


def group_signal(arm: str, fraction_with_signal: float, floor: float = 0.5) -> dict:
    """A GRPO-family arm carried a signal when at least ``floor`` of its groups had unequal rewards
    (a group whose rewards are all equal has zero advantage and gives no gradient)."""
    moved = float(fraction_with_signal) >= floor
    return {"arm": arm, "test": f"fraction of groups with unequal rewards >= {floor:g}",
            "fraction_with_signal": float(fraction_with_signal), "floor": floor, "moved": moved,
            "what": f"{arm}: only {fraction_with_signal:.0%} of its groups had unequal rewards (floor {floor:.0%})"}


def task_floor(arm: str, success, floor: float) -> dict:
    """A safety or cost claim needs agents that do the task: mean success (over seeds) at least ``floor``,
    the floor stated in the reproduction before the run."""
    value = float(np.mean(success))
    return {"arm": arm, "test": f"task success >= {floor:g}", "success": value, "floor": floor,
            "moved": value >= floor, "what": f"{arm}: task success {value:.3g} is below the floor {floor:g}"}


def baseline_signal(arm: str, value, reference, *, higher_is_better: bool = True, what: str = "its initial policy") -> dict:
    """A baseline must be better than its initial or a random policy (means over seeds) to be beaten."""
    v, r = float(np.mean(value)), float(np.mean(reference))
    moved = (v - r if higher_is_better else r - v) > EPS
    return {"arm": arm, "test": f"better than {what}", "value": v, "reference": r, "moved": moved,
            "what": f"{arm}: {v:.3g} is no better than {what} ({r:.3g})"}


def judge(claim: str, ruling: Claim, depends_on=(), quick: bool = False) -> Claim:
    """The verdict of ``claim``: ``quick run: not judged`` for a quick run; ``no signal`` (naming what did
    not move) when any signal in ``depends_on`` did not move; else the rule's verdict."""
    evidence = dict(ruling.evidence)
    stalled = [s["what"] for s in depends_on if not s["moved"]]
    if depends_on:
        evidence["depends_on"] = [s["arm"] for s in depends_on]
    if quick:
        return Claim(claim, QUICK, ruling.rule, evidence)
    if stalled:
        evidence.update(did_not_move=stalled, rule_verdict=ruling.verdict)
        return Claim(claim, NO_SIGNAL, ruling.rule, evidence)
    return Claim(claim, ruling.verdict, ruling.rule, evidence)


def combine(parts: dict, what: str, unanimous: bool = False) -> Claim:
    """A claim "at every X": holds if every part holds, contradicted if any part is contradicted (``unanimous``:
    only if every part is, the rule a run stated before it ran), else inconclusive."""
    verdicts = [p.verdict for p in parts.values()]
    against = all(v == CONTRADICTED for v in verdicts) if unanimous else CONTRADICTED in verdicts
    verdict = CONTRADICTED if against else HOLDS if all(v == HOLDS for v in verdicts) else INCONCLUSIVE
    seeds = [p.evidence["seeds"] for p in parts.values() if "seeds" in p.evidence]
    rule = (f"at every {what}: holds if every part holds, contradicted if {'every' if unanimous else 'any'} part is; "
            f"each part: {next(iter(parts.values())).rule}")
    return Claim("", verdict, rule, {"reason": "; ".join(f"{k}: {p.verdict}" for k, p in parts.items()),
                                     "parts": {k: {"verdict": p.verdict, **p.evidence} for k, p in parts.items()},
                                     **({"seeds": min(seeds)} if seeds else {})})


def demote(ruling: Claim, rule_note: str, reason: str, verdicts=(CONTRADICTED,)) -> Claim:
    """``ruling`` made ``inconclusive`` when its verdict is one of ``verdicts`` (by default a contradiction) and the
    run cannot support that verdict (an upper bound with unknown constants, a slope through censored values):
    ``rule_note`` is added to the rule, ``reason`` replaces the evidence's reason and ``rule_verdict`` keeps what the
    bare rule said. Any other verdict is returned as it is."""
    if ruling.verdict not in verdicts:
        return ruling
    return Claim("", INCONCLUSIVE, ruling.rule + "; " + rule_note,
                 {**ruling.evidence, "rule_verdict": ruling.verdict, "reason": reason})


def undecidable(reason: str, **evidence) -> Claim:
    """A claim no rule can decide from the numbers at hand (say, no per-seed numbers): inconclusive, with why."""
    return Claim("", INCONCLUSIVE, "not decidable from the recorded numbers", {"reason": reason, **evidence})


def arm(steps, seeds, *signals) -> dict:
    """One entry of a summary's ``arms``: its steps (or None), seeds and signal (several signals: all must move)."""
    signal = signals[0] if len(signals) == 1 else {"tests": list(signals), "moved": all(s["moved"] for s in signals)}
    return {"steps": None if steps is None else int(steps), "seeds": int(seeds), "signal": signal}


def not_applied(arm_name: str, why: str) -> dict:
    """The signal of an arm no movement test applies to (an exact computation, an offline-trained arm), with why."""
    return {"arm": arm_name, "test": "not applied", "moved": True, "note": why}


def as_recorded(value):
    """``value`` as a summary records it (plain JSON: numbers, lists, string keys), so a rule applied during a run
    sees exactly what a later re-judging of the written summary sees."""
    import json

    return json.loads(json.dumps(_plain(value)))


def commit() -> str:
    """The checkout's ``git rev-parse HEAD``, or ``unknown`` outside a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False,
                              cwd=Path(__file__).resolve().parent)
        return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def summary(*, paper: str, claims, arms: dict, scale: str, quick: bool, command: str, wall_seconds: float | None,
            **extra) -> dict:
    """A ``summary.json`` in the one schema; ``claims`` are :class:`Claim` objects or their dicts, ``arms``
    ``{name: {steps, seeds, signal}}``; ``extra`` keys (a reproduction's own tables) follow them."""
    out = {"paper": paper, "claims": [c.to_dict() if isinstance(c, Claim) else c for c in claims],
           "arms": _plain(arms), "scale": scale, "quick": bool(quick), "command": command, "commit": commit(),
           "wall_seconds": wall_seconds, **_plain(extra)}
    problems = validate_summary(out)
    if problems:
        raise ValueError("the summary does not follow the claims schema: " + "; ".join(problems))
    return out


def validate_summary(s) -> list[str]:
    """The ways ``s`` departs from the schema (an empty list when it follows it)."""
    if not isinstance(s, dict):
        return ["a summary is a JSON object"]
    problems = [f"missing key '{k}'" for k in SCHEMA_KEYS if k not in s]
    if problems:
        return problems
    types = {"paper": str, "claims": list, "arms": dict, "scale": str, "quick": bool, "command": str, "commit": str}
    problems += [f"'{k}' must be a {t.__name__}" for k, t in types.items() if not isinstance(s[k], t)]
    if s["wall_seconds"] is not None and not isinstance(s["wall_seconds"], (int, float)):
        problems.append("'wall_seconds' must be a number or null")
    if problems or not s["claims"]:
        return problems or ["'claims' is empty"]
    allowed = (QUICK,) if s["quick"] else VERDICTS
    for i, c in enumerate(s["claims"]):
        if not isinstance(c, dict) or set(c) != {"claim", "verdict", "rule", "evidence"}:
            problems.append(f"claim {i} must have exactly the keys claim, verdict, rule, evidence")
            continue
        if not (isinstance(c["claim"], str) and c["claim"]) or not (isinstance(c["rule"], str) and c["rule"]):
            problems.append(f"claim {i}: 'claim' and 'rule' must be non-empty strings")
        if c["verdict"] not in allowed:
            problems.append(f"claim {i}: verdict {c['verdict']!r} is not one of {', '.join(allowed)}")
        if not isinstance(c["evidence"], dict):
            problems.append(f"claim {i}: 'evidence' must be an object")
            continue
        seeds = c["evidence"].get("seeds")
        if c["verdict"] in (HOLDS, CONTRADICTED) and isinstance(seeds, int) and seeds < MIN_SEEDS:
            problems.append(f"claim {i}: {c['verdict']} from {seeds} seed(s) (at least {MIN_SEEDS} needed)")
        if c["verdict"] == NO_SIGNAL and not c["evidence"].get("did_not_move"):
            problems.append(f"claim {i}: 'no signal' must name what did not move (evidence.did_not_move)")
    for name, arm in s["arms"].items():
        if not isinstance(arm, dict) or not {"steps", "seeds", "signal"} <= set(arm):
            problems.append(f"arm {name!r} must have steps, seeds and signal")
            continue
        if arm["steps"] is not None and not isinstance(arm["steps"], int):
            problems.append(f"arm {name!r}: steps must be an integer or null")
        if not isinstance(arm["seeds"], int) or arm["seeds"] < 1 or not isinstance(arm["signal"], dict):
            problems.append(f"arm {name!r}: seeds must be a positive integer and signal an object")
    return problems


def write_curve(out_dir, arm: str, rows: list[dict]) -> Path:
    """Write one arm's training curve to ``out_dir/curves/ARM.csv``: one row per point (``step``, training
    reward or return, evaluation, KL or entropy where there is one; empty where a row lacks a column)."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    path = Path(out_dir) / "curves" / (re.sub(r"[^A-Za-z0-9._-]+", "_", arm).strip("_") + ".csv")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(_plain(rows))
    return path
