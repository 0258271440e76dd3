"""Sessions in flight: each level's figures from its records alone, and the box's capacity within a stated SLO.

A level replays the same sealed sessions with N of them in flight (records tagged `level`): per level, each step's
TTFT (p50, p95) and the cached share of its prompt at steps 2+, the agent's wait per session, each session's decode
tok/s, and the client's self-check (endpoint.keepup: its loop's CPU share and lag, its decode time against the
server's own per-request one). A level whose client could not keep up is the client's: it is neither a pass nor a
fail of the server, and the search never counts it.

The capacity search, and how it differs from aiperf's (its `max-concurrency-under-sla` recipe, as its documentation
describes it: a one-dimensional Bayesian-optimization loop over concurrency whose trials are filtered against the SLA
afterwards, ending on an iteration budget or a plateau, its confidence intervals from repeated runs of a point): here
each level is judged by a bootstrap over *sessions* (the independent unit: the steps of one session share its prefix
and its slot) of the SLO's own statistics (the step TTFT p95, pooled over the resampled sessions' steps; the median
session's decode tok/s), and decided only where the whole 95% interval lies on one side of the SLO (pass, fail; else
undecided). The levels are chosen by doubling from 1 until a level fails (or `max_in_flight`), then bisection between
the highest decided pass and the lowest decided fail, which assumes only that more sessions never serve better; it
stops when the two are adjacent (decided), not on a budget. Where they cannot be made adjacent (undecided levels in
the gap, a client that could not keep up), it says the interval the boundary lies in, never a point.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...endpoint import keepup
from ...runs.report import Finding, info, warning
from ...verdicts import stats
from ...verdicts.verdict import Row, Runs, caveats
from .figures import at_level, session_table, step_table
from .plan import Plan

DRAWS = 2000  # bootstrap resamples of the sessions
LEVEL_COLUMNS = ["in flight", "sessions", "steps", "failed", "TTFT p50 ms", "TTFT p95 ms", "TTFT p95 low",
                 "TTFT p95 high", "cached share, steps 2+", "wait per session s", "decode tok/s", "decode low",
                 "decode high", "client loop CPU %", "loop lag p99 ms", "decode vs server %", "TTFT beyond prefill ms",
                 "verdict", "why"]


def as_request(step: dict) -> dict:
    """A step as keepup.agreement reads a request: the server's own per-request timings under `server`."""
    return {**step, "server": (step.get("server") or {}).get("per_request") or {}}


def check(steps: list[dict], client: dict) -> dict:
    """The client's self-check at a level: its figures, and why it could not keep up (None where it did)."""
    answered = [as_request(r) for r in steps if "error" not in r]
    checks = keepup.agreement({}, answered)
    ttft, prefill = (keepup.mean([r.get("ttft_s") for r in answered]),
                     keepup.mean([r["server"].get("prefill_s") for r in answered]))
    checks["TTFT beyond prefill ms"] = None if ttft is None or prefill is None else 1000 * (ttft - prefill)
    return checks | {"saturated": keepup.saturation({"client": client}, checks)}


def bootstrap(groups: list, statistic, seed: int = 0) -> tuple[float | None, float | None, float | None]:
    """The statistic over all groups, and its 95% interval over DRAWS resamples of the groups (with replacement)."""
    if not groups:
        return None, None, None
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(groups), size=(DRAWS, len(groups)))
    draws = [statistic([groups[i] for i in pick]) for pick in picks]
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(statistic(groups)), float(low), float(high)


def _p95(sessions: list[list[float]]) -> float:
    return float(np.percentile([t for s in sessions for t in s], 95))


def session_speeds(steps: list[dict]) -> dict[str, float]:
    """Each session's decode tok/s: its tokens after each step's first over the client's decode seconds."""
    tokens: dict[str, list[float]] = {}
    for r in steps:
        if "error" not in r and r.get("decode_tokens") and r.get("decode_s"):
            pair = tokens.setdefault(r["session"], [0.0, 0.0])
            pair[0], pair[1] = pair[0] + r["decode_tokens"], pair[1] + r["decode_s"]
    return {s: n / t for s, (n, t) in tokens.items()}


