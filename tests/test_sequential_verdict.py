"""A sequentially decided comparison in the verdict, on crafted sealed runs: B asked A's questions in A's recorded
order and stopped when its confidence sequence decided (B better, B worse, equivalent within the margin, or
cannot tell at the budget), and a run interrupted halfway that resumes to the same state."""

import json
import zlib

import numpy as np
import pytest

from sparknb.runs.report import Finding
from sparknb.runs.run import Run, verify
from sparknb.studies.batch.headline import SCORES
from sparknb.studies import compare
from sparknb.verdicts import sequential
from sparknb.verdicts.sequential import order
from sparknb.verdicts.verdict import decide
from support import outputs_text, run_notebook
from test_compare import fingerprint, headline_of

QUESTIONS = 400


def mmlu_run(tmp_path, model: str, right, order_seed=0, sequential=None, asked=QUESTIONS, failed=False,
             words="Reasoning first.", findings=()) -> Run:
    """An mmlu_pro run as the notebook seals it, its questions asked in a seeded order, the first `asked` of it, each
    answer `words` and its answer line, the run finding `findings` about itself."""
    settings = {"stop": [], "dataset_name": "MMLU-Pro"} | ({"sequential": sequential} if sequential else {})
    ids = [int(q) for q in order([str(q) for q in range(QUESTIONS)], order_seed)]  # seed 0: A's order
    records = [{"question_id": str(q), "category": "math", "answer": "A", "finish_reason": "stop", "order": position,
                "text": f"{words} The answer is ({'A' if right(q) else 'B'})."}
               for position, q in enumerate(ids[:asked])]
    return sealed(tmp_path, "mmlu_pro", model, settings, records, failed, seconds=3.0, findings=findings)


def sealed(tmp_path, study: str, model: str, settings: dict, records: list[dict], failed: bool, seconds: float,
           findings=()) -> Run:
    """A run of `study` as its notebook seals it: these records (timed apart from any other run's), a failure
    where it stopped halfway, and its batch's pace of `seconds` a question."""
    run = Run.create(study, {"notebook": study, "model": {"name": model}, "settings": settings},
                     outputs=tmp_path, label=model)
    run.write_json("fingerprint.json", fingerprint())
    for r in records:  # two runs never time alike
        run.record(r | {"ttft_s": zlib.crc32(f"{model}-{json.dumps(r, sort_keys=True)}".encode()) / 2**32})
    if failed:
        run.write_json("failure.json", {"reason": "the server went away", "records": len(records)})
    batch = {"wall_s": seconds * len(records), "asked": len(records)}
    run.write_json("summary.json", {"findings": [f.as_dict() for f in findings], "batch": batch})
    run.seal()
    return run


def paired_row(tmp_path, a, b):
    _, h = headline_of(tmp_path, a, b)
    return h, next(r for r in h.rows if r.figure.startswith("paired difference"))


@pytest.mark.parametrize("b_right, outcome, winner", [
    (lambda q: q % 2 == 0 or q % 3 == 0, "wins", "b"),   # B right where A is, and on a third of the rest
    (lambda q: q % 2 == 0 and q % 3 != 0, "wins", "a"),  # B wrong on a third of A's right answers
    (lambda q: q % 2 == 0, "equivalent", None),          # never disagree: within the margin
])
def test_a_sequential_row_decides_by_its_sequence_and_says_what_it_saved(tmp_path, b_right, outcome, winner):
    a = mmlu_run(tmp_path, "a", lambda q: q % 2 == 0)
    b = mmlu_run(tmp_path, "b", b_right, sequential={"margin": 0.03, "budget": QUESTIONS})
    h, r = paired_row(tmp_path, a, b)
    d = decide(r, "b", "a")
    assert (d.outcome, d.winner) == (outcome, winner)
    s = r.sequences["b"]
    assert s["questions"] == r.n["b"] < QUESTIONS and s["stopped_at"] == s["questions"]
    assert r.ratios["b"].low == s["interval"]["low"] and "valid at every count" in r.ratios["b"].method
    saved = s["saved_against_fixed_sample"]
    assert saved["questions"] == s["fixed_sample"] - s["questions"] and saved["minutes"] == round(
        saved["questions"] * 3.0 / 60, 1)
    assert f"stopped after {s['questions']:,} of 400 questions" in r.note and "saved" in compare.story(h)
    stopped = mmlu_run(tmp_path, "b", b_right, sequential={"margin": 0.03, "budget": QUESTIONS}, asked=s["questions"])
    score = next(x for x in paired_row(tmp_path, a, stopped)[0].rows if x.figure.startswith("accuracy"))
    on_those = sum(q % 2 == 0 for q in map(int, order([str(q) for q in range(QUESTIONS)], 0)[:s["questions"]]))
    assert (f"b was stopped by its sequence, so its score covers only the {s['questions']} questions asked; a on "
            f"those same questions: {100 * on_those / s['questions']:.1f}%") in score.note  # B's score is partial
    (fig,) = compare.sequence_plots(h)  # the sequence narrowing, the margin band and where it stopped
    ax = fig.axes[0]
    assert [list(line.get_xdata()) for line in ax.lines if "stopped at" in line.get_label()] == [[s["questions"]] * 2]
    assert any("margin" in p.get_label() for p in ax.patches)


