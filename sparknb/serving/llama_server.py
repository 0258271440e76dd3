"""llama.cpp's llama-server for the test bed: the user's own where there is one, else built once from pinned source.

Which binary runs, the first that exists:
  1. the path given to find() or ensure() (a caller's explicit choice);
  2. the path in $SPARKNB_LLAMA_SERVER;
  3. `llama-server` on PATH (your own build or package: nothing is built);
  4. the pinned build in the per-user cache, beside the test bed's checkpoints, built once by
     `python -m sparknb.serving.llama_server build` (or by `sparknb serve ... --engine llama.cpp`).
A test-bed Target records the binary and where it came from (Target.describe), so a number can be traced to its server.

The pinned source is the llama.cpp vendored in the llama-cpp-python sdist on PyPI (SOURCE): Debian has no
llama.cpp package, and a pinned sdist is a source that cannot move under us (its sha256 is checked).
Only llama-server and llama-bench are built (static, no curl, no web UI fetched from the network), for this machine's
CPU (GGML_NATIVE, so the CPU model is part of the cache key). A lock file keeps two builders of one
version from colliding; every step has a time limit and fails with a message that names the fix.
The source tree is removed once the binaries are in place (it is 176 MB, and never part of a project).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from ..errors import BuildError
from ..runs.strict_json import dumps
from .tiny_models import cache_root

ENV_VAR = "SPARKNB_LLAMA_SERVER"  # a llama-server binary of your own
SDIST_ENV_VAR = "SPARKNB_LLAMA_CPP_SDIST"  # the sdist already on disk, for a machine without PyPI
SOURCE = {"package": "llama-cpp-python", "version": "0.3.36", "subdir": "vendor/llama.cpp",
          "sha256": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
          "llama.cpp": "0.5.0-dev, commit 0c1e570"}  # what the built binary's --version says
# The sdist keeps llama.cpp's git metadata apart from its tree; the build reads its commit from there.
GIT_DIR = ".git/modules/vendor/llama.cpp"
TARGETS = ("llama-server", "llama-bench")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DBUILD_SHARED_LIBS=OFF",
)
# Time limits per step, in seconds: 2 cores build llama-server in about 9 minutes when nothing else runs.
DOWNLOAD_S, CONFIGURE_S, BUILD_S, LOCK_WAIT_S = 900, 600, 5400, 5400


@dataclass(frozen=True)
class Binary:
    """A llama-server to run, and why this one."""

    path: Path
    origin: str  # argument, SPARKNB_LLAMA_SERVER, PATH or pinned build

    def bench(self) -> Path | None:
        """llama-bench beside it, where there is one."""
        return bench_beside(self.path)

    def version(self, timeout: float = 30) -> str:
        """What `llama-server --version` says (version, commit, compiler); empty where it says nothing."""
        try:
            done = subprocess.run([str(self.path), "--version"], capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"(--version failed: {e})"
        return " ".join((done.stdout + done.stderr).split())[:300]


def bench_beside(server: Path) -> Path | None:
    """llama-bench beside a llama-server, where there is one (the pinned build makes both)."""
    path = server.with_name("llama-bench")
    return path if path.is_file() and os.access(path, os.X_OK) else None


def build_key() -> str:
    """The source, the flags, the targets and the CPU they are built for: any change builds anew."""
    recipe = {"source": SOURCE, "flags": CMAKE_FLAGS, "targets": TARGETS, "machine": platform.machine(),
              "cpu": _cpu_model()}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def build_dir() -> Path:
    return cache_root() / "llama.cpp" / f"{SOURCE['version']}-{build_key()}"


def built() -> Path | None:
    """The pinned build's llama-server, if it is complete (its record is written last)."""
    folder = build_dir()
    binary = folder / "bin" / "llama-server"
    return binary if (folder / "build.json").is_file() and binary.is_file() else None


def find(explicit: str | os.PathLike | None = None) -> Binary | None:
    """The llama-server to use, by the precedence in the module's docstring; None where there is none."""
    if explicit:
        return Binary(_executable(Path(explicit), "the path given"), "argument")
    if os.environ.get(ENV_VAR):
        return Binary(_executable(Path(os.environ[ENV_VAR]), f"${ENV_VAR}"), ENV_VAR)
    on_path = shutil.which("llama-server")
    if on_path:
        return Binary(Path(on_path), "PATH")
    pinned = built()
    return Binary(pinned, "pinned build") if pinned else None