def judge(steps: list[dict], slo_ttft_ms: float | None, slo_tok_s: float | None, saturated: str | None) -> dict:
    """A level's verdict against the SLO: pass or fail where the 95% interval of each statistic lies on one side,
    undecided where one holds the SLO, `client` where the client could not keep up (never the server's)."""
    ttfts: dict[str, list[float]] = {}
    for r in steps:
        if "error" not in r and r.get("ttft_s") is not None:
            ttfts.setdefault(r["session"], []).append(1000 * r["ttft_s"])
    ttft = bootstrap(list(ttfts.values()), _p95)
    decode = bootstrap(list(session_speeds(steps).values()), lambda v: float(np.median(v)))
    out = {"ttft_p95_ms": ttft, "decode_tok_s": decode}
    failed = sum("error" in r for r in steps)
    if saturated:
        return out | {"verdict": "client", "why": f"the client could not keep up: {saturated}"}
    if failed:
        return out | {"verdict": "fail", "why": f"{failed} step(s) failed"}
    sides = [_side(ttft, slo_ttft_ms, "p95 TTFT", lower=True), _side(decode, slo_tok_s, "decode tok/s", lower=False)]
    sides = [s for s in sides if s is not None]
    verdict = "fail" if any(v == "fail" for v, _ in sides) else "pass" if all(v == "pass" for v, _ in sides) \
        else "undecided"
    return out | {"verdict": verdict, "why": "; ".join(why for _, why in sides)}


def _side(value: tuple, slo: float | None, name: str, lower: bool) -> tuple[str, str] | None:
    if slo is None:
        return None
    est, low, high = value
    if est is None:
        return "undecided", f"{name} unknown (not read)"
    said = f"{name} {est:.1f} (95% {low:.1f} to {high:.1f}) against {slo:g}"
    good, bad = (high <= slo, low > slo) if lower else (low >= slo, high < slo)
    return ("pass" if good else "fail" if bad else "undecided"), said


