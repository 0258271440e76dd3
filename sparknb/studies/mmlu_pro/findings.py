"""What the numbers say, and every reason to doubt them, the worst first; and the summary the run keeps."""

from __future__ import annotations

import pandas as pd

from ...runs.report import Finding, as_records, info
from ..batch import rule_sets
from ..batch.ask import Batch
from ..batch.findings import batch_findings, comparison_findings, coverage
from ..batch.headline import SCORES
from .compare import Comparison
from .plan import Work
from .prompt import said
from .scores import Scores
from .tables import table
from .traps import Traps


def findings(df: pd.DataFrame, work: Work, t: Traps, s: Scores | None, batch: Batch | None,
             cmp: Comparison | None = None) -> list[Finding]:
    notes = [Finding(t.level, t.headline(), (SCORES,))]
    level = "suspect" if t.tripped else "info"
    if s is not None:
        notes.append(Finding(level, f"Accuracy {s.headline.points()} over {s.n} questions: the {s.headline_label} "
                                    f"(95% interval, {s.headline.method}).", (SCORES,)))
        if s.other is not None:
            notes.append(Finding(level, f"The {s.other_label}: {s.other.points()}. MMLU-Pro's published scores are "
                                        "micro averages; a harness and temperature different from the vendor's also "
                                        "move the number.", (SCORES,)))
        notes.append(info(f"{s.unparsed} of {s.n} answers could not be parsed; they count as wrong (the reference "
                          "scripts would have scored them as random guesses)."))
        notes += [Finding(level, text, (SCORES,)) for text in rule_sets.sentences(t.harness)]
        notes.append(info(said(work.plan.prompt_format)))
    notes += coverage(len(work.in_order()), len(df), work)
    for note in work.dataset.notes:  # questions that are not MMLU-Pro's are marked first, never passed off as it
        if note.startswith("NOT MMLU-Pro"):  # about the name: a comparison's rows name their questions themselves
            notes.insert(0, Finding("marked", note, ("the questions' name",)))
        else:
            notes.append(info(f"Data: {note}."))
    if batch is not None and batch.asked:
        shared = ("the prompts of one category begin alike: the chat template, the instruction naming the category"
                  + (" and its worked examples" if work.plan.shots and not work.is_suite else ""))
        notes += batch_findings(batch, cached=shared)
    if cmp is not None:
        notes += comparison_findings(cmp)
    return notes


def summary(df: pd.DataFrame, work: Work, t: Traps, s: Scores | None, batch: Batch | None,
            cmp: Comparison | None, notes: list[Finding]) -> dict:
    return {
        "suspect": t.tripped,
        "traps": t.as_dict(),
        "extraction": {"graded": "last match of the first rule that matches",
                       "reference": "first 'answer is (X)' match",
                       "first_last_differ": t.first_last_differ,
                       "differ_right_last": t.differ_right_last, "differ_right_first": t.differ_right_first},
        "questions": len(work.questions), "answered": len(df),
        "accuracy": None if s is None else {"label": s.headline_label, **s.headline.as_dict()},
        "accuracy_other": None if s is None or s.other is None else {"label": s.other_label, **s.other.as_dict()},
        "unparsed": None if s is None else s.unparsed,
        "per_category": table(df).reset_index().to_dict(orient="records") if len(df) else [],
        "batch": None if batch is None else batch.as_dict(),
        "comparison": None if cmp is None else cmp.as_dict(),
        "findings": as_records(notes),
    }
