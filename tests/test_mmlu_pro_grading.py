"""Grading: the reference extraction with the last match graded (and the first-versus-last count that
says when that choice matters), the flags on cut or answerless answers, and the traps verdict."""

import pytest

from sparknb.studies import mmlu_pro as m

QWEN_STYLE = """Okay, let me work through this.

**Question:** Which enzyme unwinds DNA at the replication fork?

Helicase breaks the hydrogen bonds; primase lays primers; ligase joins fragments. Option (B) is ligase, so not that.
So the answer is helicase, option C."""

CASES = [
    # (content, expected letter, rule, first match)
    ("Helicase unwinds the helix, so **the answer is (C)**.", "C", "answer is", "C"),
    ("At first the answer is (B). Wait, B is ligase. Rechecking: the answer is (D).", "D", "answer is", "B"),
    ("The answer is C because helicase...", "C", "answer is", "C"),
    ("Reasoning done.\n\n**Answer:** E", "E", "Answer:", "E"),
    ("Final answer: G", "G", "Answer:", "G"),
    ("Between (B) and (F) I pick F", "F", "last letter", "B"),
    ("Helicase unwinds the double helix at the fork.", None, None, None),
    ("", None, None, None),
]


@pytest.mark.parametrize("content,letter,rule,first", CASES)
def test_extraction_follows_the_reference_rules_and_takes_the_last_match(content, letter, rule, first):
    assert m.extract(content) == m.Extraction(letter, rule, first)


def test_a_question_heading_in_the_reasoning_does_not_confuse_the_grade():
    # The answer is read from content; the reasoning, with its **Question:** heading, is kept but not graded.
    g = m.grade("C", "Therefore **the answer is (C)**.", "stop")
    assert g == m.Grade("C", "answer is", True, None, "C")
    assert m.extract(QWEN_STYLE.replace("**", "")).letter == "C"


def test_cut_and_answerless_responses_are_flagged():
    assert m.grade("C", "", "stop", stop=["Question:"]).flag == m.CUT_BY_STOP  # the trap
    assert m.grade("C", "", "stop").flag == m.NO_ANSWER_LINE
    assert m.grade("C", "so it is C", "length").flag == m.HIT_MAX_TOKENS
    assert m.grade("C", "Answer: C", "stop").flag is None  # stated outright, in the other common form
    assert m.grade("C", "so (C), I guess", "stop").flag == m.NO_ANSWER_LINE  # only the last-letter fallback
    unparsed = m.grade("C", "no idea", "stop")
    assert unparsed.pred is None and unparsed.correct is False  # unparsed is wrong, never a guess


GOOD = {"answer": "A", "category": "art", "finish_reason": "stop", "text": "the answer is (A)", "reasoning": "r"}
CUT = {"answer": "A", "category": "art", "finish_reason": "stop", "text": "", "reasoning": "Okay.\n\n"}


def test_traps_trip_above_the_share_and_keep_three_raw_examples():
    records = [{**GOOD, "question_id": i} for i in range(16)] + [{**CUT, "question_id": 100 + i} for i in range(4)]
    t = m.traps(records, stop=["Question:"], share_limit=0.05)
    assert t.tripped and t.level == "warning" and t.counts[m.CUT_BY_STOP] == 4 and t.unparsed == 4
    assert len(t.examples) == 3
    assert t.headline().startswith("4 of 20 answers") and "SUSPECT" in t.headline() and "stop=[]" in t.headline()
    assert m.verdict_markdown(t).startswith("### ⚠ WARNING: 4 of 20 answers")
    assert not m.traps(records[:16] + records[16:17], share_limit=0.1).tripped  # 1 of 17 is within 10%
    assert "answer is (A)" not in m.examples_markdown(t) and "cut by a stop string" in m.examples_markdown(t)


def test_failed_and_unfinished_requests_are_not_answers():
    records = [{**GOOD, "question_id": 1}, {"question_id": 2, "category": "art", "error": "EndpointError: lost"},
               {**GOOD, "question_id": 3, "finish_reason": None}]
    assert list(m.answered(records)) == ["1"] and m.traps(records).n == 1 and len(m.frame(records)) == 1


def test_answers_whose_first_and_last_match_differ_are_counted_and_said():
    restated = {**GOOD, "text": "First thought: the answer is (B). Checking again, the answer is (A)."}
    wrong_late = {**GOOD, "text": "the answer is (A)... no, the answer is (C)."}
    records = [{**GOOD, "question_id": 1}, {**restated, "question_id": 2}, {**wrong_late, "question_id": 3}]
    t = m.traps(records)
    assert (t.first_last_differ, t.differ_right_last, t.differ_right_first) == (2, 1, 1)
    assert "In 2 answer(s) they differ: 1 of those are right as graded here, 1 would be right graded by the " \
           "first match" in t.headline()
    assert "LAST match" in m.verdict_markdown(t) and t.as_dict()["first_last_differ"] == 2
    assert list(m.frame(records)["first"]) == ["A", "B", "A"] and list(m.frame(records)["pred"]) == ["A", "A", "C"]
    assert "choice changes nothing" in m.traps(records[:1]).headline()
