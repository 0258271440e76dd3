"""resume_from for decode and load: a run whose server was SIGKILLed halfway is finished by a second run that
reuses what the first one finished and asks the server only for the rest, by the server's own count. On the real
llama-server test bed (tiny-dense), which starts in a second where vLLM's CPU build takes minutes."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from sparknb.endpoint import metrics
from sparknb.endpoint.client import Endpoint
from sparknb.errors import DataError
from sparknb.runs.execute import ExecuteError, run_notebook
from sparknb.runs.run import read_records, verify
from sparknb.runs.schedule import Schedule
from sparknb.serving import testbed
from sparknb.studies import decode
from support import free_port

MODEL = "tiny-dense-llamacpp"
DECODE = {"model": MODEL, "prompt_lengths": [32, 64], "repetitions": 4, "warmup": 0, "output_tokens": 48}
LOAD = {"model": MODEL, "concurrency": [1, 2, 3], "requests_per_level": 4, "warmup": 0, "prompt_tokens": 32,
        "output_tokens": 48}


def test_a_resumed_schedule_sends_only_what_the_earlier_run_did_not_finish():
    fixed = Schedule([64, 128, 256], 1, 3, "shuffled", seed=0)
    fixed.resume({64: {0: 5.0, 1: 5.0, 2: 5.1}, 128: {0: 4.0}})
    sent = list(fixed)
    assert sorted(p for p in sent if p[1] >= 0) == [(128, 1), (128, 2), (256, 0), (256, 1), (256, 2)]
    assert sorted(p for p in sent if p[1] < 0) == [(128, -1), (256, -1)]  # no warmup where nothing is left
    auto = Schedule([64, 128], 0, "auto", "grouped", cap=8)
    auto.resume({64: {i: 5.0 for i in range(6)}, 128: {0: 4.2, 1: 4.2}})  # 64: settled; 128: four short of six
    assert [(n, rep) for n, rep in auto if auto.add(n, 4.2) is None] == [(128, 2), (128, 3), (128, 4), (128, 5)]


def killed_halfway(tmp_path, notebook: str, params: dict, records_before_kill: int):
    """`notebook` run through sparknb against a llama-server SIGKILLed once the run holds this many records."""
    server = testbed.start("tiny-dense", free_port(), engine="llama.cpp", log_path=tmp_path / "first.log")
    folders = tmp_path / "outputs" / notebook

    def kill() -> None:
        while not any(len(f.read_text().splitlines()) >= records_before_kill for f in folders.glob("*/records.jsonl")):
            threading.Event().wait(0.02)
        os.killpg(server.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    try:
        with pytest.raises(ExecuteError, match=f"{notebook} failed halfway"):
            run_notebook(notebook, {**params, "endpoint": server.url}, tmp_path / "outputs")
    finally:
        killer.join(timeout=10)
        server.stop()
    (folder,) = folders.iterdir()
    return folder


def resumed(tmp_path, notebook: str, params: dict, first) -> tuple[list[dict], float]:
    """The second run, resuming `first` on a fresh server: its records, and the tokens the server generated."""
    server = testbed.start("tiny-dense", free_port(), engine="llama.cpp", log_path=tmp_path / "second.log")
    try:
        ep = Endpoint(server.url, "tiny-dense")
        ep.info()  # llama-server's counters are read under its engine's names
        before = ep.metrics()[metrics.GENERATED]
        again = run_notebook(notebook, {**params, "endpoint": server.url, "resume_from": first.name},
                             tmp_path / "outputs")
        generated = ep.metrics()[metrics.GENERATED] - before
        ep.close()
    finally:
        server.stop()
    assert verify(again) == [] and (again / "summary.json").exists()
    return read_records(again), generated


@pytest.mark.server
@pytest.mark.llamacpp
def test_a_killed_decode_run_is_finished_by_resume_from(tmp_path):
    first = killed_halfway(tmp_path, "decode", DECODE, 3)
    kept = read_records(first)
    done = {(r["prompt_length"], r["rep"]) for r in kept if "error" not in r}
    assert 3 <= len(done) < 8
    failure = json.loads((first / "failure.json").read_text())
    assert failure["failed_halfway"] and failure["reason"] and not (first / "summary.json").exists()
    assert verify(first) == []  # sealed as it stood
    # The report shows what was measured and the failure in one plain sentence, not a traceback.
    report = (first / "report.html").read_text()
    assert "This run failed halfway" in report and f"It kept {len(kept)} record(s)" in report
    assert "Traceback" not in report and "PapermillExecutionError" not in report
    assert report.count("<tr>") >= len(kept) + 1  # a row per record kept, and the header
    other = decode.Plan.build(**{k: v for k, v in DECODE.items() if k != "model"} | {"output_tokens": 32},
                              resume_from=first.name, outputs=str(tmp_path / "outputs"))
    with pytest.raises(DataError, match="output_tokens: 48 there, 32 here"):  # as the notebook asks, before start()
        decode.reusable(other, MODEL)
    records, generated = resumed(tmp_path, "decode", DECODE, first)
    reused = {(r["prompt_length"], r["rep"]) for r in records if r.get("resumed_from") == first.name}
    asked = [(r["prompt_length"], r["rep"]) for r in records if not r.get("resumed_from")]
    assert reused == done and sorted(reused | set(asked)) == [(n, rep) for n in (32, 64) for rep in range(4)]
    assert generated == 48 * len(asked) == 48 * (8 - len(done))  # the server was asked only for the rest
    assert len({r["seq"] for r in records}) == len(records)


@pytest.mark.server
@pytest.mark.llamacpp
def test_a_killed_load_run_is_finished_by_resume_from(tmp_path):
    first = killed_halfway(tmp_path, "load", LOAD, 6)  # level 1's four requests and its record, then level 2's
    kept = read_records(first)
    levels = [r["level_name"] for r in kept if r.get("kind") == "level"]
    assert levels and len(levels) < 3
    records, generated = resumed(tmp_path, "load", LOAD, first)
    reused = [r for r in records if r.get("resumed_from") == first.name]
    assert {r["level_name"] for r in reused} == set(levels)  # a level cut short is not reused...
    assert [r["level_name"] for r in records if r.get("kind") == "level"] == ["1 in flight", "2 in flight",
                                                                              "3 in flight"]
    asked = [r for r in records if r.get("kind") == "request" and not r.get("resumed_from")]
    assert generated == 48 * len(asked) == 48 * 4 * (3 - len(levels))  # ...and measured again, whole
