"""What the batch's figures and the paired comparison say, and every reason to doubt them, in words a study's
findings take whole."""

from __future__ import annotations

from ...runs.report import Finding, duration, info, warning
from .ask import Batch
from .compare import BatchSpeed, Paired, needed_text
from .headline import SCORES


def coverage(asked_for: int, graded: int, work, what: str = "questions", figures: str | None = "the speed figures"
             ) -> list[Finding]:
    """What the scores leave out (answers never graded, or never asked once a sequential run's sequence decided)
    and what they took from an earlier run (`work.reused`); `figures`: those the reused answers are left out of
    (None: a study that copies their records whole, the agent's sessions with their steps' timings)."""
    live = getattr(work, "live", None)
    notes = [_stopped(live.sequence, asked_for - graded, type(work.plan).unit)] if live and live.decided else []
    if asked_for > graded and not notes:
        notes.append(warning(f"{asked_for - graded} of the {asked_for} {what} have no graded answer (stopped or "
                             "failed); the scores cover the graded ones only. Finish with resume_from."))
    if work.reused:
        counted = (f"only those count in {figures}" if figures else "the records of those reused are counted as "
                   "this run's, with the timings that run took")
        notes.append(info(f"{len(work.reused)} graded {'answer(s)' if figures else what} were reused from run "
                          f"{work.resumed.id}; only the others were asked, and {counted}."))
    return notes


def _stopped(sequence, left: int, unit: str) -> Finding:
    """A sequential run that stopped on its sequence: the rest unasked on purpose, a fact and not a doubt (a
    warning would caveat the very row the sequence decides)."""
    return info(f"The confidence sequence stopped after {sequence.n} {unit} ({sequence.reason})"
                + (f"; {left} were not asked, on purpose." if left > 0 else "."))


def batch_findings(b: Batch, aside: str = "", cached: str = "", unit: str = "question", template: bool = True
                   ) -> list[Finding]:
    """The batch's speed, its longest prompt, the client's share of the time, the prefix cache (`cached`: why
    prompts share a prefix) and anything else that used the server meanwhile. `unit`: what was asked (HumanEval
    asks problems); `template`: whether the prompts went through the chat template (not completions)."""
    speed = "n/a (the server gave no token counts)" if b.tokens_per_s is None else f"{b.tokens_per_s:.1f}"
    tokens = "an unknown number of" if b.completion_tokens is None else str(b.completion_tokens)
    notes = [info(f"{b.asked} requests at concurrency {b.concurrency} took {duration(b.wall_s)} and generated {tokens} "
                  f"tokens: {speed} tok/s for the batch{aside}. Batched throughput is not single-stream speed: it "
                  "depends on the concurrency and on how long the answers run.")]
    if b.longest_prompt_tokens is not None:
        notes.append(info(f"The longest prompt was {b.longest_prompt_tokens} tokens ({unit} "
                          f"{b.longest_prompt_question}), counted by the server's own tokenizer"
                          f"{' with the chat template' if template else ''}, before any {unit} was asked."))
    if b.client_cpu_share is not None:
        notes.append(info(f"The client used {100 * b.client_cpu_share:.1f}% of the wall time in CPU (all its "
                          "threads); the rest it spent waiting on the server."
                          + (f" {100 * b.outside_server_share:.1f}% of the request time it saw is not in the "
                             "server's own end-to-end time (network, queuing in the client, reading the stream)."
                             if b.outside_server_share is not None else "")))
    if b.prefix_cache_hit_rate:
        notes.append(info(f"{100 * b.prefix_cache_hit_rate:.0f}% of prompt tokens came from the prefix cache"
                          + (f": {cached}." if cached else ".")))
    if b.interference:
        notes.append(warning(f"{b.interference}."))
    return notes


def comparison_findings(c: Paired) -> list[Finding]:
    """The paired difference, the disagreements, the size a narrower interval would need, the speeds, the other
    run's own traps, and the settings that differ."""
    d, p = c.difference, c.pairs
    detect = d.low > 0 or d.high < 0
    needed = needed_text(c)
    notes = [
        info(f"{c.a} against {c.b} on the same {p.n} {c.UNIT}{c.FIRST}: {c.RATE}{c.rate_a.points()} and "
             f"{c.rate_b.points()}; difference {d.points(signed=True)} (95%, Bonett-Price, paired)."),
        info(f"They disagree on {p.discordant} {c.UNIT} ({p.a_only} only {c.a} {c.WON}, {p.b_only} only "
             f"{c.b}); McNemar's exact test p = {c.test.pvalue:.3g}. "
             + ("The difference is detectable at this size." if detect else
                "No detectable difference at this size: that is not evidence the two are equal.")),
        # a precision out of reach narrows nothing the interval does not already say: loud, but not the row's doubt
        Finding("warning" if c.beyond_data else "info", needed[0].upper() + needed[1:] + ".", ("precision wanted",)),
    ]
    if c.speed is not None:
        notes += speed_findings(c.speed, c.a, c.b)
    if c.b_traps.tripped:
        b = c.b_traps
        notes.append(Finding("warning", f"the other run's raw answers are suspect too: {b.suspect} of {b.n} are cut or "
                             f"{b.LACKS} (" + ", ".join(f"{k}: {v}" for k, v in b.counts.items() if v) + ").",
                             (SCORES,)))
    if c.settings_differ:
        notes.append(info("The runs differ in: " + "; ".join(f"{k} ({v['a']!r} here, {v['b']!r} there)"
                                                            for k, v in c.settings_differ.items()) + "."))
    return notes


def speed_findings(sp: BatchSpeed, a: str, b: str) -> list[Finding]:
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
