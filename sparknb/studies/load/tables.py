"""Each level's figures, computed from the records alone, so an earlier run is read by the same code.

Formulas (over a level's measured requests, warmup left out; "window" runs from the first measured
request's sending to the last measured answer's end):
- aggregate output tok/s = sum of completion tokens / window
- per-user decode tok/s = (completion tokens - tokens of the first chunk) / (last token - first token
  time), per request; the level's median and 10th percentile (the slowest users)
- ITL (time per output token) = (last token - first token time) / (completion tokens - first chunk's),
  per request, by the server's token counts; chunk gaps (time between two chunks) apart, since under
  speculative decoding a chunk holds several tokens
- goodput = requests with TTFT <= slo_ttft_s and ITL <= slo_tpot_s / window
- the server's view: its running and waiting gauges, KV-cache use and preemptions, sampled in the window
- client against server, over the same requests (all of the level's, warmup included): the client's
  mean decode time (first to last token) over vLLM's own (per-request metrics, else its histogram), and
  its mean end-to-end time over vLLM's e2e histogram (from arrival at the API server), in percent; its
  mean TTFT less vLLM's TTFT histogram, in ms (HTTP: a fixed cost, not a share); and the ms the API
  server held a request before its engine queued it (TTFT histogram less per-request queue + TTFT)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ...run import measured

LOOP_CPU_LIMIT = 0.5  # a loop busy more than half the time queues chunks behind each other
LAG_LIMIT_S = 0.005  # a loop waking later than this (p99) stamps chunks late by as much
AGREEMENT_PCT = 2.0
# The table's columns, in the three views the notebook shows.
THROUGHPUT = ["requests", "failed", "aggregate tok/s", "per-user tok/s p50", "per-user tok/s p10", "TTFT p50 ms",
              "TTFT p90 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p90 ms", "ITL p99 ms", "chunk gap p50 ms",
              "chunk gap p99 ms", "tokens/chunk", "E2E p50 s", "E2E p90 s", "E2E p99 s", "goodput req/s", "goodput %"]
SERVER = ["running max", "running p50", "waiting max", "KV use max %", "preemptions", "samples"]
CHECKS = ["client loop CPU %", "loop lag p99 ms", "decode vs server %", "E2E vs server %", "TTFT beyond server ms",
          "API server ms", "server truth", "saturated", "why"]


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _median(values: Sequence[float]) -> float | None:
    return _pct(values, 50)


def _tpot(r: dict) -> float | None:
    return r["decode_s"] / r["decode_tokens"] if r.get("decode_s") and r.get("decode_tokens") else None


def saturation(level: dict, checks: dict | None = None) -> str | None:
    """Why the client could not keep up at this level, or None where it did.

    A busy loop is the client's own limit. A loop that woke late may only have shared a stall of the
    whole machine with the server: where the server's own timings of the same requests agree with the
    client's (decode and end to end within AGREEMENT_PCT), the stall is in both clocks and the figures
    hold; where they disagree, or cannot be had, the level is the client's.
    """
    client = level.get("client") or {}
    share, lag = client.get("loop_cpu_share"), (client.get("lags_s") or {}).get("p99")
    why = []
    if share is not None and share > LOOP_CPU_LIMIT:
        why.append(f"its event loop was busy {100 * share:.0f}% of the time (limit {100 * LOOP_CPU_LIMIT:.0f}%)")
    values = [(checks or {}).get(k) for k in ("decode vs server %", "E2E vs server %")]
    if lag is not None and lag > LAG_LIMIT_S and (None in values or any(abs(v) > AGREEMENT_PCT for v in values)):
        why.append(f"its event loop woke {1000 * lag:.1f} ms late (p99; limit {1000 * LAG_LIMIT_S:.0f} ms) and "
                   + ("no timings of the server could show its clock was still right" if None in values else
                      f"its timings differ from the server's own by more than {AGREEMENT_PCT:g}%"))
    return "; ".join(why) or None


def agreement(level: dict, requests: list[dict]) -> dict:
    """The client's timings against the server's own for the same requests: all the level's answered
    requests, warmup included, since the server's counters around the level cover exactly those.

    Decode time against vLLM's per-request generation time (else its decode histogram); end to end
    against its e2e histogram, which runs from the request's arrival at the API server; TTFT as the
    milliseconds beyond the server's own TTFT histogram (HTTP, a fixed cost, not a share); and the
    milliseconds the API server held a request before its engine queued it (its TTFT histogram less the
    per-request queue + TTFT), which grows as the API server's own loop gets busy.
    """
    view = level.get("server") or {}
    answered = [r for r in requests if "error" not in r]
    per_request = bool(answered) and all(
        all((r.get("server") or {}).get(k) is not None for k in ("queue_s", "ttft_s", "decode_s")) for r in answered)

    def mean(field: str, server: bool = False) -> float | None:
        return _mean([(r["server"] if server else r).get(field) for r in answered]) if answered else None

    engine_ttft = mean("queue_s", True) + mean("ttft_s", True) if per_request else None
    decode = mean("decode_s", True) if per_request else view.get("decode_s")
    source = "per-request metrics" if per_request else None
    if view.get("e2e_s") is not None or view.get("ttft_s") is not None:
        source = f"{source} + histograms" if source else "histograms (level means)"
    return {"decode vs server %": _over(mean("decode_s"), decode),
            "E2E vs server %": _over(mean("total_s"), view.get("e2e_s")),
            "TTFT beyond server ms": _ms(mean("ttft_s"), view.get("ttft_s")),
            "API server ms": _ms(view.get("ttft_s"), engine_ttft), "server truth": source}


def _over(client: float | None, server: float | None) -> float | None:
    return 100 * (client / server - 1) if client is not None and server else None


def _ms(a: float | None, b: float | None) -> float | None:
    return 1000 * (a - b) if a is not None and b is not None else None


def _mean(values: list) -> float | None:
    return None if not values or None in values else sum(values) / len(values)


def level_row(level: dict, requests: list[dict], slo_ttft_s: float, slo_tpot_s: float) -> dict:
    """One level's figures from its level record and its request records."""
    sent = [r for r in requests if not r["warmup"]]
    ok = measured(requests)
    row = {"level": level["level"], "mode": level["mode"], "requests": len(ok), "failed": len(sent) - len(ok)}
    if not ok:
        return row | {"saturated": saturation(level) is not None, "why": saturation(level)}
    start = min(r["sent_s"] for r in sent)
    end = max(r["sent_s"] + r["total_s"] for r in ok)
    window = end - start
    tokens = [r["completion_tokens"] for r in ok]
    tpot = [_tpot(r) for r in ok]
    good = [r for r, t in zip(ok, tpot) if t is not None and r["ttft_s"] <= slo_ttft_s and t <= slo_tpot_s]
    per_user = [r["decode_tokens_per_s"] for r in ok if r.get("decode_tokens_per_s")]
    ttft, e2e = [r["ttft_s"] for r in ok], [r["total_s"] for r in ok]
    gaps = [b - a for r in ok for a, b in zip(r["chunk_times"], r["chunk_times"][1:])]
    chunks = sum(len(r["chunk_times"]) for r in ok)
    known_tpot = [t for t in tpot if t is not None]
    row |= {
        "window s": window,
        "aggregate tok/s": None if None in tokens else sum(tokens) / window,
        "per-user tok/s p50": _median(per_user), "per-user tok/s p10": _pct(per_user, 10),
        **{f"TTFT p{q} ms": 1000 * _pct(ttft, q) for q in (50, 90, 99)},
        **{f"ITL p{q} ms": (1000 * _pct(known_tpot, q) if known_tpot else None) for q in (50, 90, 99)},
        "chunk gap p50 ms": 1000 * _pct(gaps, 50) if gaps else None,
        "chunk gap p99 ms": 1000 * _pct(gaps, 99) if gaps else None,
        "tokens/chunk": None if None in tokens or not chunks else sum(tokens) / chunks,
        **{f"E2E p{q} s": _pct(e2e, q) for q in (50, 90, 99)},
        "goodput req/s": len(good) / window if known_tpot else None,
        "goodput %": 100 * len(good) / len(ok) if known_tpot else None,
    }
    checks = agreement(level, requests)
    row |= _server(level, start, end) | _client(level) | checks
    why = saturation(level, checks)
    return row | {"saturated": why is not None, "why": why}


