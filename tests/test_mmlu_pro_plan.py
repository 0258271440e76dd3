"""The MMLU-Pro plan: every bad parameter named at once, and resume_from and compare_with read like every
study reads earlier runs (from their seal, by folder or by run id under `outputs`), every refusal made
before anything is asked of the server."""

import json

import pytest
from support import FakeHandler, serve
from test_mmlu_pro_data import SHARED, needs_shared

from sparknb.cli import main
from sparknb.errors import DataError, ParamsError
from sparknb.runs.run import Run
from sparknb.studies import mmlu_pro as m


def test_bad_parameters_are_all_named_at_once():
    with pytest.raises(ParamsError) as e:
        m.Plan.build(concurrency=0, shots=7, stop=[""], max_tokens=0, trap_share=2, temperature=3,
                     target_half_width=0, per_category=-1, seed="1")
    for field in ("concurrency", "shots", "stop.0", "max_tokens", "trap_share", "temperature", "target_half_width",
                  "per_category", "seed"):
        assert f"  {field}:" in str(e.value), field
    assert "the validation split has 5 per category" in str(e.value)
    with pytest.raises(ParamsError, match="stop: Input should be a valid list"):
        m.Plan.build(stop="Question:")  # one string is not a list of them


def past_run(outputs, run_id, settings, records=(), seal=True) -> Run:
    """An earlier mmlu_pro run as study.start and finish leave it: params, fingerprint, records, sealed."""
    run = Run.create(m.NOTEBOOK, {"notebook": m.NOTEBOOK, "settings": settings, "model": {"name": "other-model"}},
                     run_id=run_id, outputs=outputs)
    run.write_json("fingerprint.json", {"host": {"hostname": "box"}, "server": {"version": "0.32.0"}})
    for r in records:
        run.record(r)
    if seal:
        run.seal()
    return run


def answer(qid) -> dict:
    return {"question_id": qid, "category": "x", "answer": "A", "finish_reason": "stop", "text": "the answer is (A)"}


@needs_shared
def test_compare_and_resume_refusals_name_the_problem(tmp_path):
    params = {"dataset": str(SHARED), "per_category": 1, "outputs": str(tmp_path)}
    work = m.prepare(m.Plan.build(**params), "tiny-dense")
    past_run(tmp_path, "other-draw", work.settings() | {"questions": ["1", "2"], "seed": 5})
    with pytest.raises(DataError, match="asked other questions.*seed=5"):
        m.prepare(m.Plan.build(compare_with="other-draw", **params), "tiny-dense")  # a run id under outputs
    past_run(tmp_path, "half", work.settings(), [answer(work.ids[0])])
    with pytest.raises(DataError, match="no finished answer to 13 of the 14 questions.*resume_from='half'"):
        m.prepare(m.Plan.build(compare_with="half", **params), "tiny-dense")
    past_run(tmp_path, "hotter", work.settings() | {"temperature": 0.7})
    with pytest.raises(DataError, match="different temperature.*0.7 there, 0.0 here"):
        m.prepare(m.Plan.build(resume_from="hotter", **params), "tiny-dense")
    decode = Run.create("decode", {"notebook": "decode", "settings": {}}, outputs=tmp_path)
    decode.write_json("fingerprint.json", {})
    decode.seal()
    with pytest.raises(DataError, match="is a 'decode' run, not a mmlu_pro run"):
        m.Plan.build(resume_from=str(decode.path), **params)
    reused = m.prepare(m.Plan.build(resume_from="half", **params), "tiny-dense").reused
    assert [r["question_id"] for r in reused] == [work.ids[0]]


def test_a_tampered_or_unsealed_past_run_is_refused_naming_the_files(tmp_path):
    tampered = past_run(tmp_path, "tampered", {}, [answer("1")])
    records = tampered.path / "records.jsonl"
    records.chmod(0o644)
    records.write_text(json.dumps(answer("1") | {"answer": "B"}) + "\n")
    past_run(tmp_path, "unsealed", {}, [answer("1")], seal=False)
    with pytest.raises(DataError) as e:
        m.Plan.build(outputs=str(tmp_path), resume_from="tampered", compare_with="unsealed")
    text = str(e.value)
    assert "resume_from 'tampered'" in text and "changed: records.jsonl" in text  # both named at once
    assert "compare_with 'unsealed'" in text and "manifest.json" in text
    with pytest.raises(DataError, match="no such run folder, nor a run id"):
        m.Plan.build(outputs=str(tmp_path), compare_with="nowhere")


class Counting(FakeHandler):
    """Counts every HTTP request of any kind, /v1/models included, which vLLM's own counters do not:
    a refusal made before any request must leave this at zero."""

    seen: list

    def do_GET(self):
        self.seen.append(self.path)
        self.send_body(404, "{}")

    do_POST = do_GET


@needs_shared
def test_compare_and_resume_refuse_before_any_request(tmp_path, capsys):
    handler = type("Seen", (Counting,), {"seen": []})
    outputs = tmp_path / "outputs"
    work = m.prepare(m.Plan.build(dataset=str(SHARED), per_category=1), "tiny-dense")
    past_run(outputs, "hotter", work.settings() | {"temperature": 0.7})
    with serve(handler) as url:
        def refusal(*params):
            code = main(["run", "mmlu_pro", "--outputs", str(outputs), "-p", "model", "tiny-dense",
                         "-p", "endpoint", url, "-p", "dataset", str(SHARED), "-p", "per_category", "1", *params])
            assert code == 2 and sorted(p.name for p in (outputs / m.NOTEBOOK).iterdir()) == ["hotter"], \
                "nothing is kept"
            return capsys.readouterr().err

        assert "different temperature" in refusal("-p", "resume_from", "hotter")
        assert "no such run folder" in refusal("-p", "compare_with", "missing")
        assert "concurrency" in refusal("-p", "concurrency", "0")
        assert "more than 'history' holds (381 questions)" in refusal("-p", "per_category", "400")
    assert handler.seen == []  # not even the model list was asked for
