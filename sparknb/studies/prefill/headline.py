"""Prefill's rows of the comparison: time to first token per prompt length, judged only where it measures prefill.

A short prompt measures mostly the fixed cost of a request, which no model changes, so two models look
alike there (or differ by what their front ends do). Each run's fit says from which length the prompt's
tokens outweigh that overhead: only lengths at or beyond it (in every run compared) are verdict rows; the
shorter ones are shown as the trap a single short-prompt test falls into, never as the verdict.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from ...runs.run import PastRun
from ...verdicts.verdict import Row, Runs, caveats, median_row
from .plan import Plan
from .tables import clean, frame


def crossover(run: PastRun) -> float | None | str:
    """The length from which the tokens outweigh the overhead, by the run's own fit: a number of tokens, 0
    where the overhead is not above zero, "never" where the tokens never outweigh it, None where no fit."""
    return crossover_of((run.summary or {}).get("fit"))


def crossover_of(fit: dict | None) -> float | None | str:
    """crossover() of a fit as the summary keeps it (Fit.as_dict)."""
    if not fit:
        return None
    x = fit.get("crossover_tokens")
    overhead = fit.get("overhead_s") or {}
    if overhead.get("low") is not None and overhead["low"] <= 0:
        return 0.0
    return "never" if x is None else float(x["value"])


def headline_rows(runs: Runs) -> list[Row]:
    mine, frames = runs.frames("prefill", lambda records: clean(frame(records)))
    if not frames:
        return []
    points = {s: crossover(mine[s]) for s in frames}
    return list(ttft_rows(frames, points, runs.base, lambda s, n: caveats(mine[s], n), Plan.same(mine)).values())


def ttft_rows(frames: dict[str, pd.DataFrame], points: dict[str, float | None | str], base: str,
              doubts: Callable[[str, int], tuple[str, ...]], apart: str = "") -> dict[int, Row]:
    """TTFT at every length all runs measured, a verdict only from the length where every run's fit (`points`,
    crossover()) says the prompt's tokens outweigh the fixed overhead. The comparison report and a notebook's
    compare_with both judge prefill runs by these rows."""
    lengths = sorted(set.intersection(*(set(f["prompt_length"]) for f in frames.values())))
    known = [p for p in points.values() if isinstance(p, float)]
    never = [s for s, p in points.items() if p == "never"]
    from_ = max(known) if known else None
    rows = {}
    for i, n in enumerate(lengths):
        samples = {s: (1000 * f[f["prompt_length"] == n]["ttft_s"].dropna()).tolist() for s, f in frames.items()}
        doubts_at = {s: doubts(s, n) for s in samples}
        for s, p in points.items():
            if p is None:
                doubts_at[s] += ("no fit, so where the prompt's tokens outweigh the fixed overhead is unknown",)
        trap = (len(lengths) > 1 and i == 0) or bool(never) or (from_ is not None and n < from_)
        note = ""
        if trap:
            note = (f"the prompt's tokens never outweigh the fixed overhead in the fit of {', '.join(never)}"
                    if never else f"below the {from_:,.0f} tokens from which the prompt's tokens outweigh the fixed "
                    "overhead (the runs' fits)" if from_ and n < from_ else "the shortest prompt")
            note += ": this length measures mostly the fixed cost of a request; a single short-prompt test's verdict"
        rows[int(n)] = median_row("prefill", f"TTFT ms at {n:,} tokens", samples, base, better="lower",
                                  role="trap" if trap else "verdict", caveats=doubts_at, note=note,
                                  not_comparable=apart)
    return rows
