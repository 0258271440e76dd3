"""The issue's promise: without the vLLM extra the unit tests still collect and run, and every server
test is skipped saying why, unless SPARKNB_REQUIRE_SERVERS=1 (CI), which makes them fail instead."""

from __future__ import annotations

import os
import subprocess
import sys

from sparknb.runs.params import project_root

# pytest in a fresh interpreter in which `import vllm` fails, as on a machine without the extra.
WITHOUT_VLLM = ("import sys; sys.modules['vllm'] = None; import pytest; "
                "sys.exit(pytest.main(['-q', '-rs', '-p', 'no:cacheprovider', *sys.argv[1:]]))")
# Every test of the first needs a server, every one of the second builds the tiny models; the third needs neither.
TESTS = ["tests/test_testbed.py", "tests/test_tiny_models.py", "tests/test_startup_log.py"]


def _pytest_without_vllm(*args: str, require: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SPARKNB_REQUIRE_SERVERS"}
    if require:
        env["SPARKNB_REQUIRE_SERVERS"] = "1"
    return subprocess.run([sys.executable, "-c", WITHOUT_VLLM, *args], cwd=project_root(), env=env,
                          capture_output=True, text=True, timeout=300)


def test_without_vllm_the_unit_tests_run_and_the_server_tests_skip_saying_why():
    done = _pytest_without_vllm(*TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vLLM is not installed: pip install -e '.[demo]' to run the server tests" in done.stdout
    assert "vLLM is not installed: pip install -e '.[demo]' to run the tests that build the tiny models" in done.stdout
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary and " skipped" in summary and "failed" not in summary and "error" not in summary


def test_without_vllm_but_with_servers_required_the_server_tests_fail():
    done = _pytest_without_vllm(TESTS[0], require=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SPARKNB_REQUIRE_SERVERS=1 requires them" in done.stdout
    summary = done.stdout.strip().splitlines()[-1]  # a failure in set-up counts as an error
    assert (" failed" in summary or " error" in summary) and "skipped" not in summary and "passed" not in summary


def _pytest_without_llama_server(tmp_path, require: bool = False) -> subprocess.CompletedProcess:
    """A machine with no llama-server: none on PATH, no SPARKNB_LLAMA_SERVER, an empty per-user cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKNB_REQUIRE_SERVERS", "SPARKNB_LLAMA_SERVER")}
    env |= {"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path)}
    if require:
        env["SPARKNB_REQUIRE_SERVERS"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/test_llamacpp.py"], cwd=project_root(), env=env, capture_output=True, text=True,
                          timeout=300)


def test_without_llama_server_its_tests_skip_saying_how_to_build_it(tmp_path):
    if os.path.exists("/usr/bin/llama-server"):
        return  # this machine has one where every PATH finds it: nothing to skip
    done = _pytest_without_llama_server(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no llama-server: build the pinned one with `python -m sparknb.serving.llama_server build`" in done.stdout
    summary = done.stdout.strip().splitlines()[-1]
    assert " skipped" in summary and "passed" not in summary and "failed" not in summary


def test_without_llama_server_but_with_servers_required_its_tests_fail(tmp_path):
    if os.path.exists("/usr/bin/llama-server"):
        return
    done = _pytest_without_llama_server(tmp_path, require=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SPARKNB_REQUIRE_SERVERS=1 requires them" in done.stdout
    summary = done.stdout.strip().splitlines()[-1]
    assert (" failed" in summary or " error" in summary) and "skipped" not in summary and "passed" not in summary
