"""The cost of a solved item, beside the score: all items' seconds and generated tokens over the items solved, with
a seeded percentile-bootstrap interval over the items. The figure that sets a slower-but-better model against a
faster one in one number (BFCL's tasks, the agent study's sessions); `rows` gives them to the comparison. The
reasoning tokens among the generated ones are set apart where the server counted them for every answer
(`usage.completion_tokens_details.reasoning_tokens`, OpenAI's field; llama-server does not send it): otherwise
unknown, and said so, since a thinking model's reasoning is in the token count either way."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...verdicts import stats
from ...verdicts.verdict import Row

UNKNOWN_REASONING = "unknown (the server did not count reasoning tokens apart for every answer)"


@dataclass(frozen=True)
class Cost:
    """Per item solved: the seconds and the tokens, each an interval; None where nothing was solved (the cost of a
    solution is then unknown, not infinite) or a figure is missing."""

    solved: int
    n: int
    seconds: stats.Interval | None
    tokens: stats.Interval | None
    reasoning: stats.Interval | None = None  # the reasoning tokens among `tokens`, where every item's were counted

    def as_dict(self) -> dict:
        return {"solved": self.solved, "n": self.n, "seconds": self.seconds and self.seconds.as_dict(),
                "tokens": self.tokens and self.tokens.as_dict(),
                "reasoning_tokens": self.reasoning and self.reasoning.as_dict()}


def cost(df: pd.DataFrame, seconds: str = "total_s", tokens: str = "completion_tokens",
         reasoning: str = "reasoning_tokens", draws: int = 4000, seed: int = 0) -> Cost:
    """`df`: one row an item, its `correct` and the columns named `seconds` and `tokens` (and `reasoning`, where
    the server counted them)."""
    solved = int(df["correct"].sum()) if len(df) else 0
    thought = _per_solved(df, reasoning, draws, seed) if reasoning in df else None
    return Cost(solved, len(df), _per_solved(df, seconds, draws, seed), _per_solved(df, tokens, draws, seed),
                thought)


def _per_solved(df: pd.DataFrame, column: str, draws: int, seed: int) -> stats.Interval | None:
    if not len(df) or df["correct"].sum() == 0 or df[column].isna().any():  # unknown, never a guess
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
    thought = _tokens(c.reasoning) if c.reasoning else UNKNOWN_REASONING
    return (f"Cost of a solved {unit}: {c.seconds.estimate:.3g} s [{c.seconds.low:.3g}, {c.seconds.high:.3g}] and "
            f"{_tokens(c.tokens)} tokens per {unit} solved ({c.solved} of {c.n}; 95%, {c.seconds.method}), every "
            f"generated token; reasoning tokens among them: {thought}.")


def _tokens(i: stats.Interval | None) -> str:
    return f"{i.estimate:,.0f} [{i.low:,.0f}, {i.high:,.0f}]" if i else "unknown"


def rows(study: str, unit: str, costs: dict[str, Cost], n: dict[str, int], context: str,
         seconds: str = "seconds") -> list[Row]:
    """The comparison's cost rows beside a graded study's score (context, lower better): seconds and generated
    tokens per `unit` solved, each subject's interval in the note, the reasoning tokens among them where known."""
    thought = "; ".join(f"{s} {_tokens(c.reasoning) if c.reasoning else UNKNOWN_REASONING}" for s, c in costs.items())
    return [_row(study, f"{seconds} per {unit} solved", {s: c.seconds for s, c in costs.items()}, n,
                 f"{context}; all {unit}s' {seconds}", "{:.2f} s"),
            _row(study, f"tokens per {unit} solved", {s: c.tokens for s, c in costs.items()}, n,
                 f"{context}; reasoning tokens per {unit} solved: {thought}; all {unit}s' generated tokens", "{:,.0f}")]


def _row(study: str, figure: str, per: dict[str, stats.Interval | None], n: dict[str, int], note: str,
         form: str) -> Row:
    said = "; ".join(f"{s} {form.format(i.estimate)} [{form.format(i.low)}, {form.format(i.high)}]" if i else
                     f"{s} unknown (none solved, or a count missing)" for s, i in per.items())
    return Row(study, figure, {s: i and i.estimate for s, i in per.items()}, n, role="context", better="lower",
               note=f"{note} over those solved (95% bootstrap): {said}")
