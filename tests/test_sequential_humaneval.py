"""HumanEval compared sequentially, through the graded batch's one sequential path: on crafted sealed runs, each
outcome (B better, B worse, equivalent within the margin, cannot tell at the budget with the budget that would
tell, and the margin 164 problems can never tell), the order that of A's seeded draw, and a run interrupted
halfway; then asked for real, through the real sandbox, stopping when decided and resuming where it stopped."""

import json

import pytest
from test_humaneval_measure import WRONG, fake_coder, finish, open_study, quiet, work_on
from test_sequential_verdict import paired_row, sealed

from sparknb.errors import ParamsError, StudyError
from sparknb.runs.run import Run, read_records, verify
from sparknb.studies import compare
from sparknb.studies import humaneval as h
from sparknb.verdicts import sequential
from sparknb.verdicts.sequential import order
from sparknb.verdicts.verdict import decide

IDS = [f"HumanEval/{p}" for p in range(164)]


def humaneval_run(tmp_path, model: str, passes, seed=0, sequential=None, asked=164, failed=False) -> Run:
    """A humaneval run as the notebook seals it: its problems asked in the seeded order of `seed`, the first
    `asked` of it, each graded passed where `passes(problem number)`."""
    settings = {"dataset_sha256": "abc", "dataset_size": 164, "style": "chat", "problem_ids": IDS, "seed": seed}
    records = [{"problem": pid, "sample": 0, "order": position, "passed": ok, "reason": "passed" if ok else
                "assertion failed"} for position, pid in enumerate(order(IDS, seed)[:asked])
               for ok in [bool(passes(int(pid.split("/")[1])))]]
    return sealed(tmp_path, "humaneval", model, settings | ({"sequential": sequential} if sequential else {}),
                  records, failed, seconds=20.0)


def half(p):
    return p % 2 == 0


@pytest.mark.parametrize("b_passes, outcome, winner", [
    (lambda p: p % 2 == 0 or p % 3 == 0, "wins", "b"),   # B passes where A does, and a third of the rest
    (lambda p: p % 2 == 0 and p % 3 != 0, "wins", "a"),  # B fails a third of A's passes
])
def test_b_better_or_worse_is_decided_before_the_164_problems_and_says_what_it_saved(tmp_path, b_passes, outcome,
                                                                                     winner):
    a = humaneval_run(tmp_path, "a", half)
    b = humaneval_run(tmp_path, "b", b_passes, sequential={"margin": 0.03})
    h_, r = paired_row(tmp_path, a, b)
    assert r.study == "humaneval" and (decide(r, "b", "a").outcome, decide(r, "b", "a").winner) == (outcome, winner)
    s = r.sequences["b"]
    assert s["questions"] == r.n["b"] == s["stopped_at"] < 100 and s["design"]["budget"] == 164
    assert r.ratios["b"].low == s["interval"]["low"] and "valid at every count" in r.ratios["b"].method
    # A fixed-sample design of the same errors would need thousands: more than HumanEval holds, so the saving
    # said is against the 164 there are, in B's own minutes (20 s a problem here).
    assert s["fixed_sample"] > 164 and s["available"] == 164
    saved = 164 - s["questions"]
    assert (f"more than the 164 there are to ask: {saved:,} problems saved against the budget, about "
            f"{round(saved * 20 / 60):,} minutes") in r.note
    assert f"stopped after {s['questions']:,} of 164 problems" in compare.story(h_)
    (fig,) = compare.sequence_plots(h_)  # the sequence narrowing, the margin band, where it stopped
    ax = fig.axes[0]
    assert [list(line.get_xdata()) for line in ax.lines if "stopped at" in line.get_label()] == [[s["questions"]] * 2]
    assert any("margin" in p.get_label() for p in ax.patches)


def test_never_disagreeing_is_equivalent_at_a_5_point_margin_but_164_problems_cannot_tell_3_points(tmp_path):
    a = humaneval_run(tmp_path, "a", half)
    wide = humaneval_run(tmp_path, "wide", half, sequential={"margin": 0.05})
    r = paired_row(tmp_path, a, wide)[1]
    assert decide(r, "wide", "a").outcome == "equivalent" and r.sequences["wide"]["questions"] < 164
    assert -0.05 <= r.ratios["wide"].low < r.ratios["wide"].high <= 0.05
    narrow = humaneval_run(tmp_path, "narrow", half, sequential={"margin": 0.03})
    r = paired_row(tmp_path, a, narrow)[1]
    s = r.sequences["narrow"]
    assert decide(r, "narrow", "a").outcome == "cannot tell" and s["questions"] == 164 and s["needed"] > 164
    assert r.needed["narrow"] == (f"a budget of about {s['needed']:,} problems would most likely tell, more than the "
                                  "164 there are to ask: no run of these problems can tell at this margin")


