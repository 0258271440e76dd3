"""HumanEval's parameters, checked before anything starts: every problem named, a sandbox that cannot be had
refused before any request, and answers of a run with other settings never mixed in by resume_from."""

import pytest
from test_humaneval_measure import fake_coder, finish, open_study, quiet, work_on

from sparknb.errors import DataError, ParamsError, SandboxError
from sparknb.studies import humaneval as h


def test_bad_parameters_are_all_named_at_once():
    with pytest.raises(ParamsError) as e:
        h.Plan.build(style="infill", isolation="docker", samples=0, timeout_s=0)
    text = str(e.value)
    assert all(f in text for f in ("style", "isolation", "samples", "timeout_s"))


def test_samples_at_temperature_0_are_refused():
    with pytest.raises(ParamsError, match="asks the same greedy answer 5 times; set a temperature"):
        h.Plan.build(samples=5)
    assert h.Plan.build(samples=5, temperature=0.8).samples == 5


def test_a_sandbox_that_cannot_be_had_stops_the_study_before_anything_is_asked(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxError, match="apt-get install bubblewrap.*isolation='namespaces'"):
        h.prepare(h.Plan.build(limit=2), "tiny-dense")
    work = h.prepare(h.Plan.build(limit=2, isolation="rlimits"), "tiny-dense")  # asked for by name: had, recorded
    assert work.settings()["sandbox"]["level"] == "rlimits" and "NETWORK IS REACHABLE" in work.sandbox.describe()


def test_the_plan_records_the_problems_the_data_and_the_limits():
    work = h.prepare(h.Plan.build(problems=["HumanEval/3", "HumanEval/1"], timeout_s=4.5, memory_mb=512),
                     "tiny-dense")
    s = work.settings()
    assert s["problem_ids"] == ["HumanEval/1", "HumanEval/3"] and s["dataset_version"] == "1.0.3"
    assert s["dataset_size"] == 164 and s["sandbox"]["limits"]["wall_s"] == 4.5
    assert s["sandbox"]["limits"]["cpu_s"] == 5 and s["sandbox"]["limits"]["memory_mb"] == 512
    assert [(p.id, n) for p, n in work.items()] == [("HumanEval/1", 0), ("HumanEval/3", 0)]


def test_resume_from_a_run_with_other_settings_is_refused(tmp_path):
    for _, url in fake_coder():
        work = work_on(outputs=tmp_path, limit=2)
        study = open_study(tmp_path, url, work)
        finish(study, work, h.ask(study, work, log=quiet))
    with pytest.raises(DataError, match=r"different style, max_tokens \(style: 'chat' there, 'completion' here; "
                                        r"max_tokens: 8192 there, 64 here\)"):
        work_on(outputs=tmp_path, limit=2, style="completion", max_tokens=64, resume_from=study.run.id)