def ensure(explicit: str | os.PathLike | None = None, *, jobs: int | None = None, log=print) -> Binary:
    """find(), or the pinned build made now (minutes, once) where there is no llama-server at all."""
    found = find(explicit)
    if found is not None:
        return found
    log(f"no llama-server ({ENV_VAR} is unset, none on PATH): building llama.cpp from "
        f"{SOURCE['package']} {SOURCE['version']} into {build_dir()}, once; about 10 minutes on 2 cores")
    return Binary(build(jobs=jobs, log=log), "pinned build")


def missing_reason() -> str:
    """Why the llama.cpp test bed cannot run here, and how to make it run."""
    return (f"no llama-server: build the pinned one with `python -m sparknb.serving.llama_server build` "
            f"(about 10 minutes on 2 cores, once per user), put yours on PATH, or set {ENV_VAR}")


def _executable(path: Path, what: str) -> Path:
    path = path.expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BuildError(f"{what} ({path}) is not an executable file; give the full path of a llama-server "
                         f"binary, or unset {ENV_VAR} to use the one on PATH or the pinned build")
    return path


# --- the pinned build ---------------------------------------------------------------------------------


def build(*, jobs: int | None = None, log=print) -> Path:
    """Download, check, configure and build under a lock; returns the installed llama-server."""
    final = build_dir()
    final.parent.mkdir(parents=True, exist_ok=True)
    with held(final.parent / f".{final.name}.lock", log):
        if built():  # another builder finished while we waited
            return built()
        tools = _tools()
        for stale in final.parent.glob(f".build-{final.name}-*"):  # a build that was killed; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".build-{final.name}-", dir=final.parent))
        try:
            record = _build_in(work, tools, jobs or os.cpu_count() or 2, log)
            staged = work / "install"
            (staged / "bin").mkdir(parents=True)
            for target in TARGETS:
                shutil.copy2(work / "build" / "bin" / target, staged / "bin" / target)
            (staged / "build.json").write_text(dumps(record, indent=1) + "\n")
            shutil.rmtree(final, ignore_errors=True)  # a build cut short before its record was written
            staged.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    log(f"llama-server built: {final / 'bin' / 'llama-server'} (configure {record['configure_s']:.0f} s, "
        f"build {record['build_s']:.0f} s)")
    return final / "bin" / "llama-server"


