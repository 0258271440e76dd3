"""The swap notebook end to end: a start that fails on purpose, two real vLLM starts, and a sidecar.

The real run is the expensive one (two real vLLM starts, about three minutes on two cores): tiny-dense cold, with
a private compile cache that starts empty, then evicted and started again on the cache its first start wrote. A swap
between two different models is the same eviction and start (test_engines swaps llama-server's models); a third vLLM
start took 80 s here and proved nothing these two do not. The evictions are the lifecycle's stop of a ready vLLM
server's whole process tree (API server, engine core, worker), which testbed's servers use too.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import papermill
import pytest
import yaml
from support import folder_text, model_yaml, outputs_text, run_notebook

from sparknb.runs.params import project_root
from sparknb.runs.run import read_records, verify
from sparknb.runs.study import start
from sparknb.serving import startup_log
from sparknb.serving.processes import group_alive, port_in_use
from sparknb.studies import swap

NOTEBOOK = project_root() / "notebooks" / "swap.ipynb"
KEY = "sk-sparknb-swap-test-5d2e8c41a7f3"  # guards the throw-away servers the swap test starts


def _gone(pids) -> bool:
    return not any(group_alive(pid) for pid in pids)


FAILS = ("{python} -c \"import sys, time; print('loading weights ...', flush=True); time.sleep(0.5); "
         "print('ValueError: no such checkpoint: /models/nope', flush=True); sys.exit(3)\"")


def test_a_start_command_that_fails_on_purpose_stops_the_notebook_with_the_log_and_keeps_the_records(tmp_path):
    """Through the real notebook: the error shows the log's last lines, and the run folder says what happened."""
    fails = model_yaml(tmp_path, "fails", {"start": FAILS, "compile_cache": str(tmp_path / "cc")})
    out = tmp_path / "out.ipynb"
    with pytest.raises(papermill.PapermillExecutionError) as e:
        papermill.execute_notebook(str(NOTEBOOK), str(out), parameters={
            "models": [str(fails)], "clear_compile_cache": True, "outputs": str(tmp_path / "outputs")},
            progress_bar=False, kernel_name="python3")
    message = str(e.value)
    assert "exited with code 3 before it was ready" in message and "no such checkpoint" in message
    assert "No process this study started is left running" in message
    folder = next((tmp_path / "outputs" / "swap").iterdir())
    records = read_records(folder)
    kinds = [r["kind"] for r in records]
    assert kinds == ["clear", "start", "final"]
    first = records[1]
    assert first["ok"] is False and first["exit_code"] == 3 and "no such checkpoint" in first["error"]
    assert records[-1]["models"] == {"fails": "failed to start; stopped"} and records[-1]["processes_left"] == []
    assert "no such checkpoint" in (folder / "server-01-fails.log").read_text()
    assert _gone([first["pid"]])
    failure = json.loads((folder / "failure.json").read_text())  # sealed as failed halfway, every record kept
    assert failure["failed_halfway"] and "exited with code 3" in failure["reason"] and verify(folder) == []


