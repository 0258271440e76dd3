"""The agent study's live sessions graded as BFCL grades them, from the run's records alone (each turn's calls as
executed: batch.bfcl_turns, checked session by session against bfcl-eval's own multi_turn_checker), and what a
solved session cost.

- Rule set `bfcl` only. Two of the three single-turn `robust` corrections (studies.bfcl.rule_sets) cannot move a
  multi-turn verdict: BFCL's multi-turn classes offer 111 functions and no name holds a dot (no spelling to
  correct), and the response check already matches results in any order (no greedy matching). The third, JSON
  numbers, could: 5.0 and 5 compare equal in the state check, but a backend that writes the number into its result
  text fails the response check (it compares texts). It is not applied here (no robust set is built for sessions:
  a gap, said in the findings), so a session is graded exactly as the leaderboard grades it.
- A replay's answers are fixed-length filler, not the model's: a replay is never graded, and says so.
- A session of one's own (sessions_file) is graded where its line carries BFCL's `ground_truth` (one list of call
  strings per turn), else not graded, and said so.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import pandas as pd
from pydantic import Field

from ...runs.report import Finding, info
from ...runs.run import PastRun
from ...verdicts import stats
from ...verdicts.verdict import Row, Runs
from ..batch import bfcl, bfcl_turns
from ..batch.cost import Cost, cost
from ..batch.cost import sentence as cost_sentence
from ..batch.headline import SCORES, graded_rows
from .figures import session_table
from .plan import Plan

SOURCE = "BFCL v4 multi_turn_base"  # the `drawn` record's source of sessions BFCL has answers for
REPLAYED = "a replay: its answers are fixed-length filler, not the model's, so it is not graded"
NO_TRUTH = "a session of one's own without a ground_truth: nothing to grade it by"
HALF_WIDTH = 0.10  # +/- 10 points: sessions are few and slow
COLUMNS = ["session", "graded", "bfcl", "error_type", "failed_turn", "why", "wait_s", "output_tokens"]


class Graded(Plan):
    """The agent's plan as its graded rows read it (a session is the unit, plan.Plan): two live runs in different
    modes compare (the format's effect, as BFCL's format does); a different step cap or answer length does not."""

    mode: Literal["native", "prompt"] = Field("native", description="native or prompt")


def replayed(records: list[dict]) -> bool:
    return any(r.get("kind") == "session" and r.get("replayed") for r in records)


def truths(records: list[dict]) -> dict[str, tuple[dict, list]]:
    """Each session of the run that has a ground truth: (its entry, its ground truth), by id. A session of one's own
    carries its own in its record; one drawn from BFCL's multi_turn_base has BFCL's."""
    if replayed(records):
        return {}
    opened = [r for r in records if r.get("kind") == "session"]
    drawn = next((r for r in records if r.get("kind") == "drawn"), {})
    own = {r["session"]: ({"id": r["session"], "initial_config": r["initial_config"],
                           "involved_classes": r["involved_classes"]}, r["ground_truth"])
           for r in opened if r.get("ground_truth") is not None}
    if not str(drawn.get("source", "")).startswith(SOURCE):
        return own
    entries, answers = {e["id"]: e for e in bfcl.entries("multi_turn_base")}, bfcl.answers("multi_turn_base")
    return {r["session"]: (entries[r["session"]], answers[r["session"]]["ground_truth"]) for r in opened
            if r["session"] in entries and r["session"] in answers} | own


def grade_table(records: list[dict]) -> pd.DataFrame:
    """One row a session: graded or why not, BFCL's verdict and its reason, the turn it failed at, its cost."""
    known, waits = truths(records), session_table(records)
    waits = waits.set_index("session") if len(waits) else pd.DataFrame(columns=["wait_s", "output_tokens"])
    rows = []
    for s in [r["session"] for r in records if r.get("kind") == "session"]:
        spent = {k: (waits.loc[s, k] if s in waits.index else None) for k in ("wait_s", "output_tokens")}
        rows.append({"session": s, **spent, **_verdict(s, known, records)})
    return pd.DataFrame(rows, columns=COLUMNS)


def _verdict(session: str, known: dict, records: list[dict]) -> dict:
    if session not in known:
        return {"graded": False, "bfcl": None, "error_type": None, "failed_turn": None,
                "why": REPLAYED if replayed(records) else NO_TRUTH}
    entry, truth = known[session]
    v = bfcl_turns.check(entry, truth, bfcl_turns.turns_of(records, session))
    return {"graded": True, "bfcl": v.valid, "error_type": v.error_type or "pass",
            "failed_turn": None if v.turn is None else v.turn + 1, "why": _why(v, truth)}


def _why(v: bfcl_turns.Checked, truth: list) -> str:
    if v.valid:
        return "passed BFCL's state and response checks at every turn"
    if v.turn is None:
        return f"ended after {v.detail.get('turns')} of {len(truth)} turns (BFCL: force-terminated)"
    return f"turn {v.turn + 1}: " + {
        "multi_turn:empty_turn_model_response": "no call where the ground truth has some",
        "multi_turn:instance_state_mismatch": f"the backends' state differs ({_short(v.detail)})",
        "multi_turn:execution_response_mismatch": f"results missing ({_short(v.detail.get('missing'))})",
    }.get(v.error_type, v.error_type)


