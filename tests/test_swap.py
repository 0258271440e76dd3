"""Swap cost: the start-up log parser on real logs, the lifecycle's faults, and one real swap notebook run.

The integration run is the expensive one (three real vLLM starts, about four minutes on two cores):
cold tiny-dense, a swap to tiny-moe, and back, with private compile caches that start empty.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
import papermill
import pytest
import yaml

from sparknb import lifecycle, startup_log, swap
from sparknb.params import ParamsError, load_model, project_root
from sparknb.run import read_records, verify

NOTEBOOK = project_root() / "notebooks" / "swap.ipynb"
DATA = Path(__file__).parent / "data"
KEY = "sk-sparknb-swap-test-5d2e8c41a7f3"  # guards the throw-away servers the swap test starts


def _local(*fields: str) -> float:
    """time.time() of a local wall-clock time, as a server's log would print it."""
    return datetime(*map(int, fields)).timestamp()


def _fixture(name: str) -> tuple[str, dict]:
    """A real log and its launch time as local wall-clock time, so the test passes in any time zone."""
    meta = json.loads((DATA / f"{name}.json").read_text())
    meta["launched_at"] = datetime.fromisoformat(meta["launched_local"]).timestamp()
    return (DATA / f"{name}.log").read_text(), meta


def _model_yaml(tmp_path: Path, name: str, lifecycle_block: dict, port: int = 18931) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "served_model_name": name, "endpoint": f"http://127.0.0.1:{port}/v1",
        "hardware": "cpu-host", "architecture": "dense",
        "weights": {"dense_params": 1.0e6, "bytes_per_param": 2, "source": "test"},
        "lifecycle": lifecycle_block}))
    return path


def _gone(pids) -> bool:
    return not any(lifecycle.group_alive(pid) for pid in pids)


# --------------------------------------------------------------------------------------------------
# The start-up log, read from real logs of the vLLM CPU build used here (tests/data/*.log)
# --------------------------------------------------------------------------------------------------


def test_cold_start_of_the_dense_model_from_its_real_log():
    text, meta = _fixture("startup-tiny-dense-cold")
    s = startup_log.parse(text, launched_at=meta["launched_at"], ready_s=meta["ready_s"], observed_s=meta["ready_s"] + 1)
    assert s.compile_cache == startup_log.COLD
    assert s.engine["version"] == "0.32.0" and s.engine["dtype"] == "torch.bfloat16" and s.engine["quantization"] == "None"
    assert s.stages == pytest.approx(meta["stages"], abs=1e-3)  # worked out by hand from the log's timestamps
    assert sum(v for v in s.stages.values() if v is not None) == pytest.approx(meta["ready_s"])
    assert s.stages["graph capture"] is None  # the CPU build captures no graphs
    assert s.reported["init engine s"] == meta["reported"]["init engine s"]
    assert s.reported["loading weights s"] == meta["reported"]["loading weights s"]
    assert s.clock_shift_s == 0 and not s.errors
    # vLLM's own figure for engine init covers compilation, profiling and the KV cache: it must agree to ~1 s
    engine_part = s.stages["compilation"] + s.stages["profiling and KV cache"]
    assert abs(engine_part - s.reported["init engine s"]) < 1.5


def test_warm_start_that_compiles_again_is_told_apart_from_a_cold_one():
    text, meta = _fixture("startup-tiny-moe-warm")
    s = startup_log.parse(text, launched_at=meta["launched_at"], ready_s=meta["ready_s"], observed_s=meta["ready_s"] + 1)
    assert s.compile_cache == startup_log.WARM_RECOMPILED
    assert "finalize_loading" in s.compile_cache_evidence
    assert s.stages == pytest.approx(meta["stages"], abs=1e-3)
    assert s.largest(2)[0][0] in ("compilation", "process start", "engine start")


