"""The closing paragraph, generated from the headline's numbers: who wins what, and where the data cannot tell."""

from __future__ import annotations

import math

from .headline import Headline, Row


def _verdict(row: Row, model: str, base: str) -> tuple[str | None, str]:
    """(winner or None, the sentence's figure) for one model against the base on one row."""
    ratio = row.ratios[model]
    if row.kind == "difference":  # a paired difference: 0 is no difference, higher accuracy is better
        side = None if math.isnan(ratio.low) or ratio.low <= 0 <= ratio.high else (1.0 if ratio.low > 0 else -1.0)
        return (None if side is None else model if side > 0 else base), ratio.points(signed=True)
    side = ratio.excludes
    if side is None or row.better == "none":
        return None, ratio.times()
    higher_wins = row.better == "higher"
    winner = model if (side > 0) == higher_wins else base
    return winner, ratio.times()


def story(h: Headline) -> str:
    """Per study and model: the wins the intervals support, the rows they do not, and the batch caveat."""
    if len(h.models) < 2:
        return (f"Only {h.models[0] if h.models else 'no model'} is in these runs: there is nothing to compare. "
                "Give runs of a second model, or a campaign.")
    parts = []
    for model in h.models[1:]:
        by_study: dict[str, dict[str, list[str]]] = {}
        for row in h.rows:
            if model not in row.ratios or row.study == "batch":
                continue
            winner, figure = _verdict(row, model, h.base)
            key = "cannot tell" if winner is None and (row.better != "none" or row.kind == "difference") else (winner or "")
            if key:
                by_study.setdefault(row.study, {}).setdefault(key, []).append(f"{row.measure} ({figure})")
        for study, outcome in by_study.items():
            said = []
            for who in (model, h.base):
                if who in outcome:
                    said.append(f"{who} is ahead on {'; '.join(outcome[who])}")
            if "cannot tell" in outcome:
                said.append(f"the data cannot tell them apart on {'; '.join(outcome['cannot tell'])}")
            how = "differences are" if study == "MMLU-Pro" else "ratios are"
            parts.append(f"{study[0].upper() + study[1:]}, {model} against {h.base} ({how} {model} "
                         f"{'minus' if study == 'MMLU-Pro' else 'over'} {h.base}, 95% intervals): " + "; ".join(said) + ".")
    parts += _short_prompt_trap(h)
    parts += _batch(h)
    wins = _tally(h)
    mixed = sorted({r.study for r in h.rows if r.ratios and r.study != "batch"} - set().union(*wins.values()))
    if any(wins.values()):
        parts.append("In short: " + "; ".join(f"{m} wins {', '.join(sorted(s))}" for m, s in wins.items() if s)
                     + (f"; on {', '.join(mixed)} neither wins throughout" if mixed else "") + ".")
    elif mixed:
        parts.append(f"In short: on {', '.join(mixed)} the runs do not name a winner.")
    return " ".join(parts)


def _short_prompt_trap(h: Headline) -> list[str]:
    """What a single short-prompt test would have concluded, against the longest prompt measured."""
    rows = [r for r in h.rows if r.study == "prefill" and r.ratios]
    if len(rows) < 2:
        return []
    out = []
    for model in h.models[1:]:
        short, long_ = rows[0].ratios.get(model), rows[-1].ratios.get(model)
        if short is None or long_ is None:
            continue
        out.append(f"Prefill: a single short-prompt test ({rows[0].measure.split(' at ')[1]}) would report {model} at "
                   f"{short.times()} of {h.base}'s time to first token; at {rows[-1].measure.split(' at ')[1]} it is "
                   f"{long_.times()}. Short prompts measure mostly the fixed cost of a request, which no model "
                   "changes; only long ones show what prefill costs.")
    return out


def _batch(h: Headline) -> list[str]:
    rows = [r for r in h.rows if r.study == "batch"]
    if len(rows) < 2:
        return []
    batch, single = rows[0], rows[1]
    out = []
    for model in h.models[1:]:
        b, s = batch.ratios.get(model), single.ratios.get(model)
        if b is None or s is None or math.isnan(b.estimate) or math.isnan(s.estimate):
            continue
        out.append(f"Under load the picture changes: in MMLU-Pro's batch {model} ran at {b.estimate:.2f}x "
                   f"{h.base}'s throughput, where single-stream decode gave {s.times()} ({batch.note}). A batch "
                   "ratio rests on one batch per model: read it as a hint, not a measurement.")
    return out


def _tally(h: Headline) -> dict[str, set[str]]:
    """The studies each model wins outright; a study where each wins some figures is won by neither."""
    won: dict[str, dict[str, set[str]]] = {}
    for row in h.rows:
        if row.study == "batch":
            continue
        for model in row.ratios:
            winner, _ = _verdict(row, model, h.base)
            if winner:
                won.setdefault(row.study, {}).setdefault(model, set()).add(winner)
    wins: dict[str, set[str]] = {m: set() for m in h.models}
    for study, by_model in won.items():
        winners = set().union(*by_model.values())
        if len(winners) == 1:
            wins[winners.pop()].add(study)
    return wins
