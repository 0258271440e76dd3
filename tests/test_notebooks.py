"""The notebook sources: stored clean, and documented for `papermill --help-notebook`."""

import subprocess
import sys

import nbformat
import pytest

from sparknb.runs.params import project_root

NOTEBOOKS = sorted((project_root() / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert "decode" in [p.stem for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_sources_store_no_outputs_and_no_injected_cells(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        assert "injected-parameters" not in cell.metadata.get("tags", []), f"{path.name} keeps an injected cell"
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{path.name} stores outputs"
    assert "papermill" not in nb.metadata, f"{path.name} was saved after a papermill run"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_parameter_is_typed_and_explained(path):
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "exactly one cell tagged parameters"
    lines = [line for line in cells[0].source.splitlines() if line.strip()]
    for line in lines:
        assert ": " in line.split("=")[0] and "  # " in line, f"untyped or unexplained parameter: {line}"
    help_text = subprocess.run([sys.executable, "-m", "papermill", "--help-notebook", str(path)],
                               capture_output=True, text=True, check=True).stdout
    for line in lines:
        assert line.split(":")[0] in help_text
