"""A graded study's rows of the comparison, the same for every graded study: its score per model (context), and
the paired difference on the items both answered (the row that decides), from a sequential run's own sequence
where it was asked so, with what a narrower interval would need."""

from __future__ import annotations

from collections.abc import Mapping

from ...runs.run import PastRun
from ...verdicts import sequential, stats
from ...verdicts.verdict import Row, caveats
from . import sequence

SCORES = "scores"  # what a finding on the raw answers (cuts, missing answer lines) and the scores is about
DIFFERENCE = "paired difference"  # what the row that decides is about


def graded_rows(study: str, score: tuple[str, str], rights: Mapping[str, Mapping[str, bool]],
                mine: Mapping[str, PastRun], base: str, plan: type[sequence.Sequential], half_width: float, *,
                interval: str = "", holds: str = "") -> list[Row]:
    """`rights`: each subject's items, right or not, by id; `score`: the share right as its row and the paired
    difference name it ("accuracy % (all answered questions)", "accuracy"); `interval`: what the scores'
    intervals are named after each (" (Wilson)"); `holds`: the data, where a wanted
    half-width may need more items than a run of it has (its settings' dataset_size)."""
    unit = plan.unit
    same = identical(mine, rights, base, plan.key)
    doubts = {s: caveats(mine[s], DIFFERENCE if same else SCORES) for s in rights}
    rates = {s: stats.accuracy(sum(map(bool, v.values())), len(v)) for s, v in rights.items()}
    said = ["; ".join(f"{s} {a.points()} of {len(rights[s])}{interval}" for s, a in rates.items())]
    differences, n, needed, notes, sequences = {}, {}, {}, [], {}
    for s, v in rights.items():
        if s == base:
            continue
        held = sequence.held(mine[base], mine[s], rights[base], v, plan)
        if held is not None:  # asked in the base run's order and stopped when decided
            differences[s], n[s], needed[s], sequences[s] = held
            notes.append(f"{s}: {sequential.told(held[3])}")
            said += [_partial(rights[base], v, base, s, unit, interval)] if len(v) < len(rights[base]) else []
            continue
        common = [q for q in rights[base] if q in v]
        if not common:
            notes.append(f"{s} answered none of {base}'s {unit}: no paired comparison")
            continue
        pairs = stats.Pairs.of([bool(v[q]) for q in common], [bool(rights[base][q]) for q in common])
        differences[s], n[s] = stats.paired_difference(pairs), pairs.n
        n[base] = min(n.get(base, pairs.n), pairs.n)
        available = int(mine[s].settings.get("dataset_size") or len(common)) if holds else None
        needed[s] = _needed(pairs, half_width, unit, available, holds)
        notes.append(f"{s} on {pairs.n} shared {unit}: McNemar p = {stats.mcnemar(pairs).pvalue:.3g}, "
                     f"{pairs.discordant} discordant")
    if same:
        notes.append(f"every answer on the shared {unit} is the same text on both sides: a doubt about the scores (cut "
                     "answers, missing answer lines) falls on both alike and cannot move the difference; it stays on "
                     "each score")
    rows = [Row(study, score[0], {s: 100 * a.estimate for s, a in rates.items()},
                {s: len(v) for s, v in rights.items()}, role="context", better="none", note="; ".join(said))]
    if differences:
        rows.append(Row(study, f"paired difference in {score[1]} (points)", {s: None for s in rights}, n,
                        differences, kind="difference", caveats=doubts, needed=needed, note="; ".join(notes),
                        not_comparable=plan.same({s: mine[s] for s in rights}), sequences=sequences))
    return rows


def _partial(base_right: Mapping[str, bool], right: Mapping[str, bool], base: str, subject: str, unit: str,
             interval: str) -> str:
    """A subject its sequence stopped: its score covers the items it was asked, and the base's on those same items."""
    same = [bool(base_right[q]) for q in right if q in base_right]
    return (f"{subject} was stopped by its sequence, so its score covers only the {len(right)} {unit} asked; "
            f"{base} on those same {unit}: {stats.accuracy(sum(same), len(same)).points()}{interval}")


def _needed(pairs: stats.Pairs, half_width: float, unit: str, available: int | None, holds: str) -> str:
    """What an interval of +/- half_width would need, and where that is more than the data holds."""
    if not pairs.discordant:
        return "they never disagreed: no sample size would show a difference they did not make"
    more = stats.questions_needed(pairs, half_width)
    return (f"+/-{100 * half_width:.0f} points would need about {more:,} {unit}"
            + (f", more than the {available} {holds} holds: no run of it can tell these apart"
               if available is not None and more > available else ""))


def identical(mine: Mapping[str, PastRun], rights: Mapping[str, Mapping[str, bool]], base: str, key: str) -> bool:
    """Whether every subject gave the base's very answer (its text and reasoning, the first sample) on every item
    both answered: then a finding about the raw answers or the scores weighs the same on both sides of the paired
    difference (a cut answer is cut alike and graded alike, under any rule set), and is not the difference's doubt.
    Different answers keep it: a verbose model cut more often than a terse one is a difference the cut makes."""
    said = {s: _answers(mine[s], key) for s in rights}
    shared = [(s, q) for s in rights if s != base for q in rights[s] if q in rights[base]]
    return bool(shared) and all(q in said[s] and said[s].get(q) == said[base].get(q) for s, q in shared)


def _answers(run: PastRun, key: str) -> dict[str, tuple[str, str]]:
    return {str(r[key]): (r.get("reasoning") or "", r.get("text") or "") for r in run.records
            if key in r and "text" in r and not r.get("sample")}