def test_at_a_budget_it_cannot_tell_and_says_what_budget_would(tmp_path):
    a = humaneval_run(tmp_path, "a", half)
    b = humaneval_run(tmp_path, "b", lambda p: half(p) if p % 10 else p % 4 == 1, sequential={"budget": 30})
    h_, r = paired_row(tmp_path, a, b)
    s = r.sequences["b"]
    assert decide(r, "b", "a").outcome == "cannot tell" and s["questions"] == 30 and 30 < s["needed"] <= 164
    assert r.needed["b"] == (f"a budget of about {s['needed']:,} problems would most likely tell (resume the run "
                             "with it)")
    assert r.needed["b"] in compare.story(h_)


def test_the_pairs_follow_as_seeded_order_not_bs(tmp_path):
    a = humaneval_run(tmp_path, "a", half, seed=5)
    b1 = humaneval_run(tmp_path, "b1", lambda p: p % 2 == 0 or p % 3 == 0, seed=5, sequential=True)
    b2 = humaneval_run(tmp_path, "b2", lambda p: p % 2 == 0 or p % 3 == 0, seed=0, sequential=True)
    s1, s2 = (paired_row(tmp_path, a, b)[1].sequences[name] for b, name in ((b1, "b1"), (b2, "b2")))
    assert s1["path"] == s2["path"] and s1["outcome"] == "better"
    won = [int(int(p.split("/")[1]) % 6 == 3) for p in order(IDS, 5)[:s1["questions"]]]  # odd and a multiple of 3
    assert [round(p[3] * p[0]) for p in s1["path"]] == [sum(won[:i + 1]) for i in range(len(won))]


def test_an_interrupted_sealed_run_is_caveated_and_its_sequence_is_the_start_of_the_whole_one(tmp_path):
    a = humaneval_run(tmp_path, "a", half)
    better = lambda p: p % 2 == 0 or p % 3 == 0  # noqa: E731
    halfway = humaneval_run(tmp_path, "b", better, sequential=True, asked=20, failed=True)
    whole = humaneval_run(tmp_path, "b-whole", better, sequential=True)
    r = paired_row(tmp_path, a, halfway)[1]
    assert decide(r, "b", "a").outcome == "caveated" and r.sequences["b"]["outcome"] == "running"
    s = paired_row(tmp_path, a, whole)[1].sequences["b-whole"]
    assert s["path"][:20] == r.sequences["b"]["path"] and s["outcome"] == "better"


def test_sequential_compares_first_answers_so_samples_above_one_are_refused():
    with pytest.raises(ParamsError, match="sequential compares first answers.*set samples=1"):
        h.Plan.build(sequential=True, samples=5, temperature=0.8)


# --- asked for real: the real sandbox grades, a fake server answers (no tiny model writes passing code) ---------

def test_b_asked_in_as_order_stops_once_decided_and_resumes_where_it_stopped(tmp_path):
    for handler, url in fake_coder():  # A: the canonical solutions, all 40 passing, in A's seeded order
        work = work_on(outputs=tmp_path, sequential=True, seed=3, concurrency=4, limit=40)
        assert [p.id for p, _ in work.todo()] == order(IDS[:40], 3)
        study = open_study(tmp_path, url, work)
        finish(study, work, h.ask(study, work, log=quiet))
        a = study.run
    a_order = order(IDS[:40], 3)
    for handler, url in fake_coder(default=WRONG, fail_on=a_order[6]):  # B fails every one; the server dies at the 7th
        work = work_on(outputs=tmp_path, sequential=True, compare_with=a.id, concurrency=1, limit=40)
        assert [p.id for p, _ in work.todo()] == a_order  # B asks in A's order, whatever its own seed
        study = open_study(tmp_path, url, work)
        with pytest.raises(StudyError, match="request"):
            h.ask(study, work, log=quiet)
        halfway = study.run
    kept = [r["problem"] for r in read_records(halfway.path) if "error" not in r]
    assert sorted(kept) == sorted(a_order[:6])  # graded by two sandboxes: recorded as each grade ends
    for handler, url in fake_coder(default=WRONG):
        work = work_on(outputs=tmp_path, sequential=True, compare_with=a.id, resume_from=halfway.id, concurrency=1,
                       limit=40)
        assert work.live.fed == 6 and [p.id for p, _ in work.todo()][:3] == a_order[6:9]
        study = open_study(tmp_path, url, work)
        asked = h.ask(study, work, log=quiet)
        summary = finish(study, work, asked)
        held = sequential.of_run(work.live, h.passes(study.records()), None, "problems")
    assert held["outcome"] == "worse" and held["stopped_at"] < 30  # every answer fails where A's passed
    assert handler.asked == held["stopped_at"] - 6  # only the rest, one at a time: none past the decision
    worse = sequential.PairedSequence.replay([(True, False)] * held["stopped_at"])  # A passed, B failed, each time
    assert held["path"] == [list(p) for p in worse.path]
    stopped = [f for f in summary["findings"] if f["text"].startswith(f"The confidence sequence stopped after "
                                                                        f"{held['stopped_at']} problems")]
    assert [f["level"] for f in stopped] == ["info"]
    assert not any("no graded answer" in f["text"] for f in summary["findings"])  # no warning: it stopped on purpose
    assert summary["answers_asked_for"] == 40 and verify(study.run.path) == []


