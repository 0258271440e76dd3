"""A paired comparison that may be checked after every answer and stopped when decided: an anytime-valid
confidence sequence for B's accuracy minus A's on the same questions, asked in the order A's run fixed.

Why not a fixed-sample interval: peeked at every 10 questions, McNemar's test at 5% called a difference between
two equal models in about a fifth of the runs (bench/sequential_sim.py prints the figure); a confidence
sequence holds the true difference at every count at once with 95% probability, so stopping whenever it decides
keeps the error at 5%.

The sequence is Waudby-Smith and Ramdas' hedged betting capital for a bounded mean (JRSS-B 86, 2024, Theorem 3,
with their predictable plug-in bets and truncation c = 1/2), on the per-question difference d = B right - A right
in {-1, 0, 1}, rescaled to [0, 1]. The hedge is the maximum of the two one-sided capitals (each at alpha/2): a
candidate difference m leaves the sequence for good once the up-bet's capital reaches 2/alpha (the sequence lies
above m) or the down-bet's does (below m). Both capitals are monotone in m, so the sequence is an interval, and
which side left tells which way it decided. Libraries tried, Dec 2026, for Python 3.11: confseq 0.0.11 (the
authors' own) ships only a source archive that needs Boost, CMake and pybind11 2.6 to build, which no user of a
pip install has; expectation 0.6 requires Python 3.12; savvi 0.3.1 took about 142 ms per update (with cvxpy),
hours for the simulation's 10,000 sequences; ville 0.1.0 (two months old) has the same betting sequence one
stream at a time. So the capital is written here in numpy, for many sequences at once (the simulation runs
10,000 together), and tests/test_sequential.py checks its interval against ville's BettingCS where it is
installed (the dev extra).

Like the fixed-sample interval it replaces, it treats the questions as random draws from the pool they stand for;
taking them in a seeded random order (`order`), never category by category, is what makes each next answer such a
draw as the answers arrive.

The state is a function of the answers in order: records in, the same state out, so an interrupted run resumes by
replaying what it kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.stats import norm

from ..runs.run import PastRun
from .stats import Interval

Outcome = Literal["better", "worse", "equivalent", "cannot tell", "running"]
BET_CAP = 0.5  # c: a bet never stakes more than half the capital, so one answer cannot ruin it
GRID = 0.001  # the product's candidate differences, every 0.1 point: its interval is conservative by that much
NEEDED_CAP = 20_000  # the most further questions the budget forecast simulates


@dataclass(frozen=True)
class Design:
    """What is fixed before B's first answer: the margin of equivalence, the budget of questions, the error."""

    margin: float = 0.03  # 3 points: differences smaller than this count as none
    budget: int = 1000
    alpha: float = 0.05

    def __post_init__(self):
        if not 0 < self.margin < 1:
            raise ValueError(f"margin is a fraction of questions, e.g. 0.03 for 3 points; got {self.margin!r}")
        if not (isinstance(self.budget, int) and self.budget >= 1):
            raise ValueError(f"budget is the most questions B may be asked, a whole number >= 1; got {self.budget!r}")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha is the error allowed, e.g. 0.05; got {self.alpha!r}")

    def as_dict(self) -> dict:
        return {"margin": self.margin, "budget": self.budget, "alpha": self.alpha}


