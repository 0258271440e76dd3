"""MMLU-Pro: the questions, an even draw, the reference 5-shot prompt, and grading that reads every raw answer.

Three ways this benchmark lies, each made impossible to miss here: an old copy of the data gives the
answer away (data), a stop string cuts a reasoning model's answer inside its thinking, and an
unparsed answer is scored as a random guess (grading). Requests run concurrently (the seed study ran
eight at a time), each recorded the moment it ends (measure).
"""

from .compare import BatchSpeed, Comparison, batch_speed, compare, comparison_markdown
from .data import FILES, LETTERS, Dataset, Question, download, draw, heading, load, load_suite
from .findings import findings, summary
from .headline import headline_rows
from .grading import CUT_BY_STOP, HIT_MAX_TOKENS, NO_ANSWER_LINE, Extraction, Grade, answered, extract, flag, frame
from .grading import grade
from .traps import Traps, examples_markdown, traps, verdict_markdown
from .measure import Batch, ask
from .plan import NOTEBOOK, Plan, Work, prepare, prompt_tokens
from ..registry import Contract
from .plots import plot
from .prompt import lent, messages, prompt
from .scores import Scores, scores, scores_markdown
from .tables import batch_table, table

STUDY = Contract(NOTEBOOK, Plan, ask, table, findings, headline_rows, title="MMLU-Pro", order=50, prompts=lent)

__all__ = [
    "STUDY",
    "headline_rows",
    "CUT_BY_STOP", "FILES", "HIT_MAX_TOKENS", "LETTERS", "NOTEBOOK", "NO_ANSWER_LINE",
    "Batch", "BatchSpeed", "Comparison", "Dataset", "Extraction", "Grade", "Plan", "Question", "Scores", "Traps",
    "Work", "answered", "ask", "batch_speed", "batch_table", "compare", "comparison_markdown",
    "download", "draw", "heading", "examples_markdown", "extract", "findings", "flag", "frame", "grade", "load", "load_suite",
    "messages", "plot", "prepare", "prompt", "prompt_tokens", "scores", "scores_markdown", "summary", "table",
    "traps", "verdict_markdown",
]
