"""What the sweep says, and every reason to doubt a level: a client that could not keep up, a server
that never ran the concurrency asked for, requests that failed, preemptions, clocks that disagree."""

from __future__ import annotations

import dataclasses

import pandas as pd

from ...endpoint.keepup import AGREEMENT_PCT, LAG_LIMIT_S
from ...runs.report import Finding, as_records, info, warning
from .compare import Comparison, as_rows
from .plan import Plan
from .tables import knee
from .windows import ALL, STEADY

WINDOWS = (STEADY, ALL)

CHECKED = ("decode vs server %", "E2E vs server %")


def findings(table: pd.DataFrame, records: list[dict], plan: Plan, note: str | None,
             comparisons: list[Comparison]) -> list[Finding]:
    notes = [info(note)] if note else []
    if table.empty:
        return notes + [warning("No level was measured.")]
    levels = {r["level_name"]: r for r in records if r.get("kind") == "level"}
    if any(r.get("loaded_on_purpose") for r in levels.values()):
        notes.append(Finding("marked", "The client was loaded on purpose (a test hook spent CPU on every chunk): "
                                       "these figures show the self-check, not the server."))
    for name, row in table.iterrows():
        notes += _level(name, row, levels[name])
    notes += _agreement(table) + window_check(table) + _knee(table, plan) + _tokens(records, plan)
    for c in comparisons:
        notes += _comparison(c)
    return notes


def _level(name: str, row: pd.Series, level: dict) -> list[Finding]:
    notes = []
    if row["saturated"]:
        notes.append(Finding("marked", f"{name}: the client could not keep up ({row['why']}). Its figures are "
                                       "the client's limit, not the server's, and the level is left out of the knee."))
    elif (row.get("loop lag p99 ms") or 0) > 1000 * LAG_LIMIT_S:
        notes.append(warning(f"{name}: the client's event loop woke {row['loop lag p99 ms']:.0f} ms late (p99), yet "
                             f"its timings agree with the server's own within {AGREEMENT_PCT:g}%: the machine "
                             "stalled as a whole, the server too, so the figures hold with the stalls in them."))
    if row["failed"]:
        notes.append(warning(f"{name}: {row['failed']:g} request(s) failed; see the 'error' field of the records."))
    if level.get("interference"):
        notes.append(warning(f"{name}: {level['interference']}."))
    running = row.get("running max")
    if row["saturated"]:
        pass  # its requests' timing is the client's; what the server ran meanwhile says nothing of the level
    elif running is None or pd.isna(running):
        notes.append(warning(f"{name}: the server's running-requests gauge could not be read, so the concurrency "
                             "it really ran is unknown."))
    elif row["mode"] == "concurrency" and running < row["level"] and (row.get("samples") or 0) < 3:
        notes.append(warning(f"{name}: the server's running-requests gauge was read only {row.get('samples') or 0:g} "
                             f"time(s) while the level ran (at most {running:g} seen), too few to show whether it "
                             f"ran {row['level']:g} at once; lengthen the level to check it."))
    elif row["mode"] == "concurrency" and running < row["level"]:
        notes.append(warning(f"{name}: the server never ran {row['level']:g} requests at once (at most {running:g}, "
                             f"waiting up to {row.get('waiting max')}): it admits fewer (max_num_seqs or memory), "
                             "so this level measures its queue."))
    if _known(row.get("preemptions")):
        notes.append(warning(f"{name}: the server preempted {row['preemptions']:g} request(s) (its KV cache was "
                             "full); their latencies include recomputing them."))
    return [dataclasses.replace(n, about=(name,)) for n in notes]  # each about its level: a headline row's caveat


def _agreement(table: pd.DataFrame) -> list[Finding]:
    if table["saturated"].all():
        return []  # every level is marked already; there is nothing the server's clock could confirm
    kept = table[~table["saturated"]].dropna(subset=["server truth"]) if "server truth" in table else table.iloc[:0]
    if kept.empty:
        return [warning("The server's own timings could not be read (no per-request metrics, no histograms), so "
                        "the client's clock is not checked against the server's.")]
    worst = kept[list(CHECKED)].apply(pd.to_numeric).abs().max()  # NaN: the server does not time it

    def within(col: str, what: str) -> str:
        return f"{what} within {worst[col]:.1f}%" if not pd.isna(worst[col]) else f"{what} not timed by the server"

    beyond, held = kept["TTFT beyond server ms"].dropna(), kept["API server ms"].dropna()
    text = (f"Client against server ({', '.join(sorted(set(kept['server truth'])))}), at every level whose client "
            f"kept up: {within(CHECKED[0], 'decode time')}, {within(CHECKED[1], 'end to end')}"
            + (f"; TTFT {beyond.min():.1f} to {beyond.max():.1f} ms beyond the server's own (HTTP)"
               if len(beyond) else "")
            + (f"; the API server held each request {held.min():.1f} to {held.max():.1f} ms before its engine queued "
               "it" if len(held) else "") + ".")
    off = [(name, col) for name, row in kept.iterrows() for col in CHECKED
           if row[col] is not None and not pd.isna(row[col]) and abs(row[col]) > AGREEMENT_PCT]
    if not off:
        return [info(text)]
    where = "; ".join(f"{name} {col.split(' vs')[0]} {kept.at[name, col]:+.1f}%" for name, col in off)
    return [warning(f"{text} Beyond {AGREEMENT_PCT:g}%: {where}. The client kept up there, so the time is spent "
                    "between the server's clock and the client's (HTTP, the network).")]