class Capital:
    """The betting capital of `sequences` sequences at once, each at its own candidate differences (columns of
    `points`, in [-1, 1]); `above`/`below` mark the candidates a sequence has left for good, and on which side."""

    def __init__(self, points: np.ndarray, sequences: int, alpha: float):
        self.m = (np.broadcast_to(np.asarray(points, float), (sequences, np.shape(points)[-1])) + 1) / 2
        self.threshold = math.log(2 / alpha)  # each one-sided capital at alpha / 2; also sizes the bets
        self.n, self.total, self.dev, self.var = 0, np.zeros(sequences), np.zeros(sequences), np.full(sequences, 0.25)
        self.log_up, self.log_down = np.zeros(self.m.shape), np.zeros(self.m.shape)
        self.above, self.below = np.zeros(self.m.shape, bool), np.zeros(self.m.shape, bool)
        with np.errstate(divide="ignore"):
            self.cap_up, self.cap_down = BET_CAP / self.m, BET_CAP / (1 - self.m)

    def step(self, d: np.ndarray) -> None:
        """One more paired difference (B right - A right, in {-1, 0, 1}) for every sequence."""
        z, i = (np.asarray(d, float) + 1) / 2, self.n + 1
        lam = np.sqrt(2 * self.threshold / (self.var * i * math.log1p(i)))[:, None]
        gap = z[:, None] - self.m
        self.log_up += np.log1p(np.minimum(lam, self.cap_up) * gap)
        self.log_down += np.log1p(-np.minimum(lam, self.cap_down) * gap)
        self.above |= self.log_up >= self.threshold
        self.below |= self.log_down >= self.threshold
        self._plug_in(z, i)

    def _plug_in(self, z: np.ndarray, i: int) -> None:
        """The predictable mean and variance the next bet is sized by (Waudby-Smith and Ramdas, eq. 26)."""
        self.total += z
        self.dev += (z - (0.5 + self.total) / (i + 1)) ** 2
        self.var = (0.25 + self.dev) / (i + 1)
        self.n = i

    def copies(self, columns: Sequence[int], k: int) -> Capital:
        """k copies of sequence 0's state at the given columns: the start of simulated continuations."""
        out = Capital(2 * self.m[0, columns] - 1, k, 1.0)
        out.threshold, out.n = self.threshold, self.n
        for name in ("total", "dev", "var"):
            setattr(out, name, np.full(k, getattr(self, name)[0]))
        for name in ("log_up", "log_down", "above", "below"):
            setattr(out, name, np.repeat(getattr(self, name)[:1, columns], k, axis=0))
        return out


def decisions(above: np.ndarray, below: np.ndarray) -> np.ndarray:
    """Per sequence, from its columns (-margin, 0, +margin): 1 B better (the sequence lies above 0), -1 B worse,
    2 equivalent (inside the margin both ways), 0 not yet. Better or worse comes first where both hold."""
    out = np.where(above[:, 0] & below[:, 2], 2, 0)
    out = np.where(below[:, 1], -1, out)
    return np.where(above[:, 1], 1, out)


OUTCOMES = {1: "better", -1: "worse", 2: "equivalent"}


