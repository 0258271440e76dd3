"""The load study's rows of the comparison, at every level both runs measured: what each user gets (TPOT as
per-user tok/s) and how long they wait for a first token, over each request of the level (verdict rows), and
the aggregate throughput of the level's steady window (one window a level: context, never deciding alone)."""

from __future__ import annotations

import math

from ...runs.run import measured
from ...verdicts import stats
from ...verdicts.verdict import Row, Runs, caveats, median_row
from .plan import Plan
from .tables import summarize


def requests_at(records: list[dict], name: str) -> list[dict]:
    """The measured requests of one level."""
    return measured([r for r in records if r.get("kind") == "request" and r.get("level_name") == name])


def user_rows(at: dict[str, list[dict]], name: str, base: str, doubts: dict[str, tuple[str, ...]],
              apart: str = "") -> tuple[Row, Row]:
    """What each user gets at one level, over each request of it: per-user tok/s and TTFT (verdict rows). The
    comparison report and a notebook's compare_with both judge load runs by these rows."""
    speeds = {s: [r["decode_tokens_per_s"] for r in rs if r.get("decode_tokens_per_s")] for s, rs in at.items()}
    ttfts = {s: [1000 * r["ttft_s"] for r in rs if r.get("ttft_s") is not None] for s, rs in at.items()}
    return (median_row("load", f"per-user tok/s at {name}", speeds, base, caveats=doubts, not_comparable=apart),
            median_row("load", f"TTFT ms at {name}", ttfts, base, better="lower", caveats=doubts,
                       not_comparable=apart))


def headline_rows(runs: Runs) -> list[Row]:
    mine = runs.of("load")
    if len(mine) < 1:
        return []
    levels = {s: [r["level_name"] for r in run.records if r.get("kind") == "level"] for s, run in mine.items()}
    shared = [n for n in next(iter(levels.values())) if all(n in names for names in levels.values())]
    apart = Plan.same(mine)
    rows = []
    tables = {}
    for name in shared:
        at = {s: requests_at(run.records, name) for s, run in mine.items()}
        rows += user_rows(at, name, runs.base, {s: caveats(mine[s], name) for s in at}, apart)
        if not tables:
            tables = {s: summarize(run.records, run.settings.get("slo_ttft_s", 2.0), run.settings.get("slo_tpot_s", 0.1))
                      for s, run in mine.items()}
        values = {s: _value(t, name) for s, t in tables.items()}
        base = values.get(runs.base)
        ratios = {s: stats.Interval(v / base, math.nan, math.nan, 0.95, "one window each") for s, v in values.items()
                  if s != runs.base and v is not None and base}
        rows.append(Row("load", f"aggregate tok/s (steady window) at {name}", values, {s: 1 for s in values}, ratios,
                        role="context", note="one steady window a level: a throughput, not a sample"))
    return rows


def _value(table, name: str) -> float | None:
    if name not in table.index or "aggregate tok/s (steady)" not in table:
        return None
    v = table.loc[name, "aggregate tok/s (steady)"]
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)
