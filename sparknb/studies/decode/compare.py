"""Earlier decode runs beside this one (compare_with), every figure of theirs from their own sealed records, by the
rows the comparison report draws (headline.speed_rows): the two cannot disagree on a ratio or on its standing."""

from __future__ import annotations

import math

import pandas as pd

from ...machine import fingerprint
from ...runs.report import Finding, info, warning
from ...runs.run import PastRun
from ...runs.study import Study
from ...verdicts.verdict import caveats
from .headline import speed_rows
from .plan import Plan
from .tables import clean, frame


def compare(df: pd.DataFrame, study: Study, past: list[PastRun], settings: dict | None = None,
            ) -> tuple[pd.DataFrame, list[Finding]]:
    """At the lengths both measured: each earlier run's median decode tok/s over this run's, with a 95%
    bootstrap interval over each run's own requests, and the row's standing as the comparison judges it (the
    earlier run's own doubts, too few requests, `settings` that change a speed); a run from another box, driver
    or server build is named."""
    mine, this = clean(df), study.model.name
    rows, notes = [], []
    for run in past:
        theirs = clean(frame(run.records))
        label = f"{run.label} ({run.id})"
        notes += _setup(label, study, run)
        shared = sorted(set(mine["prompt_length"]) & set(theirs.get("prompt_length", [])))
        missing = sorted(set(mine["prompt_length"]) - set(shared))
        if missing:
            notes.append(info(f"{label} has no clean request at {missing} tokens: no ratio there."))
        apart = Plan.same({this: settings, label: run})
        if apart and shared:
            notes.append(warning(f"{label}: {apart}; no ratio is read from them."))
        for n, row in (speed_rows({this: mine, label: theirs}, this, lambda s, n: caveats(run, n) if s == label
                                  else (), apart) if shared else {}).items():
            ratio = row.ratios.get(label)
            rows.append({"prompt tokens": n, "run": label, "their tok/s": row.values[label],
                         f"{this} tok/s": row.values[this], "theirs / this": ratio.estimate if ratio else math.nan,
                         "95% low": ratio.low if ratio else math.nan, "95% high": ratio.high if ratio else math.nan,
                         "standing": row.standing(label, this)})
    return pd.DataFrame(rows), notes


def _setup(label: str, study: Study, run: PastRun) -> list[Finding]:
    """Another box, driver or server build, and a run that stopped halfway: named before any ratio."""
    notes = [warning(f"{label} ran elsewhere: {facet} differs: {', '.join(diffs)}.") for facet, diffs in
             fingerprint.differences(study.fingerprint, run.fingerprint, fingerprint.SAME_SETUP).items()]
    if run.signer:
        notes.append(info(f"{label} is {run.signer}."))
    if run.failure:
        notes.append(warning(f"{label} failed halfway ({run.failure.get('reason')}): its figures come from the "
                             "requests it measured before it stopped."))
    return notes