@dataclass
class PairedSequence:
    """The sequence of one comparison, fed pairs (A right, B right) in A's order; stops at its first decision
    or at the budget. `path` holds (questions, low, high, estimate) after every answer, for the report's plot."""

    design: Design = field(default_factory=Design)
    outcome: Outcome = "running"
    stopped_at: int | None = None
    path: list[tuple[int, float, float, float]] = field(default_factory=list)
    pairs: list[tuple[bool, bool]] = field(default_factory=list)

    def __post_init__(self):
        margin = self.design.margin
        self.points = np.unique(np.concatenate([np.arange(-1, 1 + GRID / 2, GRID).round(6), [-margin, 0, margin]]))
        self.columns = [int(np.searchsorted(self.points, x)) for x in (-margin, 0.0, margin)]
        self.capital = Capital(self.points, 1, self.design.alpha)
        self._sum = 0

    @classmethod
    def replay(cls, pairs: Iterable[tuple[bool, bool]], design: Design | None = None) -> PairedSequence:
        """The state after these answers, in order: the way an interrupted run resumes."""
        seq = cls(design or Design())
        seq.update(pairs)
        return seq

    def update(self, pairs: Iterable[tuple[bool, bool]]) -> PairedSequence:
        """Feed answers until decided or at the budget; answers after that are not used (the rule stopped)."""
        for a, b in pairs:
            if self.outcome != "running":
                break
            self._one(bool(a), bool(b))
        return self

    def _one(self, a: bool, b: bool) -> None:
        self.pairs.append((a, b))
        self._sum += int(b) - int(a)
        self.capital.step(np.array([int(b) - int(a)]))
        n, (low, high) = self.capital.n, self.interval()
        self.path.append((n, low, high, self._sum / n))
        code = int(decisions(self.capital.above[:, self.columns], self.capital.below[:, self.columns])[0])
        if code or n >= self.design.budget:
            self.outcome, self.stopped_at = OUTCOMES.get(code, "cannot tell"), n

    def interval(self) -> tuple[float, float]:
        """The sequence now (B minus A, fractions): between the highest candidate it lies above and the lowest it
        lies below; each end a grid point outside it, so conservative by at most 0.1 point."""
        above, below = self.capital.above[0], self.capital.below[0]
        low = float(self.points[above].max()) if above.any() else -1.0
        high = float(self.points[below].min()) if below.any() else 1.0
        return low, high

    @property
    def n(self) -> int:
        return self.capital.n

    @property
    def reason(self) -> str:
        """Why it stopped, in words."""
        m, (low, high) = 100 * self.design.margin, self.interval()
        return {"better": f"the sequence lies above 0, from {100 * low:+.1f} points: B is better",
                "worse": f"the sequence lies below 0, up to {100 * high:+.1f} points: B is worse",
                "equivalent": f"the sequence lies within the +/-{m:.0f}-point margin: equivalent",
                "cannot tell": f"the budget of {self.design.budget:,} questions ran out before the sequence "
                               "decided",
                "running": "not stopped yet"}[self.outcome]

    def fixed_sample(self) -> int:
        """The questions a fixed-sample paired test needs for the same errors (alpha either way, i.e. power 1 -
        alpha) at a difference of the margin, with the discordance seen here: the design it replaces."""
        return fixed_sample_size(rates(self.pairs), self.design.margin, self.design.alpha)

    def needed(self, continuations: int = 400, seed: int = 0) -> int | None:
        """Where it cannot tell: the budget at which half of `continuations` simulated from here, at the rates of
        agreement seen so far, have decided (None: not within NEEDED_CAP more questions)."""
        probs = rates(self.pairs)
        sims, rng = self.capital.copies(self.columns, continuations), np.random.default_rng(seed)
        done = np.zeros(continuations, bool)
        for extra in range(1, NEEDED_CAP + 1):
            sims.step(rng.choice([-1, 0, 1], size=continuations, p=probs))
            done |= decisions(sims.above, sims.below) != 0
            if done.mean() >= 0.5:
                return self.n + extra
        return None

    def as_dict(self) -> dict:
        low, high = self.interval()
        return {"design": self.design.as_dict(), "outcome": self.outcome, "stopped_at": self.stopped_at,
                "questions": self.n, "interval": {"low": low, "high": high, "estimate": self._sum / max(1, self.n),
                                                  "level": 1 - self.design.alpha, "method": METHOD},
                "reason": self.reason, "fixed_sample": self.fixed_sample()}


METHOD = "hedged betting confidence sequence (Waudby-Smith and Ramdas), valid at every count"


def rates(pairs: Sequence[tuple[bool, bool]]) -> list[float]:
    """P(d = -1), P(d = 0), P(d = 1) as seen, with one pseudo-answer each (Laplace), so none is ever 0."""
    d = [int(b) - int(a) for a, b in pairs]
    counts = np.array([d.count(-1), d.count(0), d.count(1)], float) + 1
    return list(counts / counts.sum())


def fixed_sample_size(probs: Sequence[float], difference: float, alpha: float = 0.05) -> int:
    """Paired-test sample size, two-sided alpha and power 1 - alpha at `difference`: ((z_{1-alpha/2} +
    z_{1-alpha}) sigma / difference)^2, with sigma^2 = discordance - mean^2 from P(d = -1), P(d = 0), P(d = 1)."""
    low, _, high = probs
    sigma2 = max(low + high - (high - low) ** 2, 1e-9)
    z = norm.ppf(1 - alpha / 2) + norm.ppf(1 - alpha)
    return math.ceil(z ** 2 * sigma2 / difference ** 2)


def order(question_ids: Iterable[str], seed: int) -> list[str]:
    """A seeded, uniformly random order of A's questions (by its draw's seed, recorded with A's run): B is asked in
    it, and the sequence takes the pairs in it. Never a draw's own order (category by category): the sequence
    needs each next question to be a random one of those left, as the fixed-sample interval needs a random sample."""
    ids = sorted(dict.fromkeys(map(str, question_ids)))
    return [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))]


