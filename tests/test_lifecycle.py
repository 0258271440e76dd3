"""Targets and the one Server class, on real processes (no vLLM): templates, keys, refusals, failures, stops.

The server started here is Python's own http.server over a folder that holds a /v1/models answer:
a real process on a real port, which a real vLLM cannot be made to be in a test (a stray server
serving another model, a start that loses its engine, a broken compile cache).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest
from support import free_port, model_yaml

from sparknb.errors import BuildError, LifecycleError, ParamsError, PortInUseError, ServerError
from sparknb.runs.params import load_model
from sparknb.serving import lifecycle, targets
from sparknb.serving.processes import group_alive, group_members

KEY = "sk-sparknb-lifecycle-test-9b1f4e7a"  # guards nothing: only checked for where it ends up


def launch(tmp_path: Path, name: str, block: dict, port: int = 18931, **extra) -> lifecycle.Server:
    return lifecycle.launch(targets.resolve(load_model(str(model_yaml(tmp_path, name, block, port, **extra)))),
                            tmp_path / f"{name}.out")


def models_folder(tmp_path: Path, served: str) -> Path:
    """A folder whose v1/models file says it serves `served`, for http.server to answer with."""
    folder = tmp_path / f"www-{served}"
    (folder / "v1").mkdir(parents=True)
    (folder / "v1" / "models").write_text(json.dumps({"data": [{"id": served}]}))
    return folder


def http_server(folder: Path) -> str:
    return f"{{python}} -m http.server {{port}} --bind 127.0.0.1 --directory {folder}"


# --- params and targets ---------------------------------------------------------------------------


@pytest.mark.parametrize("block, message", [
    ({"testbed": "tiny-dense", "start": "x"}, "choose one of"),
    ({"sidecar": True, "start": "x"}, "choose one of"),
    ({"start": "vllm serve m --api-key sk-123"}, "API key on the command line"),
    ({"start": "vllm serve m --port {prot}"}, "unknown placeholder"),
    ({"start": "x", "env": {"HF_TOKEN": "hf_abc"}}, "secrets do not belong"),
    ({"stop": "docker stop m"}, "stop needs a start command"),
    ({"start": "llama-server -m x.gguf --port {port}", "engine": "llama.cpp"}, "engine chooses the test bed's server"),
    ({"testbed": "tiny-dense", "engine": "llama.cpp", "compile_cache": "/tmp/x"}, "llama-server compiles nothing"),
    ({"testbed": "tiny-dense", "engine": "sglang"}, "engine"),
])
def test_a_bad_lifecycle_fails_on_loading_with_the_fix(tmp_path, block, message):
    with pytest.raises(ParamsError) as e:
        load_model(str(model_yaml(tmp_path, "m", block)))
    assert "lifecycle" in str(e.value) and message in str(e.value)


def test_a_model_without_a_lifecycle_cannot_be_resolved_and_the_error_says_what_to_add(tmp_path):
    with pytest.raises(LifecycleError, match="lifecycle: {start:"):
        targets.resolve(load_model(str(model_yaml(tmp_path, "m", {}))))


def test_compile_cache_placeholder_needs_the_folder_named(tmp_path):
    with pytest.raises(LifecycleError, match="lifecycle.compile_cache"):
        targets.resolve(load_model(str(model_yaml(tmp_path, "m", {"start": "run --cache {compile_cache}"}))))


def test_a_testbed_model_gets_a_free_port_not_its_usual_one_and_its_own_compile_cache():
    usual = load_model("tiny-moe")  # its usual port is where test servers of other sessions like to sit
    target = targets.resolve(usual)
    port = target.endpoint.rsplit(":", 1)[1].split("/")[0]
    assert target.endpoint != usual.endpoint.rstrip("/") and target.start[target.start.index("--port") + 1] == port
    assert target.env["VLLM_CACHE_ROOT"] == str(target.compile_cache) and target.compile_cache.name == "tiny-moe"


def test_a_llamacpp_testbed_model_is_llama_server_on_a_free_port_ready_at_health(monkeypatch, tmp_path):
    usual = load_model("tiny-dense-llamacpp")
    assert usual.lifecycle.mode == "testbed" and usual.lifecycle.engine == "llama.cpp"
    fake = tmp_path / "bin" / "llama-server"  # found first, through the variable; never run here
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("SPARKNB_LLAMA_SERVER", str(fake))
    target = targets.resolve(usual)
    port = target.endpoint.rsplit(":", 1)[1].split("/")[0]
    assert target.endpoint != usual.endpoint and target.start[0] == str(fake)
    assert target.start[target.start.index("--port") + 1] == port and target.ready_url.endswith(f"{port}/health")
    assert target.start[target.start.index("--alias") + 1] == usual.served_model_name
    assert "--cache-ram" in target.start and target.compile_cache is None and target.engine == "llama.cpp"
    assert target.describe()["binary"] == f"{fake} (SPARKNB_LLAMA_SERVER)"
    monkeypatch.setenv("SPARKNB_LLAMA_SERVER", str(tmp_path / "missing"))
    with pytest.raises(BuildError, match="not an executable file"):
        targets.resolve(usual)


def test_templates_are_filled_without_a_shell_and_the_key_goes_through_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LIFECYCLE_TEST_KEY", KEY)
    check = ("import os; print('same key:', os.environ['VLLM_API_KEY'] == os.environ['LIFECYCLE_TEST_KEY'] "
             "== os.environ['LLAMA_API_KEY'])")  # where vLLM and llama-server read it
    path = model_yaml(tmp_path, "m", {"start": f'{{python}} -c "{check}" {{model}}',
                                      "compile_cache": str(tmp_path / "cc"), "ready_timeout_s": 5},
                      api_key_env="LIFECYCLE_TEST_KEY")
    target = targets.resolve(load_model(str(path)))
    assert target.start[0] == sys.executable and target.start[-1] == "m" and KEY not in " ".join(target.start)
    assert target.env["VLLM_CACHE_ROOT"] == str(tmp_path / "cc")
    assert KEY not in json.dumps(target.describe()) and target.describe()["api_key_set"] is True
    server = lifecycle.launch(target, tmp_path / "out.log")
    with pytest.raises(ServerError):
        server.wait_ready()  # it prints and exits: never ready
    assert "same key: True" in server.log_text()


# --- refusals before anything starts ---------------------------------------------------------------


def test_a_command_that_does_not_exist_names_the_field_to_fix(tmp_path):
    with pytest.raises(ServerError, match="lifecycle.start"):
        launch(tmp_path, "nocmd", {"start": "no-such-server-binary --port {port}"})


def test_a_port_someone_else_listens_on_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as stray:
        stray.bind(("127.0.0.1", 0))
        stray.listen()
        port = stray.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"port {port} on 127.0.0.1 is already in use"):
            launch(tmp_path, "taken", {"start": "{python} -m http.server {port}"}, port=port)
    assert not (tmp_path / "taken.out").exists()


def test_a_sidecar_is_never_started_here(tmp_path):
    with pytest.raises(LifecycleError, match="nothing to start"):
        launch(tmp_path, "proxy", {"sidecar": True})


# --- failures while starting -----------------------------------------------------------------------


def test_a_server_that_never_gets_ready_is_stopped_with_its_children_and_its_log_shown(tmp_path):
    child = "import time; time.sleep(600)"
    server = launch(tmp_path, "hangs", {
        "start": "{python} -c \"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', '%s']); "
                 "print('compiling for ever', flush=True); time.sleep(600)\"" % child,
        "ready_timeout_s": 2})
    time.sleep(0.5)
    assert len(group_members(server.pid)) == 2  # the leader and its child
    with pytest.raises(ServerError) as e:
        server.wait_ready()
    assert "was not ready after 2 s" in str(e.value) and "compiling for ever" in str(e.value)
    assert e.value.pid == server.pid and not group_alive(server.pid)


@pytest.mark.parametrize("sign", ["Engine core initialization failed", "Worker failed with error", "InductorError"])
def test_a_start_that_lost_its_engine_is_given_up_at_once(tmp_path, sign):
    server = launch(tmp_path, "lost", {"start": "{python} -c \"import time; print('ERROR %s', flush=True); "
                                                "time.sleep(600)\"" % sign, "ready_timeout_s": 120})
    t0 = time.monotonic()
    with pytest.raises(ServerError, match="lost its engine while starting"):
        server.wait_ready()
    assert time.monotonic() - t0 < 15 and not group_alive(server.pid)


def test_a_broken_compile_cache_is_named_with_the_fix(tmp_path):
    server = launch(tmp_path, "broken", {"start": "{python} -c \"import sys; print('RuntimeError: Compile cache "
                                                  "file corrupted', flush=True); sys.exit(1)\"",
                                         "compile_cache": str(tmp_path / "cc")})
    with pytest.raises(ServerError) as e:
        server.wait_ready()
    assert "exited with code 1" in str(e.value) and e.value.exit_code == 1
    assert "compile cache looks broken" in str(e.value) and str(tmp_path / "cc") in str(e.value)


def test_a_stray_server_answering_for_another_model_is_not_taken_for_ours(tmp_path):
    server = launch(tmp_path, "ours", {"start": http_server(models_folder(tmp_path, "someone-else")),
                                       "ready_timeout_s": 30}, port=free_port())
    with pytest.raises(ServerError, match="does not serve 'ours'"):
        server.wait_ready()
    assert not group_alive(server.pid)


def test_a_server_stopped_while_starting_is_killed_after_a_short_grace(tmp_path):
    deaf = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    server = launch(tmp_path, "deaf", {"start": "{python} -c \"%s\"" % deaf})
    time.sleep(0.5)
    gone = server.stop()
    assert f"SIGKILL after {lifecycle.STARTING_GRACE_S:g} s" in gone.how
    assert lifecycle.STARTING_GRACE_S <= gone.seconds < lifecycle.STARTING_GRACE_S + 10
    assert not group_alive(server.pid) and server.stop() is gone  # stopping twice is stopping once


# --- a ready server -----------------------------------------------------------------------------------


def test_a_ready_server_runs_its_stop_command_then_ends_its_group(tmp_path):
    port = free_port()
    block = {"start": http_server(models_folder(tmp_path, "ours")),
             "stop": "{python} -c \"print('stopping {name} on {port}')\"", "ready_timeout_s": 30}
    with launch(tmp_path, "ours", block, port=port) as server:
        assert server.wait_ready() is server and server.ready_s is not None
        assert server.url == f"http://127.0.0.1:{port}/v1" and server.running
        held = server.memory_bytes()
        assert held is not None and held > 2**20
    gone = server.stop()
    assert gone.stop_command_exit == 0 and f"stopping ours on {port}" in gone.stop_command_output
    assert gone.how.startswith("stop command (exit 0), SIGTERM") and "SIGKILL" not in gone.how
    assert not server.running and server.memory_bytes() is None


def test_the_log_is_what_the_server_wrote_since_its_launch(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("an earlier run's line\n")
    write = f"open({str(log)!r}, 'a').write('this start\\\\n')"
    server = launch(tmp_path, "logs", {"start": "{python} -c \"%s\"" % write, "log": str(log), "ready_timeout_s": 5})
    with pytest.raises(ServerError) as e:
        server.wait_ready()
    assert server.log_text() == "this start\n" and server.log_path == log
    assert str(log) in str(e.value) and "earlier run" not in str(e.value)