def test_a_campaign_plans_humaneval_sequentially_and_says_what_it_saved(tmp_path):
    from sparknb.boxes.campaign import against, plan
    from sparknb.runs.params import load_campaign
    from sparknb.studies.compare import saved

    file = tmp_path / "c.yaml"
    file.write_text("name: c\nmodels: [tiny-dense, tiny-moe]\nstudies:\n  humaneval: {sequential: true, margin: 0.05, "
                    "budget: 100, limit: 40}\n")
    campaign = load_campaign(str(file))
    first, later = plan(campaign)  # the notebook's parameters: checked before any cell runs
    outputs = tmp_path / "outputs"
    a = humaneval_run(outputs, "tiny-dense", half)
    b = humaneval_run(outputs, "tiny-moe", lambda p: p % 2 == 0 or p % 3 == 0, sequential=later.parameters)
    record = Run.create("campaigns", {"notebook": "campaigns", "cells": []}, outputs=outputs, label="c")
    assert against(later, campaign, record) == later  # the first model's run not done yet: nothing to run against
    record.record({"cell": first.key, "status": "done", "run": str(a.path)})
    assert against(first, campaign, record) == first
    assert against(later, campaign, record).parameters == later.parameters | {"compare_with": str(a.path)}
    record.record({"cell": later.key, "status": "done", "run": str(b.path)})
    line, swaps = saved(record.id, outputs)
    s = paired_row(outputs, a, b)[1].sequences["tiny-moe"]
    assert line == f"humaneval, tiny-moe against tiny-dense: {sequential.told(s)}"
    assert f"stopped after {s['questions']} of 100 problems" in line
    assert f"{100 - s['questions']} problems saved" in line
    assert swaps.startswith("swaps: none saved")


def test_the_notebook_and_the_comparison_report_draw_the_sequence_stopping_as_chromium_shows_them(tmp_path):
    from browser import chromium, look_at

    from sparknb.runs.execute import run_notebook

    outputs, small = tmp_path / "outputs", {"limit": 40, "sequential": True, "seed": 1, "concurrency": 2}
    for _, url in fake_coder():  # A passes all 40; B, asked in A's order, fails every one
        a = run_notebook("humaneval", small | {"model": "tiny-dense", "endpoint": url}, outputs=outputs)
    for handler, url in fake_coder(default=WRONG, served="tiny-moe"):
        b = run_notebook("humaneval", small | {"model": "tiny-moe", "endpoint": url, "compare_with": str(a)},
                         outputs=outputs)
    held = json.loads((b / "summary.json").read_text())["sequential"]
    assert held["outcome"] == "worse" and held["stopped_at"] <= handler.asked <= held["stopped_at"] + 1 < 40
    report = run_notebook("compare", {"runs": [str(a), str(b)]}, outputs=outputs)
    with chromium() as browser:
        for folder in (b, report):
            seen = look_at(browser, folder / "report.html", tmp_path / f"{folder.name}.png")
            text = seen["text"]
            assert f"stopped after {held['stopped_at']} of 40 problems" in text and "the sequence lies below 0" in text
            assert seen["images"] >= 1 and all(seen["drawn"]) and seen["foreign"] == []
    assert "HumanEval: tiny-dense is ahead" in text  # the comparison's verdict, decided by the sequence
    assert verify(b) == [] and verify(report) == []


def test_a_campaign_resumes_a_sequential_cell_from_the_run_it_left_halfway(tmp_path):
    from sparknb.boxes.campaign import Cell, _Progress, _run_cell, resumed

    outputs = tmp_path / "outputs"
    record = Run.create("campaigns", {"notebook": "campaigns", "cells": []}, outputs=outputs, label="c")
    cell = Cell("humaneval", "tiny-dense", {"sequential": True, "limit": 20, "concurrency": 1})
    progress = _Progress(2, quiet)
    assert resumed(cell, record) == cell  # never tried: asked afresh
    first = order(IDS[:20], 0)
    for _, url in fake_coder(fail_on=first[5]):  # the server dies at the sixth problem of the order
        assert _run_cell(cell, url, record, outputs, progress) is False
    (tried,) = read_records(record.path)
    assert tried["status"] == "failed" and verify(tried["run"]) == []
    again = resumed(cell, record)
    assert again.parameters == cell.parameters | {"resume_from": tried["run"]}
    for handler, url in fake_coder():
        assert _run_cell(again, url, record, outputs, progress) is True
    done = read_records(record.path)[-1]["run"]
    kept = [r for r in read_records(done) if r.get("resumed_from")]
    assert sorted(r["problem"] for r in kept) == sorted(first[:5]) and handler.asked == 15  # only the rest asked
    assert resumed(cell, record) == cell  # its last try is done: nothing to resume
