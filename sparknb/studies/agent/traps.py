"""The agent study's findings: what its sessions cost, and every known trap named with its evidence and its fix.

- Steps served from a cache this run did not fill: sent before any of its requests was answered, yet found in
  the server's cache (another run, a warm-up, a resumed run's first half before them): not a cold start.
- The cache lost between steps: a step that the server served less than half of the prompt the session had
  already sent from its cache; where it broke is the server's own re-rendering of the two prompts (the first
  differing token: before the end of the earlier prompt, the template rewrote an earlier turn; none, the server
  did not keep an unchanged prefix: its prompt cache is off, its slots too few, or the entry was evicted).
- A tool call cut at max_tokens; a request that failed (a conversation holding a call that did not decode is
  refused); calls written into the content by a server that parses none; a backend's error that the model never
  saw (the turn ended on it, by the step cap).
Then what the live sessions achieved: their BFCL grades (grades) and their steps' call problems (problems).
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd

from ...runs.report import Finding, info, warning
from . import grades, problems
from .capacity import level_findings
from .figures import first_level, session_table, step_table
from .problems import CALL_IN_TEXT

UNTIMED_MS = 5.0  # a median gap under this is HTTP and the client's own (its decode agrees with the server's to 0.2%)
WARM = 0.1  # a share of the prompt from before the run that counts (a template's opening shared is a few tokens)
OPENING_S = 0.005  # sent this long before the run's first answer came back: `started_at` is kept to the millisecond
SPEED = "speed"  # a cache lost doubts the speed rows (they name no key), never the score (grades: batch's SCORES)



def findings(records: list[dict], engine_fix: str = "") -> list[Finding]:
    """The run's findings; a sweep's sessions read at its lowest level, then what its levels say (capacity)."""
    table, per_session, levels = step_table(records), session_table(records), level_findings(records)
    records = first_level(records)
    if not len(table):
        return [warning("No step was answered: there is nothing to measure.")] + levels
    out = [summary(table, per_session)] + blocks(records) + counters(records) + warm(records) + busy(records)
    out += cache_lost(table, [r for r in records if r.get("kind") == "cache_check"])
    out += untimed(table, records) + cut(records) + failed(records) + in_content(records, engine_fix)
    out += unseen(records)
    out += grades.findings(records) + problems.findings(records)
    return out + levels


def summary(table: pd.DataFrame, per_session: pd.DataFrame) -> Finding:
    later = table[(table["turn"] > 0) | (table["step"] > 0)]
    share = later["cached_share"].dropna()
    said = f", {100 * share.median():.0f}% of the prompt from the cache at steps 2+ (median)" if len(share) else ""
    wait = per_session["wait_s"].median()
    first = table[(table["turn"] == 0) & (table["step"] == 0)]["ttft_ms"].median()
    return info(f"{len(per_session)} sessions, {len(table)} steps: the agent waited {wait:.2f} s on the model per "
                f"session (median){said}; TTFT {first:.0f} ms at a session's first step, "
                f"{later['ttft_ms'].median():.0f} ms at steps 2+ (median).")


def blocks(records: list[dict]) -> list[Finding]:
    """How the prompt the cache should have kept is counted: in the server's blocks (none on llama-server), or
    unknown where the server does not say them."""
    drawn = next((r for r in records if r.get("kind") == "drawn"), {})
    block, said = drawn.get("cache_block"), drawn.get("cache_block_said") or "the run did not record them"
    if block == 1:
        return []
    if block is None:
        return [info(f"THE PREFIX CACHE'S BLOCKS ARE UNKNOWN ({said}): of a prompt sent before, a server may serve "
                     "again only whole blocks, so the tokens it should have served (should_cache) and the prefill "
                     "they would have saved are unknown, not estimated.")]
    return [info(f"The server's prefix cache keeps whole blocks of {block} tokens ({said}): of a prompt sent "
                 f"before, should_cache counts its whole blocks only (up to {block - 1} tokens fewer than it sent).")]


def counters(records: list[dict]) -> list[Finding]:
    """What the server's counters over the sessions say (measure.counted): another client's requests, or its two
    counts of the cache disagreeing; where they cannot tell, what is unchecked."""
    c = next((r for r in records if r.get("kind") == "counters"), None)
    if c is None:
        return []
    if c["interference"]:
        return [warning(f"ANOTHER CLIENT USED THE SERVER during the sessions: {c['interference']}. Its requests share "
                        "the server with these steps and may be in their times. Fix: a server of the run's own.",
                        (SPEED,))]
    hits, cached = c.get("prefix_cache_hits"), c.get("cached_tokens")
    if hits is not None and cached is not None and hits != cached:
        return [warning(f"THE SERVER'S TWO CACHE COUNTS DISAGREE: its prefix-cache hits counter moved by {hits:g} "
                        f"tokens over the {c['steps']} steps, its answers counted {cached} cached prompt tokens.",
                        (SPEED,))]
    said = [u for u in c.get("unchecked") or [] if u == "whether another client used the server"]
    return [info(f"Its counters cannot tell {said[0]} during the sessions.")] if said else []


def warm(records: list[dict]) -> list[Finding]:
    """Steps sent before any request of this run was answered (OPENING_S apart), yet served from the server's cache:
    nothing of this run could have filled it. Seen on an H100: a bench replayed at 4 in flight to the server that had
    just served the same replay at 1; the first steps' TTFT fell from 265 to 72 ms (a 1.7B) and from 411 to 48 ms (a
    4B), and the comparison called the 4B faster at a session's first step (0.67x)."""
    sent = [r for r in records if r.get("started_at") and r.get("total_s") is not None and "resumed_from" not in r]
    if not sent:
        return []
    back = min(_at(r) + r["total_s"] for r in sent) - OPENING_S
    hits = [r for r in sent if r.get("kind") == "step" and _at(r) < back and r.get("prompt_tokens")
            and (r.get("cached_tokens") or 0) >= WARM * r["prompt_tokens"]]
    if not hits:
        return []
    r = hits[0]
    return [warning(f"WARM FROM BEFORE THIS RUN: {len(hits)} step(s) sent before any request of this run was "
                    f"answered found their prompt in the server's cache, e.g. session {r['session']} turn "
                    f"{r['turn'] + 1} step {r['step'] + 1}: {r['cached_tokens']} of its {r['prompt_tokens']} prompt "
                    "tokens. Another run, a warm-up or a resumed run's first half filled it: the first steps' TTFT is "
                    "not a cold start's. Fix: restart the server (or give each run a fresh one) before runs whose "
                    "TTFT you compare.", (SPEED,))]


