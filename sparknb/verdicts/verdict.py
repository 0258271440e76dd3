"""The verdict: the headline rows each study draws from its own sealed runs, and the rules by which a row decides.

A comparison is only as good as the weakest figure it rests on, so every row carries its standing, judged
here the same way for every study:
- trusted: nothing in the runs behind it gives a reason to doubt it;
- caveated: a reason carried from a run's own findings (bursts, a busy machine, drift, outliers, too few
  samples, speculative decoding on one side only, a run that failed halfway): shown and named, never deciding.
  A finding that names what it is about (a length, a kind, the scores) caveats only the rows about that: a graded
  paired difference whose sides gave the very same answer text on every shared item is not doubted by what doubts
  the scores (cut answers are cut and graded alike on both sides), and a name or a precision out of reach is no
  doubt of an interval;
- not comparable: the two figures do not measure the same thing, so no ratio is read from them.
A model wins a figure only on a trusted row in the role of a verdict whose interval excludes no difference.
How each kind decides: a ratio where its bootstrap interval lies on one side of 1; a fixed-sample paired
difference where its interval lies on one side of 0 (it was computed once, at the run's own count); a
sequentially decided difference (`sequences`) by what its confidence sequence decided when it stopped: above 0
wins for the subject, below 0 for the base, inside the margin both ways is "equivalent" (decided, no winner),
and a budget spent first is "cannot tell", with the budget that would most likely tell.
A trap (the short-prompt TTFT that measures fixed overhead) and context (a bandwidth share, tokens per
step) are shown beside the verdict rows and never decide. A study is won by a model that wins at least one
of its figures and loses none. Where two models cannot be told apart, the row says what sample would tell.

Each study builds its rows in its own package (`headline_rows(runs)`); the comparison only loops over them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..runs.report import first_line
from ..runs.run import PastRun
from . import stats

if TYPE_CHECKING:
    import pandas as pd

Standing = Literal["trusted", "caveated", "not comparable"]
Better = Literal["higher", "lower", "none"]
Role = Literal["verdict", "trap", "context"]
Outcome = Literal["wins", "equivalent", "cannot tell", "caveated", "not comparable", "trap", "context"]

MIN_SAMPLES = 5  # fewer measurements a side than this are too few for an interval anyone should decide on
DOUBTS = ("warning", "marked", "suspect", "failed")  # every Finding level but info is a reason to doubt


@dataclass(frozen=True)
class Runs:
    """The sealed runs a comparison sets side by side: per study (notebook), per subject (a model, or a box
    where one model is compared across boxes). The first subject is the base every ratio divides by."""

    by_study: dict[str, dict[str, PastRun]]
    subjects: list[str]
    apart: str = ""  # where the subjects were measured on different boxes: a caveat on every row

    @property
    def base(self) -> str:
        return self.subjects[0]

    def of(self, study: str) -> dict[str, PastRun]:
        """The runs of one study, in the subjects' order."""
        runs = self.by_study.get(study, {})
        return {s: runs[s] for s in self.subjects if s in runs}

    def frames(self, study: str, read: Callable[[list[dict]], pd.DataFrame]) -> tuple[dict[str, PastRun], dict]:
        """The runs of one study, and the request table of each that kept a row (`read`: records -> its rows)."""
        mine = self.of(study)
        frames = {s: read(r.records) for s, r in mine.items()}
        return mine, {s: f for s, f in frames.items() if len(f)}


@dataclass(frozen=True)
class Row:
    """One figure of one study for every subject, with the ratio (or paired difference) of each to the base."""

    study: str
    figure: str  # e.g. "tok/s at 1,024 tokens"
    values: dict[str, float | None]  # subject -> its figure
    n: dict[str, int] = field(default_factory=dict)  # subject -> measurements behind it
    ratios: dict[str, stats.Interval] = field(default_factory=dict)  # subject -> its figure against the base's
    better: Better = "higher"
    kind: Literal["ratio", "difference"] = "ratio"  # ratio: 1 is no difference; difference (points): 0 is
    role: Role = "verdict"
    caveats: dict[str, tuple[str, ...]] = field(default_factory=dict)  # subject -> why its figure is in doubt
    not_comparable: str = ""  # why no ratio can be read here, where that is so
    needed: dict[str, str] = field(default_factory=dict)  # subject -> what would tell it from the base
    note: str = ""
    sequences: dict[str, dict] = field(default_factory=dict)  # subject -> its confidence sequence where sequential

    def reasons(self, subject: str, base: str) -> list[str]:
        """Every reason the comparison of `subject` with `base` on this row cannot decide, base's first."""
        out = [f"{base}: {c}" for c in self.caveats.get(base, ())]
        out += [f"{subject}: {c}" for c in self.caveats.get(subject, ())]
        few = [f"{s} {self.n[s]}" for s in (base, subject) if s in self.n and self.n[s] < MIN_SAMPLES]
        if few:
            out.append(f"too few measurements for an interval ({', '.join(few)}; {MIN_SAMPLES} a side needed)")
        ratio = self.ratios.get(subject)
        if ratio is not None and math.isnan(ratio.low) and not few:
            out.append("no interval could be drawn")
        return out

    def standing(self, subject: str, base: str) -> Standing:
        if self.not_comparable:
            return "not comparable"
        return "caveated" if self.reasons(subject, base) else "trusted"

    def as_dict(self) -> dict:
        return {"study": self.study, "figure": self.figure, "values": self.values, "n": self.n,
                "ratios": {s: i.as_dict() for s, i in self.ratios.items()}, "better": self.better, "kind": self.kind,
                "role": self.role, "caveats": {s: list(c) for s, c in self.caveats.items()},
                "not_comparable": self.not_comparable, "needed": self.needed, "note": self.note,
                "sequences": self.sequences}


