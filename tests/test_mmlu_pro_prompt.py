"""MMLU-Pro's prompt in lm-evaluation-harness's format is, byte for byte, what lm-eval itself sends: its own `mmlu_pro`
task files (pointed at local parquet files in MMLU-Pro's schema) build the chat requests of `--apply_chat_template`
(few-shot as multi-turn, its default there) through its local-chat-completions model, and sparknb's messages for the
same questions equal them, 0-shot and 5-shot. sparknb's own format differs from it, on purpose and said so."""

import json
from pathlib import Path

import harnesses
import pandas as pd
import pytest
from test_mmlu_pro_data import SHARED

from sparknb.studies import mmlu_pro as m

CATEGORIES = ("biology", "business", "chemistry", "computer science", "economics", "engineering", "health", "history",
              "law", "math", "other", "philosophy", "physics", "psychology")
STEP = "A: Let's think step by step. "


def _row(qid: int, category: str, options: list[str], cot: str = "") -> dict:
    question = f"In {category}, which holds for item {qid}?\nSee $x_{{{qid}}}$ \u2014 caf\u00e9 \u200b(note)"
    return {"question_id": qid, "question": question + ("\n" if qid % 3 == 0 else ""), "options": options,
            "answer": "B", "answer_index": 1, "cot_content": cot, "category": category, "src": "written-for-test"}


def _write(folder: Path) -> Path:
    """Two test and six validation questions per category, in MMLU-Pro's schema: options padded with "N/A" and one
    carrying the old copy's leading space, a question ending in a newline, unicode, worked reasoning to strip."""
    test, validation = [], []
    for c, category in enumerate(CATEGORIES):
        for i in range(2):
            options = [f" option {k} of {i}" if k == 1 else f"option {k}" for k in range(4 + c % 7)]
            test.append(_row(1000 * c + i, category, options + ["N/A"] * (i * 2)))
        for i in range(6):
            options = [f"choice {k}" for k in range(3 + i)] + ["N/A"] * (7 - i)
            validation.append(_row(1000 * c + 500 + i, category, options,
                                   f"{STEP}Reason {i} about {category}.\n\nSo the answer is (B)."))
    folder.mkdir()
    pd.DataFrame(test).to_parquet(folder / m.FILES["test"])
    pd.DataFrame(validation).to_parquet(folder / m.FILES["validation"])
    return folder


def _compare(folder: Path, categories, shots: int, per_category: int, cache: Path) -> int:
    d = m.load(str(folder))
    theirs = harnesses.requests(harnesses.mmlu_pro_files(folder, categories, cache), shots, per_category)
    by_id = {q.id: q for q in d.test}
    for qid, messages in theirs.items():
        q = by_id[qid]
        ours = m.messages(q, d.examples(q.category, shots), "lm-eval")
        assert json.dumps(ours, ensure_ascii=False) == json.dumps(messages, ensure_ascii=False), qid
        assert m.messages(q, d.examples(q.category, shots), "sparknb") != messages  # the two formats differ
    return len(theirs)


@pytest.mark.parametrize("shots", [0, 5])
def test_the_lm_eval_format_is_lm_evals_own_chat_request_byte_for_byte(tmp_path, shots):
    assert _compare(_write(tmp_path / "data"), CATEGORIES, shots, 2, tmp_path) == 2 * len(CATEGORIES)


@pytest.mark.skipif(not (SHARED / m.FILES["test"]).is_file(), reason=f"the MMLU-Pro copy is not at {SHARED}")
def test_on_mmlu_pros_own_files_the_lm_eval_format_is_lm_evals_request_in_every_category(tmp_path):
    assert _compare(SHARED, CATEGORIES, 5, 2, tmp_path) == 2 * len(CATEGORIES)


def test_sparknbs_own_format_drops_the_padding_and_sends_one_user_turn_and_lm_evals_keeps_both_apart(tmp_path):
    d = m.load(str(_write(tmp_path / "data")))
    q = d.test[1]  # padded with two "N/A"
    examples = d.examples(q.category, 2)
    ours, theirs = m.messages(q, examples, "sparknb"), m.messages(q, examples, "lm-eval")
    assert [t["role"] for t in ours] == ["user"] and "N/A" not in ours[0]["content"]
    assert [t["role"] for t in theirs] == ["system"] + ["user", "assistant"] * 2 + ["user"]
    assert theirs[-1]["content"].count("N/A") == 2 and STEP not in theirs[2]["content"]
