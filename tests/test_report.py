"""The report of a run that failed halfway, made from a real papermill run of a notebook that fails."""

import nbformat
import papermill
import pytest

from sparknb.runs.report import write_html


def test_a_failed_halfway_report_has_no_papermill_banner_and_says_the_reason_once(tmp_path):
    source, executed = tmp_path / "fails.ipynb", tmp_path / "executed.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('measured 3 requests')"),
                                         nbformat.v4.new_code_cell("raise RuntimeError('the server went away')"),
                                         nbformat.v4.new_code_cell("print('never')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, source)
    with pytest.raises(papermill.PapermillExecutionError):
        papermill.execute_notebook(str(source), str(executed), progress_bar=False)
    assert "An Exception was encountered" in executed.read_text()  # papermill's banner is in the notebook
    html = write_html(executed, tmp_path / "report.html", "RuntimeError: the server went away", []).read_text()
    assert "An Exception was encountered" not in html and "encountered an exception here" not in html
    assert "measured 3 requests" in html and "This run failed halfway</strong>: RuntimeError: the server went away" in html
