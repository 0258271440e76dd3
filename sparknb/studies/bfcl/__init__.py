"""BFCL v4's single-turn categories (simple_python, multiple, parallel, parallel_multiple, irrelevance): tool calls
asked natively (`tools`) or in BFCL's prompt mode, graded exactly as the leaderboard grades them, beside a robust
rule set and the harness effect between the two.

Ways this benchmark lies, each made impossible to miss here: a server without a tool-call parser (or a chat
template without tools) leaves calls in the text and a good model scores near zero natively (traps; the format's
effect against a prompt-mode run); a grade that hangs on BFCL's strictness rather than on the call (rule_sets);
and a score that hides what the calls got wrong (findings: each problem counted and named with an example).
"""

from ..registry import Contract
from .findings import compare, findings, problem_findings, problems, summary, traps
from .headline import headline_rows
from .measure import ask, decoded
from .plan import CATEGORIES, FORMATS, NOTEBOOK, Item, Plan, Work, draw, prepare
from .scores import Cost, cost, frame, graded, harness, right, table

STUDY = Contract(NOTEBOOK, Plan, ask, table, findings, headline_rows, title="BFCL", order=55)

__all__ = [
    "CATEGORIES", "FORMATS", "NOTEBOOK", "STUDY", "Cost", "Item", "Plan", "Work", "ask", "compare", "cost", "decoded",
    "draw", "findings", "frame", "graded", "harness", "headline_rows", "prepare", "problem_findings", "problems",
    "right", "summary", "table", "traps",
]
