"""Two runs on the same problems: paired pass@1 (McNemar's exact test, Bonett-Price), and what a narrower
interval would need, said plainly when HumanEval's 164 problems cannot give it. On the fake coder of
test_humaneval_measure (no tiny model writes correct code), every program run in the real sandbox."""

import json

import pytest
from test_humaneval_measure import PROBLEMS, WRONG, fake_coder, finish, open_study, quiet, work_on

from sparknb.errors import DataError
from sparknb.studies import humaneval as h


def sealed_run(tmp_path, url, **plan):
    work = work_on(outputs=tmp_path, **plan)
    study = open_study(tmp_path, url, work)
    asked = h.ask(study, work, log=quiet)
    finish(study, work, asked)
    return work, asked, study.run.path


def test_a_comparison_is_paired_and_says_when_humaneval_is_too_small_for_a_narrower_interval(tmp_path):
    ids = list(PROBLEMS)[:10]
    for handler, url in fake_coder():
        _, _, run_b = sealed_run(tmp_path, url, problems=ids, concurrency=4)  # B: all 10 right
        handler.bodies.update({pid: WRONG for pid in ids[:6]})  # A: the first 6 wrong
        work_a = work_on(outputs=tmp_path, problems=ids, concurrency=4, compare_with=run_b.name)
        study = open_study(tmp_path, url, work_a)
        asked = h.ask(study, work_a, log=quiet)
        df = h.frame(study.records())
        cmp = h.compare(df, work_a, "fake", asked.batch)
        study.finish({})
    assert (cmp.pairs.both, cmp.pairs.a_only, cmp.pairs.b_only, cmp.pairs.neither) == (4, 0, 6, 0)
    assert cmp.rate_a.estimate == 0.4 and cmp.rate_b.estimate == 1.0
    assert cmp.difference.estimate == pytest.approx(-0.6) and cmp.difference.high < 0
    assert cmp.test.pvalue == pytest.approx(2 * 0.5 ** 6)  # exact: all 6 discordant problems one way
    assert cmp.table().loc["fake failed"].tolist() == [6, 0]
    assert cmp.available == 164 and cmp.needed > 164 and cmp.beyond_data
    text = h.needed_text(cmp)
    assert "HumanEval has only 164, so no run of it can" in text and "larger benchmark" in text
    assert "McNemar" in h.comparison_markdown(cmp) and cmp.speed is not None and cmp.speed.ratio > 0
    assert "dataset_sha256" not in cmp.settings_differ and json.dumps(cmp.as_dict())


def test_only_runs_on_the_same_problems_and_data_are_compared(tmp_path):
    ids = list(PROBLEMS)[:4]
    for _, url in fake_coder():
        _, _, run_b = sealed_run(tmp_path, url, problems=ids)
    with pytest.raises(DataError, match="asked other problems: 0 of its 4 are not asked here and 1 of these 5"):
        work_on(outputs=tmp_path, problems=list(PROBLEMS)[:5], compare_with=run_b.name)
    suite = tmp_path / "mine.jsonl"
    suite.write_text("".join(json.dumps({"task_id": p.id, "prompt": p.prompt, "entry_point": p.entry_point,
                                         "test": p.test}) + "\n" for p in PROBLEMS.values()))
    with pytest.raises(DataError, match="read other data"):
        work_on(outputs=tmp_path, suite=str(suite), problems=ids, compare_with=run_b.name)


def test_the_verdicts_a_comparison_reads_are_the_first_answers_as_recorded(tmp_path):
    ids = list(PROBLEMS)[:3]
    for handler, url in fake_coder(bodies={ids[1]: WRONG}):
        _, _, run = sealed_run(tmp_path, url, problems=ids)
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    assert h.passes(records) == {ids[0]: True, ids[1]: False, ids[2]: True}
    assert h.pass_at_1(h.frame(records)).estimate == pytest.approx(2 / 3)