# Lines in the formats of vLLM 0.32's GPU code paths (gpu_model_runner.py, monitor.py, backends.py, mem_utils.py,
# gpu_worker.py, core.py); no GPU log can be produced here. Launched 31 Dec 23:59:40.2, ready 198.0 s later.
GPU_LOG = """\
(APIServer pid=100) INFO 12-31 23:59:50 [api_utils.py:286] non-default args: {'model': 'Qwen/Qwen3.6-27B-FP8'}
(EngineCore_DP0 pid=200) INFO 12-31 23:59:58 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: \
model='Qwen/Qwen3.6-27B-FP8', speculative_config=None, dtype=torch.bfloat16, max_seq_len=32768, quantization=fp8, \
enforce_eager=False, kv_cache_dtype=auto, served_model_name=Qwen/Qwen3.6-27B
(EngineCore_DP0 pid=200) INFO 01-01 00:00:05 [gpu_model_runner.py:5040] Starting to load model Qwen/Qwen3.6-27B-FP8...
(EngineCore_DP0 pid=200) INFO 01-01 00:01:10 [gpu_model_runner.py:5150] Model loading took 28.53 GiB memory and 64.812345 seconds
(EngineCore_DP0 pid=200) INFO 01-01 00:01:11 [monitor.py:40] Starting torch.compile
(EngineCore_DP0 pid=200) INFO 01-01 00:01:20 [backends.py:1167] Dynamo bytecode transform time: 8.52 s
(EngineCore_DP0 pid=200) INFO 01-01 00:02:05 [backends.py:399] Compiling a graph for compile range (1, 8192) takes 44.10 s
(EngineCore_DP0 pid=200) INFO 01-01 00:02:06 [monitor.py:62] torch.compile took 55.30 s in total
(EngineCore_DP0 pid=200) INFO 01-01 00:02:20 [gpu_worker.py:700] Memory profiling takes 13.90 seconds. Total non KV cache memory: 30.1GiB
(EngineCore_DP0 pid=200) INFO 01-01 00:02:20 [gpu_worker.py:760] Available KV cache memory: 45.20 GiB
(EngineCore_DP0 pid=200) INFO 01-01 00:02:21 [kv_cache_utils.py:2328] GPU KV cache size: 394,112 tokens, Maximum concurrency for 32,768 tokens per request: 12.03x
Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67 [00:27<00:00,  2.45it/s]
(EngineCore_DP0 pid=200) INFO 01-01 00:02:51 [gpu_model_runner.py:6582] Graph capturing finished in 29 secs, took 1.25 GiB
(EngineCore_DP0 pid=200) INFO 01-01 00:02:52 [core.py:403] init engine (profile, create kv cache, warmup model) took 101.50 s (compilation: 55.30 s)
(APIServer pid=100) INFO 01-01 00:02:55 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000
INFO:     Application startup complete.
"""
GPU_LAUNCH = ("2026", "12", "31", "23", "59", "40")


def _gpu_launch() -> float:
    return _local(*GPU_LAUNCH) + 0.2


def test_gpu_log_lines_across_new_year_give_every_stage_and_vllms_own_figures():
    s = startup_log.parse(GPU_LOG, launched_at=_gpu_launch(), ready_s=198.0, observed_s=200.0)
    # Worked out by hand: each line sits at the middle of its second, counted from 23:59:40.2.
    assert s.stages == pytest.approx({
        "process start": 10.3, "engine start": 15.0, "weight loading": 66.0, "compilation": 55.0,
        "profiling and KV cache": 16.0, "graph capture": 30.0, "API ready": 5.7}, abs=1e-3)
    assert s.reported == pytest.approx({
        "model memory GiB": 28.53, "model loading s": 64.812345, "dynamo transform s": 8.52, "graph compile s": 44.10,
        "torch.compile s": 55.30, "memory profiling s": 13.90, "KV cache GiB": 45.20, "KV cache tokens": 394112,
        "graph capture s": 29, "graph capture GiB": 1.25, "init engine s": 101.50, "init engine compilation s": 55.30})
    assert s.compile_cache == startup_log.COLD
    assert s.engine["quantization"] == "fp8" and s.engine["served_model_name"] == "Qwen/Qwen3.6-27B"
    assert [name for name, _ in s.largest(2)] == ["weight loading", "compilation"]


def test_a_server_clock_in_another_time_zone_is_moved_back_by_whole_hours():
    # The same log read by a host one hour ahead of the server (a container on UTC, say).
    s = startup_log.parse(GPU_LOG, launched_at=_gpu_launch() + 3600, ready_s=198.0, observed_s=200.0)
    assert s.clock_shift_s == -3600
    assert s.stages["compilation"] == pytest.approx(55.0) and s.stages["API ready"] == pytest.approx(5.7)
    assert any("time zone" in n for n in s.notes)


