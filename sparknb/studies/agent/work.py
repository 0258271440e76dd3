"""The agent study's work decided before any request, through the graded batch's machinery (batch.plan.Prepared,
batch.sequence), as MMLU-Pro's and BFCL's: the sessions drawn, those reused from `resume_from`, `compare_with`
checked, and a sequential run's live sequence against it, every refusal before the run opens.

A session is the item: it spans many records (its opening, steps, tools, turns), so its verdict is one record of
its own, `graded` (`graded_session`, `bfcl`), written as each session of a sequential run ends with the sequence's
state after it, and for each session reused. A resumed run takes the whole records of the sessions the earlier run
finished (every turn recorded), timings included, and asks the rest; a session cut halfway is asked again.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import DataError
from ...runs.report import Finding
from ...runs.run import PastRun
from ...verdicts import sequential
from ..batch.findings import coverage
from ..batch.plan import Prepared
from ..batch.sequence import ordered
from . import grades
from .plan import Plan, sessions

KINDS = ("session", "step", "tools", "turn", "cache_check")  # the records of one session


@dataclass
class Work(Prepared[Plan, str]):
    """The sessions to run (`dataset`: where they came from), the grades reused, the live sequence."""

    entries: list[dict]

    @property
    def ids(self) -> list[str]:
        return [e["id"] for e in self.entries]

    def in_order(self) -> list[dict]:
        """The sessions in the order asked: as drawn; a sequential run's seeded (or compare_with's), up to budget."""
        return ordered(self.plan, self.entries, lambda e: e["id"], self.live)

    def todo(self) -> list[dict]:
        done = {r[Plan.key] for r in self.reused}
        return [e for e in self.in_order() if e["id"] not in done]

    def kept(self) -> list[dict]:
        """The reused sessions' own records, as the earlier run took them."""
        done = {r[Plan.key] for r in self.reused}
        past = self.plan.resumed.records if done else []
        return [r for r in past if r.get("kind") in KINDS and r.get("session") in done]

    def settings(self) -> dict:
        return self.plan.settings() | {"model": self.model} | ({Plan.drawn: self.ids} if self.entries else {})


def prepare(plan: Plan, model: str) -> Work:
    """The sessions, matched against resume_from and compare_with: every refusal before a request. A replay's
    sessions are the replayed run's (measure.replays)."""
    if plan.replayed:
        return Work(plan, model, f"replay of {plan.replayed.id}", [])
    entries, source = sessions(plan)
    ungraded = [e["id"] for e in entries if plan.sessions_file and "ground_truth" not in e]
    if plan.sequential and ungraded:
        raise DataError(f"A sequential run decides on each session's grade, and {len(ungraded)} session(s) of "
                        f"{source} carry no ground_truth (e.g. {ungraded[0]}): add BFCL's ground_truth to each line, "
                        "or run them with sequential=false.")
    work = Work(plan, model, source, entries)
    return work.matched(_reusable, _comparable, grades.right, Plan.key, "bfcl")


def finished(records: list[dict]) -> set[str]:
    """The sessions of a run that ended: every turn recorded."""
    opened = {r["session"]: r["turns"] for r in records if r.get("kind") == "session"}
    turns: dict[str, int] = {}
    for r in records:
        if r.get("kind") == "turn":
            turns[r["session"]] = turns.get(r["session"], 0) + 1
    return {s for s, n in opened.items() if turns.get(s) == n}


def _reusable(past: PastRun, work: Work) -> list[dict]:
    """One `graded` record a session the earlier run finished, graded afresh from its records."""
    work.plan.check_resume(past, work.settings())
    if grades.replayed(past.records):
        raise DataError(f"resume_from {past.id} is a replay: only a live run's sessions can be reused.")
    done, verdicts = finished(past.records), grades.right(past)
    return [{"kind": "graded", Plan.key: s, "bfcl": verdicts.get(s)} for s in work.ids if s in done]


def _comparable(other: PastRun, work: Work) -> None:
    """compare_with drew the same sessions (its `drawn` record), and, to be asked against sequentially, graded some."""
    drawn = next((r for r in other.records if r.get("kind") == "drawn"), {})
    theirs, ours = set(map(str, drawn.get("sessions") or ())), set(work.ids)
    if work.plan.sequential and theirs != ours:
        raise DataError(f"compare_with {other.id} ran other sessions: {len(theirs - ours)} of its {len(theirs)} are "
                        f"not in this draw and {len(ours - theirs)} of these {len(ours)} are not in it. Draw as it did "
                        f"(sessions={other.settings.get('sessions')}, seed={other.settings.get('seed')}, "
                        f"session_ids, sessions_file) to ask its sessions sequentially.")
    if work.plan.sequential and not grades.right(other):
        raise DataError(f"compare_with {other.id} has no graded session (a replay, or sessions without a "
                        "ground_truth): a sequential run pairs graded sessions. Compare with a live graded run.")


def judged(study, work: Work, session: str) -> None:
    """A session of a sequential run, as it ends: its grade fed to the sequence, and the sequence's state after it
    recorded beside the grade."""
    verdict = grades.passed(study.records(), session)
    record = {"kind": "graded", Plan.key: session, "bfcl": verdict}
    if work.live is not None:
        work.live.add(session, bool(verdict))
        record["sequence"] = now = state(work.live.sequence)
        print(f"[{now['sessions']} of {len(work.live.ids)}] {session} {'passed' if verdict else 'failed'}; B minus A "
              f"{100 * now['estimate']:+.0f} points [{100 * now['low']:+.0f}, {100 * now['high']:+.0f}]: "
              f"{now['reason']}")
    study.run.record(record)


def state(seq: sequential.PairedSequence) -> dict:
    """The sequence after its last pair: the sessions fed, its interval and estimate, its outcome and why."""
    n, low, high, estimate = seq.path[-1] if seq.path else (0, -1.0, 1.0, 0.0)
    return {"sessions": n, "low": low, "high": high, "estimate": estimate, "outcome": seq.outcome,
            "reason": seq.reason}


def findings(work: Work, records: list[dict]) -> list[Finding]:
    """Where a sequential run stopped and why (the rest not asked, on purpose), and the sessions reused; a session
    not graded for want of a ground truth is said by grades.findings, so the count here is of sessions ended."""
    if not (work.plan.sequential or work.reused):
        return []
    return coverage(len(work.in_order()), len(finished(records)), work, "sessions", None)


def held(work: Work, records: list[dict]) -> dict | None:
    """The sequence replayed from the run's own graded sessions in compare_with's order, with what a session not
    asked saves (this run's mean wait per session): what the notebook shows and seals. None: not sequential
    against another run."""
    table = grades.grade_table(records)
    done = table[table["graded"]]
    pace = float(done["wait_s"].mean()) if len(done) and done["wait_s"].notna().all() else None
    return sequential.of_run(work.live, dict(zip(done["session"], done["bfcl"].astype(bool))), pace, Plan.unit)