def next_level(tried: dict[int, str], cap: int) -> int | None:
    """The next level the search measures, or None where it is decided or nothing in the gap is left to try:
    doubling until a level fails (or the cap), then the middle of the untried levels between the highest pass
    and the lowest fail (or client-bound level) above it."""
    lo, hi = _bounds(tried, cap)
    gap = [n for n in range(lo + 1, hi) if n not in tried]
    if not gap:
        return None
    if hi == cap + 1:
        want = min(cap, 2 * max(tried, default=0) or 1)
        if want in gap:
            return want
    return gap[len(gap) // 2]


def _bounds(tried: dict[int, str], cap: int) -> tuple[int, int]:
    lo = max((n for n, v in tried.items() if v == "pass"), default=0)
    hi = min((n for n, v in tried.items() if v in ("fail", "client") and n > lo), default=cap + 1)
    return lo, hi


def boundary(tried: dict[int, str], cap: int) -> dict:
    """The capacity (the most sessions in flight within the SLO) and the interval its boundary lies in."""
    lo, hi = _bounds(tried, cap)
    client = tried.get(hi) == "client"
    undecided = sorted(n for n, v in tried.items() if v == "undecided" and lo < n < hi)
    below = sorted(n for n, v in tried.items() if v in ("fail", "client") and n < lo)
    out = {"capacity": lo, "low": lo, "high": hi - 1 if hi <= cap and not client else None, "cap": cap,
           "undecided_levels": undecided, "levels": {str(n): v for n, v in sorted(tried.items())},
           "not_monotone": below}
    if lo == cap:
        return out | {"decided": True, "said": f"at least {cap} (the search's highest level, max_in_flight or the "
                      "replayed run's sessions); beyond it unmeasured"}
    if hi == lo + 1 and not client:
        return out | {"decided": True, "said": f"{lo} session(s) in flight: {hi} fail(s) the SLO"}
    why = (f"the client could not keep up at {hi}, so the box beyond {lo} is unmeasured" if client else
           f"the levels {', '.join(map(str, undecided))} are undecided (their intervals hold the SLO)")
    return out | {"decided": False, "said": f"between {lo} and {out['high'] if out['high'] is not None else '?'}: "
                  + why}


def level_table(records: list[dict]) -> pd.DataFrame:
    """One row a level of sessions in flight, from the records alone (its level record and its steps)."""
    rows = [_level_row(r, at_level(records, r["level"])) for r in records if r.get("kind") == "level"]
    return pd.DataFrame(rows, columns=LEVEL_COLUMNS).set_index("in flight") if rows else pd.DataFrame(
        columns=LEVEL_COLUMNS).set_index("in flight")


def _level_row(level: dict, records: list[dict]) -> dict:
    steps, table = [r for r in records if r.get("kind") == "step"], step_table(records)
    later = table[(table["turn"] > 0) | (table["step"] > 0)]["cached_share"].dropna()
    sessions, client, checks = session_table(records), level.get("client") or {}, level.get("checks") or {}
    lag, (p95, low, high), (tok, tok_low, tok_high) = ((client.get("lags_s") or {}).get("p99"), level["ttft_p95_ms"],
                                                       level["decode_tok_s"])
    return {"in flight": level["level"], "sessions": len(sessions), "steps": len(table),
            "failed": sum("error" in r for r in steps),
            "TTFT p50 ms": float(table["ttft_ms"].median()) if len(table) else None, "TTFT p95 ms": p95,
            "TTFT p95 low": low, "TTFT p95 high": high,
            "cached share, steps 2+": float(later.median()) if len(later) else None,
            "wait per session s": float(sessions["wait_s"].median()) if len(sessions) else None,
            "decode tok/s": tok, "decode low": tok_low, "decode high": tok_high,
            "client loop CPU %": 100 * client["loop_cpu_share"] if "loop_cpu_share" in client else None,
            "loop lag p99 ms": None if lag is None else 1000 * lag,
            "decode vs server %": checks.get("decode vs server %"),
            "TTFT beyond prefill ms": checks.get("TTFT beyond prefill ms"), "verdict": level.get("verdict"),
            "why": level.get("why")}


def level_findings(records: list[dict]) -> list[Finding]:
    """What the levels say: each step's TTFT and cached share as N grows, the client's check, and the capacity."""
    table = level_table(records)
    if not len(table):
        return []
    kept = table[table["verdict"] != "client"]
    out = [info("Sessions in flight: " + "; ".join(
        f"{n}: TTFT p95 {_num(r['TTFT p95 ms'], '.0f')} ms, cached share {_num(r['cached share, steps 2+'], '.0%')}"
        f" at steps 2+, {_num(r['wait per session s'], '.2f')} s waited per session" for n, r in table.iterrows())
        + ".")]
    out += [warning(f"{n} in flight: the client could not keep up ({r['why']}); this level is the client's limit, "
                    "never counted as the server's.", about=(f"level {n}",))
            for n, r in table[table["verdict"] == "client"].iterrows()]
    off = kept["decode vs server %"].dropna()
    if len(kept) and not len(off):
        out.append(warning("The server's own per-request decode times could not be read, so the client's clock is "
                           "not checked against the server's at any level."))
    elif len(off):
        out.append(info(f"Client against server at every level it kept up: decode time within {off.abs().max():.1f}%"
                        " of the server's own per-request figure."))
    return out + _lost(records, int(table.index[0])) + _capacity([r for r in records if r.get("kind") == "capacity"])


def _lost(records: list[dict], lowest: int) -> list[Finding]:
    """Steps that lost their cache at a level above the lowest (whose own are named with the sessions): an eviction
    under load, or too few slots for the sessions in flight, each with the server's own re-rendering (cache_check)."""
    lost: dict[int, list[dict]] = {}
    for c in records:
        if c.get("kind") == "cache_check" and c.get("level", lowest) > lowest:
            lost.setdefault(c["level"], []).append(c)
    return [warning(f"CACHE LOST under load at {n} in flight: {len(cs)} step(s) were served less than half of the "
                    f"prompt their session had sent before (e.g. session {cs[0]['session']} turn {cs[0]['turn'] + 1} "
                    f"step {cs[0]['step'] + 1}: {cs[0]['cached']} of {cs[0]['prompt_before']} tokens). Fix: a slot "
                    "per session in flight (llama-server --parallel) and room for their prefixes.",
                    about=(f"level {n}",)) for n, cs in sorted(lost.items())]


def _num(value, spec: str) -> str:
    return "unknown" if value is None or pd.isna(value) else format(value, spec)


def _capacity(found: list[dict]) -> list[Finding]:
    if not found:
        return []
    c = found[-1]
    slo = " and ".join(s for s in (f"step TTFT p95 at most {c['slo_ttft_p95_ms']:g} ms" if c["slo_ttft_p95_ms"] else "",
                                   f"decode at least {c['slo_decode_tok_s']:g} tok/s a session"
                                   if c["slo_decode_tok_s"] else "") if s)
    tried = ", ".join(f"{n} {v}" for n, v in c["levels"].items())
    said = f"CAPACITY within the SLO ({slo}): {c['said']} (levels measured: {tried})."
    if c["not_monotone"]:
        said += f" Not monotone: {', '.join(map(str, c['not_monotone']))} failed below a level that passed."
    return [info(said) if c["decided"] and not c["not_monotone"] else warning(said + " Undecided: it decides no "
                                                                              "comparison.", about=("capacity",))]


def capacity_row(runs: Runs) -> list[Row]:
    """The most sessions in flight each model serves within the SLO, with the interval of its boundary; the ratio's
    interval runs from the one's lowest over the other's highest to the reverse; undecided is a caveat."""
    mine = {s: r for s, r in runs.of("agent").items()}
    found = {s: next((x for x in reversed(r.records) if x.get("kind") == "capacity"), None) for s, r in mine.items()}
    if not any(found.values()):
        return []
    marks = {s: caveats(r) + (() if c is None or c["decided"] else (f"capacity undecided: {c['said']}",))
             for s, r in mine.items() for c in [found[s]]}
    base = found.get(runs.base)
    ratios = {s: _ratio(c, base) for s, c in found.items() if s != runs.base and c and base and base["capacity"]}
    return [Row("agent", "sessions in flight within the SLO (capacity)",
                {s: (c["capacity"] if c else None) for s, c in found.items()},
                {s: len(c["levels"]) if c else 0 for s, c in found.items()}, ratios, "higher", "ratio", "verdict",
                {s: m for s, m in marks.items() if m}, Plan.same(mine),
                note="the search's boundary: highest level that passed, interval to the lowest that failed less one")]


def _ratio(c: dict, base: dict) -> stats.Interval:
    """From the lowest over the other's highest to the reverse; no interval where a boundary has no upper bound
    (at least the cap, or a client that could not keep up): such a row cannot decide."""
    if c["high"] is None or base["high"] is None or not base["low"]:
        return stats.Interval(c["capacity"] / base["capacity"], math.nan, math.nan, 0.95, "an upper bound unknown")
    return stats.Interval(c["capacity"] / base["capacity"], c["low"] / base["high"], c["high"] / base["low"], 0.95,
                          "bounds of the two boundaries")


def plot_levels(table: pd.DataFrame, slo_ttft_ms: float | None = None):
    """Step TTFT (p50, p95 with its interval) and the cached share at steps 2+ against sessions in flight; a hollow
    point is a level whose client could not keep up (the client's limit, not the server's)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    t = table.astype({c: float for c in ("TTFT p50 ms", "TTFT p95 ms", "TTFT p95 low", "TTFT p95 high")})
    ours = t["verdict"] != "client"
    left.errorbar(t.index, t["TTFT p95 ms"], yerr=[t["TTFT p95 ms"] - t["TTFT p95 low"],
                                                     t["TTFT p95 high"] - t["TTFT p95 ms"]], fmt="-", label="p95")
    left.plot(t.index, t["TTFT p50 ms"], "-", label="p50")
    left.plot(t.index[~ours], t["TTFT p95 ms"][~ours], "o", mfc="none", color="k", label="client could not keep up")
    if slo_ttft_ms:
        left.axhline(slo_ttft_ms, color="r", ls="--", label="SLO")
    right.plot(t.index, t["cached share, steps 2+"].astype(float), "o-")
    for ax, what in ((left, "step TTFT ms"), (right, "cached share of the prompt, steps 2+")):
        ax.set_xlabel("sessions in flight")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    left.legend()
    fig.tight_layout()
    return fig
