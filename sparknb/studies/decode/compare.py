"""Earlier decode runs beside this one (compare_with), every figure of theirs from their own sealed records."""

from __future__ import annotations

import pandas as pd

from ... import fingerprint, stats
from ...report import Finding, info, warning
from ...run import PastRun
from ...study import Study
from .tables import clean, frame


def compare(df: pd.DataFrame, study: Study, past: list[PastRun]) -> tuple[pd.DataFrame, list[Finding]]:
    """At the lengths both measured: each earlier run's median decode tok/s over this run's, with a 95%
    bootstrap interval over each run's own requests; a run from another box, driver or server build is named."""
    mine = clean(df)
    rows, notes = [], []
    for run in past:
        theirs = clean(frame(run.records))
        label = f"{run.label} ({run.id})"
        for facet, diffs in fingerprint.differences(study.fingerprint, run.fingerprint, fingerprint.SAME_SETUP).items():
            notes.append(warning(f"{label} ran elsewhere: {facet} differs: {', '.join(diffs)}."))
        if run.failure:
            notes.append(warning(f"{label} failed halfway ({run.failure.get('reason')}): its figures come from the "
                                 "requests it measured before it stopped."))
        shared = sorted(set(mine["prompt_length"]) & set(theirs.get("prompt_length", [])))
        missing = sorted(set(mine["prompt_length"]) - set(shared))
        if missing:
            notes.append(info(f"{label} has no clean request at {missing} tokens: no ratio there."))
        for n in shared:
            a = theirs[theirs["prompt_length"] == n]["decode_tok_s"].dropna()
            b = mine[mine["prompt_length"] == n]["decode_tok_s"].dropna()
            ratio = stats.median_ratio(a.tolist(), b.tolist())
            rows.append({"prompt tokens": int(n), "run": label, "their tok/s": float(a.median()),
                         f"{study.model.name} tok/s": float(b.median()), "theirs / this": ratio.estimate,
                         "95% low": ratio.low, "95% high": ratio.high})
    return pd.DataFrame(rows), notes
