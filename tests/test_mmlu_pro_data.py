"""MMLU-Pro's questions: loading (stripped, unpadded, damaged files named), the hub download, a suite
of your own, the even seeded draw, and the reference prompt."""

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest

from sparknb.errors import DataError
from sparknb.runs.params import project_root
from sparknb.studies import mmlu_pro as m
from sparknb.studies.mmlu_pro import data

SHARED = project_root().parent / "shared" / "data" / "mmlu_pro"
needs_shared = pytest.mark.skipif(not (SHARED / m.FILES["test"]).is_file(),
                                  reason=f"the MMLU-Pro copy is not at {SHARED}")


def synthetic(categories=("art", "bio", "chem"), per=6, answer="A") -> m.Dataset:
    """A small dataset whose every right answer is `answer`, with two worked examples per category."""
    test, val = [], []
    for c, cat in enumerate(categories):
        for i in range(per):
            qid = str(100 * c + i)
            test.append(m.Question(qid, cat, f"{cat} question {qid}?", ("yes", "no", "maybe"), answer))
        for i in range(2):
            val.append(m.Question(f"v{c}{i}", cat, f"{cat} example {i}?", ("one", "two"), "B",
                                  "A: Let's think step by step. It is two. The answer is (B)."))
    return m.Dataset("synthetic", "memory", tuple(test), tuple(val))


# -- loading ---------------------------------------------------------------------------------------


@needs_shared
def test_the_local_copy_loads_stripped_and_unpadded():
    d = m.load(str(SHARED))
    assert len(d.test) == 12032 and len(d.validation) == 70
    assert len(d.categories) == 14 and sum(d.sizes().values()) == 12032
    assert d.sizes()["history"] == 381 and d.sizes()["math"] == 1351
    # The old copy's leak: the right option alone carried a leading space in 524 questions.
    assert all(o == o.strip() for q in d.test for o in q.options)
    assert any("532 question(s)" in n for n in d.notes)
    # Validation rows are padded with "N/A" options; the worked examples must not show them.
    assert all("N/A" not in q.options for q in d.validation)
    assert all(len(d.examples(c, 5)) == 5 for c in d.categories)
    assert d.sha256[m.FILES["test"]].startswith("b8c790c6")


@needs_shared
def test_the_hub_download_fetches_both_files_once(tmp_path, monkeypatch):
    # A local HTTP server stands in for the dataset hub: this machine has no network.
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(SHARED))
    handler.log_message = lambda *a: None
    hub = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(data, "HUB_URL", f"http://127.0.0.1:{hub.server_address[1]}/{{file}}")
        folder = m.download(tmp_path / "cache")
        assert sorted(p.name for p in folder.iterdir()) == sorted(m.FILES.values())
        assert m.load(str(folder)).sha256 == m.load(str(SHARED)).sha256
        monkeypatch.setattr(data, "HUB_URL", f"http://127.0.0.1:{hub.server_address[1]}/missing/{{file}}")
        assert m.download(tmp_path / "cache") == folder  # cached: nothing fetched again
        with pytest.raises(DataError, match="(?s)Cannot download.*404.*by hand"):
            m.download(tmp_path / "elsewhere")
        assert not any((tmp_path / "elsewhere").iterdir())  # no half-written file left behind
    finally:
        hub.shutdown()
        hub.server_close()


def test_a_folder_without_the_files_says_which(tmp_path):
    with pytest.raises(DataError, match="lacks test-00000-of-00001.parquet, validation"):
        m.load(str(tmp_path))
    with pytest.raises(DataError, match="No folder"):
        m.load(str(tmp_path / "nowhere"))


def test_a_file_without_the_columns_names_them(tmp_path):
    pd.DataFrame({"question_id": [1], "question": ["q"]}).to_parquet(tmp_path / m.FILES["test"])
    pd.DataFrame({"question_id": [1]}).to_parquet(tmp_path / m.FILES["validation"])
    with pytest.raises(DataError, match=r"lacks the column\(s\) \['options', 'answer', 'category'\]"):
        m.load(str(tmp_path))


def test_a_damaged_answer_letter_is_refused(tmp_path):
    row = {"question_id": [7], "question": ["q"], "options": [["a", "b", "N/A"]], "answer": ["C"], "category": ["x"]}
    pd.DataFrame(row).to_parquet(tmp_path / m.FILES["test"])
    pd.DataFrame(row | {"cot_content": [""], "answer": ["A"]}).to_parquet(tmp_path / m.FILES["validation"])
    with pytest.raises(DataError, match="question 7 has answer 'C' but only 2 options"):
        m.load(str(tmp_path))


