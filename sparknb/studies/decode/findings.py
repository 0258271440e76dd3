"""Plain sentences about what the decode numbers mean, and every reason to doubt them, each naming the
prompt lengths it is about (a headline row at that length carries it as its caveat)."""

from __future__ import annotations

import pandas as pd

from ...roofline.bandwidth import FAR_BELOW, IMPOSSIBLE, Limit
from ...runs.report import Finding, info, warning
from ...runs.schedule import AUTO_FIRST
from ...runs.study import BURST, capped, drifts, left_out, outside_server
from ...verdicts.verdict import MIN_SAMPLES
from .tables import SPREAD, clean


def findings(df: pd.DataFrame, table: pd.DataFrame, limit: Limit, hardware: str,
             stopped: dict[int, str] | None = None, engine=None) -> list[Finding]:
    """`engine`: the server's (sparknb.engines), to name a stall of its own before the first token."""
    notes = _about_requests(df) + _about_stall(df, engine)
    if table.empty:
        return notes + [warning("No clean measurement was taken.")]
    notes += _about_clocks(df, table) + _about_samples(table, stopped or {})
    notes += drifts(df, "decode_tok_s", "decode tok/s") + capped(df, stopped or {}, "decode_s", "server_decode_s",
                                                                  "decode time")
    notes.append(_headline(table))
    return notes + _about_limit(table, limit, hardware)


def _lengths(values) -> tuple[int, ...]:
    return tuple(sorted(int(v) for v in set(values)))


def _about_requests(df: pd.DataFrame) -> list[Finding]:
    notes = left_out(df, "decode_tok_s", "decode speed", "Their answers gave no time between a first and a last "
                     "token, or no token count (usage); their records keep what the server sent.")
    unchecked = sorted(set(df["unchecked"].dropna())) if "unchecked" in df else []
    if unchecked:
        notes.append(warning(f"The server's counters could not be read for: {'; '.join(unchecked)}. Those "
                             "cross-checks are unknown, not passed."))
    off = df[df["prompt_tokens"] != df["prompt_length"]]
    if len(off):
        notes.append(warning(f"{len(off)} prompt(s) were not the length asked for: the server counted "
                             f"{sorted(set(off['prompt_tokens']))} tokens for {sorted(set(off['prompt_length']))}.",
                             _lengths(off["prompt_length"])))
    if df["completion_tokens"].isna().any():
        notes.append(warning("the server sent no usage; token counts and decode speeds are unknown, not guessed."))
    return notes


def _about_clocks(df: pd.DataFrame, table: pd.DataFrame) -> list[Finding]:
    """Bursts, counted at the server's time, and how far the client's own clock is from the server's."""
    notes = []
    kept = clean(df)
    timed = kept[kept["server_decode_s"].notna()]
    bursts = timed[timed["burst"]]
    if len(bursts):
        off = (bursts["client_tok_s"].astype(float) / bursts["decode_tok_s"].astype(float) - 1).abs()
        worst = bursts.loc[off.fillna(float("inf")).idxmax()]  # every token at once (no client speed) is the worst
        seen = ("every token at once" if pd.isna(worst["client_tok_s"]) else
                f"{worst['client_tok_s']:,.1f} tok/s")
        notes.append(info(
            f"{len(bursts)} of {len(timed)} answers reached the client in bursts or stalls: their first-to-last "
            f"token time differs from the server's own by more than {BURST:.0%} (worst: {seen} seen by the client, "
            f"{worst['decode_tok_s']:,.1f} tok/s by the server, at {int(worst['prompt_length']):,} tokens). They are "
            "counted at the server's time, as the 'server-timed' column shows; the client's speed for them was a "
            "delivery, not a decoding speed.", _lengths(bursts["prompt_length"])))
    gap = table["client vs server %"].dropna()
    if len(gap):
        far = gap[gap.abs() > 2]
        worst = gap.abs().max()
        if far.empty:
            notes.append(info(f"Over the requests the client timed itself, its ms per token is within {worst:.1f}% "
                              "of the server's own decode time: close enough to trust."))
        else:
            notes.append(warning(
                f"Over the requests the client timed itself, its ms per token differs from the server's own decode "
                f"time by up to {worst:.1f}% (at {', '.join(f'{n:,}' for n in far.index)} tokens): more than 2%. "
                "Look at the network or the client's load before trusting those lengths.", tuple(far.index)))
    elif not len(timed):
        notes.append(warning("The server's own decode time could not be read, so the client's figures are not "
                             "cross-checked against the server's and bursts cannot be told from speed."))
    return notes