def _short(value) -> str:
    text = str(value)
    return text if len(text) <= 160 else text[:157] + "..."


def passed(records: list[dict], session: str) -> bool | None:
    """One session of the run, as soon as it ended: passed under BFCL's rules or not; None where not graded."""
    return _verdict(session, truths(records), records)["bfcl"]


def right(run: PastRun) -> dict[str, bool]:
    """Each graded session of a run: passed under BFCL's rules or not, graded afresh from its records."""
    df = grade_table(run.records)
    return {s: bool(v) for s, v in zip(df["session"], df["bfcl"]) if v is not None}


def session_cost(df: pd.DataFrame) -> Cost:
    """Seconds waited on the model and tokens generated, all graded sessions' over the sessions solved."""
    done = df[df["graded"]].rename(columns={"bfcl": "correct"})
    return cost(done.astype({"correct": bool, "wait_s": float, "output_tokens": float}), "wait_s", "output_tokens")


def score(df: pd.DataFrame) -> stats.Interval | None:
    done = df[df["graded"]]
    return stats.accuracy(int(done["bfcl"].sum()), len(done)) if len(done) else None


def headline_rows(runs: Runs) -> list[Row]:
    """The BFCL multi-turn score per serving and the paired difference on the sessions both ran live (through
    batch.headline, as every graded study), and the seconds waited per session solved beside them."""
    everyone = runs.of("agent")
    mine = {s: r for s, r in everyone.items() if right(r)}
    if runs.base not in mine:
        return []
    rights = {s: right(r) for s, r in mine.items()}
    rows = graded_rows("agent", ("BFCL multi-turn score % (live sessions)", "BFCL multi-turn score"), rights, mine,
                       runs.base, Graded, HALF_WIDTH, interval=" (Wilson)")
    left = "; ".join(f"{s}: {REPLAYED if replayed(r.records) else NO_TRUTH}" for s, r in everyone.items()
                     if s not in mine)
    rows[0] = replace(rows[0], note="; ".join(x for x in (rows[0].note, left) if x))
    costs = {s: session_cost(grade_table(r.records)).seconds for s, r in mine.items()}
    said = "; ".join(f"{s} {c.estimate:.2f} s [{c.low:.2f}, {c.high:.2f}]" if c else f"{s} unknown (none solved)"
                     for s, c in costs.items())
    modes = ", ".join(f"{s} {r.settings.get('mode')}" for s, r in mine.items())
    return rows + [Row("agent", "seconds waited per session solved", {s: c and c.estimate for s, c in costs.items()},
                       {s: len(v) for s, v in rights.items()}, role="context", better="lower",
                       note=f"modes: {modes}; all sessions' wait over the sessions solved (95% bootstrap): {said}")]


def findings(records: list[dict]) -> list[Finding]:
    """The score under BFCL's rules, each reason a session failed counted with an example, the cost of a solved
    session; or why the run is not graded."""
    df = grade_table(records)
    if not len(df):
        return []
    if not df["graded"].any():
        return [info(f"Not graded: {df['why'].iloc[0]}.")]
    done, ci = df[df["graded"]], score(df)
    notes = [Finding("info", f"BFCL multi-turn score {ci.points()} over {len(done)} live sessions (95% Wilson), "
                     "graded from the records exactly as BFCL's multi_turn_checker grades them (each turn's backend "
                     "state and call results against the ground truth's); rule set bfcl only: of the single-turn robust "
                     "corrections only JSON numbers (5.0 for 5) could move a multi-turn verdict, where a backend "
                     "writes the number into its result, and it is not applied.", (SCORES,))]
    for error, rows in done[~done["bfcl"].astype(bool)].groupby("error_type", sort=False):
        notes.append(info(f"{len(rows)} of {len(done)} sessions failed with {error}; e.g. {rows['session'].iloc[0]}, "
                          f"{rows['why'].iloc[0]}."))
    if len(done) < len(df):
        notes.append(info(f"{len(df) - len(done)} session(s) not graded: {df[~df['graded']]['why'].iloc[0]}."))
    return notes + [info(cost_sentence(session_cost(df), "session") + " The seconds are those the agent waited on "
                         "the model (tool time apart).")]


def summary(records: list[dict]) -> dict:
    """What the run keeps of its grades (strict JSON: an unknown figure is null)."""
    df = grade_table(records)
    ci = score(df) if len(df) else None
    sessions = [{k: (None if pd.isna(v) else v) for k, v in row.items() if k in ("session", "bfcl", "error_type",
                                                                                 "failed_turn", "why")}
                for row in df.to_dict(orient="records")]
    from .problems import counts

    return {"rule_set": "bfcl", "graded": int(df["graded"].sum()) if len(df) else 0, "call_problems": counts(records),
            "passed": int(df[df["graded"]]["bfcl"].sum()) if ci else 0, "score": ci and ci.as_dict(),
            "cost": session_cost(df).as_dict() if ci else None, "sessions": sessions}
