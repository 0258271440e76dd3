"""The HTML reports as a reader opens them from disk: headless Chromium, no network, tables and plots drawn.

A report is opened as a file:// page; every request it makes is recorded, and anything but file: and data:
is a request to another host, which fails the test (and is stopped before it leaves the machine).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from browser import chromium, look_at
from sparknb.runs.execute import run_notebook
from sparknb.runs.report import write_html
from sparknb.runs.run import verify
from support import strict, strict_lines

@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@dataclass(frozen=True)
class Case:
    """A small `sparknb run` of one notebook (None: a run the demo made) and what its report must show at the least."""

    parameters: Callable[[pytest.FixtureRequest, Path], dict] | None
    tables: int
    images: int


def _decode(request: pytest.FixtureRequest, tmp_path: Path) -> dict:
    server = request.getfixturevalue("tiny_dense")
    return {"model": "tiny-dense", "endpoint": server.url, "prompt_lengths": [64, 128], "output_tokens": 16,
            "warmup": 1, "repetitions": 1}


def _prefill(request: pytest.FixtureRequest, tmp_path: Path) -> dict:
    server = request.getfixturevalue("tiny_dense")
    return {"model": "tiny-dense", "endpoint": server.url, "prompt_lengths": [100, 300, 600], "warmup": 1,
            "repetitions": 2}


def _load(request: pytest.FixtureRequest, tmp_path: Path) -> dict:
    server = request.getfixturevalue("tiny_moe")
    return {"model": "tiny-moe", "endpoint": server.url, "concurrency": [1, 2], "prompt_tokens": 128,
            "output_tokens": 64, "requests_per_level": 4}


def _humaneval(request: pytest.FixtureRequest, tmp_path: Path) -> dict:
    server = request.getfixturevalue("tiny_dense")
    return {"model": "tiny-dense", "endpoint": server.url, "limit": 3, "max_tokens": 32, "concurrency": 3}


# Every notebook whose report is checked, with the parameters of a small run on the tiny test bed and the tables
# and plots its report has. mtp's, mmlu_pro's and the comparison's are the demo's own real runs (DEMO), which the
# session makes anyway; swap's is test_swap_notebook.py's, on the run it makes anyway.
READY: dict[str, Case] = {
    "decode": Case(_decode, tables=1, images=1),
    "prefill": Case(_prefill, tables=1, images=1),
    "load": Case(_load, tables=1, images=1),
    "humaneval": Case(_humaneval, tables=1, images=1),
}
DEMO: dict[str, Case] = {
    "mtp": Case(None, tables=1, images=1),
    "mmlu_pro": Case(None, tables=1, images=1),
    "compare": Case(None, tables=1, images=2),
}


def _png() -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([1, 3, 2])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def test_a_report_asks_no_other_host_for_anything(browser, tmp_path):
    # nbconvert's own template loads require.js and MathJax from a CDN: a report must not need them.
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("shown()")
    cell.outputs = [nbformat.v4.new_output("display_data", {"text/html": pd.DataFrame({"tok/s": [41.5]}).to_html()}),
                    nbformat.v4.new_output("display_data", {"image/png": _png()})]
    nb.cells = [nbformat.v4.new_markdown_cell("# A study\nWith **findings**."), cell]
    nbformat.write(nb, tmp_path / "executed.ipynb")
    report = write_html(tmp_path / "executed.ipynb", tmp_path / "report.html")

    seen = look_at(browser, report, tmp_path / "report.png")
    assert seen["foreign"] == []
    assert seen["tables"] == 1 and seen["images"] == 1 and seen["drawn"] == [True]
    assert not seen["blank_page"]
    assert "shown()" not in report.read_text()  # code hidden


@pytest.mark.server
@pytest.mark.parametrize("notebook", list(READY))
def test_the_report_of_a_real_run_opens_offline_with_its_tables_and_plots(notebook, browser, request, tmp_path):
    case = READY[notebook]
    folder = run_notebook(notebook, case.parameters(request, tmp_path), outputs=tmp_path / "outputs")
    _opens_offline(browser, notebook, folder, case, tmp_path)


@pytest.mark.server
@pytest.mark.llamacpp
@pytest.mark.parametrize("notebook", list(DEMO))
def test_the_reports_of_the_demos_runs_open_offline_with_their_tables_and_plots(notebook, browser, demo, tmp_path):
    _, _, comparison, cells = demo
    folder = comparison if notebook == "compare" else cells[notebook, "smollm2-llamacpp"]
    _opens_offline(browser, notebook, folder, DEMO[notebook], tmp_path)


def _opens_offline(browser, notebook: str, folder: Path, case: Case, tmp_path: Path) -> None:
    seen = look_at(browser, folder / "report.html", tmp_path / f"{notebook}-report.png")
    assert seen["foreign"] == [], f"the {notebook} report asks other hosts"
    assert seen["tables"] >= case.tables, f"the {notebook} report shows {seen['tables']} tables with rows"
    assert seen["images"] >= case.images, f"the {notebook} report shows {seen['images']} decoded images"
    assert all(seen["drawn"]), f"blank images in the {notebook} report: {seen['drawn']}"
    assert not seen["blank_page"]
    for path in folder.rglob("*.json*"):  # strict JSON, every file: an unknown figure is null, never NaN
        (strict_lines if path.suffix == ".jsonl" else strict)(path)
    assert (folder / "summary.json").is_file() and verify(folder) == []


def test_the_comparison_report_shows_the_verdict_first_and_every_input_warning(browser, tmp_path):
    from sparknb.runs.run import Run
    from test_compare import decode_run, fingerprint

    outputs = tmp_path / "outputs"
    warned = [{"level": "warning", "text": "this machine's load average reached 3.0 on 2 CPU threads during the sweep.",
               "about": []},
              {"level": "warning", "text": "At 111 tokens decode ranged from 14.8 to 245.9 tok/s (16.6x) over 3 requests.",
               "about": [111]}]
    a = decode_run(outputs, "tiny-dense", 26.0, fingerprint(), seed=1, findings=warned[:1])
    b = decode_run(outputs, "tiny-moe", 8.9, fingerprint(), seed=2, findings=warned[1:])
    record = Run.create("campaigns", {"notebook": "campaigns", "cells": []}, outputs=outputs, label="c")
    for run in (a, b):
        record.record({"cell": f"decode/{run.id}/1", "status": "done", "run": str(run.path)})
    record.record({"cell": "mmlu_pro/tiny-moe/1", "status": "failed", "reason": "mmlu_pro did not start: no data"})
    folder = run_notebook("compare", {"campaign": record.id}, outputs=outputs)
    seen = look_at(browser, folder / "report.html", tmp_path / "compare-warnings.png")
    assert seen["foreign"] == [] and seen["tables"] >= 1 and all(seen["drawn"]) and not seen["blank_page"]
    text = seen["text"]
    for w in warned:
        assert w["text"] in text, w["text"]
    assert "Missing: mmlu_pro/tiny-moe/1 failed" in text
    assert text.index("The verdict") < text.index("Read this first") < text.index("The headline")
    assert "2 warning(s) from the 2 run(s)" in text
