"""The scores of a run, graded afresh from its records: BFCL's (the verdict's) and robust's, per category, the
harness effect between them; the cost of a solved task is batch.cost's."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ...runs.run import PastRun
from ...verdicts import stats
from ..batch import rule_sets as batch_rules
from ..batch.cost import Cost, cost
from .rule_sets import HARNESS, bfcl, calls, robust


def graded(records: Sequence[dict]) -> list[dict]:
    """Every finished answer (those with a grade), graded again under both rule sets by this code, with its calls
    as BFCL decodes them (a prompt-mode answer's afresh from its text: tuples stay tuples)."""
    out = []
    for r in records:
        if "correct" in r and "answer" in r:
            out.append(r | {"calls": calls(r), "correct": bfcl(r).valid, "robust": robust(r).valid})
    return out


def frame(records: Sequence[dict]) -> pd.DataFrame:
    cols = ["item", "category", "format", "correct", "robust", "error_type", "total_s", "completion_tokens",
            "reasoning_tokens"]
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


def harness(records: Sequence[dict]) -> dict:
    """Both rule sets' scores and robust minus bfcl, paired, with why each differently graded answer differs."""
    return batch_rules.effect(graded(records), HARNESS)


__all__ = ["Cost", "cost", "frame", "graded", "harness", "right", "table"]
