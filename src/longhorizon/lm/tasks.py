"""Verifiable arithmetic tasks with a horizon knob, deterministic by seed.

Every task is a small *program* of assignments over single-letter variables, evaluated
modulo ``10 ** digits``::

    prompt      a=7;b=a+5;c=b*3;          (literal, then one statement per sub-problem)
    completion  b=12;c=36;                (the value of every computed variable, in order)

* :class:`ChainTask` (h1): horizon ``h`` sub-problems, each one's input is the previous
  answer; only the final answer is rewarded (``reward="final"``).
* :class:`ComposedTask` (R-HORIZON): ``h`` independent atomic problems ``u=n;w=u op c;`` are
  composed by replacing the literal ``n`` of problem ``i+1`` with ``answer_i + k`` (``k``
  chosen so the value is unchanged); a composed query counts only if *every* problem's
  answer is right (``reward="all"``).
* :class:`PackedTask`: ``k`` *independent* atomic problems in one prompt (dependency depth 1):
  the supervised data for base policies.

Rewards (``Problem.reward``): ``final`` (last answer only), ``all`` (all-or-nothing over the
scored answers), ``milestone`` (fraction of scored answers right: partial credit per correct
intermediate answer) and ``discounted`` (``sum_i gamma^(n-i) c_i / sum_i gamma^(n-i)`` over
the n scored answers, so later answers weigh more; ``gamma = 1`` is ``milestone`` and
``gamma -> 0`` is ``final``).

Verification is exact match on the canonical decimal string of each value, reading the
*first* statement that assigns each variable (so listing many guesses earns nothing), and
never raises on malformed text.
"""

from __future__ import annotations

import dataclasses
import re
import string

import numpy as np

from longhorizon.errors import UsageError

REWARDS = ("final", "all", "milestone", "discounted")
OPERATORS = "+-*"
LETTERS = string.ascii_lowercase
_STATEMENT = re.compile(r"^([a-z])=([0-9]+)$")


@dataclasses.dataclass(frozen=True)
class Problem:
    prompt: str
    target: str  # the reference completion (values of every computed variable)
    answers: tuple[tuple[str, int], ...]  # (variable, value) of every computed variable, in order
    scored: tuple[str, ...]  # the variables that count for "all" / "milestone" / "discounted"
    horizon: int
    reward: str = "final"
    gamma: float = 0.5
    width: int = 0  # >0: values are written with exactly this many digits

    @property
    def final(self) -> str:
        return self.scored[-1]

    def fmt(self, value: int) -> str:
        return f"{value:0{self.width}d}" if self.width else str(value)


def parse_completion(text: str) -> dict[str, str]:
    """``{variable: value string}`` from the first well-formed ``x=digits`` statement of each variable."""
    out: dict[str, str] = {}
    if not isinstance(text, str):
        return out
    for piece in text.split(";"):
        m = _STATEMENT.match(piece.strip())
        if m and m.group(1) not in out:
            out[m.group(1)] = m.group(2)
    return out


def correct_flags(problem: Problem, text: str) -> list[bool]:
    """Whether each scored answer appears, exactly, in ``text``."""
    values = dict(problem.answers)
    got = parse_completion(text)
    return [got.get(v) == problem.fmt(values[v]) for v in problem.scored]


def score(problem: Problem, text: str) -> float:
    """The reward of ``text`` under ``problem.reward`` (see the module docstring)."""
    flags = np.asarray(correct_flags(problem, text), dtype=np.float64)
    if problem.reward == "final":
        return float(flags[-1])
    if problem.reward == "all":
        return float(flags.all())
    if problem.reward == "milestone":
        return float(flags.mean())
    weights = problem.gamma ** np.arange(len(flags) - 1, -1, -1, dtype=np.float64)
    return float((weights * flags).sum() / weights.sum())


def segment_rewards(problem: Problem, text: str) -> list[float]:
    """One reward per computed statement of the reference (1 if that statement's value is right)."""
    got = parse_completion(text)
    return [float(got.get(v) == problem.fmt(val)) for v, val in problem.answers]


def segment_ids(text: str, n_segments: int) -> np.ndarray:
    """Index of the ``;``-terminated statement each character belongs to (-1 past ``n_segments``)."""
    ids = np.full(len(text), -1, np.int32)
    seg = 0
    for i, ch in enumerate(text):
        if seg >= n_segments:
            break
        ids[i] = seg
        if ch == ";":
            seg += 1
    return ids


