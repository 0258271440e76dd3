"""The MMLU-Pro notebook against the real vLLM CPU server: the verdict at the top, the scores marked,
the prompts measured by the server's own tokenizer, and a second run compared with the first."""

import json

import pytest
from support import outputs_text, run_notebook
from test_mmlu_pro_data import SHARED, needs_shared

from sparknb.endpoint import metrics
from sparknb.endpoint.client import Endpoint
from sparknb.errors import ParamsError
from sparknb.runs.run import read_records, verify
from sparknb.runs.study import start
from sparknb.studies import mmlu_pro as m
from sparknb.studies.batch.traps import LOOPED
from sparknb.verdicts import sequential

pytestmark = [needs_shared, pytest.mark.server]


def run(tmp_path, server, **params):
    return run_notebook("mmlu_pro", tmp_path, {"model": "tiny-dense", "endpoint": server.url, "dataset": str(SHARED),
                                               "per_category": 1, "max_tokens": 64, "concurrency": 4, **params})


def test_notebook_on_tiny_dense_says_its_answers_are_noise_and_compares(tmp_path, tiny_dense):
    nb, first = run(tmp_path, tiny_dense)
    records = read_records(first)
    assert len(records) == 14 and all("error" not in r for r in records)
    assert {r["category"] for r in records} == set(m.load(str(SHARED)).categories)
    assert all(r["completion_tokens"] <= 64 for r in records)
    summary = json.loads((first / "summary.json").read_text())
    cut = summary["traps"]["counts"]  # cut at max_tokens: some of the noise repeats itself, and is named a loop
    assert summary["suspect"] is True and cut[m.HIT_MAX_TOKENS] + cut[LOOPED] >= 10
    assert summary["batch"]["asked"] == 14 and summary["batch"]["tokens_per_s"] > 0
    assert isinstance(summary["extraction"]["first_last_differ"], int)
    # The check before the run counted what the server then really received, chat template included.
    assert summary["batch"]["longest_prompt_tokens"] == max(r["prompt_tokens"] for r in records)
    assert verify(first) == []
    text = outputs_text(nb)
    assert "WARNING" in text and "SUSPECT" in text and "could not be parsed" in text and "LAST match" in text
    assert "macro average of an even draw" in text and "image/png" in text
    assert "tqdm" not in text and "%|" not in text
    first_code = next(c for c in nb.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])
                      and "injected-parameters" not in c.metadata.get("tags", []))
    assert "WARNING" in outputs_text(type(nb)(cells=[first_code]))  # said at the top

    nb2, second = run(tmp_path, tiny_dense, max_tokens=32, compare_with=str(first))
    summary2 = json.loads((second / "summary.json").read_text())
    cmp = summary2["comparison"]
    assert cmp["pairs"]["n"] == 14 and cmp["b"].startswith("tiny-dense")
    assert cmp["settings_differ"]["max_tokens"] == {"a": 32, "b": 64}
    speed = cmp["batch_speed"]
    assert speed["b_tokens_per_s"] == summary["batch"]["tokens_per_s"]
    assert speed["a_tokens_per_s"] == summary2["batch"]["tokens_per_s"]
    assert speed["ratio"] == pytest.approx(speed["a_tokens_per_s"] / speed["b_tokens_per_s"])
    text2 = outputs_text(nb2)
    assert "McNemar" in text2 and "Bonett-Price" in text2 and "batch tok/s" in text2
    assert f"{speed['ratio']:.2f}x" in text2 and f"{summary['batch']['completion_tokens']} tokens generated" in text2
    assert "would take about" in text2 or "never disagreed" in text2


def test_a_prompt_too_long_for_the_context_is_refused_with_its_real_length(tmp_path, tiny_dense, dense_key):
    plan = m.Plan.build(dataset=str(SHARED), per_category=1, max_tokens=64)
    work = m.prepare(plan, "tiny-dense")
    ep = Endpoint(tiny_dense.url, "tiny-dense", api_key=dense_key)
    try:
        longest = max(m.prompt_tokens(ep, work, work.questions).values())
        # What the server counts when it is really asked, independently of /tokenize.
        qid = max(work.questions, key=lambda q: len(work.prompts[q.id][0]["content"])).id
        asked = ep.chat(work.prompts[qid], max_tokens=1).prompt_tokens
        assert asked == m.prompt_tokens(ep, work, [q for q in work.questions if q.id == qid])[qid]
        before = ep.metrics()[metrics.E2E + "_count"]
        room = ep.info().max_model_len - longest
        tight = m.prepare(m.Plan.build(dataset=str(SHARED), per_category=1, max_tokens=room + 1), "tiny-dense")
        with pytest.raises(ParamsError, match=f"is {longest} tokens by the server's own tokenizer.*Lower max_tokens "
                                              f"to {room} or less"):
            start(m.NOTEBOOK, model="tiny-dense", endpoint=tiny_dense.url, settings=tight.settings(),
                  outputs=str(tmp_path), validate=tight.check_server)
        assert ep.metrics()[metrics.E2E + "_count"] == before and not (tmp_path / m.NOTEBOOK).exists()
        fits = m.prepare(m.Plan.build(dataset=str(SHARED), per_category=1, max_tokens=room), "tiny-dense")
        study = start(m.NOTEBOOK, model="tiny-dense", endpoint=tiny_dense.url, settings=fits.settings(),
                      outputs=str(tmp_path), validate=fits.check_server)
        study.finish({})
        assert fits.longest[1] == longest
    finally:
        ep.close()


def test_a_sequential_run_asks_the_first_runs_order_and_shows_and_seals_its_sequence(tmp_path, tiny_dense):
    nb, first = run(tmp_path, tiny_dense, max_tokens=16, sequential=True, budget=10)
    asked = [r["question_id"] for r in sorted(read_records(first), key=lambda r: r["order"])]
    params = json.loads((first / "params.json").read_text())["settings"]
    assert asked == sequential.order(params["questions"], 0)[:10]  # its seeded order, up to its budget
    nb2, second = run(tmp_path, tiny_dense, max_tokens=16, sequential=True, margin=0.05, compare_with=str(first))
    held = json.loads((second / "summary.json").read_text())["sequential"]
    assert held["design"] == {"margin": 0.05, "budget": 10, "alpha": 0.05} and held["questions"] <= 10
    assert held["outcome"] in ("better", "worse", "equivalent", "cannot tell") and len(held["path"]) == held["questions"]
    text = outputs_text(nb2)
    assert "a 95% confidence sequence valid at every count" in text and "McNemar" not in text
    assert {r["question_id"] for r in read_records(second)} <= set(asked) and verify(second) == []