def test_at_the_budget_it_cannot_tell_and_says_what_budget_would(tmp_path):
    a = mmlu_run(tmp_path, "a", lambda q: q % 2 == 0)
    b = mmlu_run(tmp_path, "b", lambda q: q % 2 == 0 if q % 10 else q % 4 == 1, sequential={"budget": 60})
    h, r = paired_row(tmp_path, a, b)
    assert decide(r, "b", "a").outcome == "cannot tell" and r.sequences["b"]["questions"] == 60
    assert r.sequences["b"]["needed"] > 60 and "would most likely tell" in r.needed["b"]
    assert "would most likely tell" in compare.story(h)


# What the mmlu_pro notebook finds of a weak model's answers (its trap and score findings name the scores) and of
# the demo's own questions (the mark names the questions' name); mmlu_pro.findings writes them so.
DOUBTS = (Finding("warning", "9 of 84 answers (11%) cannot be taken at face value (hit max_tokens: 9); above 5%, the "
                  "scores below are marked SUSPECT.", (SCORES,)),
          Finding("suspect", "Accuracy 19.0% [12.1, 28.7] over 84 questions.", (SCORES,)),
          Finding("marked", "NOT MMLU-Pro: these are the 84 questions written for sparknb's demo.",
                  ("the questions' name",)))


@pytest.mark.parametrize("b_words, outcome", [
    ("Reasoning first.", "equivalent"),  # the very same answers: cut alike, graded alike, under any rule set
    ("Thinking it over.", "caveated"),   # the same letters in other words: a cut could fall on one side only
])
def test_doubts_about_the_scores_do_not_doubt_a_difference_between_the_very_same_answers(tmp_path, b_words, outcome):
    a = mmlu_run(tmp_path, "a", lambda q: q % 2 == 0, findings=DOUBTS)
    b = mmlu_run(tmp_path, "b", lambda q: q % 2 == 0, sequential={"margin": 0.10}, words=b_words, findings=DOUBTS)
    h, r = paired_row(tmp_path, a, b)
    d = decide(r, "b", "a")
    assert d.outcome == outcome and r.sequences["b"]["outcome"] == "equivalent"
    reasons = " ".join(d.reasons)
    assert ("SUSPECT" in reasons) == (outcome == "caveated") and "NOT MMLU-Pro" not in reasons
    assert ("the same text on both sides" in r.note) == (outcome == "equivalent")


def test_the_pairs_follow_the_seeded_order_of_as_questions_not_any_runs_record_order(tmp_path):
    a = mmlu_run(tmp_path, "a", lambda q: q % 2 == 0, order_seed=0)
    b1 = mmlu_run(tmp_path, "b1", lambda q: q % 2 == 0 or q % 3 == 0, order_seed=0, sequential=True)
    b2 = mmlu_run(tmp_path, "b2", lambda q: q % 2 == 0 or q % 3 == 0, order_seed=2, sequential=True)
    s1 = paired_row(tmp_path, a, b1)[1].sequences["b1"]
    s2 = paired_row(tmp_path, a, b2)[1].sequences["b2"]
    assert s1["path"] == s2["path"] and s1["outcome"] == "better"
    ids = order([str(q) for q in range(QUESTIONS)], 0)  # A's draw seed (none given: 0)
    d = [int(int(q) % 2 == 0 or int(q) % 3 == 0) - int(int(q) % 2 == 0) for q in ids[:s1["questions"]]]
    assert [round(p[3] * p[0]) for p in s1["path"]] == list(np.cumsum(d))


def test_an_interrupted_run_resumes_to_the_state_of_one_never_interrupted(tmp_path):
    a = mmlu_run(tmp_path, "a", lambda q: q % 2 == 0)
    better = lambda q: q % 2 == 0 or q % 3 == 0  # noqa: E731
    halfway = mmlu_run(tmp_path, "b", better, sequential=True, asked=40, failed=True)
    whole = mmlu_run(tmp_path, "b-whole", better, sequential=True)
    h, r = paired_row(tmp_path, a, halfway)
    assert decide(r, "b", "a").outcome == "caveated" and r.sequences["b"]["outcome"] == "running"
    s = paired_row(tmp_path, a, whole)[1].sequences["b-whole"]
    assert s["path"][:40] == r.sequences["b"]["path"] and s["outcome"] == "better"