@dataclass(frozen=True)
class Decision:
    """What one row says about one subject against the base."""

    row: Row
    subject: str
    outcome: Outcome
    winner: str | None
    reasons: tuple[str, ...] = ()

    @property
    def shown(self) -> str:
        """The ratio or difference as the table shows it."""
        ratio = self.row.ratios.get(self.subject)
        if ratio is None:
            return "-"
        return ratio.points(signed=True) if self.row.kind == "difference" else ratio.times()


def decide(row: Row, subject: str, base: str) -> Decision:
    """The rules, in order: a trap and context never decide; nor does a row that is not comparable or is
    caveated; a trusted verdict row decides where its interval excludes no difference, else cannot tell."""
    if row.role in ("trap", "context") or (row.better == "none" and row.kind == "ratio"):
        return Decision(row, subject, "trap" if row.role == "trap" else "context", None)
    if row.not_comparable:
        return Decision(row, subject, "not comparable", None, (row.not_comparable,))
    if subject not in row.ratios:
        return Decision(row, subject, "not comparable", None, ("no figure on one side",))
    reasons = row.reasons(subject, base)
    if reasons:
        return Decision(row, subject, "caveated", None, tuple(reasons))
    if subject in row.sequences:
        return _sequential(row, subject, base)
    side = _side(row.ratios[subject], row.kind)
    if side is None:
        return Decision(row, subject, "cannot tell", None)
    ahead = side > 0 if row.kind == "difference" or row.better == "higher" else side < 0
    return Decision(row, subject, "wins", subject if ahead else base)


def _sequential(row: Row, subject: str, base: str) -> Decision:
    """What the subject's confidence sequence decided when it stopped, as a decision of the row."""
    outcome = row.sequences[subject].get("outcome")
    if outcome in ("better", "worse"):
        return Decision(row, subject, "wins", subject if outcome == "better" else base)
    return Decision(row, subject, "equivalent" if outcome == "equivalent" else "cannot tell", None)


def _side(interval: stats.Interval, kind: str) -> float | None:
    """+1 or -1 where the whole interval lies on one side of no difference; None where it holds it."""
    if kind == "ratio":
        return interval.excludes
    if math.isnan(interval.low) or interval.low <= 0 <= interval.high:
        return None
    return 1.0 if interval.low > 0 else -1.0


@dataclass(frozen=True)
class StudyVerdict:
    """One study, one subject against the base: who wins it, on which rows, and what could not decide."""

    study: str
    subject: str
    base: str
    decisions: tuple[Decision, ...]

    def of(self, outcome: Outcome) -> list[Decision]:
        return [d for d in self.decisions if d.outcome == outcome]

    @property
    def winner(self) -> str | None:
        """The one side that wins a figure here while the other wins none; None where neither or both do."""
        winners = {d.winner for d in self.of("wins")}
        return winners.pop() if len(winners) == 1 else None

    @property
    def split(self) -> bool:
        return len({d.winner for d in self.of("wins")}) > 1


def verdicts(rows: Sequence[Row], subjects: Sequence[str]) -> list[StudyVerdict]:
    """Every study against the base, for every other subject, in the rows' order."""
    base, out = subjects[0], []
    for subject in subjects[1:]:
        for study in dict.fromkeys(r.study for r in rows):
            mine = tuple(decide(r, subject, base) for r in rows if r.study == study)
            out.append(StudyVerdict(study, subject, base, mine))
    return out


# --- a run's own doubts, carried into its rows -------------------------------------------------------------