def test_a_compile_cache_hit_on_the_gpu_build_reads_as_warm_loaded():
    text = GPU_LOG.replace(
        "Compiling a graph for compile range (1, 8192) takes 44.10 s",
        "Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 3.412 s")
    s = startup_log.parse(text, launched_at=_gpu_launch(), ready_s=198.0)
    assert s.compile_cache == startup_log.WARM_LOADED and s.reported["compiled graph load s"] == 3.412


def test_a_log_without_the_start_marker_counts_loading_back_from_vllms_own_figure():
    text = "\n".join(line for line in GPU_LOG.splitlines() if "Starting to load model" not in line)
    s = startup_log.parse(text, launched_at=_gpu_launch(), ready_s=198.0)
    # The model-loading line sits at 90.3 s and says 64.812 s: loading began at 25.488 s; the first line is at 10.3 s.
    assert s.stages["engine start"] == pytest.approx(25.488 - 10.3, abs=1e-3)
    assert s.stages["weight loading"] == pytest.approx(91.3 - 25.488, abs=1e-3)


def test_a_log_with_no_vllm_lines_names_no_stage_and_says_so():
    s = startup_log.parse("Traceback (most recent call last):\nValueError: boom\n", launched_at=time.time(), ready_s=None)
    assert all(v is None for v in s.stages.values()) and s.compile_cache == startup_log.UNKNOWN
    assert any("no time-stamped" in n for n in s.notes)


# --------------------------------------------------------------------------------------------------
# Lifecycle params and faults (no vLLM needed)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block, message", [
    ({"testbed": "tiny-dense", "start": "x"}, "choose one of"),
    ({"sidecar": True, "start": "x"}, "choose one of"),
    ({"start": "vllm serve m --api-key sk-123"}, "API key on the command line"),
    ({"start": "vllm serve m --port {prot}"}, "unknown placeholder"),
    ({"start": "x", "env": {"HF_TOKEN": "hf_abc"}}, "secrets do not belong"),
    ({"stop": "docker stop m"}, "stop needs a start command"),
])
def test_a_bad_lifecycle_fails_on_loading_with_the_fix(tmp_path, block, message):
    with pytest.raises(ParamsError) as e:
        load_model(str(_model_yaml(tmp_path, "m", block)))
    assert "lifecycle" in str(e.value) and message in str(e.value)


def test_a_model_without_a_lifecycle_cannot_be_swapped_and_the_error_says_what_to_add(tmp_path):
    path = _model_yaml(tmp_path, "m", {})
    with pytest.raises(lifecycle.LifecycleError, match="lifecycle: {start:"):
        swap.Plan.build([str(path)], 1, False)


def test_clearing_a_cache_needs_to_know_where_it_is(tmp_path):
    path = _model_yaml(tmp_path, "m", {"start": "{python} -m http.server {port}"})
    with pytest.raises(ValueError, match="lifecycle.compile_cache"):
        swap.Plan.build([str(path)], 1, True)


def test_templates_are_filled_without_a_shell_and_the_key_goes_through_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SWAP_TEST_KEY", KEY)
    check = "import os; print('same key:', os.environ['VLLM_API_KEY'] == os.environ['SWAP_TEST_KEY'])"
    path = _model_yaml(tmp_path, "m", {"start": f'{{python}} -c "{check}" {{model}}',
                                       "compile_cache": str(tmp_path / "cc"), "ready_timeout_s": 5})
    data = yaml.safe_load(path.read_text()) | {"api_key_env": "SWAP_TEST_KEY"}
    path.write_text(yaml.safe_dump(data))
    target = lifecycle.resolve(load_model(str(path)))
    assert target.start[0] == sys.executable and target.start[-1] == "m" and KEY not in " ".join(target.start)
    assert target.env["VLLM_CACHE_ROOT"] == str(tmp_path / "cc") and "api_key" not in json.dumps(target.describe()).replace("api_key_set", "")
    started = lifecycle.start(target, tmp_path / "out.log")
    with pytest.raises(lifecycle.StartError):
        started.wait_ready()  # it prints and exits: never ready
    assert "same key: True" in started.log_text()