def busy(records: list[dict]) -> list[Finding]:
    """Steps whose answer had begun to come while the client still wrote the step before (wire.meanwhile): their
    first stamps may be late by up to that long. On an H200 a chat step's answer began 20 to 47 ms after its sending
    (the server renders and tokenizes first), and the writing took 0.6 ms."""
    hits = [r for r in records if r.get("kind") == "step" and r.get("busy_s")]
    if not hits:
        return []
    worst = max(r["busy_s"] for r in hits)
    return [warning(f"ANSWERED WHILE THE CLIENT WAS BUSY: {len(hits)} step(s) had begun to answer before the client "
                    f"had written the step before them, up to {1000 * worst:.2f} ms after the sending: their TTFT may "
                    "be late by up to that, so the speed rows carry it. A server that begins to answer that soon is "
                    "measured best by TTFT in the load or decode study, whose requests write nothing while out.",
                    (SPEED,))]


def _at(r: dict) -> float:
    return datetime.fromisoformat(r["started_at"]).timestamp()


def cache_lost(table: pd.DataFrame, checks: list[dict]) -> list[Finding]:
    out = []
    for c in checks:
        where = f"session {c['session']} turn {c['turn'] + 1} step {c['step'] + 1}"
        out.append(warning(f"CACHE LOST at {where}: the server served {c['cached']} prompt tokens from its cache of "
                           f"the {c['prompt_before']} this session had sent before (by its own per-request count). "
                           f"{_cause(c)}", (SPEED,)))
    return out


def _cause(c: dict) -> str:
    at = c.get("first_difference")
    if at is None and c.get("why"):
        return f"Where it broke cannot be told: {c['why']}."
    if at is not None and at < c["prompt_before"] - 1:
        return (f"The chat template rewrote an earlier turn: the re-rendered prompt first differs at token {at} "
                f"(before: {c.get('text_before')!r}; now: {c.get('text_after')!r}). Fix: a template that renders "
                "earlier turns as they were (one that drops earlier reasoning or reformats calls changes the prefix).")
    return ("The prompt re-rendered is unchanged up to the end of the earlier one, so the server did not keep it: its "
            "prompt cache is off (llama-server --no-cache-prompt, or cache_prompt false), too few slots for the "
            "sessions in flight (--parallel) or an eviction under load, or a hybrid model's recurrent state that its "
            "engine cannot roll back. Fix: keep the prompt cache on, with a slot per session in flight.")


def untimed(table: pd.DataFrame, records: list[dict]) -> list[Finding]:
    """The time before each step's first token that the server's own prompt time leaves out, where sessions ran one
    at a time (in flight, a queue would be in it too). Measured on an H100: llama-server replaying agent prompts of
    6,783 to 11,133 tokens took 18 to 29 ms a step beyond its own prompt time, growing with the whole prompt (2.3-2.6
    us a token, r 0.74-0.86) and not with the part it had to prefill (r about 0), while the client's decode time
    agreed with the server's to 0.2%. Sent the same steps three ways (bench/agent_ttft_control.py, 26 steps): as chat
    with the tools 40.1 ms (median) beyond, as the rendered text 8.0 ms, as the server's own token ids 2.9 ms: the
    template with the tools is most of it, tokenizing 5 ms, receiving the prompt the rest."""
    if any(r.get("in_flight") not in (None, 1) for r in records if r.get("kind") == "step"):
        return []
    known = table.dropna(subset=["ttft_ms", "prefill_ms", "prompt_tokens"])
    gap = (known["ttft_ms"] - known["prefill_ms"]).astype(float)
    if len(gap) < 3 or gap.median() < UNTIMED_MS:
        return []
    return [info(f"TIME BEFORE THE PROMPT THAT THE SERVER DOES NOT COUNT: each step's first token came "
                 f"{gap.median():.1f} ms (median; {gap.min():.1f} to {gap.max():.1f}) after the server's own prompt "
                 f"time{_grows(known, gap)}. An agent waits for it at every step: the TTFT rows count it, the server's "
                 "prefill time does not.")]


