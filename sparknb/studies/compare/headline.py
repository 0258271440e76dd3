"""The headline table: every study's own rows, in the shape of the reference study, with their standing.

Nothing here knows a study: each one's package builds its rows (`headline_rows(runs)`), and the rules by
which a row decides are sparknb.verdicts.verdict's. A study of these runs without headline rows is named, not skipped.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import pandas as pd

from ...machine import energy
from ...verdicts.verdict import Row, Runs, StudyVerdict, decide, verdicts
from .. import registry

LABELS = {"trusted": "trusted", "caveated": "caveated", "not comparable": "not comparable"}


@dataclass(frozen=True)
class Headline:
    base: str
    subjects: list[str]
    rows: list[Row]
    without_rows: list[str] = field(default_factory=list)  # studies run but giving no headline row, and why

    @property
    def models(self) -> list[str]:
        return self.subjects

    def verdicts(self) -> list[StudyVerdict]:
        return verdicts(self.rows, self.subjects)

    def table(self, cite=None) -> pd.DataFrame:
        """One line per figure: each subject's value (and sample), each ratio to the base, what it decides and why;
        `cite` turns a reason into the id of the run warning that states it (fingerprints.Warned.cite)."""
        cite = cite or (lambda reason: reason)
        out = []
        for r in self.rows:
            row = {"study": r.study, "figure": r.figure}
            for s in self.subjects:
                v = r.values.get(s)
                shown = "-" if v is None or (isinstance(v, float) and math.isnan(v)) else _fmt(v)
                row[s] = shown + (f" (n={r.n[s]})" if s in r.n and shown != "-" else "")
            whys = []
            for s in self.subjects[1:]:
                d = decide(r, s, self.base)
                row[f"{s} / {self.base}"] = d.shown
                row[f"{s}: verdict"] = _outcome(d)
                whys += [cite(x) for x in d.reasons] + ([r.needed[s]] if d.outcome == "cannot tell" and s in r.needed else [])
            row["why"] = "; ".join(dict.fromkeys(whys + ([r.note] if r.note else [])))
            out.append(row)
        return pd.DataFrame(out)

    def as_dict(self) -> dict:
        return {"base": self.base, "subjects": self.subjects, "rows": [r.as_dict() for r in self.rows],
                "without_rows": self.without_rows,
                "decisions": [{"study": r.study, "figure": r.figure, "subject": s, "outcome": d.outcome,
                               "winner": d.winner, "reasons": list(d.reasons)}
                              for r in self.rows for s in self.subjects[1:] for d in [decide(r, s, self.base)]]}


def _outcome(d) -> str:
    if d.outcome == "wins":
        return f"{d.winner} ahead"
    return {"cannot tell": "cannot tell apart", "equivalent": "equivalent within the margin",
            "caveated": "caveated: does not decide",
            "not comparable": "not comparable", "trap": "the short-prompt trap: does not decide",
            "context": "context"}[d.outcome]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def headline(runs: Runs) -> Headline:
    """Every study of the runs, in the studies' order (registry), each asked for its own rows."""
    known = registry.studies()
    order = list(known)
    studies = sorted(runs.by_study, key=lambda s: order.index(s) if s in order else len(order))
    rows, without = [], []
    for study in studies:
        rows_of = known[study].headline_rows if study in known else None
        if rows_of is None:
            without.append(f"{study}: this study has no headline rows")
            continue
        mine = rows_of(runs)
        if not mine:
            without.append(f"{study}: its runs share no figure to set side by side")
        rows += mine
    rows += energy.headline_rows(runs)
    if runs.apart:  # models on different boxes: every figure mixes the model with the machine
        rows = [dataclasses.replace(r, caveats={**r.caveats, runs.base: (*r.caveats.get(runs.base, ()), runs.apart)})
                for r in rows]
    return Headline(runs.base, list(runs.subjects), rows, without)
