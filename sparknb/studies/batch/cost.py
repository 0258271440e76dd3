"""The cost of a solved item, beside the score: all items' seconds and generated tokens over the items solved, with
a seeded percentile-bootstrap interval over the items. The figure that sets a slower-but-better model against a
faster one in one number (BFCL's tasks, the agent study's sessions)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...verdicts import stats


@dataclass(frozen=True)
class Cost:
    """Per item solved: the seconds and the tokens, each an interval; None where nothing was solved (the cost of a
    solution is then unknown, not infinite) or a figure is missing."""

    solved: int
    n: int
    seconds: stats.Interval | None
    tokens: stats.Interval | None

    def as_dict(self) -> dict:
        return {"solved": self.solved, "n": self.n, "seconds": self.seconds and self.seconds.as_dict(),
                "tokens": self.tokens and self.tokens.as_dict()}


def cost(df: pd.DataFrame, seconds: str = "total_s", tokens: str = "completion_tokens", draws: int = 4000,
         seed: int = 0) -> Cost:
    """`df`: one row an item, its `correct` and the columns named `seconds` and `tokens`."""
    solved = int(df["correct"].sum()) if len(df) else 0
    return Cost(solved, len(df), _per_solved(df, seconds, draws, seed), _per_solved(df, tokens, draws, seed))


def _per_solved(df: pd.DataFrame, column: str, draws: int, seed: int) -> stats.Interval | None:
    if not len(df) or df["correct"].sum() == 0 or df[column].isna().any():
        return None
    spent, won = df[column].to_numpy(float), df["correct"].to_numpy(float)
    pick = np.random.default_rng(seed).integers(0, len(df), size=(draws, len(df)))
    ratios = spent[pick].sum(axis=1) / np.maximum(won[pick].sum(axis=1), 1e-12)
    ratios = ratios[won[pick].sum(axis=1) > 0]
    low, high = np.quantile(ratios, [0.025, 0.975]) if len(ratios) else (math.nan, math.nan)
    return stats.Interval(float(spent.sum() / won.sum()), float(low), float(high), 0.95,
                          "total over items solved, percentile bootstrap over items")


def sentence(c: Cost, unit: str = "task") -> str:
    """The cost in words, or why it is unknown."""
    if c.seconds is None:
        return (f"Cost of a solved {unit}: unknown ({c.solved} of {c.n} solved, or a time or token count "
                "missing): nothing to divide by.")
    tokens = f"{c.tokens.estimate:,.0f} tokens [{c.tokens.low:,.0f}, {c.tokens.high:,.0f}]" if c.tokens else \
        "tokens unknown"
    return (f"Cost of a solved {unit}: {c.seconds.estimate:.3g} s [{c.seconds.low:.3g}, {c.seconds.high:.3g}] and "
            f"{tokens} per {unit} solved ({c.solved} of {c.n}; 95%, {c.seconds.method}). The tokens are every "
            "generated token: the server's count does not set a reasoning model's thinking apart.")
