"""MMLU-Pro's rows of the comparison: accuracy per model, the paired difference on the questions both answered
(the row that decides), and the batch's throughput beside single-stream decode (a hint, never a verdict).

Questions that are not MMLU-Pro's (a suite, or the demo's own small set) are named by their dataset in every
row, never called MMLU-Pro.
"""

from __future__ import annotations

import math

from ...runs.run import PastRun
from ...verdicts import stats
from ...verdicts.verdict import Row, Runs, median_row
from .. import registry
from ..batch.headline import graded_rows
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
    rights = {s: dict(g["correct"]) for s, g in graded.items()}
    rows = graded_rows(study, ("accuracy % (all answered questions)", "accuracy"), rights, mine, base, Plan,
                       HALF_WIDTH)
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
