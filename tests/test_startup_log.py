"""The start-up log parser, on real logs of the vLLM CPU build used here (tests/data/*.log) and on
lines in the formats of vLLM's GPU code paths: stages, vLLM's own figures, and the compile cache."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from sparknb.serving import startup_log

DATA = Path(__file__).parent / "data"


def _local(*fields: str) -> float:
    """time.time() of a local wall-clock time, as a server's log would print it."""
    return datetime(*map(int, fields)).timestamp()


def _fixture(name: str) -> tuple[str, dict]:
    """A real log and its launch time as local wall-clock time, so the test passes in any time zone."""
    meta = json.loads((DATA / f"{name}.json").read_text())
    meta["launched_at"] = datetime.fromisoformat(meta["launched_local"]).timestamp()
    return (DATA / f"{name}.log").read_text(), meta



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


# --- llama.cpp's llama-server (real logs of the pinned CPU build: tests/data/startup-llamacpp-*) --------------


def test_llama_servers_start_with_a_draft_model_at_its_default_verbosity():
    text, meta = _fixture("startup-llamacpp-tiny-moe-default")
    s = startup_log.parse(text, launched_at=meta["launched_at"], ready_s=meta["ready_s"], observed_s=meta["first_answer_s"])
    assert tuple(s.stages) == startup_log.llama_log.STAGES
    assert s.stages["process start"] == pytest.approx(0.001744, abs=1e-6)  # the logger's clock, from the launch
    assert s.stages["model load"] == pytest.approx(0.309417 - 0.001744, abs=1e-6)  # until the threadpool line
    assert s.stages["warm-up"] == pytest.approx(0.326541 - 0.309417, abs=1e-6)  # until the draft starts loading
    assert s.stages["draft model"] == pytest.approx(0.532277 - 0.326541, abs=1e-6)  # until the slots are set up
    assert s.stages["API ready"] == pytest.approx(meta["ready_s"] - 0.532277, abs=1e-6)
    assert sum(s.stages.values()) == pytest.approx(meta["ready_s"], abs=1e-6)
    assert s.compile_cache == startup_log.NO_COMPILE and s.errors == [] and s.notes == []
    assert s.engine == {"name": "llama.cpp", "model": "~/.cache/sparknb/testbed/gguf/tiny-moe-7bc1caff15ba-w3-g0.19.0.gguf",
                        "draft model": "~/.cache/sparknb/testbed/gguf/tiny-moe-7bc1caff15ba-w3-g0.19.0-q4_0.gguf",
                        "listening on": "http://127.0.0.1:8122"}
    assert s.reported == {"slots": 8, "context per slot": 16384}


def test_llama_servers_verbose_start_gives_its_build_file_type_and_memory_and_no_draft_stage():
    text, meta = _fixture("startup-llamacpp-tiny-dense-lv4")
    s = startup_log.parse(text, launched_at=meta["launched_at"], ready_s=meta["ready_s"], observed_s=meta["first_answer_s"])
    assert s.stages["draft model"] is None and s.notes == []  # no draft is no gap
    assert s.stages["warm-up"] == pytest.approx(0.321780 - 0.283154, abs=1e-6)
    assert [e.name for e in s.events if e.name in ("threadpool", "warmup_start", "slots")] == [
        "threadpool", "warmup_start", "slots"]
    assert s.engine["version"] == "build 1 (0c1e570)" and s.engine["file type"] == "BF16"
    assert s.reported["KV cache MiB"] == 256 and s.reported["model buffers MiB"] == 10.01
    assert s.reported["compute buffers MiB"] == 22.51 and s.reported["fit to memory s"] == 0.01


def test_a_llama_server_log_without_timestamps_names_the_engine_but_no_stage():
    text, meta = _fixture("startup-llamacpp-tiny-moe-default")
    bare = "\n".join(line.split(" ", 2)[2] if line[:1].isdigit() else line for line in text.splitlines())
    assert "llama_server: model loaded" in bare and "0.00." not in bare
    s = startup_log.parse(bare, launched_at=meta["launched_at"], ready_s=meta["ready_s"])
    assert all(v is None for v in s.stages.values()) and s.engine["name"] == "llama.cpp"
    assert any("--log-prefix --log-timestamps" in n for n in s.notes)
    assert s.reported["slots"] == 8


def test_a_llama_server_that_could_not_load_its_model_says_why():
    text = """0.00.005.906 I srv  llama_server: initializing ...
0.00.017.389 I srv    load_model: loading model '/m/tiny-dense.gguf'
0.00.024.501 E llama_model_load: error loading model: error loading model vocabulary: unknown pre-tokenizer type: 'gpt2'
0.00.037.330 E srv    load_model: failed to load model, '/m/tiny-dense.gguf'
0.00.038.535 E srv  llama_server: exiting due to model loading error
"""
    s = startup_log.parse(text, launched_at=time.time(), ready_s=None)
    assert "unknown pre-tokenizer type: 'gpt2'" in s.errors[0] and len(s.errors) == 3
    assert s.stages["model load"] is None and s.stages["API ready"] is None
    assert any("never answered its ready URL" in n for n in s.notes)
