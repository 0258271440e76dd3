"""The demo's own questions are never titled MMLU-Pro: not in the study's report, nor in the report of a run that
failed halfway. Through `sparknb run`'s own path (papermill, the HTML report, the seal), on the fake reasoner of
test_mmlu_pro_measure (it answers 500 on purpose, which no real server does)."""

import re

import pytest
from test_mmlu_pro_measure import fake_reasoner

from sparknb.errors import ExecuteError
from sparknb.runs.execute import run_notebook
from sparknb.studies import mmlu_pro as m


def headings(report: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<(?:h[1-6]|title)\b[^>]*>(.*?)</(?:h[1-6]|title)>",
                                                         report, re.S)]


def test_the_demo_questions_are_named_as_what_they_are_in_every_report(tmp_path, monkeypatch):
    # MMLU-Pro cannot be had: no cached copy (a fresh home) and the hub unreachable (a proxy nothing listens on).
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    demo = m.load("auto")
    for handler, url in fake_reasoner():
        params = {"model": "tiny-dense", "endpoint": url, "dataset": "auto", "max_tokens": 64, "concurrency": 2}
        whole = run_notebook("mmlu_pro", params, tmp_path / "outputs")
        handler.fail_on = demo.test[5].question.splitlines()[0]
        with pytest.raises(ExecuteError, match="failed halfway") as failed:
            run_notebook("mmlu_pro", params, tmp_path / "outputs")
    for folder in (whole, failed.value.folder):
        report = (folder / "report.html").read_text()
        titles = headings(report)
        assert not [t for t in titles if "MMLU-Pro" in t], titles
        assert any("sparknb demo questions" in t for t in titles) and "NOT MMLU-Pro" in report
    assert "failed halfway" in (failed.value.folder / "report.html").read_text()
