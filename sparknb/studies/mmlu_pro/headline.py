"""MMLU-Pro's rows of the comparison: accuracy per model, the paired difference on the questions both answered
(the row that decides), and the batch's throughput beside single-stream decode (a hint, never a verdict).

Questions that are not MMLU-Pro's (a suite, or the demo's own small set) are named by their dataset in every
row, never called MMLU-Pro.
"""

from __future__ import annotations

import math

from ...runs.run import PastRun
from ...verdicts import sequential, stats
from ...verdicts.verdict import Row, Runs, caveats, median_row
from .. import registry
from ..batch import sequence
from .grading import frame
from .plan import Plan

HALF_WIDTH = 0.02  # the paired interval a reader would want: +/- 2 points


def label(run: PastRun) -> str:
    """The study's name in the comparison: MMLU-Pro only where the questions are MMLU-Pro's."""
    name = run.settings.get("dataset_name") or "MMLU-Pro"
    return "MMLU-Pro" if name == "MMLU-Pro" else f"{name} (not MMLU-Pro)"


def headline_rows(runs: Runs) -> list[Row]:
    mine = runs.of("mmlu_pro")
    graded = {s: frame(r.records, tuple(r.settings.get("stop") or ())).set_index("question_id") for s, r in mine.items()}
    graded = {s: g for s, g in graded.items() if len(g)}
    base = runs.base
    if base not in graded:
        return []
    study = label(mine[base])
    doubts = {s: caveats(mine[s]) for s in graded}
    accuracy = {s: stats.accuracy(int(g["correct"].sum()), len(g)) for s, g in graded.items()}
    rows = [Row(study, "accuracy % (all answered questions)", {s: 100 * a.estimate for s, a in accuracy.items()},
                {s: len(g) for s, g in graded.items()}, role="context", better="none",
                note="; ".join(f"{s} {a.points()} of {len(graded[s])}" for s, a in accuracy.items()))]
    differences, n, needed, notes, sequences = {}, {}, {}, [], {}
    for s, g in graded.items():
        if s == base:
            continue
        held = sequence.held(mine[base], mine[s], graded[base]["correct"], g["correct"], Plan)
        if held is not None:
            differences[s], n[s], needed[s], sequences[s] = held
            notes.append(f"{s}: {sequential.told(held[3])}")
            continue
        common = [q for q in graded[base].index if q in g.index]
        if not common:
            notes.append(f"{s} answered none of {base}'s questions: no paired comparison")
            continue
        pairs = stats.Pairs.of(g.loc[common, "correct"].astype(bool).tolist(),
                               graded[base].loc[common, "correct"].astype(bool).tolist())
        differences[s], n[s] = stats.paired_difference(pairs), pairs.n
        n[base] = min(n.get(base, pairs.n), pairs.n)
        needed[s] = (f"+/-{100 * HALF_WIDTH:.0f} points would need about "
                     f"{stats.questions_needed(pairs, HALF_WIDTH):,} questions" if pairs.discordant
                     else "they never disagreed: no sample size would show a difference they did not make")
        notes.append(f"{s} on {pairs.n} shared questions: McNemar p = {stats.mcnemar(pairs).pvalue:.3g}, "
                     f"{pairs.discordant} discordant")
    if differences:
        rows.append(Row(study, "paired difference in accuracy (points)", {s: None for s in graded}, n, differences,
                        kind="difference", caveats=doubts, needed=needed, note="; ".join(notes),
                        not_comparable=Plan.same({s: mine[s] for s in graded}), sequences=sequences))
    return rows + batch_rows(runs, study)


def batch_rows(runs: Runs, study: str) -> list[Row]:
    """The batch's throughput beside single-stream decode at the decode length nearest the batch's mean prompt,
    so both ratios speak of prompts of about the same size. One batch per model: context, never a verdict."""
    base = runs.base
    batches = {s: ((r.summary or {}).get("batch") or {}) for s, r in runs.of("mmlu_pro").items()}
    batches = {s: b for s, b in batches.items() if b.get("tokens_per_s")}
    if base not in batches or len(batches) < 2:
        return []
    values = {s: b["tokens_per_s"] for s, b in batches.items()}
    ratios = {s: stats.Interval(v / values[base], math.nan, math.nan, 0.95, "one batch each")
              for s, v in values.items() if s != base}
    volumes = {s: b.get("completion_tokens") for s, b in batches.items()}
    tokens = ", ".join(f"{s} {v:,}" if v is not None else f"{s} unknown" for s, v in volumes.items())
    same = "the same volume" if len(set(volumes.values())) == 1 else "not the same volume: the ratio mixes in the lengths"
    rows = [Row("batch", f"{study} batch tok/s at concurrency {batches[base].get('concurrency')}", values,
                {s: 1 for s in values}, ratios, role="context",
                note=f"one batch per model, a hint rather than a measurement; generated tokens {tokens} ({same})")]
    single = next((c for c in registry.studies().values() if c.speeds), None)  # the study of single-stream speed
    decodes = runs.of(single.name) if single else {}
    if base in decodes:
        prompt = batches[base].get("prompt_tokens", 0) / max(1, batches[base].get("asked", 1))
        speeds = {s: single.speeds(r) for s, r in decodes.items() if s in values}
        lengths = sorted(speeds[base])
        if lengths:
            length = min(lengths, key=lambda x: abs(x - prompt))
            samples = {s: at.get(length, []) for s, at in speeds.items()}
            rows.append(median_row("batch", f"single-stream decode tok/s at {length:,} tokens (batch prompts: "
                                   f"{prompt:,.0f})", samples, base, role="context",
                                   note="beside the batch row: how much batching narrows the gap"))
    return rows
