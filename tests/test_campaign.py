"""Campaigns: a file that fails before anything starts, and a real run stopped with Ctrl-C and resumed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparknb.boxes import campaign
from sparknb.cli import main
from sparknb.errors import ParamsError
from sparknb.runs.params import load_campaign, project_root
from sparknb.runs.run import read_records, verify
from support import free_port, model_yaml


def _file(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


def test_the_shipped_campaigns_are_valid_and_plan_every_cell():
    cells = campaign.plan(load_campaign("tiny"))
    assert [c.key for c in cells][-1] == "swap/all models/1"  # across models, last, with no server up
    studies = {p.stem for p in (project_root() / "notebooks").glob("*.ipynb")} - {"compare"}
    assert {c.notebook for c in cells} == studies  # the demo runs every study there is
    assert len(cells) == (len(studies) - 1) * 2 + 1  # each on both models, and the swap between them
    assert cells[-1].parameters["models"] == ["tiny-dense", "tiny-moe"]
    seed = campaign.plan(load_campaign("spark-35b-vs-27b"))
    assert {c.model for c in seed} == {"qwen3.6-35b-a3b", "qwen3.6-27b-fp8", None}
    assert {c.notebook for c in seed} == studies


def test_an_invalid_campaign_names_every_bad_field_before_anything_starts(tmp_path):
    path = _file(tmp_path, """
name: bad
models: [tiny-dense]
studies:
  decode: {prompt_lenghts: [64], repetitions: "five", endpoint: "http://x/v1"}
  nosuch: {}
""")
    with pytest.raises(ParamsError) as e:
        campaign.plan(load_campaign(path))
    text = str(e.value)
    assert "studies.decode.prompt_lenghts: not a parameter of decode.ipynb" in text
    assert "studies.decode.repetitions: repetitions must be a whole number, 1 or more, or auto; got 'five'" in text
    assert "studies.decode.endpoint: set by the campaign itself" in text
    assert "studies.nosuch: no such notebook" in text


def test_an_unknown_model_or_field_in_the_file_is_named(tmp_path):
    with pytest.raises(ParamsError, match="models: No model params"):
        load_campaign(_file(tmp_path, "name: x\nmodels: [no-such-model]\nstudies: {decode: {}}\n"))
    with pytest.raises(ParamsError, match="repetition"):
        load_campaign(_file(tmp_path, "name: x\nmodels: [tiny-dense]\nrepetition: 2\nstudies: {decode: {}}\n"))


def _members(pgid: int) -> list[int]:
    """Live processes of a group, read from /proc here rather than through the code under test."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                out.append(int(entry))
    return out


MOE, DENSE = "tiny-moe-llamacpp", "tiny-dense-llamacpp"