def _server(level: dict, start: float, end: float) -> dict:
    inside = [s for s in level.get("samples", []) if start <= s[0] <= end and s[1] is not None]
    running = [s[1] for s in inside]
    waiting = [s[2] for s in inside if s[2] is not None]
    kv = [s[3] for s in inside if s[3] is not None]
    preempt = [s[4] for s in inside if s[4] is not None]
    return {"running max": max(running) if running else None, "running p50": _median(running),
            "waiting max": max(waiting) if waiting else None, "KV use max %": 100 * max(kv) if kv else None,
            "preemptions": preempt[-1] - preempt[0] if len(preempt) > 1 else None, "samples": len(inside)}


def _client(level: dict) -> dict:
    client = level.get("client") or {}
    lag = (client.get("lags_s") or {}).get("p99")
    return {"client loop CPU %": 100 * client["loop_cpu_share"] if "loop_cpu_share" in client else None,
            "loop lag p99 ms": 1000 * lag if lag is not None else None}


def summarize(records: list[dict], slo_ttft_s: float, slo_tpot_s: float) -> pd.DataFrame:
    """One row per level, indexed by the level's name, in the order measured."""
    rows, names = [], []
    for level in (r for r in records if r.get("kind") == "level"):
        requests = [r for r in records if r.get("kind") == "request" and r["level_name"] == level["level_name"]]
        rows.append(level_row(level, requests, slo_ttft_s, slo_tpot_s))
        names.append(level["level_name"])
    return pd.DataFrame(rows, index=pd.Index(names, name="level name"))


