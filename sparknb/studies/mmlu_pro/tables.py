"""The tables a reader scans: accuracy per category (and the batch's figures beside the compared run's)."""

from __future__ import annotations

import pandas as pd

from ...verdicts import stats
from ..batch.tables import batch_table

__all__ = ["batch_table", "table"]


def table(df: pd.DataFrame) -> pd.DataFrame:
    """Per category: questions, right, accuracy with its Wilson interval, unparsed and suspect answers."""
    rows = []
    for cat, g in df.groupby("category"):
        ci = stats.accuracy(int(g["correct"].sum()), len(g))
        rows.append({"category": cat, "n": len(g), "right": int(g["correct"].sum()),
                     "accuracy %": 100 * ci.estimate, "95% low": 100 * ci.low, "95% high": 100 * ci.high,
                     "unparsed": int(g["pred"].isna().sum()), "suspect": int(g["flag"].notna().sum())})
    return pd.DataFrame(rows).set_index("category") if rows else pd.DataFrame()
