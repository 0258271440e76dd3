"""Process groups and ports, on real processes and sockets: what every start and stop relies on."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import pytest

from sparknb.serving import processes

SLEEPER = "import time; time.sleep(600)"
# A leader that starts one child in its own group, says so, and sleeps.
FAMILY = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', %r]); print('up', flush=True); "
          "time.sleep(600)" % SLEEPER)
DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"


def _group(code: str) -> subprocess.Popen:
    """A Python process in a new process group, returned once it has printed 'up'."""
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    assert process.stdout.readline().strip() == "up"
    return process


@pytest.fixture
def family():
    process = _group(FAMILY)
    deadline = time.monotonic() + 10
    while len(processes.group_members(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    yield process
    processes.signal_group(process.pid, signal.SIGKILL)
    process.wait()


def test_group_members_are_the_leader_and_its_child_and_nothing_else(family):
    members = processes.group_members(family.pid)
    assert len(members) == 2 and family.pid in members
    assert processes.group_alive(family.pid)


def test_signalling_the_group_ends_the_child_too(family):
    processes.signal_group(family.pid, signal.SIGTERM)
    assert processes.wait_gone(family.pid, family, timeout=10)
    assert processes.group_members(family.pid) == [] and not processes.group_alive(family.pid)
    processes.signal_group(family.pid, signal.SIGTERM)  # a group already gone is not an error


def test_waiting_for_a_group_that_ignores_sigterm_times_out():
    deaf = _group(DEAF)
    try:
        processes.signal_group(deaf.pid, signal.SIGTERM)
        t0 = time.monotonic()
        assert not processes.wait_gone(deaf.pid, deaf, timeout=0.5)
        assert 0.5 <= time.monotonic() - t0 < 3
    finally:
        processes.signal_group(deaf.pid, signal.SIGKILL)
        deaf.wait()


def test_a_leader_that_exited_but_was_not_reaped_does_not_count_as_alive():
    process = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    deadline = time.monotonic() + 10
    while processes.group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # no poll(): the leader stays a zombie
    assert not processes.group_alive(process.pid)
    assert _state(process.pid) == "Z"
    process.wait()


def test_memory_of_a_live_group_is_counted_and_unknown_once_it_is_gone(family):
    held = processes.group_memory(family.pid)
    assert held is not None and held > 2 * 2**20  # two Python interpreters hold megabytes
    processes.signal_group(family.pid, signal.SIGKILL)
    processes.wait_gone(family.pid, family, timeout=10)
    assert processes.group_memory(family.pid) is None


def test_a_started_process_dies_with_the_process_that_started_it():
    starter = ("import subprocess, sys, time; from sparknb.serving.processes import die_with_parent; "
               f"p = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}], preexec_fn=die_with_parent); "
               "print(p.pid, flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", starter], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _state(child) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(child) in (None, "Z")


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (Z for a zombie), None once it is gone."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


# --- ports ----------------------------------------------------------------------------------------


def test_a_listening_port_is_in_use_on_every_local_name_and_a_free_one_is_not():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert all(processes.port_in_use(port, host) for host in ("127.0.0.1", "localhost", "0.0.0.0"))
    assert not processes.port_in_use(port)


def test_a_port_left_in_time_wait_is_free():
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server side closes first, so its end of the port waits in TIME_WAIT
        time.sleep(0.1)
        client.close()
    assert not processes.port_in_use(port)


def test_pick_port_keeps_a_free_preferred_port_and_replaces_a_taken_one():
    free = processes.free_port()
    assert processes.pick_port(free) == free
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", free))
        listener.listen()
        other = processes.pick_port(free)
        assert other != free and not processes.port_in_use(other)