def _apply(op: str, x: int, c: int, modulus: int) -> int:
    if op == "+":
        return (x + c) % modulus
    if op == "-":
        return (x - c) % modulus
    return (x * c) % modulus


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """Difficulty knobs shared by every task."""

    digits: int = 2  # values live in [0, 10**digits)
    operators: str = "+-"
    const_max: int = 9  # constants are drawn from [1, const_max]
    names: str = "random"  # "random" distinct letters, "sequential" a, b, c, ..., or "split" (see _names)
    reward: str = "final"
    gamma: float = 0.5
    fixed_width: bool = False  # write every value with exactly `digits` digits ("07")

    def __post_init__(self):
        if not 1 <= self.digits <= 6:
            raise UsageError(f"digits={self.digits} is out of range; use 1 to 6.")
        if not self.operators or any(o not in OPERATORS for o in self.operators):
            raise UsageError(f"operators={self.operators!r} must be a non-empty subset of {OPERATORS!r}.")
        if not 1 <= self.const_max < 10**self.digits:
            raise UsageError(f"const_max={self.const_max} must be in [1, 10**digits); lower it or raise digits.")
        if self.names not in ("random", "sequential", "split"):
            raise UsageError(f"names={self.names!r} is unknown; use 'random', 'sequential' or 'split'.")
        if self.reward not in REWARDS:
            raise UsageError(f"reward={self.reward!r} is unknown; use one of {REWARDS}.")
        if not 0.0 < self.gamma <= 1.0:
            raise UsageError(f"gamma={self.gamma} must be in (0, 1].")

    @property
    def modulus(self) -> int:
        return 10**self.digits

    @property
    def width(self) -> int:
        return self.digits if self.fixed_width else 0

    def fmt(self, value: int) -> str:
        return f"{value:0{self.digits}d}" if self.fixed_width else str(value)


def _names(rng: np.random.Generator, n: int, cfg: TaskConfig, literal_slots=()) -> list[str]:
    """``n`` distinct variable names in order of appearance; ``literal_slots`` are the literal statements.

    ``random``: distinct random letters; ``sequential``: a, b, c, ...; ``split``: computed variables
    are consecutive letters from a random start (the next one to answer is always the next
    letter) and literals are distinct random letters outside that run (so a name-based lookup,
    not a position, finds a literal's value, and every letter appears in both roles).
    """
    if n > len(LETTERS):
        raise UsageError(f"a problem needs {n} variables but only {len(LETTERS)} letters exist; lower the horizon.")
    if cfg.names == "sequential":
        return list(LETTERS[:n])
    if cfg.names == "random":
        return [LETTERS[i] for i in rng.permutation(len(LETTERS))[:n]]
    literal_slots = set(literal_slots)
    n_comp = n - len(literal_slots)
    start = int(rng.integers(len(LETTERS) - n_comp + 1))
    computed = LETTERS[start : start + n_comp]
    others = [c for c in LETTERS if c not in computed]
    lits = iter(others[i] for i in rng.permutation(len(others)))
    comps = iter(computed)
    return [next(lits) if i in literal_slots else next(comps) for i in range(n)]


def _check_horizon(h: int, limit: int = 25) -> None:
    if not 1 <= h <= limit:
        raise UsageError(f"horizon {h} is out of range; use 1 to {limit}.")


def chain_problem(rng: np.random.Generator, horizon: int, cfg: TaskConfig) -> Problem:
    """h1 chain: ``x0=n; x1=x0 op c; ...; xh=x(h-1) op c;`` -- each sub-problem consumes the previous answer."""
    _check_horizon(horizon)
    names = _names(rng, horizon + 1, cfg, literal_slots=(0,))
    value = int(rng.integers(cfg.modulus))
    prompt = [f"{names[0]}={cfg.fmt(value)};"]
    answers = []
    for i in range(1, horizon + 1):
        op = cfg.operators[int(rng.integers(len(cfg.operators)))]
        c = int(rng.integers(1, cfg.const_max + 1))
        value = _apply(op, value, c, cfg.modulus)
        prompt.append(f"{names[i]}={names[i - 1]}{op}{c};")
        answers.append((names[i], value))
    target = "".join(f"{v}={cfg.fmt(x)};" for v, x in answers)
    return Problem("".join(prompt), target, tuple(answers), tuple(v for v, _ in answers), horizon, cfg.reward, cfg.gamma, cfg.width)


def _atomic(rng: np.random.Generator, cfg: TaskConfig) -> tuple[int, str, int, int]:
    n = int(rng.integers(cfg.modulus))
    op = cfg.operators[int(rng.integers(len(cfg.operators)))]
    c = int(rng.integers(1, cfg.const_max + 1))
    return n, op, c, _apply(op, n, c, cfg.modulus)


def packed_problem(rng: np.random.Generator, k: int, cfg: TaskConfig) -> Problem:
    """``k`` independent atomic problems ``u=n;w=u op c;`` in one prompt (dependency depth 1)."""
    _check_horizon(k, 13)
    names = _names(rng, 2 * k, cfg, literal_slots=range(0, 2 * k, 2))
    prompt, answers = [], []
    for i in range(k):
        u, w = names[2 * i], names[2 * i + 1]
        n, op, c, ans = _atomic(rng, cfg)
        prompt.append(f"{u}={cfg.fmt(n)};{w}={u}{op}{c};")
        answers.append((w, ans))
    target = "".join(f"{v}={cfg.fmt(x)};" for v, x in answers)
    return Problem("".join(prompt), target, tuple(answers), tuple(v for v, _ in answers), 1, cfg.reward, cfg.gamma, cfg.width)