def _speculative(run: PastRun) -> str | None:
    """The speculative method the run's model declares, or the one its server showed (tokens per step above 1)."""
    declared = (run.params.get("model") or {}).get("speculative")
    if declared:
        return declared
    table = (run.summary or {}).get("table") or []
    return "seen in its tokens per step" if any((r.get("tokens/step") or 1) > 1 for r in table) else None


def one_sided(runs: dict[str, PastRun]) -> dict[str, tuple[str, ...]]:
    """Speculative decoding on some sides only: those sides' speeds depend on the text, the others' do not."""
    methods = {s: _speculative(r) for s, r in runs.items()}
    if len({bool(m) for m in methods.values()}) < 2:
        return {}
    return {s: (f"speculative decoding ({m}) on this side only: its speed depends on how predictable the text is",)
            for s, m in methods.items() if m}


def caveats(run: PastRun, about: object = None) -> tuple[str, ...]:
    """The reasons a run gives to doubt its figure about `about` (a prompt length, a kind, a level; None: a
    figure of the whole run): it failed halfway; the guard was forced; every finding of its own above info
    that names this key or names none (a run sealed before findings named their keys counts as naming none);
    the GPU telemetry's warnings."""
    out = []
    if run.failure:
        kept, why = run.failure.get("records"), first_line(str(run.failure.get("reason") or "no reason recorded"))
        out.append(f"run {run.id} failed halfway ({why})"
                   + (f"; its figures come from the {kept} records it kept" if kept is not None else ""))
    guard = (run.params.get("guard") or {})
    if guard.get("forced") or guard.get("lock_forced_over"):
        out.append(f"run {run.id} was measured with the guard forced past")
    summary = run.summary or {}
    found = list(summary.get("findings") or []) + list((summary.get("telemetry") or {}).get("findings") or [])
    for f in found:
        if isinstance(f, dict) and f.get("level") in DOUBTS and _concerns(f.get("about") or (), about):
            out.append(_first_sentence(f.get("text", "")))
    return tuple(dict.fromkeys(out))


def warnings_of(run: PastRun) -> list[tuple[str, str]]:
    """Every doubt a run states about itself, whatever it is about, as (level, text): for the comparison's top
    section. Each text's first sentence is what caveats() carries into a row, so a row can cite it."""
    summary = run.summary or {}
    found = list(summary.get("findings") or []) + list((summary.get("telemetry") or {}).get("findings") or [])
    out = [(f.get("level", "warning"), f.get("text", "")) for f in found
           if isinstance(f, dict) and f.get("level") in DOUBTS]
    if run.failure:
        out.insert(0, ("failed", caveats(run)[0]))
    if summary == {} and not run.failure:
        out.insert(0, ("warning", "the run has no summary: it ended before its tables were written"))
    return list(dict.fromkeys(out))


def short(text: str) -> str:
    """A finding as a row carries it: its first sentence."""
    return _first_sentence(text)


def _concerns(named: Iterable, about: object) -> bool:
    named = [str(x) for x in named]
    return not named or about is None or str(about) in named


def _first_sentence(text: str, limit: int = 240) -> str:
    """Enough of a finding to name it in a row; the whole text is in the run's own report."""
    text = " ".join(text.split())
    cut = text.find(". ")
    short = text if cut < 0 else text[: cut + 1]
    return short if len(short) <= limit else short[: limit - 3].rstrip() + "..."


# --- shared row makers ---------------------------------------------------------------------------------------

def median_row(study: str, figure: str, samples: dict[str, list[float]], base: str, *, better: Better = "higher",
               role: Role = "verdict", caveats: dict[str, tuple[str, ...]] | None = None, note: str = "",
               not_comparable: str = "") -> Row:
    """A row of medians over each subject's own measurements, every ratio to the base's with a bootstrap
    interval, and, where an interval holds 1, how many requests a side would tell the two apart."""
    values = {s: (float(np.median(v)) if v else None) for s, v in samples.items()}
    ratios = {s: stats.median_ratio(v, samples[base]) for s, v in samples.items()
              if s != base and v and samples.get(base)}
    needed = {}
    for s, ratio in ratios.items():
        if ratio.excludes is None and not math.isnan(ratio.low):
            more = stats.requests_needed(ratio, min(len(samples[s]), len(samples[base])))
            needed[s] = (f"about {more:,} requests a side, if the spread stays as measured" if more else
                         "no difference was seen: more requests would only narrow the interval around 1")
    return Row(study, figure, values, {s: len(v) for s, v in samples.items()}, ratios, better, "ratio", role,
               {s: tuple(c) for s, c in (caveats or {}).items() if c}, not_comparable, needed, note)
