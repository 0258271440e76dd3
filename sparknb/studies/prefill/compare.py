"""This run beside earlier ones: the TTFT ratio at each length, with an interval, and where the runs differ.

Every figure of an earlier run is computed from its own sealed records by the same code as this
run's; its fingerprint is kept beside it so that a reader sees whether both ran on the same box.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ...errors import DataError
from ...machine import fingerprint
from ...runs.report import Finding, as_records, markdown, warning
from ...runs.run import PastRun
from ...runs.study import Study
from ...verdicts.verdict import Row, caveats, decide
from .fit import Fit
from .headline import crossover, crossover_of, ttft_rows
from .plan import Plan
from .tables import clean, frame, summarize


def ratio_table(frames: dict[str, pd.DataFrame], base: str, rows: dict[int, Row] | None = None) -> pd.DataFrame:
    """Median TTFT of every run per length, and each other run's over the base run's, with an interval.

    The interval is its row's in the comparison (headline.ttft_rows; `rows` where they are made already): a
    percentile bootstrap over each run's own requests (seeded: the same records always give the same interval).
    With five requests a side it is rough, but it says when a ratio is too noisy to carry a conclusion.
    """
    tables = {label: summarize(df) for label, df in frames.items()}
    lengths = {label: list(t.index) for label, t in tables.items()}
    if any(ls != lengths[base] for ls in lengths.values()):
        raise DataError("The runs measured different prompt lengths: "
                         + "; ".join(f"{label} {ls}" for label, ls in lengths.items())
                         + ". A ratio needs the same lengths in every run.")
    rows = rows or ttft_rows({label: clean(df) for label, df in frames.items()}, {}, base, lambda s, n: ())
    out = pd.DataFrame(index=pd.Index(lengths[base], name="prompt tokens"))
    for label, t in tables.items():
        out[f"{label} TTFT ms"] = t["TTFT ms (median)"]
    for label, t in tables.items():
        if label == base:
            continue
        col = f"{label} / {base}"
        out[col] = t["TTFT ms (median)"] / tables[base]["TTFT ms (median)"]
        bounds = [rows[int(n)].ratios[label] for n in out.index]
        out[f"{col} low"], out[f"{col} high"] = [b.low for b in bounds], [b.high for b in bounds]
        # The same ratio from the server's own TTFT: free of whatever held up either client.
        if t["server TTFT ms"].notna().all() and tables[base]["server TTFT ms"].notna().all():
            out[f"{col} (server)"] = t["server TTFT ms"].astype(float) / tables[base]["server TTFT ms"].astype(float)
    return out


@dataclass(frozen=True)
class Comparison:
    """This run beside earlier ones: the ratio table, every run's fingerprint, and what makes a ratio doubtful."""

    base: str
    labels: tuple[str, ...]  # the other runs, in compare_with order
    run_ids: tuple[str, ...]
    table: pd.DataFrame
    fingerprints: pd.DataFrame | None
    warnings: tuple[Finding, ...]

    def as_dict(self) -> dict:
        return {"base": self.base, "others": [{"label": la, "run_id": r} for la, r in zip(self.labels, self.run_ids)],
                "table": self.table.reset_index().to_dict(orient="records"), "warnings": as_records(self.warnings)}

    def warnings_markdown(self) -> str:
        if not self.warnings:
            return "Every run compared here ran on the same box, driver and server build, and verifies as sealed."
        return markdown(self.warnings)


def compare(df: pd.DataFrame, study: Study, others: Sequence[PastRun], allow_cache_hits: bool, fit: Fit | None = None,
            settings: dict | None = None) -> Comparison | None:
    """This run beside earlier ones (None where there are none), every figure of theirs from their sealed records,
    and at each length what the comparison report decides on the same row (this run's `fit` and `settings` as the
    report would read them once it is sealed)."""
    if not others:
        return None
    names = [study.model.name, *(o.label for o in others)]
    ids = [study.run.id, *(o.id for o in others)]
    labels = [n if names.count(n) == 1 else f"{n} ({i})" for n, i in zip(names, ids)]
    base = labels[0]
    frames = {base: df} | {label: frame(o.records) for label, o in zip(labels[1:], others)}
    warnings = []
    for label, o in zip(labels[1:], others):
        for facet, diffs in fingerprint.differences(study.fingerprint, o.fingerprint, fingerprint.SAME_SETUP).items():
            warnings.append(warning(f"{label} ran elsewhere: {facet} differs: {', '.join(diffs)}."))
        if o.failure:
            warnings.append(warning(f"{label} ({o.id}) failed halfway ({o.failure.get('reason')}): its figures come "
                                    "from the requests it measured before it stopped."))
        if bool(o.settings.get("allow_cache_hits")) != allow_cache_hits:
            marked = label if o.settings.get("allow_cache_hits") else base
            warnings.append(warning(f"{marked} allowed prefix-cache hits on purpose and the other did not: the "
                                    "ratio shows the cache's effect, not the models'."))
    prints = {}
    for label, run_id, fp in zip(labels, ids, [study.fingerprint, *(o.fingerprint for o in others)]):
        try:
            rows = fingerprint.table(fp)["value"]
        except (KeyError, TypeError, AttributeError):
            rows = pd.Series({"fingerprint": "incomplete; see its fingerprint.json"})
        prints[label] = pd.concat([pd.Series({"run": run_id}), rows])
    rows = verdict_rows(frames, base, dict(zip(labels[1:], others)), fit, settings)
    table = verdicts(ratio_table(frames, base, rows), rows, base, labels[1:])
    return Comparison(base, tuple(labels[1:]), tuple(ids[1:]), table, pd.concat(prints, axis=1), tuple(warnings))


def verdict_rows(frames: dict[str, pd.DataFrame], base: str, others: dict[str, PastRun], fit: Fit | None,
                 settings: dict | None) -> dict[int, Row]:
    """The rows the comparison report decides on, as it would read this run once sealed (headline.ttft_rows): a
    trap below the length where the tokens outweigh the overhead, caveated by the other run's own doubts, not
    comparable where a setting that changes a TTFT differs."""
    points = {base: crossover_of(fit.as_dict() if fit else None)} | {s: crossover(o) for s, o in others.items()}
    apart = Plan.same({base: settings} | others)
    return ttft_rows({s: clean(f) for s, f in frames.items()}, points, base,
                     lambda s, n: caveats(others[s], n) if s in others else (), apart)


def verdicts(table: pd.DataFrame, rows: dict[int, Row], base: str, others: Sequence[str]) -> pd.DataFrame:
    """Each other run's verdict at each length, decided on its row as the comparison report decides it."""
    for label in others:
        said = [decide(rows[n], label, base) if n in rows else None for n in table.index]
        table[f"{label} / {base} verdict"] = [d and (f"{d.winner} ahead" if d.winner else d.outcome) for d in said]
    return table