def _grows(known: pd.DataFrame, gap: pd.Series) -> str:
    """What the gap grows with: the whole prompt (the server's work on the conversation before it prefills), or not."""
    whole = known["prompt_tokens"].astype(float)
    fresh = whole - known["cached_tokens"].astype(float).fillna(0)
    if whole.nunique() < 5 or not gap.corr(whole) >= 0.5:
        return ""
    slope = 1000 * np.polyfit(whole, gap, 1)[0]
    return (f"; it grows with the whole prompt ({slope:.1f} us a token, r {gap.corr(whole):.2f}), not with the part the "
            f"cache did not hold (r {gap.corr(fresh):.2f}): the server's work on the whole conversation before each "
            "request (rendering it through the chat template, tokenizing it, matching it to a slot), which its prompt "
            "time leaves out")


def cut(records: list[dict]) -> list[Finding]:
    """Steps stopped at max_tokens with a call begun; the example one whose call the server had begun to stream, where
    there is one (on the real model, 4 of 5 such steps were prose holding a JSON example)."""
    hits = [r for r in records if r.get("kind") == "step" and r.get("finish_reason") == "length"
            and (r.get("tool_calls") or CALL_IN_TEXT.search(r.get("text") or ""))]
    if not hits:
        return []
    r = next((r for r in hits if r.get("tool_calls")), hits[0])
    return [warning(f"TOOL CALL CUT AT max_tokens: {len(hits)} step(s) stopped at max_tokens "
                    f"({r.get('completion_tokens')} tokens) in the middle of a call, e.g. session {r['session']} turn "
                    f"{r['turn'] + 1} step {r['step'] + 1}: the call does not parse, and the turn ends on it. Fix: "
                    "raise max_tokens.")]


def failed(records: list[dict]) -> list[Finding]:
    """Requests that failed, each ending its turn; where the session had sent a call that did not decode, the
    server could not render the conversation (llama-server: "Failed to parse tool call arguments")."""
    hits = [r for r in records if r.get("kind") == "step" and "error" in r]
    if not hits:
        return []
    r, undecoded = hits[0], {t["session"] for t in records if t.get("kind") == "tools" and t.get("parse_error")}
    why = (" That session's conversation held the model's own call that did not decode (cut at max_tokens, or "
           "garbled), which the server cannot render; BFCL's own loop sends it back too, and fails there. Fix: raise "
           "max_tokens." if r["session"] in undecoded else "")
    return [warning(f"REQUESTS FAILED: {len(hits)} request(s), e.g. session {r['session']} turn {r['turn'] + 1} step "
                    f"{r['step'] + 1}: {str(r['error'])[:200]}. Each ended its turn, graded as a turn without "
                    f"calls.{why}")]


def in_content(records: list[dict], engine_fix: str) -> list[Finding]:
    native = {r["session"] for r in records if r.get("kind") == "session" and r.get("mode") == "native"}
    hits = [r for r in records if r.get("kind") == "step" and r.get("session") in native and not r.get("tool_calls")
            and r.get("finish_reason") != "length" and CALL_IN_TEXT.search(r.get("text") or "")]
    if not hits:
        return []
    return [warning(f"CALLS WRITTEN INTO THE CONTENT: {len(hits)} answer(s) hold a call in their text but no "
                    f"tool_calls, e.g. {(hits[0].get('text') or '')[:80]!r}: the server parsed no tool call, so the "
                    f"agent runs none. Fix: {engine_fix or 'the server option that parses tool calls'} "
                    "(llama-server --jinja; vLLM --enable-auto-tool-choice --tool-call-parser NAME), or "
                    "mode='prompt'.")]


def unseen(records: list[dict]) -> list[Finding]:
    """A backend error in the last step of a turn the step cap ended: the model never read it."""
    capped = {(r["session"], r["turn"], r["steps"] - 1) for r in records if r.get("kind") == "turn"
              and r.get("stopped") == "step cap"}
    hits = [r for r in records if r.get("kind") == "tools" and (r["session"], r["turn"], r["step"]) in capped
            and any(str(x).startswith("Error during execution") for x in r["results"])]
    if not hits:
        return []
    r = hits[0]
    error = next(x for x in r["results"] if str(x).startswith("Error during execution"))
    return [warning(f"A BACKEND ERROR THE MODEL NEVER SAW: in {len(hits)} turn(s) the last call failed "
                    f"({error[:100]!r}, session {r['session']} turn {r['turn'] + 1}) and the step cap ended the turn "
                    "before the model could read it. Fix: raise max_steps.")]
