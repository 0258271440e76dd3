"""What the numbers say, and every reason to doubt them, the worst first; and the summary the run keeps."""

from __future__ import annotations

import pandas as pd

from ...report import Finding, as_records, duration, info, warning
from .compare import BatchSpeed, Comparison, needed_text
from .traps import Traps
from .measure import Batch
from .plan import Work
from .scores import Scores
from .tables import table


def findings(df: pd.DataFrame, work: Work, t: Traps, s: Scores | None, batch: Batch | None,
             cmp: Comparison | None = None) -> list[Finding]:
    notes = [Finding(t.level, t.headline())]
    level = "suspect" if t.tripped else "info"
    if s is not None:
        notes.append(Finding(level, f"Accuracy {s.headline.points()} over {s.n} questions: the {s.headline_label} "
                                    f"(95% interval, {s.headline.method})."))
        if s.other is not None:
            notes.append(Finding(level, f"The {s.other_label}: {s.other.points()}. MMLU-Pro's published scores are "
                                        "micro averages; a harness and temperature different from the vendor's also "
                                        "move the number."))
        notes.append(info(f"{s.unparsed} of {s.n} answers could not be parsed; they count as wrong (the reference "
                          "scripts would have scored them as random guesses)."))
    missing = len(work.questions) - len(df)
    if missing:
        notes.append(warning(f"{missing} of the {len(work.questions)} questions have no answer (stopped or failed); "
                             "the scores cover the answered ones only. Finish with resume_from."))
    if work.reused:
        notes.append(info(f"{len(work.reused)} answer(s) were reused from run {work.resumed.id}; only the others "
                          "were asked, and only those count in the speed figures."))
    for note in work.dataset.notes:  # questions that are not MMLU-Pro's are marked first, never passed off as it
        if note.startswith("NOT MMLU-Pro"):
            notes.insert(0, Finding("marked", note))
        else:
            notes.append(info(f"Data: {note}."))
    if batch is not None and batch.asked:
        notes += _batch(batch)
    if cmp is not None:
        notes += _comparison(cmp)
    return notes


def _batch(batch: Batch) -> list[Finding]:
    speed = "n/a (the server gave no token counts)" if batch.tokens_per_s is None else f"{batch.tokens_per_s:.1f}"
    tokens = "an unknown number of" if batch.completion_tokens is None else str(batch.completion_tokens)
    notes = [info(f"{batch.asked} requests at concurrency {batch.concurrency} took {duration(batch.wall_s)} and "
                  f"generated {tokens} tokens: {speed} tok/s for the batch. Batched throughput is not single-stream "
                  "speed: it depends on the concurrency and on how long the answers run.")]
    if batch.longest_prompt_tokens is not None:
        notes.append(info(f"The longest prompt was {batch.longest_prompt_tokens} tokens (question "
                          f"{batch.longest_prompt_question}), counted by the server's own tokenizer with the chat "
                          "template, before any question was asked."))
    if batch.client_cpu_share is not None:
        notes.append(info(f"The client used {100 * batch.client_cpu_share:.1f}% of the wall time in CPU (all its "
                          "threads); the rest it spent waiting on the server."
                          + (f" {100 * batch.outside_server_share:.1f}% of the request time it saw is not in vLLM's "
                             "own end-to-end time (network, queuing in the client, reading the stream)."
                             if batch.outside_server_share is not None else "")))
    if batch.prefix_cache_hit_rate:
        notes.append(info(f"{100 * batch.prefix_cache_hit_rate:.0f}% of prompt tokens came from the prefix cache: "
                          "questions of one category share their worked examples."))
    if batch.interference:
        notes.append(warning(f"{batch.interference}."))
    return notes


def _comparison(cmp: Comparison) -> list[Finding]:
    d = cmp.difference
    detect = d.low > 0 or d.high < 0
    notes = [
        info(f"{cmp.a} against {cmp.b} on the same {cmp.pairs.n} questions: {cmp.accuracy_a.points()} and "
             f"{cmp.accuracy_b.points()}; difference {d.points(signed=True)} (95%, Bonett-Price, paired)."),
        info(f"They disagree on {cmp.pairs.discordant} questions ({cmp.pairs.a_only} only {cmp.a} got right, "
             f"{cmp.pairs.b_only} only {cmp.b}); McNemar's exact test p = {cmp.test.pvalue:.3g}. "
             + ("The difference is detectable at this size." if detect else
                "No detectable difference at this size: that is not evidence the two are equal.")),
        info(needed_text(cmp)[0].upper() + needed_text(cmp)[1:] + "."),
    ]
    if cmp.speed is not None:
        notes += _speed(cmp.speed, cmp.a, cmp.b)
    if cmp.b_traps.tripped:
        b = cmp.b_traps
        notes.append(warning(f"the other run's raw answers are suspect too: {b.suspect} of {b.n} are cut or lack the "
                             "answer line (" + ", ".join(f"{k}: {v}" for k, v in b.counts.items() if v) + ")."))
    if cmp.settings_differ:
        notes.append(info("The runs differ in: " + "; ".join(f"{k} ({v['a']!r} here, {v['b']!r} there)"
                                                            for k, v in cmp.settings_differ.items()) + "."))
    return notes


def _speed(sp: BatchSpeed, a: str, b: str) -> list[Finding]:
    """The two batches' tok/s and their ratio, each from its own run's figures, with the volumes beside them."""
    def side(tps, tokens, asked, conc) -> str:
        rate = "n/a" if tps is None else f"{tps:.1f}"
        volume = "unknown" if tokens is None else str(tokens)
        return f"{rate} tok/s ({volume} tokens generated by {asked} requests at concurrency {conc})"

    here = side(sp.a_tokens_per_s, sp.a_tokens, sp.a_asked, sp.a_concurrency)
    there = side(sp.b_tokens_per_s, sp.b_tokens, sp.b_asked, sp.b_concurrency)
    if sp.ratio is None:
        return [warning(f"The batch tok/s ratio cannot be computed: {a} {here}, {b} {there}; a figure that could "
                        "not be read is unknown, not zero.")]
    notes = [info(f"Batch throughput, from each run's own figures: {a} {here}, {b} {there}; a batch tok/s ratio of "
                  f"{sp.ratio:.2f}x. The two batches generated different volumes, and batched throughput is not "
                  "single-stream speed: measure decode speed with the decode notebook before reading this ratio as "
                  "one between the models.")]
    if sp.a_concurrency != sp.b_concurrency:
        notes.append(warning(f"The runs asked at different concurrency ({sp.a_concurrency} here, {sp.b_concurrency} "
                             "there): their batch ratio mixes the models with the load."))
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
