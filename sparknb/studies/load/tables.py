"""Each level's figures, computed from the records alone, so an earlier run is read by the same code.

Per request, over a level's measured requests (warmup left out), by the names and definitions of
`vllm bench serve` (vllm/benchmarks/serve.py and lib/endpoint_request_func.py), the mean beside the
chosen percentiles:
- TTFT = sending to the first chunk that carries a token (a chat's role-only opening chunk is none,
  where vllm bench counts it);
- TPOT (time per output token, the first left out) = (E2E - TTFT) / (output tokens - 1), by the server's
  own token count; where the first chunk holds several tokens, all of them are left out;
- ITL (inter-token latency) = every gap between two chunks that carry tokens, pooled over the requests:
  under speculative decoding one chunk holds several tokens (`tokens/chunk`) and one gap serves them all,
  as in vllm bench, so ITL and TPOT then differ;
- E2E = sending to the last chunk that carries a token;
- per-user tok/s = 1 / TPOT, per request: the median (p50) and the slowest tenth (p10);
- goodput = requests with TTFT <= slo_ttft_s and TPOT <= slo_tpot_s, over a window.

Aggregate figures (tok/s, goodput req/s) name their window, steady or all, and tok/s is checked
against the server's own count of generated tokens over the same window (windows.py). Besides:
- the server's view: its running and waiting gauges, KV-cache use and preemptions, sampled in the
  steady window;
- client against server, over the same requests (all of the level's, warmup included): the client's
  mean decode time (first to last token) over vLLM's own (per-request metrics, else its histogram), and
  its mean E2E over vLLM's e2e histogram (from arrival at the API server), in percent; its mean TTFT less
  vLLM's TTFT histogram, in ms (HTTP: a fixed cost, not a share); and the ms the API server held a
  request before its engine queued it (TTFT histogram less per-request queue + TTFT)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ...endpoint.keepup import agreement, mean, saturation
from ...runs.run import measured
from .windows import ALL, STEADY, windows

PERCENTILES = (50, 90, 99)
METRICS = ("TTFT", "TPOT", "ITL", "E2E")  # each in ms: its mean, then its percentiles
SERVER = ["running max", "running p50", "waiting max", "KV use max %", "preemptions", "samples"]
CHECKS = ["client loop CPU %", "loop lag p99 ms", "decode vs server %", "E2E vs server %", "TTFT beyond server ms",
          "API server ms", "tok/s vs server % (steady)", "tok/s vs server % (all)", "server count ± % (steady)",
          "server truth", "saturated", "why"]


def throughput_columns(percentiles: Sequence[float] = PERCENTILES) -> list[str]:
    """The throughput table's columns: each aggregate figure with its window, then each metric's mean and
    percentiles over the measured requests."""
    return (["count rule", "requests", "failed", "window s (steady)", "aggregate tok/s (steady)", "window s (all)",
             "aggregate tok/s (all)", "goodput req/s (steady)", "goodput req/s (all)", "goodput %",
             "per-user tok/s p50", "per-user tok/s p10", "tokens/chunk"]
            + [col for m in METRICS for col in _metric_columns(m, percentiles)])


def _metric_columns(metric: str, percentiles: Sequence[float]) -> list[str]:
    return [f"{metric} mean ms"] + [f"{metric} p{q:g} ms" for q in percentiles]


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _tpot(r: dict) -> float | None:
    return r["decode_s"] / r["decode_tokens"] if r.get("decode_s") and r.get("decode_tokens") else None


def level_row(level: dict, requests: list[dict], slo_ttft_s: float, slo_tpot_s: float,
              percentiles: Sequence[float] = PERCENTILES) -> dict:
    """One level's figures from its level record and its request records."""
    sent = [r for r in requests if not r["warmup"]]
    ok = measured(requests)
    row = {"level": level["level"], "mode": level["mode"], "count rule": level.get("count_rule"),
           "requests": len(ok), "failed": len(sent) - len(ok)}
    spans = windows(level, requests)
    if spans is None:
        return row | {"saturated": saturation(level) is not None, "why": saturation(level)}
    steady, everything = spans[STEADY], spans[ALL]
    tokens = [r["completion_tokens"] for r in ok]
    tpot = [_tpot(r) for r in ok]
    known_tpot = [t for t in tpot if t is not None]
    good = [r for r, t in zip(ok, tpot) if _good(r, t, slo_ttft_s, slo_tpot_s)]
    good_all = [r for r in requests if "error" not in r and _good(r, _tpot(r), slo_ttft_s, slo_tpot_s)]
    per_user = [r["decode_tokens_per_s"] for r in ok if r.get("decode_tokens_per_s")]
    chunks = sum(len(r["chunk_times"]) for r in ok)
    values = {"TTFT": [r["ttft_s"] for r in ok], "TPOT": known_tpot,
              "ITL": [b - a for r in ok for a, b in zip(r["chunk_times"], r["chunk_times"][1:])],
              "E2E": [r["last_token_s"] for r in ok]}
    row |= {
        "window s (steady)": steady.seconds, "aggregate tok/s (steady)": steady.tok_s,
        "window s (all)": everything.seconds, "aggregate tok/s (all)": everything.tok_s,
        "goodput req/s (steady)": len(good) / steady.seconds if known_tpot else None,
        "goodput req/s (all)": len(good_all) / everything.seconds if known_tpot else None,
        "goodput %": 100 * len(good) / len(ok) if known_tpot else None,
        "per-user tok/s p50": _pct(per_user, 50), "per-user tok/s p10": _pct(per_user, 10),
        "tokens/chunk": None if None in tokens or not chunks else sum(tokens) / chunks,
    }
    for metric, seconds in values.items():
        ms = [1000 * v for v in seconds]
        row |= dict(zip(_metric_columns(metric, percentiles),
                        [mean(ms) if ms else None, *(_pct(ms, q) for q in percentiles)]))
    checks = agreement(level, requests) | {
        "tok/s vs server % (steady)": steady.vs_server_pct, "tok/s vs server % (all)": everything.vs_server_pct,
        "server count ± % (steady)": steady.spread_pct, "server count ± % (all)": everything.spread_pct,
        "server tok/s (steady)": steady.server_tok_s, "server tok/s (all)": everything.server_tok_s}
    row |= _server(level, steady.start, steady.end) | _client(level) | checks
    why = saturation(level, checks)
    return row | {"saturated": why is not None, "why": why}


