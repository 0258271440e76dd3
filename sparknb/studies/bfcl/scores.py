"""The scores of a run, graded afresh from its records: BFCL's (the verdict's) and robust's, per category, the
harness effect between them, and the cost of a solved task."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...runs.run import PastRun
from ...verdicts import stats
from ..batch import rule_sets as batch_rules
from .rule_sets import HARNESS, bfcl, robust


def graded(records: Sequence[dict]) -> list[dict]:
    """Every finished answer (those with a grade), graded again under both rule sets by this code."""
    out = []
    for r in records:
        if "correct" in r and "answer" in r:
            out.append(r | {"correct": bfcl(r).valid, "robust": robust(r).valid})
    return out


def frame(records: Sequence[dict]) -> pd.DataFrame:
    cols = ["item", "category", "format", "correct", "robust", "error_type", "total_s", "completion_tokens"]
    rows = [{k: r.get(k) for k in cols} | {"called": bool(r.get("calls"))} for r in graded(records)]
    return pd.DataFrame(rows, columns=cols + ["called"])


def right(run: PastRun) -> dict[str, bool]:
    """Each item a run answered: right under BFCL's rules or not, graded afresh."""
    return {str(r["item"]): bool(r["correct"]) for r in graded(run.records)}


def table(df: pd.DataFrame) -> pd.DataFrame:
    """Per category: items, passed under bfcl and robust with BFCL's interval, and items with any parsed call."""
    rows = []
    for cat, g in df.groupby("category"):
        ci = stats.accuracy(int(g["correct"].sum()), len(g))
        rows.append({"category": cat, "n": len(g), "bfcl": int(g["correct"].sum()), "bfcl %": 100 * ci.estimate,
                     "95% low": 100 * ci.low, "95% high": 100 * ci.high, "robust": int(g["robust"].sum()),
                     "any call": int(g["called"].sum())})
    return pd.DataFrame(rows).set_index("category") if rows else pd.DataFrame()


@dataclass(frozen=True)
class Cost:
    """Per task solved (under bfcl): the seconds the answers took and the tokens they generated, all answers'
    cost over the tasks solved, with a seeded percentile-bootstrap interval over the items; None where nothing
    was solved (the cost of a solution is then unknown, not infinite)."""

    solved: int
    n: int
    seconds: stats.Interval | None
    tokens: stats.Interval | None

    def as_dict(self) -> dict:
        return {"solved": self.solved, "n": self.n, "seconds": self.seconds and self.seconds.as_dict(),
                "tokens": self.tokens and self.tokens.as_dict()}


def cost(df: pd.DataFrame, draws: int = 4000, seed: int = 0) -> Cost:
    solved = int(df["correct"].sum()) if len(df) else 0
    return Cost(solved, len(df), _per_solved(df, "total_s", draws, seed),
                _per_solved(df, "completion_tokens", draws, seed))


def _per_solved(df: pd.DataFrame, column: str, draws: int, seed: int) -> stats.Interval | None:
    if not len(df) or df["correct"].sum() == 0 or df[column].isna().any():
        return None
    spent, won = df[column].to_numpy(float), df["correct"].to_numpy(float)
    pick = np.random.default_rng(seed).integers(0, len(df), size=(draws, len(df)))
    ratios = spent[pick].sum(axis=1) / np.maximum(won[pick].sum(axis=1), 1e-12)
    ratios = ratios[won[pick].sum(axis=1) > 0]
    low, high = np.quantile(ratios, [0.025, 0.975]) if len(ratios) else (math.nan, math.nan)
    return stats.Interval(float(spent.sum() / won.sum()), float(low), float(high), 0.95,
                          "total over tasks solved, percentile bootstrap over items")


def harness(records: Sequence[dict]) -> dict:
    """Both rule sets' scores and robust minus bfcl, paired, with why each differently graded answer differs."""
    return batch_rules.effect(graded(records), HARNESS)