def _about_samples(table: pd.DataFrame, stopped: dict[int, str]) -> list[Finding]:
    """Too few requests for an interval, and a spread too wide for a steady box."""
    notes = []
    few = table[table["95% low"].isna() | (table["n"] < MIN_SAMPLES)]
    if len(few):
        notes.append(warning(f"Too few clean requests for a 95% interval at {_at(few)} ({AUTO_FIRST} needed): "
                             "their medians are shown, not settled.", tuple(few.index)))
    wide = table[table["spread x"] > SPREAD]
    for n, row in wide.iterrows():
        notes.append(warning(f"At {n:,} tokens decode ranged from {row['min']:,.1f} to {row['max']:,.1f} tok/s "
                             f"({row['spread x']:.1f}x) over {row['n']} requests, beyond the {SPREAD}x a steady box "
                             "stays within: the box was not steady, and a median of so wide a spread is not a "
                             "speed to quote.", (n,)))
    return notes


def _at(rows: pd.DataFrame) -> str:
    return ", ".join(f"{n:,} tokens ({int(r['n'])})" for n, r in rows.iterrows())


def _headline(table: pd.DataFrame) -> Finding:
    """The speed at the shortest and the longest context; their change only where both are settled."""
    first, last = table.index[0], table.index[-1]
    a, b = table.loc[first], table.loc[last]
    text = (f"Median decode speed: {a['decode tok/s (median)']:,.1f} tok/s at {first:,} tokens"
            + (f" and {b['decode tok/s (median)']:,.1f} at {last:,}" if last != first else "") + ".")
    if last == first:
        return info(text)
    why = _unsettled(a, b)
    if why is None and (a["95% high"] < b["95% low"] or b["95% high"] < a["95% low"]):
        change = b["decode tok/s (median)"] / a["decode tok/s (median)"] - 1
        return info(text + f" Longer context changes it by {100 * change:+.1f}%, beyond both medians' 95% intervals.")
    return info(text + f" No change with context is claimed: {why or 'the intervals of the two medians overlap'}.")


def _unsettled(a: pd.Series, b: pd.Series) -> str | None:
    """Why two lengths' medians cannot be set against each other; None where both have an interval and a
    steady spread. Below six values a median has no 95% interval (stats.median_interval): none is claimed."""
    without = sum(pd.isna(r["95% low"]) or pd.isna(r["95% high"]) for r in (a, b))
    if without == 2:
        return f"neither length has a 95% interval (fewer than {AUTO_FIRST} clean requests each)"
    if without:
        return f"one of the two lengths has no 95% interval (fewer than {AUTO_FIRST} clean requests)"
    if any((r["spread x"] or 0) > SPREAD for r in (a, b)):
        return "one of the two lengths has too wide a spread to say"
    return None


def _about_limit(table: pd.DataFrame, limit: Limit, hardware: str) -> list[Finding]:
    share = table["% of limit"].dropna()
    notes = []
    if len(share):
        kv = table["KV % of bytes"].dropna()
        part = (f" The KV cache is {kv.iloc[0]:.1f}% of the bytes a step reads at {kv.index[0]:,} tokens and "
                f"{kv.iloc[-1]:.1f}% at {kv.index[-1]:,}." if len(kv) else "")
        notes.append(info(f"That is {share.min():.1f}% to {share.max():.1f}% of the bandwidth limit "
                          f"({limit.describe()}).{part}"))
        notes += _physics(table, share) + _split(table, limit)
        if limit.kv is None or not limit.kv.bytes_per_token:
            notes.append(warning("The limit counts the weights alone: without a census of the checkpoint the KV "
                                 "cache's read is not counted, so the share falls with context for a reason the "
                                 "limit leaves out (`sparknb model add` or checkpoint: in the params counts it).",
                                 ("limit",)))
    elif limit.bandwidth_bytes_s is None:
        notes.append(info(f"No bandwidth limit is drawn: the hardware params ({hardware}) give no memory bandwidth."))
    elif limit.bytes_per_step is None:
        notes.append(warning("No bandwidth limit is drawn: neither hand-written weights nor a census say what a "
                             "token reads.", ("limit",)))
    else:
        notes.append(warning("No bandwidth limit is drawn: the model is speculative and the server exposes no "
                             "speculative-decoding counters, so the tokens per step are unknown.", ("limit",)))
    if (table["tokens/step"].dropna() > 1).any():
        notes.append(info("Speculative decoding is on: the limit is divided by the measured tokens per step, and "
                          "tok/s depends on how predictable the text is (random filler here)."))
    return notes