def _tiny_with_private_cache(tmp_path: Path, name: str) -> Path:
    """The shipped params with a compile cache of the test's own, so clearing it disturbs no one."""
    data = yaml.safe_load((project_root() / "params" / "models" / f"{name}.yaml").read_text())
    data["lifecycle"]["compile_cache"] = str(tmp_path / "cc" / name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.server
def test_cold_start_then_a_restart_on_the_real_vllm_server_finds_its_own_compile_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKNB_API_KEY", KEY)  # tiny-dense's params name this variable: its server gets the key
    dense = str(_tiny_with_private_cache(tmp_path, "tiny-dense"))
    nb, folder = run_notebook("swap", tmp_path, {"models": [dense, dense], "clear_compile_cache": True})
    records = read_records(folder)
    starts = [r for r in records if r["kind"] == "start"]
    evicts = [r for r in records if r["kind"] == "evict"]

    # Two starts, the first from an empty machine; each answered.
    assert [(s["from"], s["model"]) for s in starts] == [("(empty)", "tiny-dense"), ("tiny-dense", "tiny-dense")]
    assert all(s["ok"] for s in starts)
    # The cleared cache makes the first start cold; the second finds the cache the first wrote.
    assert starts[0]["compile_cache_before"]["state"] == "empty" and starts[1]["compile_cache_before"]["files"] > 0
    assert starts[0]["compile_cache"] == startup_log.COLD
    assert starts[1]["compile_cache"] in (startup_log.WARM_LOADED, startup_log.WARM_RECOMPILED)
    for s in starts:
        stages = s["startup"]["stages"]
        assert sum(v for v in stages.values() if v is not None) == pytest.approx(s["ready_s"], abs=1e-3)
        assert stages["process start"] > 0 and stages["compilation"] > 0 and stages["weight loading"] is not None
        assert s["first_answer_s"] >= s["ready_s"] and s["answer"]["ok"]
        assert s["client_wait_s"] == pytest.approx(s["evict_s"] + s["first_answer_s"])
        assert s["server"]["model"] == s["model"] and s["startup"]["engine"]["version"] == s["server"]["version"]
        assert s["memory_after"]["server_bytes"] > 100 * 2**20  # a vLLM server holds hundreds of MiB at least
        assert s["memory_before"]["used_bytes"] > 0 and "unified" in s["memory_after"]["source"]
        assert not port_in_use(int(s["target"]["endpoint"].rsplit(":", 1)[1].split("/")[0]))
    assert starts[0]["evict_s"] == 0.0 and starts[1]["evict_s"] > 0
    assert [e["for"] for e in evicts] == ["tiny-dense", None]
    # Each ready server's process tree went on SIGTERM, within seconds: a clean shutdown, not the SIGKILL fallback.
    assert all(e["how"] == "SIGTERM" and e["seconds"] < 15 for e in evicts), evicts
    # Afterwards, no server process remains, and the records say what became of the model.
    final = records[-1]
    assert final["kind"] == "final" and final["processes_left"] == []
    assert final["models"] == {"tiny-dense": "stopped by the study"}
    assert _gone(s["pid"] for s in starts)

    summary = json.loads((folder / "summary.json").read_text())
    assert len(summary["transitions"]) == 2 and summary["processes_left"] == []
    assert all(set(row) == {swap.EVICT, *startup_log.STAGES, swap.FIRST_ANSWER} for row in summary["stages"].values())
    texts = [f["text"] for f in summary["findings"]]
    assert swap.SINGLE_CAVEAT in texts
    assert any("cold compile cache" in t for t in texts)  # cold against warm, for tiny-dense
    for name in ("server-01-tiny-dense.log", "server-02-tiny-dense.log"):
        assert "Starting vLLM server on" in (folder / name).read_text()
    text = outputs_text(nb)
    assert "image/png" in text and "client wait s" in text and swap.SINGLE_CAVEAT[:40] in text
    assert "%|" not in text  # no frozen progress bar
    assert KEY not in folder_text(folder) and KEY not in nbformat.writes(nb)
    assert verify(folder) == []
    _read_in_chromium(nb, folder, tmp_path)


def _read_in_chromium(nb, folder: Path, tmp_path: Path) -> None:
    """The swap report as sparknb writes it from the executed notebook, opened from disk in headless Chromium: no
    other host asked, its tables and plots drawn, every file strict JSON (what test_browser_reports checks of every
    other study's report, here on the run this module makes anyway: one more would start the server twice again)."""
    from browser import chromium, look_at
    from support import strict, strict_lines

    from sparknb.runs.report import write_html

    nbformat.write(nb, tmp_path / "executed.ipynb")
    report = write_html(tmp_path / "executed.ipynb", tmp_path / "report.html")
    with chromium() as browser:
        seen = look_at(browser, report, tmp_path / "swap-report.png")
    assert seen["foreign"] == [] and seen["tables"] >= 1 and seen["images"] >= 1
    assert all(seen["drawn"]) and not seen["blank_page"]
    for path in folder.rglob("*.json*"):  # strict JSON, every file: an unknown figure is null, never NaN
        (strict_lines if path.suffix == ".jsonl" else strict)(path)


@pytest.mark.server
def test_sidecar_mode_times_the_request_itself_here_against_a_model_already_resident(tmp_path, tiny_moe):
    """No llama-swap here (a Go binary, not on PyPI): the degenerate case, where the proxy has nothing to swap."""
    path = model_yaml(tmp_path, "tiny-moe", {"sidecar": True, "ready_timeout_s": 60}, port=tiny_moe.port)
    plan = swap.Plan.build(models=[str(path)], repetitions=2)
    study = start("swap", models=plan.models, settings=plan.settings(), outputs=str(tmp_path / "outputs"))
    table = swap.run(study, plan)
    records = study.records()
    requests = [r for r in records if r["kind"] == "request"]
    assert len(requests) == 2 and all(r["ok"] and r["evict_s"] is None for r in requests)
    assert all(0 < r["client_wait_s"] < 30 for r in requests)
    assert list(table["to"]) == ["tiny-moe", "tiny-moe"]
    assert records[-1]["models"] == {"tiny-moe": "not managed here (sidecar)"} and records[-1]["processes_left"] == []
    assert tiny_moe.running  # a sidecar's models are never stopped here
    study.finish(swap.summary(records, swap.findings(records)))
    assert verify(study.run.path) == []