def test_a_server_that_never_gets_ready_is_stopped_with_its_children_and_its_log_shown(tmp_path):
    child = "import time; time.sleep(600)"
    path = _model_yaml(tmp_path, "hangs", {
        "start": "{python} -c \"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', '%s']); "
                 "print('compiling for ever', flush=True); time.sleep(600)\"" % child,
        "ready_timeout_s": 2})
    started = lifecycle.start(lifecycle.resolve(load_model(str(path))), tmp_path / "hangs.log")
    time.sleep(0.5)
    assert len(lifecycle.group_members(started.pid)) == 2  # the leader and its child
    with pytest.raises(lifecycle.StartError) as e:
        started.wait_ready()
    assert "was not ready after 2 s" in str(e.value) and "compiling for ever" in str(e.value)
    assert not lifecycle.group_alive(started.pid)


def test_a_command_that_does_not_exist_names_the_field_to_fix(tmp_path):
    path = _model_yaml(tmp_path, "nocmd", {"start": "no-such-server-binary --port {port}"})
    with pytest.raises(lifecycle.StartError, match="lifecycle.start"):
        lifecycle.start(lifecycle.resolve(load_model(str(path))), tmp_path / "x.log")


def test_a_port_someone_else_listens_on_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as stray:
        stray.bind(("127.0.0.1", 0))
        stray.listen()
        port = stray.getsockname()[1]
        path = _model_yaml(tmp_path, "taken", {"start": "{python} -m http.server {port}"}, port=port)
        with pytest.raises(lifecycle.StartError, match="already listens"):
            lifecycle.start(lifecycle.resolve(load_model(str(path))), tmp_path / "x.log")
    assert not (tmp_path / "x.log").exists()


FAILS = ("{python} -c \"import sys, time; print('loading weights ...', flush=True); time.sleep(0.5); "
         "print('ValueError: no such checkpoint: /models/nope', flush=True); sys.exit(3)\"")


def test_a_start_command_that_fails_on_purpose_stops_the_notebook_with_the_log_and_keeps_the_records(tmp_path):
    """Through the real notebook: the error shows the log's last lines, and the run folder says what happened."""
    fails = _model_yaml(tmp_path, "fails", {"start": FAILS, "compile_cache": str(tmp_path / "cc")})
    out = tmp_path / "out.ipynb"
    with pytest.raises(papermill.PapermillExecutionError) as e:
        papermill.execute_notebook(str(NOTEBOOK), str(out), parameters={
            "models": [str(fails)], "clear_compile_cache": True, "outputs": str(tmp_path / "outputs")},
            progress_bar=False, kernel_name="python3")
    message = str(e.value)
    assert "exited with code 3 before it was ready" in message and "no such checkpoint" in message
    assert "No process this study started is left running" in message
    folder = next((tmp_path / "outputs" / "swap").iterdir())
    records = read_records(folder)
    kinds = [r["kind"] for r in records]
    assert kinds == ["clear", "start", "final"]
    start = records[1]
    assert start["ok"] is False and start["exit_code"] == 3 and "no such checkpoint" in start["error"]
    assert records[-1]["models"] == {"fails": "failed to start; stopped"} and records[-1]["processes_left"] == []
    assert "no such checkpoint" in (folder / "server-01-fails.log").read_text()
    assert _gone([start["pid"]])


# --------------------------------------------------------------------------------------------------
# The real thing: the notebook, the vLLM CPU server, the command lifecycle
# --------------------------------------------------------------------------------------------------


