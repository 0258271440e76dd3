"""Decode's rows of the comparison: tok/s at every context length both runs measured, and the bandwidth share."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from ...runs.run import PastRun
from ...verdicts.verdict import Row, Runs, caveats, median_row, one_sided
from .plan import Plan
from .prediction import rows as predicted_rows
from .tables import clean, frame


def speeds(run: PastRun) -> dict[int, list[float]]:
    """A run's clean decode tok/s per prompt length: single-stream speed, which another study's rows may set their
    figures beside (the question batch's throughput)."""
    f = clean(frame(run.records))
    return {int(n): g["decode_tok_s"].dropna().tolist() for n, g in f.groupby("prompt_length")} if len(f) else {}


def speed_rows(frames: dict[str, pd.DataFrame], base: str, doubts: Callable[[str, int], tuple[str, ...]],
               apart: str = "") -> dict[int, Row]:
    """tok/s at every context length all runs measured: each subject's median, and its ratio to the base's with
    a 95% interval. The comparison report and a notebook's compare_with both set decode runs side by side here."""
    rows = {}
    for n in sorted(set.intersection(*(set(f["prompt_length"]) for f in frames.values()))):
        samples = {s: f[f["prompt_length"] == n]["decode_tok_s"].dropna().tolist() for s, f in frames.items()}
        rows[int(n)] = median_row("decode", f"tok/s at {n:,} tokens", samples, base, not_comparable=apart,
                                  caveats={s: doubts(s, n) for s in samples})
    return rows


def headline_rows(runs: Runs) -> list[Row]:
    mine, frames = runs.frames("decode", lambda records: clean(frame(records)))
    if not frames:
        return []
    spec = one_sided(mine)
    rows = list(speed_rows(frames, runs.base, lambda s, n: caveats(mine[s], n) + spec.get(s, ()),
                           Plan.same(mine)).values())
    shares = {}
    for s, run in mine.items():
        values = [r.get("% of limit") for r in (run.summary or {}).get("table") or [] if r.get("% of limit") is not None]
        shares[s] = sum(values) / len(values) if values else None
    if any(v is not None for v in shares.values()):
        rows.append(Row("decode", "% of the bandwidth limit (mean over lengths)", shares, role="context",
                        better="none", note="the limit: bytes read per token over the hardware's bandwidth"))
    return rows + predicted_rows(runs)