def test_the_comparison_report_says_and_draws_where_the_sequence_stopped(tmp_path):
    outputs = tmp_path / "outputs"
    a = mmlu_run(outputs, "a", lambda q: q % 2 == 0)
    b = mmlu_run(outputs, "b", lambda q: q % 2 == 0 or q % 3 == 0, sequential={"margin": 0.03, "budget": QUESTIONS})
    nb, folder = run_notebook("compare", tmp_path, {"runs": [a.id, b.id]})
    text = outputs_text(nb)
    assert "**MMLU-Pro: b is ahead**" in text and "stopped after" in text and "a fixed-sample design" in text
    drawn = [c for c in nb.cells if "sequence_plots" in "".join(c.source)]
    assert len(drawn) == 1 and any("image/png" in o.get("data", {}) for o in drawn[0].outputs)
    assert verify(folder) == []


def test_a_sequential_plan_asks_the_other_runs_answered_questions_in_its_order_and_resumes_fed(tmp_path):
    from sparknb.studies import mmlu_pro as m
    from sparknb.studies.mmlu_pro.data import DEMO_FILE

    params = {"suite": str(DEMO_FILE), "outputs": str(tmp_path), "sequential": True}
    first = m.prepare(m.Plan.build(budget=12, **params), "a")
    asked = [q.id for q in first.todo()]
    assert asked == order(first.ids, 0)[:12]  # A: its seeded order, up to its budget
    a = Run.create("mmlu_pro", {"notebook": "mmlu_pro", "settings": first.settings(), "model": {"name": "a"}},
                   outputs=tmp_path, label="a")
    a.write_json("fingerprint.json", fingerprint())
    for q in asked:
        a.record({"question_id": q, "category": "x", "answer": "A", "finish_reason": "stop", "text": "The answer is (A)."})
    a.seal()
    b = m.prepare(m.Plan.build(compare_with=a.id, **params), "b")
    assert [q.id for q in b.todo()] == asked and b.live.ids == asked  # only what A answered, in A's order
    assert not b.live.decided and b.live.sequence.design.budget == 12
    halfway = Run.create("mmlu_pro", {"notebook": "mmlu_pro", "settings": b.settings(), "model": {"name": "b"}},
                         outputs=tmp_path, label="b")
    halfway.write_json("fingerprint.json", fingerprint())
    for q in asked[:3]:
        halfway.record({"question_id": q, "category": "x", "answer": "A", "finish_reason": "stop", "correct": True,
                        "text": "The answer is (A)."})
    halfway.seal()
    resumed = m.prepare(m.Plan.build(compare_with=a.id, resume_from=halfway.id, **params), "b")
    assert [q.id for q in resumed.todo()] == asked[3:] and resumed.live.fed == 3
    assert resumed.live.sequence.path == sequential.PairedSequence.replay([(True, True)] * 3).path


def test_a_campaign_runs_a_later_models_sequential_cell_against_the_first_and_says_what_it_saved(tmp_path):
    from types import SimpleNamespace

    from sparknb.boxes.campaign import Cell, against
    from sparknb.studies.compare import saved

    outputs = tmp_path / "outputs"
    a = mmlu_run(outputs, "a", lambda q: q % 2 == 0)
    b = mmlu_run(outputs, "b", lambda q: q % 2 == 0 or q % 3 == 0, sequential={"margin": 0.03, "budget": QUESTIONS})
    record = Run.create("campaigns", {"notebook": "campaigns", "cells": []}, outputs=outputs, label="c")
    record.record({"cell": "mmlu_pro/a/1", "status": "done", "run": str(a.path)})
    campaign = SimpleNamespace(models=["a", "b"])
    later, first = Cell("mmlu_pro", "b", {"sequential": True}), Cell("mmlu_pro", "a", {"sequential": True})
    assert against(later, campaign, record).parameters == {"sequential": True, "compare_with": str(a.path)}
    assert against(first, campaign, record) == first and against(Cell("mmlu_pro", "b"), campaign, record).parameters == {}
    record.record({"cell": "mmlu_pro/b/1", "status": "done", "run": str(b.path)})
    (line, swaps) = saved(record.id, outputs)
    assert line.startswith("MMLU-Pro, b against a: sequential, 3-point margin: stopped after") and "saved" in line
    assert swaps.startswith("swaps: none saved")
