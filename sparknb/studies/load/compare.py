"""This run beside earlier load runs of other models: the batch ratio against the single-stream ratio.

One user at a time, decode speed follows the bytes read per token; in a batch the weights are read
once for many users and the gap between two models can shrink (seed 000: 3x alone, 1.2x in a batch of
eight). Each earlier run's figures come from its own sealed records, by the same code as this run's.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...run import PastRun
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


def compare(table: pd.DataFrame, past: list[PastRun]) -> list[Comparison]:
    """Every compare_with run, summarized with its own SLO settings, and its ratios to this run."""
    out = []
    for run in past:
        settings = run.settings
        theirs = summarize(run.records, settings.get("slo_ttft_s", 2.0), settings.get("slo_tpot_s", 0.1),
                           settings.get("percentiles", PERCENTILES))
        out.append(Comparison(run.label, run.id, theirs, ratios(table, theirs)))
    return out


def as_rows(df: pd.DataFrame) -> list[dict]:
    """A table as summary.json keeps it: NaN is unknown, so None."""
    return [{k: (None if isinstance(v, float) and pd.isna(v) else v) for k, v in row.items()}
            for row in df.reset_index().to_dict("records")]