def window_check(table: pd.DataFrame) -> list[Finding]:
    """Aggregate tok/s over each window against the server's own count of generated tokens over the same."""
    kept = table[~table["saturated"]] if "saturated" in table else table
    if kept.empty or "tok/s vs server % (all)" not in kept:
        return []
    found = {w: kept[f"tok/s vs server % ({w})"].dropna() for w in WINDOWS}
    if all(v.empty for v in found.values()):
        return [warning("The server's count of generated tokens could not be read over the levels' windows, so "
                        "aggregate tok/s is not checked against the server's.")]
    spread = kept["server count ± % (steady)"].dropna() if "server count ± % (steady)" in kept else kept.iloc[:0]
    said = "; ".join(f"{w} {'window' if w == STEADY else 'requests'} within {v.abs().max():.1f}%"
                     + (f" (the server's readings around its edges allow up to ±{spread.max():.1f}%)"
                        if w == STEADY and len(spread) else "")
                     for w, v in found.items() if not v.empty)
    text = (f"Aggregate tok/s against the server's own count of generated tokens over the same windows, at every "
            f"level whose client kept up: {said}.")
    off = [f"{name} ({w}) {row[f'tok/s vs server % ({w})']:+.1f}%" for name, row in kept.iterrows() for w in WINDOWS
           if _beyond(row[f"tok/s vs server % ({w})"], row.get(f"server count ± % ({w})"))]
    if not off:
        return [info(text)]
    return [warning(f"{text} Beyond {AGREEMENT_PCT:g}% and beyond what the server's readings around the window's "
                    f"edges allow: {'; '.join(off)}. The tokens reached the client at other times than the server "
                    "made them (late stamps, a burst), or the server also made tokens for another client.")]


def _known(value) -> bool:
    """A figure that was read and is not zero (a table holds an unread one as NaN)."""
    return value is not None and not pd.isna(value) and bool(value)


def _beyond(pct, spread) -> bool:
    if pct is None or pd.isna(pct):
        return False
    return abs(pct) > max(AGREEMENT_PCT, 0.0 if spread is None or pd.isna(spread) else spread) + 1e-9


def _knee(table: pd.DataFrame, plan: Plan) -> list[Finding]:
    slo = f"TTFT at most {plan.slo_ttft_s:g} s and TPOT at most {1000 * plan.slo_tpot_s:g} ms"
    name = knee(table)
    if name is None:
        return [warning(f"No level kept a request within the SLO ({slo}), so there is no knee.")]
    row = table.loc[name]
    return [info(f"The knee is {name}: {row['goodput req/s (steady)']:.2f} requests/s within the SLO ({slo}), "
                 f"{row['aggregate tok/s (steady)']:.1f} tok/s in all at {row['per-user tok/s p50']:.1f} tok/s per user "
                 "(steady window: the warmup wave left out).")]


def _tokens(records: list[dict], plan: Plan) -> list[Finding]:
    answered = [r for r in records if r.get("kind") == "request" and "error" not in r]
    notes = []
    if any(r.get("completion_tokens") is None for r in answered):
        notes.append(warning("The server sent no usage for some answers: their token counts, tok/s and TPOT are "
                             "unknown, not guessed."))
    if plan.source.tokens:
        off = sorted({r["prompt_tokens"] for r in answered if r.get("prompt_tokens") != plan.prompt_tokens},
                     key=str)
        if off:
            notes.append(warning(f"Some prompts were not {plan.prompt_tokens} tokens: the server counted {off}."))
    return notes


def _comparison(c: Comparison) -> list[Finding]:
    one, many = c.single_stream, c.batch
    if one is None or many is None:
        return [warning(f"Against {c.label} ({c.run_id}): no common level where both clients kept up.")]
    return [info(f"Against {c.label} ({c.run_id}): per-user speed {one[1]:.2f}x at {one[0]}, aggregate "
                 f"{many[1]:.2f}x at {many[0]}: the single-stream ratio {'shrinks' if many[1] < one[1] else 'grows'} "
                 "under load.")]


def summary(table: pd.DataFrame, plan: Plan, notes: list[Finding], comparisons: list[Comparison]) -> dict:
    """summary.json: every level's figures, the knee, and the findings."""
    return {"prompts": plan.source.kind, "knee": knee(table), "levels": as_rows(table),
            "comparisons": [c.as_dict() for c in comparisons], "findings": as_records(notes)}
