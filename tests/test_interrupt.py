"""Ctrl-C during `sparknb run`, as a terminal sends it (SIGINT to the command's process group), against the real
llama-server test bed (ready in a second, where vLLM's CPU build takes minutes): once in the middle of the
requests, once after the last one, while the analysis runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from sparknb.runs.run import read_records, verify

DECODE = ["-p", "model", "tiny-dense-llamacpp", "-p", "prompt_lengths", "[32, 64]", "-p", "repetitions", "3",
          "-p", "warmup", "0", "-p", "output_tokens", "16"]


def started(tmp_path, server) -> subprocess.Popen:
    """`sparknb run decode` as a terminal starts it, Ctrl-C at its default."""
    command = [sys.executable, "-m", "sparknb", "run", "decode", *DECODE, "-p", "endpoint", server.url,
               "--outputs", str(tmp_path / "outputs")]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def interrupted(tmp_path, server, when: str) -> tuple[int, str]:
    """`sparknb run decode` stopped by Ctrl-C as soon as a line containing `when` is printed: its exit code and
    everything it printed."""
    proc = started(tmp_path, server)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if when in line:
            os.killpg(proc.pid, signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=120)
    return proc.returncode, "".join(seen) + rest


@pytest.mark.server
def test_ctrl_c_mid_run_seals_every_record_with_a_plain_reason_and_no_traceback(tmp_path, tiny_dense_llama):
    code, printed = interrupted(tmp_path, tiny_dense_llama, "[3/6]")
    (folder,) = (tmp_path / "outputs" / "decode").iterdir()
    assert code == 130 and f"interrupted (Ctrl-C); every record taken is kept, sealed as failed halfway, in {folder}" \
        in printed
    assert "Traceback" not in printed and "ZMQError" not in printed
    assert json.loads((folder / "failure.json").read_text())["reason"] == "interrupted (Ctrl-C)"
    assert len(read_records(folder)) >= 3 and verify(folder) == []


@pytest.mark.server
def test_ctrl_c_after_the_last_request_keeps_the_analysis(tmp_path, tiny_dense_llama):
    code, printed = interrupted(tmp_path, tiny_dense_llama, "6 requests done.")
    (folder,) = (tmp_path / "outputs" / "decode").iterdir()
    assert code == 130 and "after the last request: the run is complete" in printed and "Traceback" not in printed
    assert not (folder / "failure.json").exists() and verify(folder) == []
    summary = json.loads((folder / "summary.json").read_text())
    assert len(summary["table"]) == 2 and "Median decode speed" in (folder / "report.html").read_text()
    for r in read_records(folder):  # each progress line counts `rep` as the records and tables do
        assert f"[{r['seq']}/6] {r['prompt_length']} tokens, rep {r['rep']}:" in printed


def kernel_of(pid: int) -> bool:
    """Whether `pid` has started its Jupyter kernel."""
    try:
        return any("ipykernel" in " ".join(child.cmdline()) for child in psutil.Process(pid).children())
    except psutil.Error:  # a process that ended while it was read
        return False


@pytest.mark.server
def test_ctrl_c_while_the_kernel_starts_ends_the_run_as_interrupted(tmp_path, tiny_dense_llama):
    """Seen in a campaign: a Ctrl-C passed on to a kernel still importing its site module killed it, nbclient said
    "Kernel died before replying to kernel_info", and the command ended in that traceback with 1, not 130."""
    proc = started(tmp_path, tiny_dense_llama)
    deadline = time.monotonic() + 60
    while not kernel_of(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGINT)  # the kernel is launched and has not yet answered
    printed, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in printed, printed
    assert "sparknb run: interrupted (Ctrl-C)" in printed
    assert not (tmp_path / "outputs" / "decode").exists() or not any((tmp_path / "outputs" / "decode").iterdir())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop, on purpose
def test_a_ctrl_c_that_python_drops_is_still_raised_before_a_campaigns_next_cell():
    """Python drops an exception raised where it cannot propagate: in a fork hook (a campaign went on to finish
    after a Ctrl-C landed while it started its next server), or in __del__, used here to drop one on purpose."""
    from sparknb.runs import interrupt

    class Drops:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)
            for _ in range(1000):  # the handler runs here, inside __del__, and its KeyboardInterrupt is dropped
                pass

    with interrupt.remembered():
        Drops()  # and this test is still running: the Ctrl-C was dropped
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
    interrupt.check()  # outside a sequence of runs it is forgotten
