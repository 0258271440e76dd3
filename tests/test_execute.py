"""Executing a notebook into a sealed run: the notebook found through the study registry, every parameter checked
against the notebook's own and the study's Plan before any kernel starts, secrets kept out of it, and a run that
died sealed by hand."""

import json
import os

import pytest

from sparknb.errors import ExecuteError
from sparknb.runs import execute
from sparknb.runs.run import FAILURE, Run, verify
from sparknb.runs.study import ENV_PREFIX
from sparknb.studies import registry


def test_a_study_is_found_by_its_name_and_a_notebook_by_its_path(tmp_path):
    assert execute.notebook_path("decode") == registry.find("decode").notebook_path()
    own = tmp_path / "mine.ipynb"
    own.write_text("{}")
    assert execute.notebook_path(str(own)) == own
    with pytest.raises(ExecuteError, match=r"No notebook 'decod'\. Known: decode, prefill, mtp, load, agent, mmlu_pro"):
        execute.notebook_path("decod")


def test_every_bad_parameter_is_named_at_once_by_the_notebook_and_the_plan():
    problems = execute.parameter_problems(execute.notebook_path("decode"), {
        "seal": False, "prompt_lenghts": [111], "output_tokens": 1, "order": "random", "force": "yes",
        "temperature": 0.5})
    text = "\n".join(problems)
    assert len(problems) == 5, text  # temperature 0.5 is fine
    assert "seal: set by sparknb itself" in text and "prompt_lenghts: not a parameter of decode.ipynb" in text
    assert "output_tokens: Input should be greater than or equal to 2" in text  # the Plan's own check...
    assert "(decode speed needs two tokens or more)" in text  # ...with its description
    assert "order: Input should be 'shuffled' or 'grouped'" in text
    assert "force: 'yes' is not of type bool" in text  # not a Plan field: the notebook's declared type


def test_a_parameter_set_by_the_campaign_is_refused_where_the_campaign_gives_it():
    problems = execute.parameter_problems(execute.notebook_path("decode"), {"model": "tiny-dense"},
                                          ("model", "run_id"))
    assert problems == ["model: set by sparknb itself; leave it out"]


def test_a_password_in_the_endpoint_goes_through_the_environment_and_any_other_secret_is_refused():
    environ = {}
    safe = execute.hide_secrets({"endpoint": "http://me:hunter2pass@127.0.0.1:9/v1", "model": "tiny-dense"}, environ)
    assert safe == {"endpoint": ENV_PREFIX + "SPARKNB_PARAMETER_ENDPOINT", "model": "tiny-dense"}
    assert environ == {"SPARKNB_PARAMETER_ENDPOINT": "http://me:hunter2pass@127.0.0.1:9/v1",
                       "SPARKNB_ENDPOINT_PASSWORD": "hunter2pass"}
    with pytest.raises(ExecuteError, match="parameter suite holds a secret"):
        execute.hide_secrets({"suite": "http://me:hunter2pass@host/x.jsonl"}, {})


def test_the_declared_type_of_a_notebook_parameter_is_checked_as_python_would_read_it():
    assert execute.fits(3, "float") and execute.fits([1], "list") and execute.fits("x", "object")
    assert not execute.fits(True, "int") and not execute.fits("3", "int") and not execute.fits(3.5, "int")


def test_a_run_that_died_is_sealed_by_hand_marked_failed_halfway_with_its_records(tmp_path):
    run = Run.create("decode", {"notebook": "decode", "settings": {}}, run_id="died", outputs=tmp_path)
    run.record({"prompt_length": 111, "decode_tok_s": 8.4})
    assert execute.seal_interrupted(run.path) == run.path
    assert verify(run.path) == [] and (run.path / "records.jsonl").read_text().count("\n") == 1
    assert json.loads((run.path / FAILURE).read_text())["reason"] == "sealed by hand after the run died"
    with pytest.raises(ExecuteError, match="is sealed already"):
        execute.seal_interrupted(run.path)
    with pytest.raises(ExecuteError, match="is not a sparknb run folder"):
        execute.seal_interrupted(tmp_path)
    assert not any(k.startswith("SPARKNB_PARAMETER_") for k in os.environ)