def _good(r: dict, tpot: float | None, slo_ttft_s: float, slo_tpot_s: float) -> bool:
    return tpot is not None and r["ttft_s"] <= slo_ttft_s and tpot <= slo_tpot_s


def _server(level: dict, start: float, end: float) -> dict:
    inside = [s for s in level.get("samples", []) if start <= s[0] <= end and s[1] is not None]
    running = [s[1] for s in inside]
    waiting = [s[2] for s in inside if s[2] is not None]
    kv = [s[3] for s in inside if s[3] is not None]
    preempt = [s[4] for s in inside if s[4] is not None]
    return {"running max": max(running) if running else None, "running p50": _pct(running, 50),
            "waiting max": max(waiting) if waiting else None, "KV use max %": 100 * max(kv) if kv else None,
            "preemptions": preempt[-1] - preempt[0] if len(preempt) > 1 else None, "samples": len(inside)}


def _client(level: dict) -> dict:
    client = level.get("client") or {}
    lag = (client.get("lags_s") or {}).get("p99")
    return {"client loop CPU %": 100 * client["loop_cpu_share"] if "loop_cpu_share" in client else None,
            "loop lag p99 ms": 1000 * lag if lag is not None else None}


def summarize(records: list[dict], slo_ttft_s: float, slo_tpot_s: float,
              percentiles: Sequence[float] = PERCENTILES) -> pd.DataFrame:
    """One row per level, indexed by the level's name, in the order measured."""
    rows, names = [], []
    for level in (r for r in records if r.get("kind") == "level"):
        requests = [r for r in records if r.get("kind") == "request" and r["level_name"] == level["level_name"]]
        rows.append(level_row(level, requests, slo_ttft_s, slo_tpot_s, percentiles))
        names.append(level["level_name"])
    return pd.DataFrame(rows, index=pd.Index(names, name="level name"))


def level_line(level: dict, requests: list[dict], slo_ttft_s: float, slo_tpot_s: float,
               percentiles: Sequence[float] = PERCENTILES) -> str:
    """One printed line per level as it ends, every aggregate figure with its window."""
    row = level_row(level, requests, slo_ttft_s, slo_tpot_s, percentiles)

    def f(key: str, fmt: str) -> str:
        return "n/a" if row.get(key) is None else format(row[key], fmt)

    q = f"p{percentiles[0]:g}"
    return (f"{level['level_name']} ({row['count rule']}): {row['requests']} measured, {row['failed']} failed; "
            f"steady window (warmup wave left out, {f('window s (steady)', '.1f')} s): "
            f"{f('aggregate tok/s (steady)', '.1f')} tok/s, the server's count {f('server tok/s (steady)', '.1f')}; "
            f"all requests ({f('window s (all)', '.1f')} s): {f('aggregate tok/s (all)', '.1f')} tok/s, the server's "
            f"count {f('server tok/s (all)', '.1f')}; per measured request: TTFT {q} {f(f'TTFT {q} ms', '.0f')} ms, "
            f"TPOT {q} {f(f'TPOT {q} ms', '.2f')} ms, ITL {q} {f(f'ITL {q} ms', '.2f')} ms; the server ran "
            f"{f('running max', 'g')} at most"
            + (f"  !! CLIENT SATURATED: {row['why']}" if row["saturated"] else ""))


def knee(table: pd.DataFrame) -> str | None:
    """The level with the most goodput (steady) among those whose client kept up; None where none met the SLO."""
    kept = table[~table["saturated"]] if "saturated" in table else table
    column = "goodput req/s (steady)"
    goodput = kept[column].dropna() if column in kept else pd.Series(dtype=float)
    if goodput.empty or goodput.max() <= 0:
        return None
    return str(goodput.idxmax())


def ratios(mine: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    """This run's figures over another's at every level both measured: aggregate (steady) and per-user tok/s."""
    common = [name for name in mine.index if name in other.index]
    out = pd.DataFrame(index=pd.Index(common, name="level name"))
    out["aggregate ratio"] = [_ratio(mine.at[n, "aggregate tok/s (steady)"], other.at[n, "aggregate tok/s (steady)"])
                              for n in common]
    out["per-user ratio"] = [_ratio(mine.at[n, "per-user tok/s p50"], other.at[n, "per-user tok/s p50"])
                             for n in common]
    out["either saturated"] = [bool(mine.at[n, "saturated"] or other.at[n, "saturated"]) for n in common]
    return out


def _ratio(a, b) -> float | None:
    return float(a) / float(b) if a is not None and b and not pd.isna(a) and not pd.isna(b) else None
