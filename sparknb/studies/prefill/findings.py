"""What the numbers say: every reason to doubt them, then the plain-language paragraph.

Findings are report.Finding lists: anything a reader must not read past is a warning (or marked),
and an unknown (a counter or histogram the server does not expose) is said, never taken as zero.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict

import pandas as pd

from ...engines import Engine
from ...runs.report import Finding, as_records, duration, info, warning
from ...runs.study import capped, drifts, left_out, outside_server, server_first_s
from ...verdicts.verdict import MIN_SAMPLES
from .compare import Comparison
from .fit import Fit
from .measure import UNCHECKED, CacheCount
from .plan import Plan
from .tables import clean

FIT = ("fit",)  # a finding about the fit's shape: the fit's own figures, not any length's measured TTFT
SERVER_COLUMNS = {"server TTFT ms": "time_to_first_token", "server prefill ms": "request_prefill_time",
                  "server queue ms": "request_queue_time"}


def findings(df: pd.DataFrame, table: pd.DataFrame, fit_: Fit | None, plan: Plan, cache: CacheCount,
             note: str | None = None, stopped: dict[int, str] | None = None, engine: Engine | None = None
             ) -> list[Finding]:
    """Every reason to doubt the numbers, each naming the lengths it is about where it is not the whole
    run (a headline row at that length carries it as its caveat), then what the fit says about them.
    `engine` (the server's, sparknb.engines) names a stall of its own where the time outside it shows one."""
    notes = []
    if plan.allow_cache_hits:
        notes.append(Finding("marked", "this run allowed prefix-cache hits on purpose (each length's prompt "
                             "repeats): its TTFTs show what a cache hit looks like, not what prefill costs."))
    if note:
        notes.append(info(note))
    notes.append(cache.finding())
    notes += _about_requests(df, plan)
    notes += drifts(df, "ttft_s", "TTFT", duration)
    if table.empty:
        return notes + [warning("No clean measurement was taken.")]
    notes += _about_samples(table, stopped or {}) + _about_spread(df) + _about_server(df, table, engine) + _about_load(df)
    notes += capped(df.assign(server_first_s=server_first_s(df)), stopped or {}, "ttft_s", "server_first_s", "TTFT")
    if fit_ is not None:
        notes += _about_fit(table, fit_)
    return notes


def _about_requests(df: pd.DataFrame, plan: Plan) -> list[Finding]:
    """Requests another client disturbed, prompts or answers of the wrong length, counters not given."""
    notes = left_out(df, "ttft_s", "first-token time", "The server's stream ended without a token the client could "
                     "time; their records keep what it sent.")
    unknown = df["cache_hits"].isna().sum()
    if unknown:
        notes.append(warning(f"{UNCHECKED} for {unknown} of {len(df)} measured request(s): the server's counters "
                             "did not say, so their TTFT may include a cache hit (unknown, not zero hits)."))
    off = df[df["prompt_tokens"].notna() & (df["prompt_tokens"] != df["prompt_length"])]
    if len(off):
        notes.append(warning(f"{len(off)} prompt(s) were not the length asked for: the server counted "
                             f"{sorted(set(off['prompt_tokens']))} tokens for {sorted(set(off['prompt_length']))}."))
    if df["completion_tokens"].isna().any():
        notes.append(warning("the server sent no usage for some requests; their token counts are unknown, not "
                             "guessed."))
    wrong = df[df["completion_tokens"].notna() & (df["completion_tokens"] != plan.output_tokens)]
    if len(wrong):
        notes.append(warning(f"{len(wrong)} answer(s) were not {plan.output_tokens} token(s) long "
                             f"({sorted(set(wrong['completion_tokens'].astype(str)))}): the server ignored ignore_eos."))
    return notes


def _about_spread(df: pd.DataFrame) -> list[Finding]:
    kept = clean(df)
    median = kept.groupby("prompt_length")["ttft_s"].transform("median")
    odd = kept[(kept["ttft_s"] > 1.5 * median) | (kept["ttft_s"] < median / 1.5)]
    if not len(odd):
        return []
    shown = "; ".join(f"{duration(t)} at {n:,} tokens (median {duration(m)})"
                      for n, t, m in zip(odd["prompt_length"], odd["ttft_s"], median[odd.index]))
    return [warning(f"{len(odd)} request(s) took over 1.5 times as long as the median of their length, or under "
                    f"two thirds of it: {shown}. The same prompt length should cost the same, so something held "
                    "these requests up: another process on the machine, or the server itself (its own times, where "
                    "it gives them, say which). Medians and the robust fit resist them; std and max do not.",
                    tuple(sorted({int(n) for n in odd["prompt_length"]})))]


def _about_samples(table: pd.DataFrame, stopped: dict[int, str]) -> list[Finding]:
    """Too few requests for an interval."""
    notes = []
    few = table[table["n"] < MIN_SAMPLES]
    if len(few):
        notes.append(warning("Too few clean requests for an interval at "
                             + ", ".join(f"{n:,} tokens ({int(r['n'])})" for n, r in few.iterrows())
                             + f" ({MIN_SAMPLES} needed): their medians are shown, not settled.", tuple(few.index)))
    return notes


def _about_server(df: pd.DataFrame, table: pd.DataFrame, engine: Engine | None = None) -> list[Finding]:
    """the server's own times: those it did not give, and how far the client's TTFT is from its own; a stall
    that is the server's own (its engine's trap) is named as such, with its fix, never blamed on the machine."""
    notes = []
    columns = [c for c in SERVER_COLUMNS if not (engine is not None and c in engine.untimed)]
    missing = [c for c in columns if table[c].isna().any()]
    if missing:
        notes.append(warning(f"the server's own {', '.join(SERVER_COLUMNS[c] for c in missing)} could not be read at "
                             f"some lengths (the server exposes no such histogram, or it did not move): the "
                             f"columns {', '.join(missing)} show '-' there, unknown, not zero; only the client's "
                             "times are shown there."))
    gap = table["outside the server ms"].dropna()
    if not len(gap):  # the server's TTFT is missing everywhere: said above
        return notes
    if (gap < -2).any():
        notes.append(warning("the client saw the first token before the server says it made it: the clocks or the "
                             "counters are not to be trusted here."))
    stall = engine.stall(*outside_server(df)) if engine is not None else None
    if stall:
        return notes + [warning(stall)]
    notes.append(info(f"Outside the server (HTTP, the client, streaming) each request spent {gap.min():.1f} to "
                      f"{gap.max():.1f} ms of its TTFT; the rest is the server's own time to first token."))
    if gap.max() > 2 * max(gap.iloc[0], 1.0) and gap.max() - gap.iloc[0] > 10:
        notes.append(warning(f"the time outside the server should not depend on the prompt length (one output token, "
                             f"prompts sent as token ids), yet it grows from {gap.iloc[0]:.1f} ms at "
                             f"{gap.index[0]:,} tokens to {gap.max():.1f} ms at {gap.idxmax():,}. Most often a busy "
                             "machine holds up the client or the server's front end; the client's TTFTs then "
                             "include that delay, and the server's own columns show the engine's time alone."))
    return notes


def _about_load(df: pd.DataFrame) -> list[Finding]:
    loads = df["load_1m"].dropna()
    cpus = os.cpu_count() or 1
    if not len(loads) or loads.median() <= cpus:  # the server and this client alone make a load of about 2
        return []
    return [warning(f"this machine's load average reached {loads.max():.1f} on {cpus} CPU threads during the sweep "
                    f"(median {loads.median():.1f}): other processes competed with the client, and with the server "
                    "if it runs here. Expect slow outliers; measure again on a quiet machine before trusting the "
                    "figures.")]


def _about_fit(table: pd.DataFrame, fit_: Fit) -> list[Finding]:
    notes = []
    if fit_.outliers:
        shown = "; ".join(f"{duration(t)} at {n:,} tokens" for n, t, _ in fit_.outliers[:3])
        notes.append(info(f"The robust fit gave little weight to {len(fit_.outliers)} request(s) far from its curve "
                          f"({shown}{'; ...' if len(fit_.outliers) > 3 else ''})."))
    length, miss = fit_.worst_misfit
    if abs(miss) > 0.10:
        notes.append(warning(f"the {fit_.shape} misses the median TTFT at {length:,} tokens by {100 * miss:+.0f}%: "
                             "read the fitted overhead and per-token cost as rough.", FIT))
    predicted = 1000 * fit_.predict(table.index.to_numpy(dtype=float))["ttft_s"].to_numpy()
    outside = [(n, p) for n, p, lo, hi in zip(table.index, predicted, table["min"], table["max"]) if not lo <= p <= hi]
    if outside:
        shown = "; ".join(f"{duration(p / 1000)} at {n:,} tokens" for n, p in outside)
        notes.append(warning(f"the {fit_.shape} falls outside the spread measured (fastest to slowest request) at "
                             f"{len(outside)} length(s): {shown}. Where it does, the fit describes the run only "
                             "roughly.", FIT))
    if fit_.curvature_s:
        word = "faster" if fit_.curvature_s.value > 0 else "slower"
        notes.append(info(f"TTFT grows {word} than in proportion to the prompt: the per-token cost is "
                          f"{duration(fit_.per_token_s.value)} at {fit_.lengths[0]:,} tokens and "
                          f"{duration(fit_.per_token_at(fit_.lengths[-1]))} at {fit_.lengths[-1]:,} tokens."))
    return notes


def _gap(r: float) -> float:
    return max(r, 1 / r)


def story(table: pd.DataFrame, fit_: Fit | None, label: str, comparison: Comparison | None = None,
          allow_cache_hits: bool = False) -> str:
    """The plain-language paragraph: what one short prompt would have said, and what the long ones show."""
    if table.empty:
        return "Nothing was measured cleanly, so there is nothing to conclude."
    short, long_ = table.index[0], table.index[-1]
    s, l_ = table.loc[short], table.loc[long_]
    parts = []
    if allow_cache_hits:
        parts.append("This run allowed prefix-cache hits on purpose, so none of this is a prefill cost.")
    rate_change = l_["prefill tok/s"] / s["prefill tok/s"]
    parts.append(f"A single short-prompt test ({short:,} tokens) would have measured {s['TTFT ms (median)']:,.0f} ms "
                 f"to the first token for {label}, a prefill rate of {s['prefill tok/s']:,.0f} tokens/s.")
    if rate_change > 1.1:
        why = ("so at short prompts most of the time is the fixed cost of a request, and a short test understates "
               "what the hardware does on long documents")
    elif rate_change < 1 / 1.1:
        why = ("so each token costs more as the context grows (attention's work grows with the square of the length), "
               "and a short test overstates the speed on long documents")
    else:
        why = "about the same, so here the short test would not have misled on throughput"
    parts.append(f"At {long_:,} tokens it takes {l_['TTFT ms (median)']:,.0f} ms, {l_['prefill tok/s']:,.0f} tokens/s: "
                 f"{rate_change:.2f} times the short-prompt rate, {why}.")
    rates = table["prefill tok/s"]
    if rates.idxmax() not in (short, long_) and rates.max() > 1.1 * max(rates.iloc[0], rates.iloc[-1]):
        parts.append(f"In between, the rate peaks at {rates.max():,.0f} tokens/s at {rates.idxmax():,} tokens: "
                     "one length alone, short or long, would not have shown the shape.")
    if fit_ is not None:
        parts.append(_split(fit_, short, long_))
    if comparison is not None:
        parts += [_versus(comparison, other) for other in comparison.labels]
    return " ".join(parts)


def _split(fit_: Fit, short: int, long_: int) -> str:
    """The fit in words: the overhead, one token's cost, and from where the tokens outweigh the overhead."""
    a, b = fit_.overhead_s, fit_.per_token_s
    fixed = (f"The fit puts the fixed overhead of a request at {a.show(duration)} and one prompt token at "
             f"{b.show(duration)}{fit_.where} ({100 * fit_.level:.0f}% intervals)")
    x = fit_.crossover_tokens
    if a.low <= 0:
        fixed += ("; the overhead is not distinguishable from zero (its interval reaches it), so the prompt's "
                  "tokens dominate from the shortest prompts on")
    elif x is None:
        fixed += "; the tokens' share never overtakes the overhead in this fit"
    elif x.value < short:
        fixed += (f"; the tokens outweigh the overhead from about {x.value:,.0f} tokens, so even the "
                  f"{short:,}-token prompt mostly measures prefill")
    elif x.value > long_:
        fixed += (f"; the tokens would outweigh the overhead only from about {x.value:,.0f} tokens, beyond the "
                  f"longest prompt here, so every length measured is mostly overhead")
    else:
        fixed += (f"; the tokens outweigh the overhead from about {x.value:,.0f} tokens "
                  f"[{x.low:,.0f}, {x.high:,.0f}], so prompts shorter than that mostly measure overhead")
    return fixed + "."


def _versus(comparison: Comparison, other: str) -> str:
    """One other run against this one, claiming no more than the ratio's intervals allow."""
    t, base = comparison.table, comparison.base
    col = f"{other} / {base}"
    ratios, low, high = t[col], t[f"{col} low"], t[f"{col} high"]
    short, long_ = t.index[0], t.index[-1]
    r0, r1 = ratios.iloc[0], ratios.iloc[-1]

    def span(i):
        return "" if math.isnan(low.iloc[i]) else f" [{low.iloc[i]:.2f}, {high.iloc[i]:.2f}]"

    vllm = (f" (by the server's own TTFT: {t[col + ' (server)'].iloc[0]:.2f} and {t[col + ' (server)'].iloc[-1]:.2f})"
            if col + " (server)" in t else "")
    text = (f"Against {other}: the {short:,}-token test would have said {other} takes {r0:.2f}{span(0)} times as "
            f"long as {base} to the first token; at {long_:,} tokens it is {r1:.2f}{span(-1)} times{vllm}.")
    slower = (low > 1).any()  # somewhere the other is surely slower
    faster = (high < 1).any()  # somewhere it is surely faster
    if slower and faster:
        return text + " The faster model changes with the prompt length: a short test picks the wrong one for long prompts."
    if math.isnan(low.iloc[0]) or math.isnan(low.iloc[-1]):
        return text + " With one request per length there is no interval to say whether the ratio really changes."
    if low.iloc[0] <= 1 <= high.iloc[0]:
        text += f" At {short:,} tokens the two cannot be told apart."
    if not (high.iloc[0] < low.iloc[-1] or high.iloc[-1] < low.iloc[0]):
        return text + (" The intervals at the two ends overlap: these repetitions cannot tell whether the ratio "
                       "really changes with the prompt length; more repetitions, or a quieter machine, would.")
    if _gap(r1) > _gap(r0):
        return text + (f" The gap grows from {_gap(r0):.2f}x to {_gap(r1):.2f}x: a short-prompt benchmark would "
                       "have called the two models closer than they are.")
    return text + (f" The gap shrinks from {_gap(r0):.2f}x to {_gap(r1):.2f}x: a short-prompt benchmark would "
                   "have called them further apart than they are on long prompts.")


def summary(lengths: Sequence[int], plan: Plan, cache: CacheCount, table: pd.DataFrame, fit_: Fit | None,
            comparison: Comparison | None, paragraph: str, notes: Sequence[Finding]) -> dict:
    """What summary.json holds: the figures and the words, as printed."""
    return {"prompt_lengths": list(lengths), "cache_hits_allowed": plan.allow_cache_hits,
            "cache": asdict(cache) | {"exposed": cache.exposed},
            "table": table.reset_index().to_dict(orient="records"),
            "fit": fit_.as_dict() if fit_ else None,
            "comparison": comparison.as_dict() if comparison else None,
            "story": paragraph, "findings": as_records(notes)}