class Live:
    """B's run as it goes: answers arrive out of order (several are in flight), so each is held until every
    question before it in A's order has its answer, then fed to the sequence; `decided` tells the batch to send
    no more. Answers reused from an interrupted run are added first: the same state as if never interrupted."""

    def __init__(self, ids: Sequence[str], a_right: Mapping[str, bool], design: Design, key: str = "question_id"):
        self.ids, self.a, self.b, self.key = list(ids), {str(k): bool(v) for k, v in a_right.items()}, {}, key
        self.sequence, self.fed = PairedSequence(design), 0

    def add(self, question: str, right: bool) -> None:
        self.b[str(question)] = bool(right)
        while self.fed < len(self.ids) and self.ids[self.fed] in self.b and not self.decided:
            q = self.ids[self.fed]
            self.sequence.update([(self.a[q], self.b[q])])
            self.fed += 1

    @property
    def decided(self) -> bool:
        return self.sequence.outcome != "running"

    def until_decided(self, calls: Iterable) -> Iterator:
        """The calls, one at a time, until the sequence decides (the batch asks for the next as one ends)."""
        for call in calls:
            if self.decided:
                return
            yield call


# --- from sealed runs: B's answers in A's order, and what the verdict row carries -------------------------------

def design_of(settings: Mapping, questions: int) -> Design | None:
    """The design a run was planned with (`sequential: true` with `margin` and `budget`, or `sequential` as a
    mapping of them); None for a fixed-sample run. The budget defaults to every question of A's order."""
    plan = settings.get("sequential")
    if not plan:
        return None
    given = plan if isinstance(plan, Mapping) else settings
    return Design(float(given.get("margin") or Design.margin), int(given.get("budget") or questions),
                  float(given.get("alpha") or Design.alpha))


def from_runs(a: PastRun, b: PastRun, a_right: Mapping, b_right: Mapping, drawn: str = "questions",
              unit: str = "questions") -> tuple[Interval, int, str, dict]:
    """B's sealed run, planned sequential, against A's: the sequence replayed from both runs' graded records (never
    a figure B's run wrote about itself) in A's order, as a verdict row carries it: the interval, the questions
    used, what budget would tell where it could not, and the summary. `drawn`: the setting with A's draw."""
    ids = a_order(a, a_right, drawn)
    design = design_of(b.settings, len(ids))
    held = summary(PairedSequence.replay(in_order(ids, a_right, b_right), design), pace(b), len(ids), unit)
    told_by = needed_text(held) if held["outcome"] == "cannot tell" else ""
    return Interval(**held["interval"]), held["questions"], told_by, held


def a_order(a: PastRun, a_right: Mapping, drawn: str = "questions") -> list[str]:
    """A's seeded order of its whole draw (the ids its settings record under `drawn`), kept to those A answered."""
    ids = [str(q) for q in a.settings.get(drawn) or a_right.keys()]
    return [q for q in order(ids, int(a.settings.get("seed") or 0)) if q in a_right]


def pace(run: PastRun) -> float | None:
    """Seconds of the run's batch per question: what a question not asked saves (None where unknown)."""
    batch = (run.summary or {}).get("batch") or {}
    return batch["wall_s"] / batch["asked"] if batch.get("wall_s") and batch.get("asked") else None


def in_order(order: Sequence[str], a: Mapping[str, bool], b: Mapping[str, bool]) -> list[tuple[bool, bool]]:
    """(A right, B right) in A's order, up to the first question either has no answer for: B was asked in this
    order, and an answer that came back past a gap waits for it."""
    out = []
    for q in order:
        if q not in a or q not in b:
            break
        out.append((bool(a[q]), bool(b[q])))
    return out