def _physics(table: pd.DataFrame, share: pd.Series) -> list[Finding]:
    """Above the limit is impossible, said loud; far below it the step is not bandwidth-bound, and by how much."""
    notes = []
    above = share[share > 100 * IMPOSSIBLE]
    if len(above):
        notes.append(warning(f"IMPOSSIBLE: decode at {_lengths(above.index)} tokens is faster than the memory can "
                             f"feed ({', '.join(f'{v:.0f}%' for v in above)} of the limit). Something is miscounted: "
                             "a burst, a cache, a wrong census or bandwidth, or speculative tokens counted as "
                             "steps. Do not quote these speeds.", tuple(above.index)))
    far = share[share < 100 * FAR_BELOW]
    if len(far):
        times = "; ".join(f"{n:,} tokens: a step takes {100 / v:.1f}x its reading" for n, v in far.items())
        notes.append(info(f"NOT BANDWIDTH-BOUND: under {100 * FAR_BELOW:.0f}% of the limit ({times}). "
                          + _faster(table.loc[far.index[0]], far.index[0]), tuple(far.index)))
    return notes


def _faster(row: pd.Series, n: int) -> str:
    """What a faster memory would and would not change: it shortens the reading, never the rest. An MoE at 38% of an
    H100's limit would sit at about 30% of an H200's and still decode about 13% faster there."""
    if pd.isna(row.get("rest ms")) or pd.isna(row.get("read ms")):
        return ("Something other than reading memory sets most of the step (compute, the server's scheduling, its "
                "CPU side); how much is unknown here, so what a faster memory would change is not said.")
    step, read, rest = row["step ms"], row["read ms"], row["rest ms"]
    doubled = rest + read / 2
    return (f"At {n:,} tokens {rest:.2f} ms of each {step:.2f} ms step is not reading memory (compute, the server's "
            f"scheduling, its CPU side): a faster memory shortens only the {read:.2f} ms of reading (twice the "
            f"bandwidth: {doubled:.2f} ms a step, {step / doubled - 1:.0%} faster) and leaves the {rest:.2f} ms "
            "as it is.")


def _alone(r: pd.Series) -> str:
    """The rest split again where llama-bench measured the engine alone on the same GGUF."""
    if pd.isna(r.get("engine ms")):
        return ""
    engine, read, step = r["engine ms"], r["read ms"], r["step ms"]
    if engine > step:
        return (f"; llama-bench, the engine alone, took {engine:.2f} ms a token, longer than the server's step: the "
                "two ran differently (threads, load, build), so the rest is not split into the engine's and the "
                "server's")
    return (f"; llama-bench, the engine alone, took {engine:.2f} ms a token: {engine - read:.2f} ms of the rest is "
            f"the engine's and {step - engine:.2f} ms the server's own")


def _split(table: pd.DataFrame, limit: Limit) -> list[Finding]:
    """Each length's step as the bytes' time at the box's bandwidth and the rest, with the rest's interval."""
    rows = table.dropna(subset=["rest ms"]) if "rest ms" in table else table.iloc[0:0]
    if rows.empty:
        return []
    parts = [f"at {n:,} tokens {r['rest ms']:.2f} ms of each {r['step ms']:.2f} ms step is not reading memory"
             + (f" (95%: {r['rest 95% low']:.2f}-{r['rest 95% high']:.2f})" if pd.notna(r["rest 95% low"]) else
                " (too few requests for an interval)") + f" and {r['read ms']:.2f} ms is reading" + _alone(r)
             for n, r in rows.iterrows()]
    bw = f"{limit.bandwidth_bytes_s / 1e9:,.0f} GB/s {limit.divides_by}"
    return [info(f"The step, split: {'; '.join(parts)}. Reading is the bytes a step reads over {bw}, and the share "
                 "of the limit is reading's share of the step. The rest is a cost per step whatever the bytes: a "
                 "model that reads fewer bytes loses more of its speed to it.", tuple(rows.index))]


def _about_stall(df: pd.DataFrame, engine) -> list[Finding]:
    """The server's own wait before a prompt (a server's host prompt cache on an H200: TTFT 253-575 ms against
    its own 11-143 ms of prompt time), named with its fix as prefill names it, never blamed on the machine."""
    stall = engine.stall(*outside_server(df)) if engine is not None and len(df) else None
    return [warning("TTFT here: " + stall)] if stall else []
