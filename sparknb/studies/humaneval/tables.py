"""The tables a reader scans: verdicts by reason beside the compared run, the failures, what the sandbox cost, and
the batch's figures."""

from __future__ import annotations

import pandas as pd

from ..batch.tables import batch_table
from .grading import REASONS
from .measure import Cost


def reasons_table(df: pd.DataFrame, label: str, other: pd.DataFrame | None = None, other_label: str = "") -> pd.DataFrame:
    """First answers by the reason of their verdict, one column per run, on this run's problems."""
    runs = {label: df} | ({other_label: other[other["problem"].isin(df["problem"])]} if other is not None else {})
    return pd.DataFrame({name: d[d["sample"] == 0]["reason"].value_counts().reindex(REASONS, fill_value=0)
                         for name, d in runs.items()}).rename_axis("reason")


def failures(df: pd.DataFrame, n: int = 20) -> pd.DataFrame:
    """The suspect passes, then the first n failed answers, with why: a reader checks here that the failures are the
    model's, not the harness's, and that no pass is the harness's either."""
    suspect = df[df["passed"] & df["suspect"].notna()].assign(reason="passed, SUSPECT", detail=lambda d: d["suspect"])
    failed = pd.concat([d for d in (suspect, df[~df["passed"]].head(n)) if len(d)] or [df.head(0)])
    failed = failed[["problem", "sample", "reason", "detail", "how"]]
    return failed.set_index(["problem", "sample"])


def cost_table(c: Cost) -> pd.DataFrame:
    """The sandbox's cost per program at the isolation had, and in all."""
    def ms(x):
        return None if x is None else 1000 * x

    return pd.DataFrame({"value": {"isolation": c.level, "programs run": c.programs,
                                   "wall per program, median ms": ms(c.wall_median_s),
                                   "CPU per program, median ms": ms(c.cpu_median_s),
                                   "wall, all programs s": c.wall_total_s, "CPU, all programs s": c.cpu_total_s,
                                   "waited for verdicts after the last answer s": c.lag_s}}, dtype=object)


__all__ = ["batch_table", "cost_table", "failures", "reasons_table"]
