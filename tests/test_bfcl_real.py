"""The shipped tool-format campaign (params/campaigns/smollm2-tool-format.yaml) on the real model, SmolLM2-135M on
llama-server with a tool-capable template: native tool calls against BFCL's prompt mode on the same tasks, the
second serving asked sequentially. Every real answer's decoded calls and grade are checked against bfcl-eval's own
decoder and checker on the raw answer, and the comparison's report is read in headless Chromium as a person sees it.

Its servings listen on free ports here (copies of the shipped model files), and ask two tasks (one function, and
no fitting function) with short answers: on a busy 2-core box one task took 10 to 28 s at 64 tokens, most of it
the prefill of the tool schemas (300 to 1,000 prompt tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from bfcl_reference import decoded, graded
from browser import chromium, look_at
from support import free_port

from sparknb.boxes import campaign
from sparknb.cli import main
from sparknb.runs.params import project_root
from sparknb.runs.run import read_records, verify

pytestmark = [pytest.mark.server, pytest.mark.llamacpp, pytest.mark.beside_the_vllm_starts]
MODELS = ("smollm2-tools-llamacpp", "smollm2-prompt-llamacpp")


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tool-format")
    shipped = yaml.safe_load((project_root() / "params/campaigns/smollm2-tool-format.yaml").read_text())
    assert shipped["models"] == list(MODELS) and shipped["studies"]["bfcl"]["sequential"] is True
    paths = []
    for name in MODELS:
        model = yaml.safe_load((project_root() / f"params/models/{name}.yaml").read_text())
        model["endpoint"] = f"http://127.0.0.1:{free_port()}/v1"
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump(model))
        paths.append(str(tmp / f"{name}.yaml"))
    shipped["models"] = paths
    shipped["studies"]["bfcl"] |= {"categories": ["simple_python", "irrelevance"], "per_category": 1,
                                    "max_tokens": 24}
    (tmp / "campaign.yaml").write_text(yaml.safe_dump(shipped))
    outputs = tmp / "outputs"
    record = campaign.run(str(tmp / "campaign.yaml"), outputs=outputs, log=print)
    cells = {Path(e["model"]).stem: Path(e["run"]) for e in read_records(record) if e.get("status") == "done"}
    assert main(["run", "compare", "-p", "campaign", record.name, "--outputs", str(outputs)]) == 0
    (report,) = (outputs / "compare").iterdir()
    return cells, report


def test_both_servings_seal_and_every_real_answer_is_graded_as_bfcl_grades_it(ran):
    cells, _ = ran
    assert set(cells) == set(MODELS) and all(verify(folder) == [] for folder in cells.values())
    formats = {}
    for name, folder in cells.items():
        records = [r for r in read_records(folder) if "correct" in r]
        assert records, name
        for r in records:  # BFCL's own decoder and checker on the raw answer
            assert (r["calls"], r["correct"]) == (decoded(r), graded(r)["valid"]), (r["item"], r["text"][:200])
        formats[name] = {r["format"] for r in records}
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["with_a_call"] == sum(bool(r["calls"]) for r in records)
        assert set(summary["problems"]) >= {"an answer that does not parse as calls", "a call where none was wanted"}
    assert formats == {MODELS[0]: {"native"}, MODELS[1]: {"prompt"}}


def test_the_comparison_shows_the_format_effect_decided_sequentially_in_chromium(ran, tmp_path):
    _, report = ran
    headline = json.loads((report / "summary.json").read_text())["headline"]
    (row,) = [r for r in headline["rows"] if r["figure"].startswith("paired difference in BFCL score")]
    assert row["sequences"], row  # the prompt-mode serving's own confidence sequence decides the row
    with chromium() as browser:
        seen = look_at(browser, report / "report.html", tmp_path / "report.png")
    assert seen["foreign"] == [] and not seen["blank_page"] and seen["tables"] > 0
    assert "paired difference in BFCL score" in seen["text"] and "sequential" in seen["text"]
