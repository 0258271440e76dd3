"""The prefill records as tables: one row per measured request, then one row per prompt length.

The server's own timings sit beside the client's; a figure the server did not give stays unknown
(NaN in a request's row, None in the per-length table, shown as "-"), never zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ...runs.run import measured
from ...runs.study import server_first_s
from ...verdicts import benchy, stats

COLUMNS = ["seq", "prompt_length", "rep", "prompt_tokens", "completion_tokens", "ttft_s", "server_ttft_s",
           "server_prefill_s", "server_queue_s", "cache_queries", "cache_hits", "cache_hits_allowed",
           "load_1m", "interference"]


def frame(records: Sequence[dict]) -> pd.DataFrame:
    """Measured requests as a table, the server's timings beside the client's; warmups and errors left out."""
    rows = []
    for r in measured(records):
        server = r.get("server") or {}
        rows.append({
            "seq": r.get("seq"),
            "prompt_length": r["prompt_length"],
            "rep": r.get("rep"),
            "prompt_tokens": r.get("prompt_tokens"),
            "completion_tokens": r.get("completion_tokens"),
            "ttft_s": r.get("ttft_s"),
            "server_ttft_s": server.get("ttft_s"),
            "server_prefill_s": server.get("prefill_s"),
            "server_queue_s": server.get("queue_s"),
            "cache_queries": server.get("prefix_cache_queries"),
            "cache_hits": server.get("prefix_cache_hits"),
            "cache_hits_allowed": bool(r.get("cache_hits_allowed")),
            "load_1m": r.get("load_1m"),
            "interference": r.get("interference"),
        })
    return pd.DataFrame(rows, columns=COLUMNS)


def clean(df: pd.DataFrame) -> pd.DataFrame:
    """The requests no other client disturbed and that have a TTFT: the only ones any figure uses."""
    return df[df["interference"].isna() & df["ttft_s"].notna()]


def measured_lengths(records: Sequence[dict]) -> tuple[int, ...]:
    """The prompt lengths with at least one clean measurement: what a run can be compared at."""
    df = clean(frame(records))
    return tuple(sorted(int(n) for n in df["prompt_length"].unique()))


def summarize(df: pd.DataFrame, stopped: dict[int, str] | None = None, limit=None) -> pd.DataFrame:
    """Per prompt length: the median TTFT with its 95% interval and spread, prefill throughput, and the
    server's own times beside them; `stopped`: why each length has the requests it has (repetitions auto);
    `limit` (the study's bandwidth limit): the prompt's KV cache and the least time memory allows (floor)."""
    out = []
    for length, g in clean(df).groupby("prompt_length"):
        ttft = g["ttft_s"]
        median = float(ttft.median())
        interval = stats.median_interval(ttft.tolist())

        def server_ms(column, g=g):
            return 1000 * float(g[column].median()) if g[column].notna().all() else None

        server_first = server_first_s(g)
        both = server_first.notna().all()
        out.append({
            "prompt tokens": int(length),
            "n": len(g),
            "TTFT ms (median)": 1000 * median,
            "95% low": 1000 * interval.low,
            "95% high": 1000 * interval.high,
            "std": 1000 * float(ttft.std(ddof=1)) if len(g) > 1 else None,
            "min": 1000 * float(ttft.min()),
            "max": 1000 * float(ttft.max()),
            "prefill tok/s": length / median if median > 0 else float("nan"),
            "server TTFT ms": server_ms("server_ttft_s"),
            "server prefill ms": server_ms("server_prefill_s"),
            "server queue ms": server_ms("server_queue_s"),
            "outside the server ms": 1000 * float((g["ttft_s"] - server_first).median()) if both else None,
            "cache hit %": _hit_percent(g),
            **(floor(limit, int(length), median) if limit is not None else {}),
            **({"stopped": stopped.get(int(length))} if stopped else {}),
        })
    return pd.DataFrame(out).set_index("prompt tokens") if out else pd.DataFrame()


def floor(limit, length: int, ttft_s: float) -> dict:
    """The prompt's KV cache (written once) and the bandwidth floor of a prefill: the weights its micro-batches read
    (an MoE's experts as many as the prompt touches) and that KV written, over the box's bandwidth
    (Limit.prefill_bytes); prefill is compute-bound, so its share of the floor says how far from memory-bound it
    is. None where the census or the bandwidth is unknown."""
    kv, read = limit.kv_bytes(length), limit.prefill_bytes(length)
    ms = 1000 * read / limit.bandwidth_bytes_s if read and limit.bandwidth_bytes_s else None
    return {"KV MB": kv / 1e6 if kv is not None else None, "floor GB read": read / 1e9 if read else None,
            "bandwidth floor ms": ms, "% of floor": 100 * ms / (1000 * ttft_s) if ms and ttft_s > 0 else None}


def _hit_percent(g: pd.DataFrame) -> float | None:
    """Share of looked-up prompt tokens found in the cache; None where any request's counters are unknown."""
    if g["cache_hits"].isna().any() or g["cache_queries"].isna().any():
        return None
    queries = g["cache_queries"].sum()
    return 100 * g["cache_hits"].sum() / queries if queries else None


def share(study, df: pd.DataFrame) -> str:
    """The sweep as the rows Spark owners post (pp at each length, from an empty cache), written beside the run's
    own tables as benchy.md and benchy.json."""
    return benchy.write(study.run, benchy.processing_rows(study.model.name, clean(df)))
