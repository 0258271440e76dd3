"""What the numbers say, and every reason to doubt them, the worst first; and the summary the run keeps."""

from __future__ import annotations

import pandas as pd

from ... import sandbox as sb
from ...runs.report import Finding, as_records, duration, info, warning
from ..batch import rule_sets
from ..batch.findings import batch_findings, comparison_findings, coverage
from ..batch.headline import SCORES
from .compare import Comparison
from .measure import Asked, Cost
from .plan import Work
from .rule_sets import said
from .scores import Scores
from .traps import Traps


def findings(df: pd.DataFrame, work: Work, t: Traps, s: Scores | None, asked: Asked | None,
             cmp: Comparison | None = None) -> list[Finding]:
    notes = [Finding(t.level, t.headline(), (SCORES,)), _isolation(work)]
    level = "suspect" if t.tripped else "info"
    if s is not None:
        for k, v in s.pass_at.items():
            notes.append(Finding(level, f"pass@{k} {v.points()} over {s.problems} problems of {work.dataset.name} "
                                        f"(95% interval, {v.method}).", (SCORES,)))
        notes.append(info(f"{s.no_code} answer(s) had no code and {s.cut} were cut short; both count as failed, "
                          "apart from the wrong ones. A vendor's figure comes from its own prompt and sampling: "
                          "compare runs measured alike, not a run with a model card."))
        notes += [Finding(level, text, (SCORES,)) for text in rule_sets.sentences(t.harness)]
        if t.harness:
            notes.append(info(said(work.plan.style)))
        notes += _none_passed(df, work)
    notes += coverage(len(work.items()), len(df), work, "answers asked for", "the speed and cost figures")
    if asked is not None:
        notes.append(_cost(asked.cost))
        if asked.batch.asked:
            notes += batch_findings(asked.batch, " (programs ran alongside)", unit="problem",
                                    template=work.plan.style == "chat")
    if cmp is not None:
        notes += comparison_findings(cmp)
    return notes


def _none_passed(df: pd.DataFrame, work: Work) -> list[Finding]:
    """Every completion failed: a chat-tuned model asked for completions often answers in prose (SmolLM2 passed
    0 of 164 so, 7 in chat), which says how it was asked, not what it can do."""
    if work.plan.style != "completion" or not len(df) or df["passed"].any():
        return []
    return [warning(f"Every one of the {len(df)} completions failed. A chat-tuned model asked to complete a prompt "
                    "often goes on in prose instead of code: read the answers below, and try style: chat.", (SCORES,))]


def _isolation(work: Work) -> Finding:
    box = work.sandbox
    text = f"Programs ran in a sandbox, isolation {box.describe()}."
    if box.level != sb.LEVELS[0]:
        return warning(text + f" That level was asked for instead of {sb.LEVELS[0]}: {sb.WHAT[box.level]}.")
    return info(text)


def _cost(c: Cost) -> Finding:
    if not c.programs:
        return info(f"No program was run in this run (isolation {c.level}).")
    lag = "" if c.lag_s is None else f"; the run waited {duration(c.lag_s)} for verdicts after the last answer"
    cpu = "n/a" if c.cpu_median_s is None else duration(c.cpu_median_s)
    return info(f"The sandbox ({c.level}) ran {c.programs} program(s): {duration(c.wall_median_s)} wall and {cpu} CPU "
                f"per program (medians), {duration(c.wall_total_s)} wall in all{lag}.")


def summary(df: pd.DataFrame, work: Work, t: Traps, s: Scores | None, asked: Asked | None,
            cmp: Comparison | None, notes: list[Finding]) -> dict:
    return {
        "suspect": t.tripped,
        "traps": t.as_dict(),
        "problems": len(work.problems), "answers_asked_for": len(work.items()), "graded": len(df),
        "pass_at_1": None if s is None else s.pass_at_1.as_dict(),
        "scores": None if s is None else s.as_dict(),
        "sandbox": work.sandbox.as_dict() | {"cost": None if asked is None else asked.cost.as_dict()},
        "batch": None if asked is None else asked.batch.as_dict(),
        "comparison": None if cmp is None else cmp.as_dict(),
        "findings": as_records(notes),
    }
