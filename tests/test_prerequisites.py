"""What `make demo` and `make test` need from the machine is checked in their first seconds: a machine without
bubblewrap once ran the demo for 7 minutes before both HumanEval cells failed. `.ci/prerequisites` runs for real here,
on a PATH without bwrap (and without apt-get, so nothing is installed), and the Makefile is read by make itself."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "prerequisites"


def path_without(tmp_path: Path, *names: str) -> str:
    """A PATH holding every command of this one but `names`."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        for command in Path(directory).glob("*") if Path(directory).is_dir() else ():
            if command.name not in names and not (folder / command.name).exists() and os.access(command, os.X_OK):
                (folder / command.name).symlink_to(command)
    return str(folder)


def prerequisites(what: str, path: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/"), "SPARKNB_PREREQUISITES": "check"}
    t0 = time.perf_counter()
    done = subprocess.run([str(SCRIPT), what], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    return done, time.perf_counter() - t0


@pytest.mark.parametrize("what", ["demo", "test"])
def test_without_bubblewrap_make_stops_in_seconds_naming_the_one_command(tmp_path, what):
    done, took = prerequisites(what, path_without(tmp_path, "bwrap", "apt-get", "dnf"))
    assert done.returncode == 1 and took < 10, (done, took)
    assert f"make {what} cannot run on this machine yet" in done.stderr
    assert "no bwrap" in done.stderr and "apt-get install -y bubblewrap" in done.stderr, done.stderr


@pytest.mark.parametrize("what", ["demo", "test"])
def test_without_ssh_keygen_make_stops_naming_the_package(tmp_path, what):
    """The lent GPU machine had no ssh-keygen: every run there was sealed UNSIGNED, said only run by run."""
    done, took = prerequisites(what, path_without(tmp_path, "ssh-keygen", "apt-get", "dnf"))
    assert done.returncode == 1 and took < 10, (done, took)
    assert "no ssh-keygen" in done.stderr and "openssh-client" in done.stderr, done.stderr


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed here (.ci/run installs it)")
def test_a_machine_that_has_everything_the_demo_needs_passes_at_once():
    done, took = prerequisites("demo", os.environ["PATH"])
    assert done.returncode == 0 and done.stderr == "" and took < 10, done


@pytest.mark.parametrize("what", ["demo", "test"])
def test_make_checks_the_prerequisites_before_anything_else(what):
    done = subprocess.run(["make", "-n", "--no-print-directory", what], capture_output=True, text=True, cwd=ROOT,
                          env=os.environ | {"MAKEFLAGS": ""}, timeout=60)
    assert done.stdout.splitlines()[0].endswith(f".ci/prerequisites {what}"), done.stdout[:500]


def test_without_ssh_keygen_a_run_says_in_its_first_lines_what_to_install(tmp_path, monkeypatch):
    from sparknb.runs import signing

    if shutil.which("ssh-keygen"):
        assert signing.absent() is None
    monkeypatch.setenv("PATH", path_without(tmp_path, "ssh-keygen"))
    assert "sealed UNSIGNED" in signing.absent() and "apt-get install -y openssh-client" in signing.absent()