@pytest.mark.server
@pytest.mark.llamacpp
def test_ctrl_c_stops_cleanly_and_resume_runs_only_what_is_missing(tmp_path):
    """On llama-server, which starts in a second (each of vLLM's three starts here took a minute and more)."""
    path = _file(tmp_path, """
name: two-cells
models: [tiny-moe-llamacpp, tiny-dense-llamacpp]
studies:
  decode: {prompt_lengths: [64], output_tokens: 16, warmup: 0, repetitions: 1}
""")
    outputs = tmp_path / "outputs"
    command = [sys.executable, "-m", "sparknb", "campaign", "run", path, "--outputs", str(outputs)]
    # A shell starts background jobs with Ctrl-C ignored, and Python keeps it so: give the child the default back.
    proc = subprocess.Popen(command, cwd=project_root(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 900
    record = None
    while time.monotonic() < deadline and proc.poll() is None:
        found = list((outputs / "campaigns").glob("*/records.jsonl"))
        if found and any(r.get("status") == "done" for r in read_records(found[0].parent)):
            record = found[0].parent
            break
        time.sleep(0.5)
    assert record is not None, proc.stdout.read() if proc.poll() is not None else "no cell finished in time"
    proc.send_signal(signal.SIGINT)  # Ctrl-C, after the first cell and while the second model starts
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "--resume" in out
    events = read_records(record)
    for pid in [e["pid"] for e in events if e.get("event") == "server up"]:
        assert _members(pid) == [], f"server group {pid} left running"
    done = [e for e in events if e.get("status") == "done"]
    assert [e["cell"] for e in done] == ["decode/tiny-moe-llamacpp/1"] and verify(done[0]["run"]) == []
    assert not (record / "manifest.json").exists()  # unsealed: it can be resumed

    again = subprocess.run([*command, "--resume", record.name], cwd=project_root(), capture_output=True, text=True,
                           timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 already done" in again.stdout and "[1/1] decode/tiny-dense-llamacpp/1: sealed" in again.stdout
    assert "left" in again.stdout  # the progress line estimates what is left
    events = read_records(record)
    cells = [e["cell"] for e in events if e.get("status") == "done"]
    assert cells == ["decode/tiny-moe-llamacpp/1", "decode/tiny-dense-llamacpp/1"]  # the first was not run again
    assert verify(record) == []
    params = json.loads((record / "params.json").read_text())
    assert [c["cell"] for c in params["cells"]] == cells

    # The comparison reads the campaign's sealed cells: real runs, real ratios.
    assert main(["run", "compare", "-p", "campaign", record.name, "--outputs", str(outputs)]) == 0
    (report,) = (outputs / "compare").iterdir()
    headline = json.loads((report / "summary.json").read_text())["headline"]
    assert headline["subjects"] == [MOE, DENSE]
    row = next(r for r in headline["rows"] if r["figure"] == "tok/s at 64 tokens")
    assert set(row["values"]) == {MOE, DENSE} and DENSE in row["ratios"]
    decision = next(d for d in headline["decisions"] if d["figure"] == "tok/s at 64 tokens")
    assert decision["outcome"] == "caveated"  # one request a side is too few for an interval, and it says so
    assert any("too few measurements" in reason for reason in decision["reasons"])
    assert verify(report) == [] and (report / "report.html").exists()
    # Beside the measured ratio, the one the two byte curves predict (bytes a step reads, tokens a step yields).
    tables = {e["cell"].split("/")[1]: json.loads((Path(e["run"]) / "summary.json").read_text())["table"][0]
              for e in events if e.get("status") == "done"}
    moe, dense = tables[MOE], tables[DENSE]
    predicted = next(r for r in headline["rows"] if r["figure"] == "speed ratio at 64 tokens predicted by the byte curves")
    expected = moe["MB read/step"] / dense["MB read/step"] / (moe["tokens/step"] or 1)
    assert predicted["values"][DENSE] == pytest.approx(expected) and "measured" in predicted["note"]


def test_a_model_that_cannot_be_served_fails_its_cells_and_the_campaign_goes_on(tmp_path):
    broken = model_yaml(tmp_path, "broken", {"start": f"{sys.executable} -c 'import sys; sys.exit(3)'",
                                             "ready_timeout_s": 30}, port=free_port())
    path = _file(tmp_path, f"name: broken\nmodels: [{broken}]\nstudies: {{decode: {{prompt_lengths: [64]}}}}\n")
    folder = campaign.run(path, outputs=tmp_path / "outputs", log=lambda line: None)
    (cell,) = [r for r in read_records(folder) if r.get("cell")]
    assert cell["status"] == "failed" and cell["reason"].startswith("server: ") and "exited with code 3" in cell["reason"]
    assert not (folder / "manifest.json").exists()  # not every cell done: left open for --resume
    assert [r["cell"] for r in campaign.failed(folder.name, tmp_path / "outputs")] == [cell["cell"]]


def test_a_campaign_with_a_failed_cell_exits_non_zero_with_the_failures_last(tmp_path, capsys):
    broken = model_yaml(tmp_path, "broken", {"start": f"{sys.executable} -c 'import sys; sys.exit(3)'",
                                             "ready_timeout_s": 30}, port=free_port())
    path = _file(tmp_path, f"name: broken\nmodels: [{broken}]\nstudies: {{decode: {{prompt_lengths: [64]}}}}\n")
    assert main(["campaign", "run", path, "--outputs", str(tmp_path / "outputs")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-2] == "1 cell(s) FAILED:" and err[-1].startswith("  decode/") and "exited with code 3" in err[-1]


def test_a_campaign_with_an_unknown_model_study_and_parameter_names_all_three(tmp_path, capsys):
    path = _file(tmp_path, "name: x\nmodels: [no-such-model]\nstudies: {nosuch: {}, decode: {prompt_lenghts: [64]}}\n")
    assert main(["campaign", "run", path, "--outputs", str(tmp_path / "outputs")]) == 2
    said = capsys.readouterr().err
    assert "models: No model params" in said and "studies.nosuch: no such notebook" in said
    assert "studies.decode.prompt_lenghts: not a parameter of decode.ipynb" in said
    assert not (tmp_path / "outputs").exists()
