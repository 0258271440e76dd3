"""The HumanEval notebook end to end under papermill against the real vLLM CPU server. The tiny random-weight
model writes noise, so pass@1 is near 0: what is checked is that every answer is graded (its noise run in the
real sandbox, or counted as no code), none crashes the grader, the verdict marks the cut answers at the top, and
a second run in the other style is compared with the first."""

import json

import pytest
from support import outputs_text, run_notebook

from sparknb.runs.run import read_records, verify
from sparknb.studies import humaneval as h
from sparknb.studies.batch.traps import LOOPED

pytestmark = pytest.mark.server


def run(tmp_path, server, **params):
    return run_notebook("humaneval", tmp_path, {"model": "tiny-dense", "endpoint": server.url, "limit": 6,
                                                "max_tokens": 48, "concurrency": 4, **params})


def test_notebook_on_tiny_dense_grades_every_noise_answer_and_compares(tmp_path, tiny_dense):
    nb, first = run(tmp_path, tiny_dense, style="completion")
    records = read_records(first)
    assert len(records) == 6 and all(r["reason"] in h.REASONS and "error" not in r for r in records)
    assert all(r["completion_tokens"] <= 48 for r in records)
    summary = json.loads((first / "summary.json").read_text())
    assert summary["graded"] == 6 and summary["pass_at_1"]["estimate"] <= 1 / 6
    cut = summary["traps"]["counts"]  # cut at max_tokens: some of the noise repeats itself, and is named a loop
    assert summary["suspect"] is True and cut[h.HIT_MAX_TOKENS] + cut[LOOPED] >= 5
    ran = sum(r["sandbox_wall_s"] is not None for r in records)
    assert ran >= 5 and summary["sandbox"]["cost"]["programs"] == ran  # completion style: noise is code, run
    assert summary["sandbox"]["level"] == "bubblewrap" and verify(first) == []
    text = outputs_text(nb)
    assert "WARNING" in text and "SUSPECT" in text and "Sandbox: bubblewrap" in text and "image/png" in text
    assert "tqdm" not in text and "%|" not in text
    first_code = next(c for c in nb.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])
                      and "injected-parameters" not in c.metadata.get("tags", []))
    assert "WARNING" in outputs_text(type(nb)(cells=[first_code]))  # said at the top

    nb2, second = run(tmp_path, tiny_dense, style="chat", compare_with=str(first))
    summary2 = json.loads((second / "summary.json").read_text())
    assert summary2["graded"] == 6 and summary2["comparison"]["pairs"]["n"] == 6
    assert summary2["comparison"]["settings_differ"]["style"] == {"a": "chat", "b": "completion"}
    text2 = outputs_text(nb2)
    assert "McNemar" in text2 and "Bonett-Price" in text2
    assert "HumanEval has only 164" in text2 or "never disagreed" in text2