def _tiny_with_private_cache(tmp_path: Path, name: str) -> Path:
    """The shipped params with a compile cache of the test's own, so clearing it disturbs no one."""
    data = yaml.safe_load((project_root() / "params" / "models" / f"{name}.yaml").read_text())
    data["lifecycle"]["compile_cache"] = str(tmp_path / "cc" / name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _files_text(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


@pytest.mark.server
def test_cold_start_then_a_swap_to_the_moe_and_back_on_the_real_vllm_server(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKNB_API_KEY", KEY)  # tiny-dense's params name this variable: its server gets the key
    dense, moe = (str(_tiny_with_private_cache(tmp_path, n)) for n in ("tiny-dense", "tiny-moe"))
    out = tmp_path / "swap-out.ipynb"
    papermill.execute_notebook(str(NOTEBOOK), str(out), parameters={
        "models": [dense, moe, dense], "clear_compile_cache": True, "outputs": str(tmp_path / "outputs")},
        progress_bar=False, kernel_name="python3")
    folder = next((tmp_path / "outputs" / "swap").iterdir())
    records = read_records(folder)
    starts = [r for r in records if r["kind"] == "start"]
    evicts = [r for r in records if r["kind"] == "evict"]

    # Three starts, the first from an empty machine; each answered.
    assert [(s["from"], s["model"]) for s in starts] == [
        ("(empty)", "tiny-dense"), ("tiny-dense", "tiny-moe"), ("tiny-moe", "tiny-dense")]
    assert all(s["ok"] for s in starts)
    # Cleared caches make both first starts cold; the return to tiny-dense finds its cache warm.
    assert [s["compile_cache_before"]["state"] for s in starts[:2]] == ["empty", "empty"]
    assert starts[2]["compile_cache_before"]["files"] > 0
    assert [s["compile_cache"] for s in starts[:2]] == [startup_log.COLD, startup_log.COLD]
    assert starts[2]["compile_cache"] in (startup_log.WARM_LOADED, startup_log.WARM_RECOMPILED)
    for s in starts:
        stages = s["startup"]["stages"]
        assert sum(v for v in stages.values() if v is not None) == pytest.approx(s["ready_s"], abs=1e-3)
        assert stages["process start"] > 0 and stages["compilation"] > 0 and stages["weight loading"] is not None
        assert s["first_answer_s"] >= s["ready_s"] and s["answer"]["ok"]
        assert s["client_wait_s"] == pytest.approx(s["evict_s"] + s["first_answer_s"])
        assert s["server"]["model"] == s["model"] and s["startup"]["engine"]["version"] == s["server"]["version"]
        assert s["memory_after"]["server_bytes"] > 100 * 2**20  # a vLLM server holds hundreds of MiB at least
        assert s["memory_before"]["used_bytes"] > 0 and "unified" in s["memory_after"]["source"]
        assert not lifecycle._port_in_use("127.0.0.1", int(s["target"]["endpoint"].rsplit(":", 1)[1].split("/")[0]))
    assert starts[0]["evict_s"] == 0.0 and starts[1]["evict_s"] > 0
    assert [e["for"] for e in evicts] == ["tiny-moe", "tiny-dense", None]
    assert all("SIGKILL" not in e["how"] for e in evicts)
    # Afterwards, no server process remains, and the records say what became of each model.
    final = records[-1]
    assert final["kind"] == "final" and final["processes_left"] == []
    assert final["models"] == {"tiny-dense": "stopped by the study", "tiny-moe": "stopped by the study"}
    assert _gone(s["pid"] for s in starts)

    summary = json.loads((folder / "summary.json").read_text())
    assert len(summary["transitions"]) == 3 and summary["processes_left"] == []
    assert all(set(row) == set(swap.BAR_PARTS) for row in summary["stages"].values())
    assert swap.SINGLE_CAVEAT in summary["findings"]
    assert any("cold compile cache" in f for f in summary["findings"])  # cold against warm, for tiny-dense
    for name in ("server-01-tiny-dense.log", "server-02-tiny-moe.log", "server-03-tiny-dense.log"):
        assert "Starting vLLM server on" in (folder / name).read_text()
    nb = nbformat.read(out, as_version=4)
    text = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "image/png" in text and "client wait s" in text and swap.SINGLE_CAVEAT[:40] in text
    assert "%|" not in text  # no frozen progress bar
    assert KEY not in _files_text(folder) and KEY not in out.read_text()
    assert verify(folder) == []


@pytest.mark.server
def test_sidecar_mode_times_the_request_itself_here_against_a_model_already_resident(tmp_path, tiny_moe):
    """No llama-swap here (a Go binary, not on PyPI): the degenerate case, where the proxy has nothing to swap."""
    path = _model_yaml(tmp_path, "tiny-moe", {"sidecar": True, "ready_timeout_s": 60}, port=tiny_moe.port)
    plan = swap.Plan.build([str(path)], 2, False)
    study = swap.open_study(plan, settings={"models": [str(path)]}, outputs=str(tmp_path / "outputs"))
    table = swap.run(study)
    records = study.records()
    requests = [r for r in records if r["kind"] == "request"]
    assert len(requests) == 2 and all(r["ok"] and r["evict_s"] is None for r in requests)
    assert all(0 < r["client_wait_s"] < 30 for r in requests)
    assert list(table["to"]) == ["tiny-moe", "tiny-moe"]
    assert records[-1]["models"] == {"tiny-moe": "not managed here (sidecar)"} and records[-1]["processes_left"] == []
    assert tiny_moe.running  # a sidecar's models are never stopped here
    study.finish(swap.summary(records))
    assert verify(study.run.path) == []
