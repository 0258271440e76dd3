"""The agent study: what an agent's user waits for, step by step, with the server's own cache truth.

BFCL v4's multi-turn sessions run against any OpenAI-compatible server (native `tools`, or BFCL's prompt mode),
each call executed on the session's own backends (studies.batch.bfcl), every step timed (TTFT, time to the first
tool-call and content token, prompt tokens and the ones the server served from its cache by its own count, its
prefill time, decode speed), every session's wait split into prefill of new tokens, prefill the cache should have
saved, and the rest; the traps named (traps). A sealed live run replays to other models for speed (`replay_from`).
The records keep each turn's calls as executed, their results and the backends' state: a live run's sessions are
graded from them as BFCL grades them (grades), and its steps' call problems named (problems); a replay is not graded.
"""

from ..registry import Contract
from .figures import headline_rows, session_table, step_table
from .grades import grade_table
from .grades import summary as grade_summary
from .measure import measure
from .plan import NOTEBOOK, Plan
from .traps import findings

__all__ = ["STUDY", "Plan", "findings", "grade_summary", "grade_table", "headline_rows", "measure", "session_table",
           "step_table"]

STUDY = Contract(NOTEBOOK, Plan, measure, step_table, findings, headline_rows, title="Agent sessions", order=45)
