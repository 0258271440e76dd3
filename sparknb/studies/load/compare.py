"""This run beside earlier load runs of other models: the batch ratio against the single-stream ratio.

One user at a time, decode speed follows the bytes read per token; in a batch the weights are read
once for many users and the gap between two models can shrink (seed 000: 3x alone, 1.2x in a batch of
eight). Each earlier run's figures come from its own sealed records, by the same code as this run's.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...runs.run import PastRun
from ...verdicts.verdict import caveats
from .headline import requests_at, user_rows
from .plan import Plan
from .tables import PERCENTILES, ratios, summarize


@dataclass(frozen=True)
class Comparison:
    label: str
    run_id: str
    table: pd.DataFrame  # the other run's levels
    ratios: pd.DataFrame  # this run over the other, per common level

    @property
    def single_stream(self) -> tuple[str, float | None] | None:
        """Per-user tok/s ratio at the lowest common level (1 in flight, where both measured it)."""
        return _pick(self.ratios, "per-user ratio", first=True)

    @property
    def batch(self) -> tuple[str, float | None] | None:
        """Aggregate tok/s ratio at the highest common level where neither client was saturated."""
        return _pick(self.ratios, "aggregate ratio", first=False)

    def as_dict(self) -> dict:
        return {"label": self.label, "run_id": self.run_id, "single_stream": self.single_stream,
                "batch": self.batch, "ratios": as_rows(self.ratios)}


def _pick(table: pd.DataFrame, column: str, first: bool) -> tuple[str, float | None] | None:
    kept = table[~table["either saturated"]][column].dropna()
    if kept.empty:
        return None
    name = kept.index[0] if first else kept.index[-1]
    return str(name), float(kept[name])


def compare(table: pd.DataFrame, past: list[PastRun], records: list[dict] | None = None,
            settings: dict | None = None) -> list[Comparison]:
    """Every compare_with run, summarized with its own SLO settings, and its ratios to this run; given this run's
    `records` (and `settings`), each level's per-user tok/s and TTFT standing as the comparison report judges the
    same rows (headline.user_rows)."""
    out = []
    for run in past:
        theirs = summarize(run.records, run.settings.get("slo_ttft_s", 2.0), run.settings.get("slo_tpot_s", 0.1),
                           run.settings.get("percentiles", PERCENTILES))
        table_ = ratios(table, theirs)
        if records is not None:
            table_ = standings(table_, records, run, Plan.same({"this run": settings, run.id: run}))
        out.append(Comparison(run.label, run.id, theirs, table_))
    return out


def standings(table: pd.DataFrame, records: list[dict], run: PastRun, apart: str) -> pd.DataFrame:
    """Per level, the standing of this run's per-user tok/s and TTFT against the other run's, by the report's rows."""
    said = {n: user_rows({run.id: requests_at(run.records, n), "this run": requests_at(records, n)}, n, run.id,
                         {run.id: caveats(run, n)}, apart) for n in table.index}
    table["per-user standing"] = [said[n][0].standing("this run", run.id) for n in table.index]
    table["TTFT standing"] = [said[n][1].standing("this run", run.id) for n in table.index]
    return table


def as_rows(df: pd.DataFrame) -> list[dict]:
    """A table as summary.json keeps it: NaN is unknown, so None."""
    return [{k: (None if isinstance(v, float) and pd.isna(v) else v) for k, v in row.items()}
            for row in df.reset_index().to_dict("records")]
