"""HumanEval's rows of the comparison: pass@1 per model, and the paired difference on the problems both answered
(the row that decides), with what a narrower interval would need, and when that is more than HumanEval holds."""

from __future__ import annotations

from ...verdicts import sequential, stats
from ...verdicts.verdict import Row, Runs, caveats
from ..batch import sequence
from .compare import passes
from .plan import Plan

HALF_WIDTH = 0.05  # +/- 5 points: a reader's usual wish, and already near what 164 problems allow


def headline_rows(runs: Runs) -> list[Row]:
    mine = runs.of("humaneval")
    verdicts = {s: passes(r.records) for s, r in mine.items()}
    verdicts = {s: v for s, v in verdicts.items() if v}
    base = runs.base
    if base not in verdicts:
        return []
    doubts = {s: caveats(mine[s]) for s in verdicts}
    rates = {s: stats.accuracy(sum(v.values()), len(v)) for s, v in verdicts.items()}
    rows = [Row("humaneval", "pass@1 % (first answers)", {s: 100 * a.estimate for s, a in rates.items()},
                {s: len(v) for s, v in verdicts.items()}, role="context", better="none",
                note="; ".join(f"{s} {a.points()} of {len(verdicts[s])} (Wilson)" for s, a in rates.items()))]
    differences, n, needed, notes, sequences = {}, {}, {}, [], {}
    for s, v in verdicts.items():
        if s == base:
            continue
        held = sequence.held(mine[base], mine[s], verdicts[base], v, Plan)
        if held is not None:  # asked in the base run's order and stopped when decided
            differences[s], n[s], needed[s], sequences[s] = held
            notes.append(f"{s}: {sequential.told(held[3])}")
            continue
        common = [p for p in verdicts[base] if p in v]
        if not common:
            notes.append(f"{s} answered none of {base}'s problems: no paired comparison")
            continue
        pairs = stats.Pairs.of([v[p] for p in common], [verdicts[base][p] for p in common])
        differences[s], n[s] = stats.paired_difference(pairs), pairs.n
        n[base] = min(n.get(base, pairs.n), pairs.n)
        available = int(mine[s].settings.get("dataset_size") or len(common))
        if pairs.discordant:
            more = stats.questions_needed(pairs, HALF_WIDTH)
            needed[s] = (f"+/-{100 * HALF_WIDTH:.0f} points would need about {more:,} problems"
                         + (f", more than the {available} HumanEval holds: no run of it can tell these apart"
                            if more > available else ""))
        else:
            needed[s] = "they never disagreed: no sample size would show a difference they did not make"
        notes.append(f"{s} on {pairs.n} shared problems: McNemar p = {stats.mcnemar(pairs).pvalue:.3g}, "
                     f"{pairs.discordant} discordant")
    if differences:
        rows.append(Row("humaneval", "paired difference in pass@1 (points)", {s: None for s in verdicts}, n,
                        differences, kind="difference", caveats=doubts, needed=needed, note="; ".join(notes),
                        not_comparable=Plan.same({s: mine[s] for s in verdicts}), sequences=sequences))
    return rows
