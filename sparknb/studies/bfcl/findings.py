"""What the answers say: the call problems counted and named with an example each, the traps that make a score
untrustworthy, the scores under both rule sets, the cost of a solved task, the format's effect; and the summary
the run keeps."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import pandas as pd

from ...endpoint.tools import prompted
from ...runs import strict_json
from ...runs.report import Finding, as_records, info
from ...verdicts import stats
from ..batch import rule_sets as batch_rules
from ..batch.ask import Batch
from ..batch.calls import EXTRA, FEWER, NO_CALL, PROBLEMS, UNPARSED, UNWANTED, named, schema_problems
from ..batch.compare import Paired, batch_speed, paired
from ..batch.cost import sentence as cost_sentence
from ..batch.findings import batch_findings, comparison_findings, coverage
from ..batch.headline import SCORES
from ..batch.traps import Traps
from .plan import Work
from .scores import Cost, graded

CUT = "cut at max_tokens"
CALL_START = re.compile(r"(\[|[A-Za-z_][\w.]*\s*\(|$)")  # how a text BFCL's decoder could still read begins
IN_CONTENT = "calls written into the text, not as tool calls"


def problems(r: dict) -> list[str]:
    """What is wrong with an answer's calls, by the schema alone (the value check is BFCL's). Asked natively, an
    answer in text alone is no call (BFCL's decoder fails on it: graded as unparsed)."""
    calls, wanted = r.get("calls"), len(r.get("answer") or [])
    if r["category"] == "irrelevance":
        return [UNWANTED] if calls else []
    if calls is None:
        return [NO_CALL] if r.get("format") == "native" and not r.get("tool_calls") else [UNPARSED]
    found = [NO_CALL] if not calls else [EXTRA] if len(calls) > wanted else [FEWER] if len(calls) < wanted else []
    offered = {_spelled(f["name"], r): f["parameters"] for f in r["functions"]}
    return list(dict.fromkeys(found + schema_problems(calls, offered)))


def _spelled(name: str, r: dict) -> str:
    return name.replace(".", "_") if r.get("format") == "native" else name


def traps(records: Sequence[dict], share: float) -> Traps:
    """Answers that cannot be judged as they are: cut at max_tokens where the rest could still have changed the
    grade, or (native) calls the server left in the text because it has no tool-call parser or the template has
    no tools."""
    done, counts, examples = graded(records), Counter({CUT: 0, IN_CONTENT: 0}), []
    for r in done:
        flag = CUT if _cut_undecided(r) else IN_CONTENT if _in_content(r) else None
        if flag:
            counts[flag] += 1
            examples += [{"question_id": r["item"], "flag": flag, "text": r.get("text", "")}][: 3 - len(examples)]
    return BfclTraps(len(done), dict(counts), share, (), examples)


def _cut_undecided(r: dict) -> bool:
    """Cut at max_tokens, and not already decided: a prompt-mode answer that begins with prose fails BFCL's
    decoder whatever would have followed (the whole text must be calls); a native one could still end in a call."""
    if r.get("finish_reason") != "length":
        return False
    return r.get("format") == "native" or bool(CALL_START.match((r.get("text") or "").strip("`\n ")))


def _in_content(r: dict) -> bool:
    if r.get("format") != "native" or r.get("tool_calls") or not (r.get("text") or "").strip():
        return False
    try:
        return bool(prompted(r["text"]))
    except (ValueError, TypeError):
        return False


class BfclTraps(Traps):
    LACKS = "hold their calls in the text"
    ENDS_BEFORE = "the call was complete"

    def why(self) -> str:
        text = super().why()
        if self.counts.get(IN_CONTENT):
            text += (" Calls written into the text by a server asked natively: start llama-server with --jinja and a "
                     "tool-capable chat template (--chat-template-file), vLLM with --enable-auto-tool-choice "
                     "--tool-call-parser NAME, or ask in prompt mode (format=prompt).")
        return text


def problem_findings(records: Sequence[dict]) -> list[Finding]:
    """Each problem counted, with the first answer that shows it."""
    done = graded(records)
    seen: dict[str, list[dict]] = {p: [] for p in PROBLEMS}
    for r in done:
        for p in problems(r):
            seen[p].append(r)
    called = sum(bool(r.get("calls")) for r in done)
    shown = {p: [(r["item"], _shown(r)) for r in rs] for p, rs in seen.items()}
    return [info(f"{called} of {len(done)} answers had at least one parsed call.")] + named(shown, len(done), "answers")


def _shown(r: dict) -> str:
    what = strict_json.dumps(r["calls"]) if r.get("calls") is not None else repr((r.get("text") or "")[:160])
    return f"`{what[:200]}`"


def findings(df: pd.DataFrame, work: Work, t: Traps, harness: dict, cost: Cost, batch: Batch | None,
             cmp: Paired | None = None) -> list[Finding]:
    notes = [Finding(t.level, t.headline(), (SCORES,))]
    level = "suspect" if t.tripped else "info"
    if len(df):
        score = stats.accuracy(int(df["correct"].sum()), len(df))
        notes.append(Finding(level, f"BFCL score {score.points()} over {len(df)} tasks in {work.plan.format} format "
                             f"(95% Wilson; tasks drawn evenly from {len(work.plan.categories)} categories, an "
                             "unweighted mean of them).", (SCORES,)))
        notes += [Finding(level, s, (SCORES,)) for s in batch_rules.sentences(harness)]
        notes.append(info(cost_sentence(cost)))
    notes += coverage(len(work.in_order()), len(df), work, "tasks")
    if batch is not None and batch.asked:
        notes += batch_findings(batch, cached="the prompts of one format begin alike")
    if cmp is not None:
        notes += comparison_findings(cmp)
        notes += _format_effect(cmp, work)
    return notes


def _format_effect(cmp: Paired, work: Work) -> list[Finding]:
    theirs = work.other.settings.get("format")
    if theirs == work.plan.format:
        return []
    return [info(f"The format's effect, {work.plan.format} minus {theirs} on the same tasks: "
                 f"{cmp.difference.points(signed=True)} (95%, paired). A server without a tool parser, or a template "
                 "that renders tools badly, shows here as a large gap.")]


def compare(df: pd.DataFrame, work: Work, label: str, batch: Batch | None = None) -> Paired:
    """The paired comparison with compare_with, both graded afresh by this code."""
    other = work.other
    theirs = {str(r["item"]): bool(r["correct"]) for r in graded(other.records)}
    pairs = paired(dict(zip(df["item"], df["correct"])), theirs, other.id, "task(s)")
    return Paired.of(pairs, label, other, work.plan.target_half_width, traps(other.records, work.plan.trap_share),
                     work.plan.differences(work.settings(), other.settings), batch_speed(batch, other))


def summary(df: pd.DataFrame, work: Work, t: Traps, harness: dict, cost: Cost, batch: Batch | None,
            cmp: Paired | None, notes: list[Finding], records: Sequence[dict]) -> dict:
    counts = Counter(p for r in graded(records) for p in problems(r))
    return {"suspect": t.tripped, "traps": t.as_dict(), "format": work.plan.format, "tasks": len(work.items),
            "answered": len(df), "with_a_call": int(df["called"].sum()) if len(df) else 0,
            "bfcl": int(df["correct"].sum()) if len(df) else 0, "robust": int(df["robust"].sum()) if len(df) else 0,
            "harness": harness, "cost": cost.as_dict(), "problems": {p: counts.get(p, 0) for p in PROBLEMS},
            "batch": None if batch is None else batch.as_dict(), "comparison": None if cmp is None else cmp.as_dict(),
            "findings": as_records(notes)}
