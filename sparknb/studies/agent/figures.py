"""The agent study's tables, from its records alone: one row a step, one row a session.

A step's prompt splits by the server's own per-request count into the tokens it served from its prefix cache and
the tokens it prefilled; of those, the ones the previous request of the session had already sent (its prompt, in
the whole blocks the server's cache keeps: measure.blocks_said) should have been cached. A session's wait on the
model is the sum of its requests' times (sending to the last byte), split into prefill of new tokens, prefill the
cache should have saved (the server's prefill time, shared out by tokens) and the rest (decode, and anything the
server does not time); tool time is apart.
"""

from __future__ import annotations

import pandas as pd

from ...verdicts.stats import median_interval
from ...verdicts.verdict import Row, Runs, caveats, median_row

STEP_COLUMNS = ["session", "turn", "step", "ttft_ms", "tool_call_ms", "content_ms", "prompt_tokens", "cached_tokens",
                "cached_share", "sent_before", "should_cache", "prefill_ms", "decode_tok_s", "output_tokens",
                "reasoning_tokens", "finish", "calls", "parsed", "total_s"]


def levels_of(records: list[dict]) -> list[int]:
    """The levels of sessions in flight a sweep measured (capacity), none where the run had one level."""
    return sorted({r["level"] for r in records if r.get("level") is not None})


def at_level(records: list[dict], level: int | None) -> list[dict]:
    """The records of one level (None: the records of a run of one level, untagged)."""
    return [r for r in records if r.get("level") == level]


def first_level(records: list[dict]) -> list[dict]:
    """What a run of one level would hold: its lowest level's records, where it swept several (the step and
    session tables, the findings and the headline rows read a sweep's sessions at its lowest level)."""
    found = levels_of(records)
    return records if not found else [r for r in records if r.get("level") in (None, found[0])]


def step_table(records: list[dict]) -> pd.DataFrame:
    """One row a step answered (errors apart), in the order sent; a sweep's at its lowest level."""
    rows, before, block = [], {}, cache_block(records)
    for r in first_level(records):
        if r.get("kind") != "step" or "error" in r:
            continue
        prior = before.get(r["session"])
        rows.append(_step(r, prior, _ms, block))
        before[r["session"]] = r
    parsed = _parsed(first_level(records))
    df = pd.DataFrame(rows, columns=STEP_COLUMNS[:-3] + ["total_s"]) if rows else pd.DataFrame(columns=STEP_COLUMNS)
    if len(df):
        keys = list(zip(df["session"], df["turn"], df["step"]))
        df["calls"] = [parsed.get(k, (None, None))[0] for k in keys]
        df["parsed"] = [parsed.get(k, (None, None))[1] for k in keys]
    return df[STEP_COLUMNS]


def cache_block(records: list[dict]) -> int | None:
    """The tokens a block of the server's prefix cache holds, as the run recorded it (1: no blocks); None unknown."""
    return next((r.get("cache_block") for r in records if r.get("kind") == "drawn"), None)


def should_cache(new: int | None, sent_before: int | None, cached: int | None, block: int | None) -> int | None:
    """The prefilled tokens the cache could have served: of the prompt sent before, its whole blocks only (vLLM
    served 1,024 of 1,074 tokens sent before, in blocks of 128: counted by the token, 50 too many), every token on
    llama-server (a block of 1); unknown where the server does not say its blocks."""
    if new is None or sent_before is None or (sent_before and block is None):
        return None
    return max(0, min(new, whole_blocks(sent_before, block) - cached)) if sent_before else 0


def whole_blocks(tokens: int, block: int) -> int:
    """Of the tokens sent before, those in whole blocks of the server's prefix cache: the most it can serve again."""
    return tokens // block * block


def _ms(value: float | None) -> float | None:
    return None if value is None else 1000 * value


def _step(r: dict, prior: dict | None, ms, block: int | None) -> dict:
    per = (r.get("server") or {}).get("per_request") or {}
    prompt, cached = r.get("prompt_tokens"), r.get("cached_tokens")
    sent_before = prior.get("prompt_tokens") if prior else 0
    new = None if prompt is None or cached is None else prompt - cached
    return {"session": r["session"], "turn": r["turn"], "step": r["step"], "ttft_ms": ms(r.get("ttft_s")),
            "tool_call_ms": ms(r.get("tool_call_s")), "content_ms": ms(r.get("content_s")), "prompt_tokens": prompt,
            "cached_tokens": cached, "cached_share": cached / prompt if prompt and cached is not None else None,
            "sent_before": sent_before, "should_cache": should_cache(new, sent_before, cached, block),
            "prefill_ms": ms(per.get("prefill_s")), "decode_tok_s": r.get("decode_tokens_per_s"),
            "output_tokens": r.get("completion_tokens"), "reasoning_tokens": r.get("reasoning_tokens"),
            "finish": r.get("finish_reason"), "total_s": r.get("total_s")}


def _parsed(records: list[dict]) -> dict:
    """(session, turn, step) -> (calls executed, whether they parsed), from the tools records."""
    return {(r["session"], r["turn"], r["step"]): (len(r["calls"]), r.get("parse_error") is None)
            for r in records if r.get("kind") == "tools"}


