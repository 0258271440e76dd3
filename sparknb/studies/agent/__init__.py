"""The agent study: what an agent's user waits for, step by step, with the server's own cache truth.

BFCL v4's multi-turn sessions run against any OpenAI-compatible server (native `tools`, or BFCL's prompt mode),
each call executed on the session's own backends (studies.batch.bfcl), every step timed (TTFT, time to the first
tool-call and content token, prompt tokens and the ones the server served from its cache by its own count, its
prefill time, decode speed), every session's wait split into prefill of new tokens, prefill the cache should have
saved, and the rest; the traps named (traps). A sealed live run replays to other models for speed (`replay_from`).
Several sessions in flight (`in_flight: [1, 2, 4, 8]`) and the box's capacity within a stated SLO, found by a
search that stops when decided (capacity; measure.sweep). The records keep each turn's calls as executed, their
results and the backends' state: a live run's sessions are graded from them as BFCL grades them (grades), and its
steps' call problems named (problems); a replay is not graded. Live sessions asked sequentially against another
run stop once the paired sequence of their grades decides, and resume where they stopped (work).
"""

from ...verdicts.verdict import Row, Runs
from ..registry import Contract
from .capacity import capacity_row, level_table, plot_levels
from .figures import headline_rows as step_rows
from .figures import session_table, step_table
from .grades import grade_table
from .grades import summary as grade_summary
from .measure import measure
from .plan import NOTEBOOK, Plan
from .traps import findings
from .work import Work, held, prepare
from .work import findings as sequence_findings

__all__ = ["STUDY", "Plan", "Work", "findings", "grade_summary", "grade_table", "headline_rows", "held",
           "level_table", "measure", "plot_levels", "prepare", "sequence_findings", "session_table", "step_table"]


def headline_rows(runs: Runs) -> list[Row]:
    """The comparison's rows: the agent's wait per session, TTFT at step 1 and 2+, the cached share, the live
    sessions' BFCL score; and, where the runs searched it, the box's capacity within the SLO."""
    return step_rows(runs) + capacity_row(runs)

STUDY = Contract(NOTEBOOK, Plan, measure, step_table, findings, headline_rows, title="Agent sessions", order=45)