def composed_problem(rng: np.random.Generator, horizon: int, cfg: TaskConfig) -> Problem:
    """R-HORIZON composition of ``horizon`` atomic problems: problem i+1's literal becomes ``w_i + k``."""
    _check_horizon(horizon, 13)
    names = _names(rng, 2 * horizon, cfg, literal_slots=(0,))
    prompt, answers, scored = [], [], []
    prev = None
    for i in range(horizon):
        u, w = names[2 * i], names[2 * i + 1]
        n, op, c, ans = _atomic(rng, cfg)
        if prev is None:
            prompt.append(f"{u}={cfg.fmt(n)};")
        else:
            k = (n - prev) % cfg.modulus
            prompt.append(f"{u}={names[2 * i - 1]}+{cfg.fmt(k)};")
            answers.append((u, n))
        prompt.append(f"{w}={u}{op}{c};")
        answers.append((w, ans))
        scored.append(w)
        prev = ans
    target = "".join(f"{v}={cfg.fmt(x)};" for v, x in answers)
    reward = "all" if cfg.reward == "final" else cfg.reward
    return Problem("".join(prompt), target, tuple(answers), tuple(scored), horizon, reward, cfg.gamma, cfg.width)


KINDS = {"chain": chain_problem, "composed": composed_problem, "packed": packed_problem}


def make_problems(kind: str, horizons, n: int, seed: int, cfg: TaskConfig | None = None) -> list[Problem]:
    """``n`` problems of ``kind``; ``horizons`` is an int or a sequence sampled uniformly per problem.

    Deterministic in ``(kind, horizons, n, seed, cfg)``.
    """
    if kind not in KINDS:
        raise UsageError(f"task kind {kind!r} is unknown; use one of {sorted(KINDS)}.")
    cfg = cfg or TaskConfig()
    hs = [int(horizons)] if np.isscalar(horizons) else [int(h) for h in horizons]
    if not hs:
        raise UsageError("no horizons given; pass at least one horizon.")
    rng = np.random.default_rng(seed)
    make = KINDS[kind]
    return [make(rng, hs[int(rng.integers(len(hs)))], cfg) for _ in range(n)]


def max_lengths(kind: str, horizon: int, cfg: TaskConfig) -> tuple[int, int]:
    """Upper bounds on (prompt characters, completion characters) for ``kind`` at ``horizon``."""
    d, cd = cfg.digits, len(str(cfg.const_max))
    literal, step, link, answer = 3 + d, 5 + cd, 5 + d, 3 + d  # "x=NN;", "y=x+C;", "u=w+KK;", "y=NN;"
    if kind == "chain":
        return literal + horizon * step, horizon * answer
    if kind == "packed":
        return horizon * (literal + step), horizon * answer
    return literal + horizon * step + (horizon - 1) * link, (2 * horizon - 1) * answer


class ProblemStream:
    """An endless, seeded source of problems: ``sample(horizons, n)`` draws the next ``n``.

    Training streams and held-out sets use different seeds (held-out sets are built with
    :func:`make_problems` and ``seed + HELD_OUT_OFFSET``).
    """

    def __init__(self, kind: str, cfg: TaskConfig | None = None, seed: int = 0):
        if kind not in KINDS:
            raise UsageError(f"task kind {kind!r} is unknown; use one of {sorted(KINDS)}.")
        self.kind, self.cfg = kind, cfg or TaskConfig()
        self.rng = np.random.default_rng(seed)

    def sample(self, horizons, n: int) -> list[Problem]:
        hs = [int(horizons)] if np.isscalar(horizons) else [int(h) for h in horizons]
        make = KINDS[self.kind]
        return [make(self.rng, hs[int(self.rng.integers(len(hs)))], self.cfg) for _ in range(n)]


HELD_OUT_OFFSET = 1_000_003


def parse_horizons(text: str) -> list[int]:
    """``"1-5"`` -> [1, 2, 3, 4, 5]; ``"1,3,8"`` -> [1, 3, 8]; ``"4"`` -> [4]."""
    out: list[int] = []
    try:
        for part in str(text).split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = part.split("-")
                out.extend(range(int(lo), int(hi) + 1))
            elif part:
                out.append(int(part))
    except ValueError:
        raise UsageError(f"horizons {text!r} are malformed; write e.g. 1-5 or 1,2,4.") from None
    if not out or min(out) < 1:
        raise UsageError(f"horizons {text!r} must name at least one positive horizon; write e.g. 1-5.")
    return out
