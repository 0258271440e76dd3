"""JupyterLab as a user meets it: a real `jupyter lab`, driven in headless Chromium, runs the notebooks.

The notebook is a copy with papermill's injected-parameters cell (what `papermill --prepare-only` writes),
pointing it at the tiny test bed; the stored notebook is never touched. The test clicks Run > Run All
Cells as a person does, then checks what a person would look at: the kernel connected and idle, the table
and the plot on screen, no error, and a sealed run folder on disk.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from browser import (DECODED_IMAGES, TABLES_WITH_ROWS, chromium, decode_runs_of_both_tiny_models, images_not_blank,
                     open_page)
from sparknb.runs.params import project_root
from sparknb.runs.run import verify
from support import free_port

RUN_TIMEOUT_MS = 300_000
# jupyter_server issue #1265: a kernel websocket the browser drops while the server still waits for the
# kernel's first reply fails with this in the server's log. Seen here only as a log line: see test below.
WS_BUG = "'NoneType' object has no attribute 'kernel_ws_protocol'"
OUTPUT = ".jp-OutputArea-output"
# The toolbar says idle before the notebook has a kernel at all; the status bar names the kernel once it has one.
KERNEL_IDLE = ("() => { const bar = [...document.querySelectorAll('.jp-StatusBar-Widget')].map(e => e.textContent).join(' ');"
               " return /\\S \\| Idle/.test(bar) && !bar.includes('No Kernel') && bar; }")
# Run All marks every code cell [*]; a cell that fails turns the cells queued after it back to [ ].
DONE = ("() => !!document.querySelector('.jp-Notebook-ExecutionIndicator[data-status=idle]') && "
        "/\\[\\d+\\]/.test(document.querySelector('.jp-CodeCell .jp-InputPrompt')?.textContent) && "
        "![...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].some(p => p.textContent.includes('*'))")


@dataclass(frozen=True)
class Lab:
    url: str
    token: str
    root: Path
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _wait_up(lab: Lab, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"jupyter lab exited with {process.returncode}:\n{lab.log_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"{lab.url}/api/status?token={lab.token}", timeout=2)
            return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"jupyter lab did not answer in {timeout} s:\n{lab.log_text()[-3000:]}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM lets jupyter shut its kernels down; whatever of its process group is left is killed."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def running_lab(home: Path, **env: str) -> Iterator[Lab]:
    """`jupyter lab` on a free port with a token, rooted at the project, with its own config and workspace
    folders so nothing of the machine's JupyterLab state reaches the test; stopped after."""
    home.mkdir(parents=True, exist_ok=True)
    lab = Lab(f"http://127.0.0.1:{free_port()}", secrets.token_hex(16), project_root(), home / "lab.log")
    env = os.environ | {"JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime")} | env
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={lab.url.rsplit(':', 1)[1]}", f"--IdentityProvider.token={lab.token}",
               f"--ServerApp.root_dir={lab.root}", f"--LabApp.workspaces_dir={home / 'workspaces'}",
               f"--LabApp.user_settings_dir={home / 'settings'}"]
    if os.geteuid() == 0:  # CI and this machine run as root; jupyter refuses root without it
        command.append("--allow-root")
    with open(lab.log, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        _wait_up(lab, process)
        yield lab
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def lab(tiny_dense, tmp_path_factory) -> Iterator[Lab]:
    """Started after tiny_dense, so the kernels inherit the API key variable its params name."""
    with running_lab(tmp_path_factory.mktemp("jupyter")) as lab:
        yield lab


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A folder under the lab's root (JupyterLab opens nothing outside it), in the ignored outputs/, removed after."""
    folder = project_root() / "outputs" / f"lab-test-{secrets.token_hex(4)}"
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def prepared(notebook: str, folder: Path, parameters: dict) -> Path:
    """A copy of notebooks/NAME.ipynb with papermill's injected-parameters cell, as --prepare-only writes it."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(project_root() / "notebooks" / f"{notebook}.ipynb"))
    target = folder / f"{notebook}.ipynb"
    nbformat.write(parameterize_notebook(nb, parameters), target)
    return target


def kernel_status(page) -> str:
    """What the status bar says of the kernel: "Python 3 (ipykernel) | Idle", "... | Connecting"."""
    return page.locator(".jp-StatusBar-Widget").inner_text()


def wait_for_kernel(page, lab: Lab, screenshot: Path, timeout_ms: int = 120_000) -> str:
    """Wait until the notebook's kernel is connected and idle; what the status bar said at that moment (a
    moment later JupyterLab's own first requests may make it busy again)."""
    try:
        return page.wait_for_function(KERNEL_IDLE, timeout=timeout_ms, polling=250).json_value()
    except Exception:
        page.screenshot(path=str(screenshot))
        pytest.fail(f"the kernel never became idle: the status bar says {kernel_status(page)!r}; "
                    f"server log:\n{lab.log_text()[-3000:]}")


def open_notebook(browser, lab: Lab, notebook: Path):
    """A page showing the notebook in JupyterLab, as the link `jupyter lab` prints opens it; requests recorded."""
    page = open_page(browser, allowed=(lab.url, "data:", "blob:"))
    page.goto(f"{lab.url}/lab/tree/{notebook.relative_to(lab.root).as_posix()}?token={lab.token}")
    return page


def run_all_in_lab(browser, lab: Lab, notebook: Path, screenshot: Path):
    """Open the notebook in JupyterLab, wait for the kernel, click Run > Run All Cells, wait until it is done.
    Returns the page (the caller closes it) and the kernel status the status bar showed before running."""
    page = open_notebook(browser, lab, notebook)
    connected = wait_for_kernel(page, lab, screenshot)
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    page.wait_for_function(DONE, timeout=RUN_TIMEOUT_MS, polling=500)
    page.screenshot(path=str(screenshot), full_page=True)
    return page, connected


@pytest.mark.server
def test_decode_runs_in_jupyterlab_with_its_table_and_plot(browser, lab, workdir, tiny_dense, tmp_path):
    outputs = tmp_path / "outputs"
    notebook = prepared("decode", workdir, {"model": "tiny-dense", "endpoint": tiny_dense.url,
                                            "prompt_lengths": [64, 128], "output_tokens": 16, "warmup": 1,
                                            "repetitions": 1, "outputs": str(outputs)})
    page, connected = run_all_in_lab(browser, lab, notebook, tmp_path / "decode-lab.png")
    try:
        status = kernel_status(page)
        errors = page.locator(f"{OUTPUT}[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
        tables = page.evaluate(TABLES_WITH_ROWS, OUTPUT)
        images = page.evaluate(DECODED_IMAGES, OUTPUT)
        drawn = images_not_blank(page, OUTPUT)
        foreign = page.requests.foreign()
    finally:
        page.close()
    assert "| Idle" in connected, connected
    assert "Connecting" not in status and "Unknown" not in status, status
    assert not [e for e in errors if "Traceback" in e or "Error" in e], errors
    assert tables >= 2, f"{tables} tables with rows on screen (measurements and the summary expected)"
    assert images >= 1 and all(drawn), f"{images} plots drawn, blank: {drawn}"
    assert foreign == [], "JupyterLab asked other hosts"
    (run,) = (outputs / "decode").iterdir()
    assert verify(run) == []  # the whole notebook ran, through study.finish and the seal
    assert WS_BUG not in lab.log_text()


KERNEL_START_S = 8


def test_a_page_reloaded_while_the_kernel_starts_connects_once_the_kernel_is_up(browser, workdir, tmp_path):
    # The reload drops a kernel socket the server still holds open, waiting for the new kernel's first
    # kernel_info reply; jupyter_server logs WS_BUG for it (issue #1265) whatever its version. In 2.18.0 the
    # dropped socket also orphaned that kernel_info request, so the reloaded page said "Connecting" for the
    # whole kernel_info_timeout (60 s): hence jupyter_server>=2.18.1 in pyproject.toml.
    ipython = tmp_path / "ipython"
    startup = ipython / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-slow.py").write_text(f"import time\ntime.sleep({KERNEL_START_S})\n")  # as slow as on a busy box
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    notebook = workdir / "slow-kernel.ipynb"
    nbformat.write(nb, notebook)
    with running_lab(tmp_path / "jupyter", IPYTHONDIR=str(ipython)) as lab:
        page = open_notebook(browser, lab, notebook)
        try:
            page.wait_for_function("() => [...document.querySelectorAll('.jp-StatusBar-Widget')]"
                                   ".some(e => e.textContent.includes('| Connecting'))", timeout=60_000)
            reloaded = time.monotonic()
            page.reload()
            status = wait_for_kernel(page, lab, tmp_path / "reloaded.png", timeout_ms=120_000)
            waited = time.monotonic() - reloaded
        finally:
            page.close()
    assert "| Idle" in status, status
    assert waited < KERNEL_START_S + 30, f"connected {waited:.0f} s after the reload (kernel_info timeout is 60 s)"


# compare.ipynb's run browser (sparknb.studies.compare.browser): an ipywidgets SelectMultiple of sealed runs,
# a Compare button and an Output that the button fills with the table and the chart.
RUN_PICKER = f"{OUTPUT} .widget-select-multiple select"
COMPARE_BUTTON = f"{OUTPUT} button.widget-button:has-text('Compare')"
RUN_VIEW = f"{OUTPUT} .widget-output"


IMAGE_SIZES = "s => [...document.querySelectorAll(s + ' img')].map(i => [i.naturalWidth, i.naturalHeight])"


def check_run_browser_answers_a_click(page, runs: list[Path]) -> None:
    """Picking the notebook's own runs and pressing Compare draws their table and the same chart again below."""
    (notebook_chart,) = page.evaluate(IMAGE_SIZES, OUTPUT)  # the notebook's chart, before the view has any
    page.locator(RUN_PICKER).select_option(label=[f"decode: {run.name}" for run in runs])
    assert page.evaluate(TABLES_WITH_ROWS, RUN_VIEW) == 0  # nothing drawn there before the click
    page.locator(COMPARE_BUTTON).click()
    # The button's callback prints "Cannot compare these runs: ..." into the view when it fails.
    page.wait_for_function(f"() => ({DECODED_IMAGES})({RUN_VIEW!r}) > 0 || "
                           f"document.querySelector({RUN_VIEW!r}).innerText.includes('Cannot compare')", timeout=60_000)
    view = page.locator(RUN_VIEW).inner_text()
    assert page.evaluate(TABLES_WITH_ROWS, RUN_VIEW) >= 1, view
    assert page.evaluate(IMAGE_SIZES, RUN_VIEW) == [notebook_chart], f"the chart after the click:\n{view[-2000:]}"
    assert all(images_not_blank(page, RUN_VIEW))


@pytest.mark.server
def test_compare_runs_in_jupyterlab_and_its_run_browser_answers_a_click(browser, lab, workdir, tiny_dense, tiny_moe,
                                                                          tmp_path):
    outputs = tmp_path / "outputs"
    runs = decode_runs_of_both_tiny_models(tiny_dense, tiny_moe, outputs)
    notebook = prepared("compare", workdir, {"runs": [str(run) for run in runs], "outputs": str(outputs)})
    page, connected = run_all_in_lab(browser, lab, notebook, tmp_path / "compare-lab.png")
    try:
        assert "| Idle" in connected, connected
        assert page.evaluate(TABLES_WITH_ROWS, OUTPUT) >= 1
        assert page.evaluate(DECODED_IMAGES, OUTPUT) >= 1 and all(images_not_blank(page, OUTPUT))
        check_run_browser_answers_a_click(page, runs)
        page.screenshot(path=str(tmp_path / "compare-clicked.png"), full_page=True)
    finally:
        page.close()
    assert WS_BUG not in lab.log_text()
