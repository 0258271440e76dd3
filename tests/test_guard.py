"""The guard stops a measurement on a busy machine, says why, and records an override."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparknb.endpoint.metrics import Snapshot
from sparknb.engines import VLLM
from sparknb.machine import fingerprint
from sparknb.machine.guard import GuardError, GuardReport, RunLock, check

REPO = Path(__file__).resolve().parents[1]
QUIET = {"running": 0.0, "waiting": 0.0}
NO_SUCH_PID = 2**22 + 17  # above the kernel's largest possible pid_max
OTHER_NO_SUCH_PID = 2**22 + 99


def gpu_with(*pids: int, used: int | None = 3 * 2**30) -> dict:
    """The shape fingerprint.nvml() returns on a machine with one GPU."""
    return {"available": True, "driver_version": "580.0", "cuda_driver_version": "13.0",
            "devices": [{"index": 0, "name": "GB10", "processes": [{"pid": p, "used_memory_bytes": used}
                                                                      for p in pids]}]}


def test_running_requests_stop_the_run() -> None:
    with pytest.raises(GuardError) as caught:
        check(server_load={"running": 2.0, "waiting": 0.0}, gpu=gpu_with())
    message = str(caught.value)
    assert "2" in message and "running" in message
    assert "force=True" in message and "recorded" in message


def test_waiting_requests_stop_the_run() -> None:
    with pytest.raises(GuardError, match="3 requests waiting"):
        check(server_load={"running": 0.0, "waiting": 3.0}, gpu=gpu_with())


def test_unreadable_load_stops_the_run() -> None:
    with pytest.raises(GuardError, match="could not read"):
        check(server_load={"running": float("nan")}, gpu=gpu_with())


def test_a_server_without_the_load_gauges_is_refused_and_forcing_records_it_unchecked() -> None:
    # A server whose /metrics lacks the gauges: the old guard read 0 and passed, so "busy" could never be found.
    load = Snapshot.parse("vllm:generation_tokens_total 12\n", engine=VLLM).load()
    with pytest.raises(GuardError, match="could not read how many requests are running"):
        check(server_load=load, gpu=gpu_with())
    report = check(server_load=load, gpu=gpu_with(), force=True)
    assert report.forced and all(f.startswith("unchecked:") for f in report.findings) and len(report.findings) == 2


def test_no_server_to_ask_is_not_an_unreadable_one() -> None:
    # The swap study starts its own servers: there is no load to read, and that is not a finding.
    assert check(server_load=None, gpu=gpu_with()).findings == []


def test_quiet_machine_passes() -> None:
    report = check(server_load=QUIET, gpu=gpu_with())
    assert report == GuardReport(findings=[], forced=False, gpu="1 GPU(s), 0 compute process(es) seen")


def test_no_gpu_is_recorded_and_the_run_goes_on() -> None:
    report = check(server_load=QUIET, gpu={"available": False, "reason": "nvmlInit failed: no library"})
    assert report.gpu == "no NVIDIA GPU: nvmlInit failed: no library"
    assert not report.findings


def test_real_nvml_is_asked_when_no_gpu_dict_is_given(monkeypatch) -> None:
    # What NVML says, read here without sparknb: the guard's summary must agree with it.
    try:
        import pynvml

        pynvml.nvmlInit()
        expected = f"{pynvml.nvmlDeviceGetCount()} GPU(s)"
        pynvml.nvmlShutdown()
    except Exception as exc:  # no driver here: the guard must say why, in NVML's words
        expected = f"no NVIDIA GPU: nvmlInit failed: {exc}" if "pynvml" in sys.modules else "no NVIDIA GPU: pynvml"
    report = check(server_load=QUIET, allow_pids=[os.getpid()])
    assert report.gpu.startswith(expected)
    # And the guard really asks NVML when given nothing: a different answer from it shows up in the report.
    monkeypatch.setattr(fingerprint, "nvml", lambda: {"available": False, "reason": "sentinel from the test"})
    assert check(server_load=QUIET).gpu == "no NVIDIA GPU: sentinel from the test"


def test_force_keeps_the_findings_and_says_it_was_forced() -> None:
    report = check(server_load={"running": 1.0, "waiting": 4.0}, gpu=gpu_with(), force=True)
    assert report.forced is True
    assert report.findings == ["1 request running on the server", "4 requests waiting on the server"]
    assert report.as_dict()["forced"] is True and len(report.as_dict()["findings"]) == 2


def test_force_on_a_quiet_machine_is_not_an_override() -> None:
    assert check(server_load=QUIET, gpu=gpu_with(), force=True).forced is False


def test_a_gpu_process_that_is_not_the_server_is_named() -> None:
    me = os.getpid()
    assert "vllm" not in Path(f"/proc/{me}/cmdline").read_bytes().decode().lower()
    with pytest.raises(GuardError) as caught:
        check(server_load=QUIET, gpu=gpu_with(me), server_process="vllm")
    message = str(caught.value)
    assert f"GPU process {me} (" in message and "3.0 GiB" in message


def test_allowed_pids_are_the_servers() -> None:
    report = check(server_load=QUIET, gpu=gpu_with(os.getpid()), allow_pids=[os.getpid()])
    assert report.findings == [] and report.gpu == "1 GPU(s), 1 compute process(es) seen"


def test_a_process_whose_command_line_names_the_server_is_the_servers() -> None:
    # vLLM's engine process retitles itself VLLM::EngineCore, in capitals.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "VLLM::EngineCore"])
    try:
        assert not check(server_load=QUIET, gpu=gpu_with(proc.pid), server_process="vllm").findings
    finally:
        proc.kill()
        proc.wait()


def test_a_lone_unreadable_process_is_taken_as_the_server_and_noted() -> None:
    report = check(server_load=QUIET, gpu=gpu_with(NO_SUCH_PID, used=None))
    assert report.findings == []
    assert len(report.notes) == 1 and str(NO_SUCH_PID) in report.notes[0] and "server" in report.notes[0]


def test_two_unreadable_processes_are_findings() -> None:
    with pytest.raises(GuardError) as caught:
        check(server_load=QUIET, gpu=gpu_with(NO_SUCH_PID, OTHER_NO_SUCH_PID))
    message = str(caught.value)
    assert str(NO_SUCH_PID) in message and str(OTHER_NO_SUCH_PID) in message
    assert "command line not readable" in message


def test_unsupported_process_list_is_noted() -> None:
    gpu = gpu_with()
    gpu["devices"][0]["processes"] = "not supported"
    report = check(server_load=QUIET, gpu=gpu)
    assert report.findings == [] and report.notes == ["GPU 0 process list: not supported"]


# --- the run lock ----------------------------------------------------------------------------------------

HOLD = """
import sys, time
from pathlib import Path
from sparknb.machine.guard import RunLock
RunLock({"run_id": "run-sub-7", "notebook": "bench.ipynb"}, Path(sys.argv[1])).acquire()
time.sleep(120)
"""


def _holder_written(path: Path, pid: int, proc: subprocess.Popen, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the lock holder exited early: {proc.stderr.read()}"
        try:
            holder = json.loads(path.read_text())
            if holder.get("pid") == pid:
                return holder
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError("the subprocess never wrote its holder record")


@pytest.fixture
def held_lock(tmp_path: Path):
    path = tmp_path / "run.lock"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        holder = _holder_written(path, proc.pid, proc)
        yield path, proc, holder
    finally:
        proc.kill()
        proc.wait()


def test_a_held_lock_names_its_holder(held_lock) -> None:
    path, proc, holder = held_lock
    assert holder["run_id"] == "run-sub-7" and holder["notebook"] == "bench.ipynb" and holder["started_at"]
    lock = RunLock({"run_id": "mine"}, path)
    with pytest.raises(GuardError) as caught:
        lock.acquire()
    message = str(caught.value)
    assert f"pid {proc.pid}" in message and "run-sub-7" in message and "bench.ipynb" in message
    assert not lock.held


def test_the_lock_is_free_once_the_holder_dies(held_lock) -> None:
    path, proc, _ = held_lock
    proc.kill()
    proc.wait()
    lock = RunLock({"run_id": "mine", "notebook": "n.ipynb"}, path)
    lock.acquire()
    try:
        assert lock.held and lock.forced_over is None
        assert json.loads(path.read_text())["pid"] == os.getpid()
    finally:
        lock.release()
    assert path.read_text() == ""  # the next run is not told about a finished one


def test_force_over_a_held_lock_is_recorded(held_lock) -> None:
    path, proc, _ = held_lock
    lock = RunLock({"run_id": "mine"}, path)
    lock.acquire(force=True)
    assert not lock.held
    assert lock.forced_over["pid"] == proc.pid and lock.forced_over["run_id"] == "run-sub-7"
    assert json.loads(path.read_text())["pid"] == proc.pid  # the holder's record is left alone
    lock.release()


def test_context_manager_holds_then_frees(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    with RunLock({"run_id": "a"}, path) as first:
        assert first.held
        with pytest.raises(GuardError, match="run_id a"):
            RunLock({"run_id": "b"}, path).acquire()
    assert not first.held
    with RunLock({"run_id": "b"}, path) as second:
        assert second.held


def test_default_lock_path_is_in_the_temp_dir(monkeypatch) -> None:
    import tempfile
    monkeypatch.delenv("SPARKNB_LOCK_FILE", raising=False)
    assert RunLock({}).path == Path(tempfile.gettempdir()) / "sparknb-run.lock"
    monkeypatch.setenv("SPARKNB_LOCK_FILE", "/elsewhere/lock")
    assert RunLock({}).path == Path("/elsewhere/lock")
