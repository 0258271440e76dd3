"""Writes that fail whole: a record is on disk whole or not at all, a full disk or a killed kernel ends a run sealed
as failed halfway with the reason and the command that finishes it, and resume_from finishes it. The disk is a
real tmpfs mounted here (root only: skipped, with the reason, where it cannot be mounted); the server is the
suite's tiny llama-server; the kernel is papermill's own, killed with SIGKILL as the OOM killer would."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sparknb.errors import RunError
from sparknb.runs import execute
from sparknb.runs.execute import ExecuteError, run_notebook
from sparknb.runs.run import FAILURE, RESERVE, Run, read_records, verify

MODEL = "tiny-dense-llamacpp"
DECODE = {"model": MODEL, "prompt_lengths": [32, 64], "repetitions": 8, "warmup": 0, "output_tokens": 48}
ALL = [(n, rep) for n in (32, 64) for rep in range(8)]


@contextlib.contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A real tmpfs mounted on `folder` (root only: the test is skipped, saying why, where it cannot be), unmounted
    after."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True,
                             text=True)
    if mounted.returncode:
        pytest.skip(f"a tmpfs ({options}) cannot be mounted here (root only): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 40 MiB tmpfs: room for the run's 16 MiB reserve, a decode run, and a filler that takes the rest."""
    with tmpfs(tmp_path / "disk", "size=40m") as disk:
        yield disk


def fill(disk: Path) -> Path:
    """Take every byte left on the disk; the file is returned, to give the room back."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(bytes(1 << 16))
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


def test_a_record_that_does_not_fit_is_not_written_at_all_and_a_half_line_is_said_and_left_out(small_disk, caplog):
    run = Run.create("decode", {"notebook": "decode", "settings": {}}, run_id="full", outputs=small_disk)
    run.record({"rep": 0})
    fill(small_disk)
    with pytest.raises(RunError, match=f"Could not write to {run.path}: No space left on device. Free space"):
        run.record({"rep": 1, "text": "x" * 10_000})  # more than the slack of the last 4 KiB page
    assert (run.path / "records.jsonl").read_text() == '{"rep": 0}\n'  # the part that fitted was taken back
    (small_disk / "filler").unlink()
    with open(run.path / "records.jsonl", "a") as f:  # as a kernel killed mid-write, or an older sparknb, left it
        f.write('{"rep": 1, "te')
    with caplog.at_level(logging.WARNING):
        assert read_records(run.path) == [{"rep": 0}]
    assert "records.jsonl line 2 is not a whole record" in caplog.text
    assert execute.seal_interrupted(run.path) == run.path and verify(run.path) == []  # no JSONDecodeError


def fsyncs(monkeypatch, then=None) -> list[tuple[float, str]]:
    """os.fsync as a slow disk's (30 ms, as no test disk is on purpose) or a failing one's (`then` raised): when
    each push ended and which file it pushed."""
    pushed, real = [], os.fsync

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if then is not None:
            raise then
        time.sleep(0.03)
        real(fd)
        pushed.append((time.perf_counter(), name))
    monkeypatch.setattr(os, "fsync", fsync)
    return pushed


def test_records_are_pushed_to_disk_off_the_writers_path_and_seal_waits_for_every_push(tmp_path, monkeypatch):
    pushed = fsyncs(monkeypatch)
    run = Run.create("decode", {"notebook": "decode", "settings": {}}, run_id="slow", outputs=tmp_path)
    t0 = time.perf_counter()
    for rep in range(20):
        run.record({"rep": rep})
    appended = time.perf_counter()
    assert appended - t0 < 0.3, "20 records waited on a 30 ms push each"
    assert read_records(run.path) == [{"rep": rep} for rep in range(20)]  # whole in the file when record returns
    run.seal()
    records = str(run.path / "records.jsonl")
    assert any(name == records and at > appended for at, name in pushed), pushed
    assert verify(run.path) == []


def test_a_push_to_disk_that_failed_is_said_at_the_next_write_or_at_seal(tmp_path, monkeypatch):
    fsyncs(monkeypatch, OSError(errno.EIO, os.strerror(errno.EIO)))
    run = Run.create("decode", {"notebook": "decode", "settings": {}}, run_id="eio", outputs=tmp_path)
    run.record({"rep": 0})
    with pytest.raises(RunError, match=f"Could not write to {run.path}: Input/output error"):
        run.seal()
    assert not run.sealed
    monkeypatch.undo()
    run.seal()  # said once: the run that failed can still be sealed, with what it kept
    assert read_records(run.path) == [{"rep": 0}] and verify(run.path) == []


def test_records_held_while_a_request_is_out_are_written_in_order_at_each_flush_and_at_the_end_however_it_ends(
        tmp_path):
    """The agent's steps one at a time hold their records until the next request has gone (measure.one)."""
    run = Run.create("agent", {"notebook": "agent", "settings": {}}, run_id="held", outputs=tmp_path)
    with pytest.raises(KeyboardInterrupt), run.holding() as flush:
        run.record({"step": 0})
        run.record({"step": 1})
        assert read_records(run.path) == []
        flush()
        assert read_records(run.path) == [{"step": 0}, {"step": 1}]
        run.record({"step": 2})
        raise KeyboardInterrupt  # as Ctrl-C in a cell
    run.record({"step": 3})  # no longer held
    assert read_records(run.path) == [{"step": n} for n in range(4)]