def test_own_suite_loads_and_bad_lines_are_named(tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"id": "m1", "question": "2+2?", "options": ["3", " 4 "], "answer": "b", "category": "math"}\n'
                     '\n{"question": "Capital of France?", "options": ["Paris", "Rome", "Oslo"], "answer": "A"}\n')
    d = m.load_suite(suite)
    assert [q.id for q in d.test] == ["m1", "suite:3"]
    assert d.test[0].options == ("3", "4") and d.test[0].answer == "B"
    assert d.test[1].category == "general knowledge"
    suite.write_text('{"question": "x", "options": ["a", "b"], "answer": "C"}\n')
    with pytest.raises(DataError, match="line 1: answer must be one of A, B"):
        m.load_suite(suite)
    suite.write_text('{"question": "x", "options": ["a", "b"]}\n')
    with pytest.raises(DataError, match=r"lacks \['answer'\]"):
        m.load_suite(suite)
    suite.write_text('{"id": 1, "question": "x", "options": ["a", "b"], "answer": "A"}\n' * 2)
    with pytest.raises(DataError, match="line 2: id '1' is used twice"):
        m.load_suite(suite)


# -- the draw --------------------------------------------------------------------------------------


def test_the_draw_is_even_seeded_and_interleaved():
    d = synthetic(per=10)
    one = m.draw(d, 4, seed=7)
    assert [q.category for q in one[:3]] == ["art", "bio", "chem"]  # interleaved: a half run stays even
    assert pd.Series([q.category for q in one]).value_counts().to_dict() == {"art": 4, "bio": 4, "chem": 4}
    assert [q.id for q in m.draw(d, 4, seed=7)] == [q.id for q in one]  # deterministic
    assert {q.id for q in m.draw(d, 4, seed=8)} != {q.id for q in one}
    # A category's draw does not depend on the others.
    alone = synthetic(categories=("bio",), per=10)
    assert [q.id for q in m.draw(alone, 4, seed=7)] == [str(int(q.id) - 100) for q in one if q.category == "bio"]
    assert len(m.draw(d, 0)) == 30  # the whole split


@needs_shared
def test_the_default_draw_is_280_and_pinned():
    d = m.load(str(SHARED))
    qs = m.draw(d, 20, seed=0)
    assert len(qs) == 280 and len({q.id for q in qs}) == 280
    assert set(pd.Series([q.category for q in qs]).value_counts()) == {20}
    assert [q.id for q in qs[:3]] == ["2821", "93", "3531"]  # the same questions on every machine, every time


def test_a_sample_larger_than_a_category_is_refused():
    d = synthetic(per=5)
    with pytest.raises(DataError, match="per_category=6 is more than 'art' holds \\(5 questions\\)"):
        m.draw(d, 6)


# -- the prompt ------------------------------------------------------------------------------------


def test_the_prompt_text_is_exactly_the_reference_harness():
    d = synthetic()
    q = d.test[0]
    expected = (
        'The following are multiple choice questions (with answers) about art. Think step by step and then '
        'finish your answer with "the answer is (X)" where X is the correct letter choice.\n'
        "Question:\nart example 0?\nOptions:\nA. one\nB. two\n"
        "Answer: Let's think step by step. It is two. The answer is (B).\n\n"
        "Question:\nart example 1?\nOptions:\nA. one\nB. two\n"
        "Answer: Let's think step by step. It is two. The answer is (B).\n\n"
        "Question:\nart question 0?\nOptions:\nA. yes\nB. no\nC. maybe\n"
        "Answer: Let's think step by step."
    )
    assert m.prompt(q, d.examples("art", 5)) == expected


@needs_shared
def test_a_real_prompt_has_five_worked_examples_of_its_category():
    d = m.load(str(SHARED))
    q = next(q for q in d.test if q.id == "70")
    text = m.prompt(q, d.examples(q.category, 5))
    assert text.startswith("The following are multiple choice questions (with answers) about business. ")
    assert text.count("Question:\n") == 6 and text.count("Answer: Let's think step by step.") == 6
    assert "A: Let's think step by step." not in text and "N/A" not in text
    assert text.endswith("I. Unsafe practices, Distress, Fear, Serious\nAnswer: Let's think step by step.")


def test_a_file_that_is_not_parquet_is_named(tmp_path):
    (tmp_path / m.FILES["test"]).write_text("not parquet")
    (tmp_path / m.FILES["validation"]).write_text("not parquet")
    with pytest.raises(DataError, match="test-00000-of-00001.parquet is not a readable parquet file.*Download it"):
        m.load(str(tmp_path))


def test_auto_falls_back_to_the_demo_questions_named_as_what_they_are(tmp_path, monkeypatch):
    # MMLU-Pro cannot be had: no cached copy (a fresh home) and the hub unreachable (a proxy nothing listens on).
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    dataset = m.load("auto")
    assert dataset.name == "sparknb demo questions" and "MMLU-Pro" not in dataset.name
    assert len(dataset.test) == 84 and dataset.validation == ()
    assert dataset.sizes() == dict.fromkeys(dataset.categories, 6) and len(dataset.categories) == 14  # MMLU-Pro's 14
    assert dataset.notes[0].startswith("NOT MMLU-Pro: MMLU-Pro could not be had")
    assert all(q.answer in m.LETTERS[:len(q.options)] for q in dataset.test)
    # drawn as MMLU-Pro is, each category giving what it holds where more is asked: a campaign's per_category holds
    two = m.draw(dataset, 2)
    assert len(two) == 28 and [q.category for q in two[:14]] == sorted(dataset.categories)
    assert len(m.draw(dataset, 20)) == 84 and len(m.draw(dataset, 0)) == 84