@contextlib.contextmanager
def held(path: Path, log) -> Iterator[None]:
    """One builder per version; the others wait (bounded) and then use its result."""
    with open(path, "a+") as fh:
        deadline, told = time.monotonic() + LOCK_WAIT_S, False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    log(f"another process is building llama-server ({path}); waiting for it")
                    told = True
                if time.monotonic() > deadline:
                    raise BuildError(f"waited {LOCK_WAIT_S} s for another llama-server build ({path} is locked); "
                                     "if no build is running, another user's process holds it: wait, or set "
                                     f"{ENV_VAR} to a llama-server of your own") from None
                time.sleep(2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _tools() -> dict[str, str]:
    """cmake and a C++ compiler are needed; ninja is used where it is installed."""
    found = {"cmake": shutil.which("cmake"), "c++": shutil.which("c++") or shutil.which("g++"),
             "ninja": shutil.which("ninja")}
    missing = [name for name in ("cmake", "c++") if not found[name]]
    if missing:
        raise BuildError(f"building llama-server needs {' and '.join(missing)}, which is not on PATH: install "
                         "them (Debian: apt-get install cmake g++ ninja-build), or set "
                         f"{ENV_VAR} to a llama-server of your own")
    return {k: v for k, v in found.items() if v}


def _build_in(work: Path, tools: dict[str, str], jobs: int, log) -> dict:
    sdist = _sdist(work, log)
    source = _extract(sdist, work / "src")
    build = work / "build"
    generator = ["-G", "Ninja"] if "ninja" in tools else []
    t0 = time.monotonic()
    step("configure", [tools["cmake"], "-S", str(source), "-B", str(build), *generator, *CMAKE_FLAGS],
          work / "configure.log", CONFIGURE_S, log)
    t1 = time.monotonic()
    log(f"building {', '.join(TARGETS)} with {jobs} jobs (log: {build_dir().parent}/last-build.log once done)")
    try:
        step("build", [tools["cmake"], "--build", str(build), "-j", str(jobs), "--target", *TARGETS],
              work / "build.log", BUILD_S, log)
    finally:
        shutil.copy2(work / "build.log", build_dir().parent / "last-build.log")
    t2 = time.monotonic()
    return {"source": SOURCE, "flags": list(CMAKE_FLAGS), "targets": list(TARGETS), "generator": generator[1:] or
            ["default"], "jobs": jobs, "configure_s": round(t1 - t0, 1), "build_s": round(t2 - t1, 1),
            "cmake": _first_line([tools["cmake"], "--version"]), "compiler": _first_line([tools["c++"], "--version"]),
            "cpu": _cpu_model(), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def given(variable: str, name: str, fix: str = "") -> Path | None:
    """The file $variable names instead of a download (None where it is unset); one that is not a file is an
    error naming what it should point at."""
    value = os.environ.get(variable)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise BuildError(f"${variable} names {path}, which is not a file; point it at {name}{fix}, or unset it to "
                         "download it from PyPI")
    return path


def _sdist(work: Path, log) -> Path:
    """The sdist from $SPARKNB_LLAMA_CPP_SDIST or from PyPI (pip download), checked against its sha256."""
    name = f"{SOURCE['package'].replace('-', '_')}-{SOURCE['version']}.tar.gz"
    path = given(SDIST_ENV_VAR, name)
    if path is None:
        spec = f"{SOURCE['package']}=={SOURCE['version']}"
        log(f"downloading the {spec} sdist from PyPI (77 MB)")
        step("download", [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                           "--disable-pip-version-check", "-d", str(work), spec],
              work / "download.log", DOWNLOAD_S, log, fix=f"download {name} where PyPI can be reached and set "
              f"{SDIST_ENV_VAR} to it, or set {ENV_VAR} to a llama-server of your own")
        path = work / name
    return pinned(path, SOURCE["sha256"], "the source sparknb's test bed is pinned to", f"fetch {name} again from PyPI")


def pinned(path: Path, sha256: str, what: str, fix: str) -> Path:
    """The file, where its sha256 is the one pinned; else a BuildError naming both, `what` it should be, and the fix."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise BuildError(f"{path} has sha256 {digest}, not the pinned {sha256}: it is not {what}; {fix}")
    return path


def _extract(sdist: Path, into: Path) -> Path:
    """Only the vendored llama.cpp and its git metadata (so the binary knows its commit), through
    tarfile's data filter (no links out, no devices)."""
    top = sdist.name.removesuffix(".tar.gz")
    prefixes = (f"{top}/{SOURCE['subdir']}/", f"{top}/{GIT_DIR}/")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefixes)]
        if not any(m.name.startswith(prefixes[0]) for m in members):
            raise BuildError(f"{sdist} has no {SOURCE['subdir']}: not the sdist the test bed is pinned to")
        tar.extractall(into, members=members, filter="data")
    return into / prefixes[0]


def step(what: str, argv: list[str], log_file: Path, limit: float, log, fix: str | None = None,
          who: str = "llama-server") -> None:
    with open(log_file, "w") as out:
        try:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  timeout=limit)
        except subprocess.TimeoutExpired:
            again = fix or (f"run `python -m sparknb.serving.llama_server build` again when it is quieter, or set "
                            f"{ENV_VAR} to a llama-server of your own")
            raise BuildError(f"{who} {what} took longer than {limit:g} s and was stopped. The machine may be busy "
                             f"or the network slow: {again}") from None
    if done.returncode != 0:
        tail = "".join(log_file.read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise BuildError(f"{who} {what} failed (exit {done.returncode}): "
                         f"{fix or 'read the log below; a missing compiler or header is the usual cause'}.\n"
                         f"Last lines of {log_file}:\n{tail}")


def _first_line(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparknb.serving.llama_server",
                                     description="find or build the test bed's llama-server")
    parser.add_argument("action", choices=["build", "where"])
    parser.add_argument("-j", "--jobs", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        binary = ensure(jobs=args.jobs, log=lambda m: print(m, flush=True)) if args.action == "build" else find()
    except BuildError as e:
        print(f"llama-server: {e}", file=sys.stderr)
        return 2
    if binary is None:
        print(missing_reason())
        return 1
    print(json.dumps({**asdict(binary), "path": str(binary.path), "version": binary.version()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