def test_a_run_is_refused_before_any_kernel_where_the_disk_has_no_room_to_seal_it(small_disk):
    fill(small_disk)
    with pytest.raises(ExecuteError, match="No space left on device. Free space.*Nothing was run"):
        run_notebook("decode", {"model": MODEL}, small_disk)
    assert not list((small_disk / "decode").iterdir())


def test_a_read_only_outputs_folder_is_refused_before_any_kernel_naming_the_fix(tmp_path):
    with tmpfs(tmp_path / "frozen", "ro,size=1m") as frozen:
        with pytest.raises(ExecuteError, match=f"Could not write to {frozen}/decode: .*Make the folder writable"):
            run_notebook("decode", {"model": MODEL}, frozen)


def finish(tmp_path: Path, server, first: Path, outputs: Path) -> list[dict]:
    """resume_from the folder: the new run's records, checked whole and verified."""
    again = run_notebook("decode", {**DECODE, "endpoint": server.url, "resume_from": first.name}, outputs)
    assert verify(again) == [] and (again / "summary.json").exists()
    records = read_records(again)
    assert sorted((r["prompt_length"], r["rep"]) for r in records) == ALL
    return records


def when_records(folders: Path, count: int, then) -> threading.Thread:
    """Call `then` once a run folder under `folders` holds `count` records."""
    def wait() -> None:
        for _ in range(3000):
            if any(len(f.read_text().splitlines()) >= count for f in folders.glob("*/records.jsonl")):
                return then()
            threading.Event().wait(0.02)

    watcher = threading.Thread(target=wait, daemon=True)
    watcher.start()
    return watcher


@pytest.mark.server
def test_a_full_disk_mid_decode_seals_the_run_failed_halfway_and_resume_from_finishes_it(small_disk, tiny_dense_llama,
                                                                                          tmp_path):
    watcher = when_records(small_disk / "decode", 2, lambda: fill(small_disk))
    with pytest.raises(ExecuteError) as failed:
        run_notebook("decode", {**DECODE, "endpoint": tiny_dense_llama.url}, small_disk)
    watcher.join(timeout=10)
    (first,) = (small_disk / "decode").iterdir()
    message = str(failed.value)
    assert "decode failed halfway:" in message and f"Could not write to {first}: No space left on device" in message
    assert "Free space on that disk" in message
    assert f"-p resume_from {first.name} --outputs {small_disk}" in message
    assert verify(first) == [] and not (first / RESERVE).exists()  # sealed by the run itself, from its reserve
    assert "No space left" in json.loads((first / FAILURE).read_text())["reason"]
    kept = read_records(first)
    assert 2 <= len(kept) < len(ALL)
    (small_disk / "filler").unlink()  # the room is back
    records = finish(tmp_path, tiny_dense_llama, first, small_disk)
    assert sum(r.get("resumed_from") == first.name for r in records) == len(kept)


def kernel_of(test: int) -> psutil.Process:
    """The notebook's kernel: the ipykernel child of this test's process."""
    found = [p for p in psutil.Process(test).children(recursive=True) if "ipykernel_launcher" in " ".join(p.cmdline())]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.server
def test_a_killed_kernel_seals_the_run_failed_halfway_with_the_reason_and_resume_from_finishes_it(
        tiny_dense_llama, tmp_path, capfd, caplog):
    """Its two runs' terminal is read too (at the file descriptors: the kernel writes to it itself): the runs'
    progress and findings, not the kernel's plumbing (issue 38, item 6)."""
    caplog.set_level(logging.INFO, logger="papermill")
    outputs = tmp_path / "outputs"
    watcher = when_records(outputs / "decode", 2, lambda: kernel_of(os.getpid()).send_signal(signal.SIGKILL))
    with pytest.raises(ExecuteError) as failed:
        run_notebook("decode", {**DECODE, "endpoint": tiny_dense_llama.url}, outputs)
    watcher.join(timeout=10)
    (first,) = (outputs / "decode").iterdir()
    message = str(failed.value)
    assert "the notebook's kernel died (killed by signal SIGKILL)" in message, message
    assert f"-p resume_from {first.name}" in message and "DeadKernelError" not in message
    assert verify(first) == [] and "kernel died" in json.loads((first / FAILURE).read_text())["reason"]
    kept = [r for r in read_records(first) if "error" not in r]
    records = finish(tmp_path, tiny_dense_llama, first, outputs)
    assert sum(r.get("resumed_from") == first.name for r in records) == len(kept) >= 2
    terminal = "".join(capfd.readouterr()) + caplog.text
    assert caplog.text.count("Input Notebook") == 2  # once a run
    assert "running over TCP without encryption" not in terminal and "[IPKernelApp]" not in terminal
    assert "IPython.core.display.Markdown object" not in terminal and "tg48 @ d32" in terminal  # findings as text
