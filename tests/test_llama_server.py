"""The test bed's llama-server: found by a stated precedence, or built from the pinned source with every step
bounded and every failure naming its fix. The failures are real: a PATH without cmake, a wrong sdist, a held lock."""

from __future__ import annotations

import fcntl
import json
import os
import stat
from pathlib import Path

import pytest

from sparknb.errors import BuildError
from sparknb.serving import llama_server


def _program(folder: Path, name: str = "llama-server") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\necho 'version: 1 (mine)'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def clean(monkeypatch, tmp_path) -> Path:
    """No llama-server anywhere: an empty cache, no variable, a PATH with only the basics."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(llama_server.ENV_VAR, raising=False)
    monkeypatch.delenv(llama_server.SDIST_ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    if llama_server.shutil.which("llama-server"):
        pytest.skip("this machine has a llama-server in /usr/bin: the precedence cannot be tested around it")
    return tmp_path


def test_precedence_is_argument_then_variable_then_path_then_the_pinned_build(clean, monkeypatch):
    assert llama_server.find() is None
    assert "python -m sparknb.serving.llama_server build" in llama_server.missing_reason()
    pinned = llama_server.build_dir()
    _program(pinned / "bin")
    assert llama_server.find() is None  # no record yet: a build cut short is not a build
    (pinned / "build.json").write_text("{}")
    assert llama_server.find() == llama_server.Binary(pinned / "bin" / "llama-server", "pinned build")
    on_path = _program(clean / "path")
    monkeypatch.setenv("PATH", f"{clean / 'path'}:/usr/bin:/bin")
    assert llama_server.find() == llama_server.Binary(on_path, "PATH")
    mine = _program(clean / "mine", "my-llama-server")
    monkeypatch.setenv(llama_server.ENV_VAR, str(mine))
    assert llama_server.find().origin == llama_server.ENV_VAR
    given = _program(clean / "given")
    assert llama_server.find(given) == llama_server.Binary(given, "argument")
    assert llama_server.find(given).version() == "version: 1 (mine)"


def test_a_variable_naming_no_program_is_an_error_not_a_fallback(clean, monkeypatch):
    monkeypatch.setenv(llama_server.ENV_VAR, str(clean / "nothing-here"))
    with pytest.raises(BuildError, match="is not an executable file.*unset SPARKNB_LLAMA_SERVER"):
        llama_server.find()


def test_the_build_key_changes_with_the_source_and_the_flags(monkeypatch):
    before = llama_server.build_key()
    monkeypatch.setattr(llama_server, "CMAKE_FLAGS", (*llama_server.CMAKE_FLAGS, "-DGGML_NATIVE=OFF"))
    assert llama_server.build_key() != before
    monkeypatch.undo()
    monkeypatch.setitem(llama_server.SOURCE, "version", "0.3.37")
    assert llama_server.build_key() != before


def test_a_build_without_cmake_names_what_to_install(clean, monkeypatch):
    monkeypatch.setenv("PATH", str(clean / "empty"))  # no cmake, no compiler
    with pytest.raises(BuildError, match="needs cmake and c\\+\\+.*apt-get install cmake g\\+\\+"):
        llama_server.build(log=lambda m: None)
    assert not llama_server.build_dir().exists()


def test_a_sdist_that_is_not_the_pinned_one_is_refused_before_anything_is_built(clean, monkeypatch):
    if llama_server.shutil.which("cmake") is None or llama_server.shutil.which("c++") is None:
        pytest.skip("no cmake or c++ here: the build stops before it reads the sdist")
    fake = clean / "llama_cpp_python-0.3.36.tar.gz"
    fake.write_bytes(b"not the source")
    monkeypatch.setenv(llama_server.SDIST_ENV_VAR, str(fake))
    with pytest.raises(BuildError, match="not the pinned 832db069.*fetch llama_cpp_python-0.3.36.tar.gz again"):
        llama_server.build(log=lambda m: None)
    assert llama_server.built() is None
    assert [p.name for p in llama_server.build_dir().parent.iterdir() if not p.name.endswith(".lock")] == []


def test_a_second_builder_waits_for_the_first_and_gives_up_with_a_message(clean, monkeypatch):
    monkeypatch.setattr(llama_server, "LOCK_WAIT_S", 3)
    folder = llama_server.build_dir()
    folder.parent.mkdir(parents=True)
    said = []
    with open(folder.parent / f".{folder.name}.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a real lock, as another process's build holds it
        with pytest.raises(BuildError, match="waited 3 s for another llama-server build"):
            llama_server.build(log=said.append)
    assert said and "another process is building llama-server" in said[0]


def test_the_pinned_build_says_what_it_was_built_from():
    """Where the pinned build exists (CI builds it first): its record and its own --version name the source."""
    path = llama_server.built()
    if path is None:
        if os.environ.get("SPARKNB_REQUIRE_SERVERS") == "1":
            pytest.fail(f"{llama_server.missing_reason()} (SPARKNB_REQUIRE_SERVERS=1 requires it)")
        pytest.skip(llama_server.missing_reason())
    record = json.loads((path.parent.parent / "build.json").read_text())
    assert record["source"] == llama_server.SOURCE and record["targets"] == list(llama_server.TARGETS)
    assert record["build_s"] > 0
    binary = llama_server.Binary(path, "pinned build")
    assert "0.5.0-dev" in binary.version() and "commit 0c1e570" in binary.version()  # read from the sdist's git data
    assert binary.bench() is not None