def level_line(level: dict, requests: list[dict], slo_ttft_s: float, slo_tpot_s: float) -> str:
    """One printed line per level as it ends."""
    row = level_row(level, requests, slo_ttft_s, slo_tpot_s)

    def f(key: str, fmt: str) -> str:
        return "n/a" if row.get(key) is None else format(row[key], fmt)

    return (f"{level['level_name']}: {row['requests']} measured, {row['failed']} failed; "
            f"{f('aggregate tok/s', '.1f')} tok/s aggregate, per user {f('per-user tok/s p50', '.1f')} tok/s, "
            f"TTFT p50 {f('TTFT p50 ms', '.0f')} ms; the server ran {f('running max', 'g')} at most"
            + (f"  !! CLIENT SATURATED: {row['why']}" if row["saturated"] else ""))


def knee(table: pd.DataFrame) -> str | None:
    """The level with the most goodput among those whose client kept up; None where none met the SLO."""
    kept = table[~table["saturated"]] if "saturated" in table else table
    goodput = kept["goodput req/s"].dropna() if "goodput req/s" in kept else pd.Series(dtype=float)
    if goodput.empty or goodput.max() <= 0:
        return None
    return str(goodput.idxmax())


def ratios(mine: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    """This run's figures over another's at every level both measured: aggregate and per-user tok/s."""
    common = [name for name in mine.index if name in other.index]
    out = pd.DataFrame(index=pd.Index(common, name="level name"))
    out["aggregate ratio"] = [_ratio(mine.at[n, "aggregate tok/s"], other.at[n, "aggregate tok/s"]) for n in common]
    out["per-user ratio"] = [_ratio(mine.at[n, "per-user tok/s p50"], other.at[n, "per-user tok/s p50"])
                             for n in common]
    out["either saturated"] = [bool(mine.at[n, "saturated"] or other.at[n, "saturated"]) for n in common]
    return out


def _ratio(a, b) -> float | None:
    return float(a) / float(b) if a is not None and b and not pd.isna(a) and not pd.isna(b) else None