def summary(seq: PairedSequence, seconds_per_question: float | None, available: int | None = None,
            unit: str = "questions") -> dict:
    """The sequence as a verdict row carries it: its state, the questions and minutes saved against the budget
    and against the fixed-sample design of the same errors (minutes None where B's pace is unknown), what budget
    would most likely tell where it could not, and its path for the plot. `available`: the most there are to
    ask (A's answered questions, in its order): HumanEval's 164 problems cannot tell a 3-point margin at all."""
    out = seq.as_dict() | {"seconds_per_question": seconds_per_question, "path": [list(p) for p in seq.path],
                           "available": available, "unit": unit}
    for name, total in (("budget", seq.design.budget), ("fixed_sample", out["fixed_sample"])):
        saved = total - seq.n
        out[f"saved_against_{name}"] = {"questions": saved, "minutes": None if seconds_per_question is None
                                        else round(saved * seconds_per_question / 60, 1)}
    out["needed"] = seq.needed() if seq.outcome == "cannot tell" else None
    return out


def told(s: Mapping) -> str:
    """The row's note: why it stopped, the questions used and saved; against the budget alone where the
    fixed-sample design would need more than there are to ask (a saving against a run that cannot be made)."""
    fixed, budget, unit = s["saved_against_fixed_sample"], s["saved_against_budget"], s.get("unit", "questions")
    text = (f"sequential, {100 * s['design']['margin']:.0f}-point margin: stopped after {s['questions']:,} of "
            f"{s['design']['budget']:,} {unit} ({s['reason']}); a fixed-sample design of the same errors, sized to "
            f"tell a difference as small as the margin, ")
    if beyond(s, s["fixed_sample"]):
        return text + (f"would need {s['fixed_sample']:,}, more than the {s['available']:,} there are to ask: "
                       f"{budget['questions']:,} {unit} saved against the budget{_minutes(budget)}")
    if fixed["questions"] < 0:  # sized with hindsight (the discordance seen), a fixed design can need fewer
        return (text + f"needs {s['fixed_sample']:,} (sized with the discordance seen here, which a fixed design "
                f"cannot know before it runs): {-fixed['questions']:,} {unit} more, the price of an interval valid "
                f"at every count; {budget['questions']:,} {unit} saved against the budget{_minutes(budget)}")
    under = f" ({budget['questions']:,} under the budget)" if budget["questions"] > 0 else ""
    return text + f"needs {s['fixed_sample']:,}: {fixed['questions']:,} {unit} saved{_minutes(fixed)}" + under


def _minutes(saved: Mapping) -> str:
    m = saved["minutes"]
    return "" if m is None else f", about {m:,.{0 if abs(m) >= 10 else 1}f} minutes of B's time"


def beyond(s: Mapping, count: int | None) -> bool:
    """More than there are to ask (A's answered questions): no run of these can be that long."""
    return count is not None and s.get("available") is not None and count > s["available"]


def needed_text(s: Mapping) -> str:
    unit = s.get("unit", "questions")
    if s.get("needed") is None:
        return f"no budget up to {s['questions'] + NEEDED_CAP:,} {unit} would most likely tell, at the rates seen"
    if beyond(s, s["needed"]):
        return (f"a budget of about {s['needed']:,} {unit} would most likely tell, more than the {s['available']:,} "
                f"there are to ask: no run of these {unit} can tell at this margin")
    return f"a budget of about {s['needed']:,} {unit} would most likely tell (resume the run with it)"


def of_run(live: Live | None, b_right: Mapping, seconds_per_question: float | None,
           unit: str = "questions") -> dict | None:
    """B's sequence replayed from its own graded answers in A's order: what its notebook shows and seals (None for
    a run that is not sequential against another)."""
    if live is None:
        return None
    seq = PairedSequence.replay(in_order(live.ids, live.a, b_right), live.sequence.design)
    return summary(seq, seconds_per_question, len(live.ids), unit)


def markdown(s: Mapping) -> str:
    i = s["interval"]
    return (f"**{s['outcome']}**: B minus A {100 * i['estimate']:+.1f} points [{100 * i['low']:+.1f}, "
            f"{100 * i['high']:+.1f}], a 95% confidence sequence valid at every count. {told(s)}."
            + (f" {needed_text(s)}." if s["outcome"] == "cannot tell" else ""))