def session_table(records: list[dict]) -> pd.DataFrame:
    """One row a session: its wait on the model, split; its tool time; steps and tokens."""
    df = step_table(records)
    tools = pd.DataFrame([r for r in first_level(records) if r.get("kind") == "tools"], columns=["session", "tool_s"])
    rows = []
    for session, mine in df.groupby("session", sort=False):
        rows.append(_session(session, mine, tools[tools["session"] == session]["tool_s"].sum()))
    return pd.DataFrame(rows)


def _session(session: str, s: pd.DataFrame, tool_s: float) -> dict:
    prefill = s["prefill_ms"].astype(float) / 1000
    new = (s["prompt_tokens"] - s["cached_tokens"]).astype(float)
    share = (s["should_cache"].astype(float) / new).where(new > 0, 0.0)
    wait = float(s["total_s"].sum())
    known = bool(prefill.notna().all() and s["cached_tokens"].notna().all())
    split = known and bool(s["should_cache"].notna().all())  # the server's blocks unknown: the split is too
    return {"session": session, "steps": len(s), "wait_s": wait,
            "prefill_new_s": float((prefill * (1 - share)).sum()) if split else None,
            "prefill_lost_s": float((prefill * share).sum()) if split else None,
            "decode_and_rest_s": wait - float(prefill.sum()) if known else None, "tool_s": tool_s,
            "prompt_tokens": int(s["prompt_tokens"].sum()),
            "cached_tokens": int(s["cached_tokens"].sum()) if known else None,
            "output_tokens": int(s["output_tokens"].fillna(0).sum()),
            "reasoning_tokens": int(s["reasoning_tokens"].sum()) if s["reasoning_tokens"].notna().all() else None}


def headline_rows(runs: Runs) -> list[Row]:
    """The agent's wait per session (paired by session where both ran the same ones: a replay), TTFT at step 1 and
    at steps 2+, and the cached share of the prompt at steps 2+; then the live sessions' BFCL score (grades).

    Where every run replays one live run, TTFT is paired by step: each step is the same prompt and the same answer
    length on both sides. Unpaired, the spread of the steps themselves hid the models' difference: on an H100 the
    steps 2+ of a 1.7B and a 4B replay gave 0.99x [0.78, 1.30], where the chat template's rendering of prompts of 7k
    to 11k tokens (22 to 54 ms a step, the same on both sides) outweighs the prefill of the new tokens."""
    from .plan import Plan

    mine = runs.of("agent")
    if not mine:
        return []
    tables = {s: step_table(r.records).set_index(["session", "turn", "step"]) for s, r in mine.items()}
    marks = {s: caveats(r) for s, r in mine.items()}
    apart = Plan.same(mine)
    first = {s: t[[k[1:] == (0, 0) for k in t.index]] for s, t in tables.items()}
    later = {s: t[[k[1:] != (0, 0) for k in t.index]] for s, t in tables.items()}
    row = paired_row if one_replay(mine) else unpaired_row
    from .grades import headline_rows as graded

    return [wait_row(mine, runs.base, marks, apart),
            row("TTFT ms, a session's first step", {s: t["ttft_ms"] for s, t in first.items()}, runs.base, marks,
                apart, "by step"),
            row("TTFT ms, steps 2+", {s: t["ttft_ms"] for s, t in later.items()}, runs.base, marks, apart, "by step"),
            median_row("agent", "cached share of the prompt, steps 2+",
                       {s: t["cached_share"].dropna().tolist() for s, t in later.items()}, runs.base,
                       better="higher", caveats=marks, not_comparable=apart, role="context")] + graded(runs)


def one_replay(runs: dict) -> bool:
    """Whether every run replays the same sealed live run (the manifest it read): the same steps on every side."""
    replayed = {next((p.get("manifest_sha256") for p in r.settings.get("inputs") or () if p.get("notebook") == "agent"),
                     None) if r.settings.get("replay_from") else None for r in runs.values()}
    return len(replayed) == 1 and None not in replayed


def unpaired_row(figure: str, values: dict, base: str, marks: dict, apart: str, _: str) -> Row:
    """Medians over each side's own steps, the ratio's interval by the bootstrap (verdict.median_row)."""
    return median_row("agent", figure, {s: v.dropna().tolist() for s, v in values.items()}, base, better="lower",
                      caveats=marks, not_comparable=apart)


def paired_row(figure: str, values: dict, base: str, marks: dict, apart: str, unit: str) -> Row:
    """Each side's median; each subject's ratio to the base is the median of the ratios over the units (the index)
    both measured, with its distribution-free interval (stats.median_interval)."""
    values, ratios = {s: v.astype(float) for s, v in values.items()}, {}
    for s, v in values.items():
        both = v.dropna().index.intersection(values[base].dropna().index)
        if s != base and len(both):
            ratios[s] = median_interval((v[both] / values[base][both]).tolist())
    return Row("agent", f"{figure} (paired {unit})", {s: float(v.median()) if v.notna().any() else None
                                                      for s, v in values.items()},
               {s: int(v.notna().sum()) for s, v in values.items()}, ratios, "lower", "ratio", "verdict",
               {s: c for s, c in marks.items() if c}, apart)


def wait_row(mine: dict, base: str, marks: dict, apart: str) -> Row:
    """Seconds the agent waited on the model per session, paired by session (the sessions both ran)."""
    waits = {s: session_table(r.records).set_index("session")["wait_s"] for s, r in mine.items()}
    return paired_row("seconds waited on the model per session", waits, base, marks, apart, "by session")
