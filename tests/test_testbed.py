"""The test bed must be real: vLLM CPU servers of the tiny models that start, guard, speculate and
stop as the rest of sparknb (and its swap-cost study) assumes. Every test here starts or uses a server."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import httpx
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from sparknb.errors import PortInUseError, ServerError
from sparknb.serving import testbed
from sparknb.serving.processes import group_members  # tested on plain processes
from support import free_port

API_KEY_ENV = "SPARKNB_API_KEY"  # set by the tiny_dense fixture, as params/models/tiny-dense.yaml names it

pytestmark = [pytest.mark.server, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _get(url: str, key: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert group_members(pid) == []


def _counter(metrics_text: str, sample_name: str, model: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name == sample_name and sample.labels.get("model_name") == model
    )


def test_models_endpoint_lists_served_names(tiny_dense, tiny_moe):
    for server, key in ((tiny_dense, os.environ[API_KEY_ENV]), (tiny_moe, None)):
        status, body = _get(f"{server.url}/models", key)
        assert status == 200
        (model,) = json.loads(body)["data"]
        assert model["id"] == server.name
        assert model["max_model_len"] == 16384
        assert server.url == f"http://127.0.0.1:{server.port}/v1"


def test_dense_server_requires_the_key(tiny_dense):
    assert os.environ[API_KEY_ENV].startswith("sk-sparknb-test-")
    assert _get(f"{tiny_dense.url}/models")[0] == 401
    assert _get(f"{tiny_dense.url}/models", "sk-wrong")[0] == 401
    client = OpenAI(base_url=tiny_dense.url, api_key=os.environ[API_KEY_ENV])
    reply = client.completions.create(model="tiny-dense", prompt="The model", max_tokens=8,
                                      temperature=0, extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 8


def test_key_is_neither_on_command_line_nor_in_log(tiny_dense):
    cmdline = Path(f"/proc/{tiny_dense.pid}/cmdline").read_bytes().decode(errors="replace")
    assert "--served-model-name" in cmdline
    key = os.environ[API_KEY_ENV]
    assert key not in cmdline
    assert key not in tiny_dense.log_path.read_text(errors="replace")


def test_greedy_completion_on_moe_drafts_ngram_tokens(tiny_moe):
    def drafts() -> float:
        status, body = _get(f"{tiny_moe.url.removesuffix('/v1')}/metrics")
        assert status == 200
        return _counter(body.decode(), "vllm:spec_decode_num_drafts_total", "tiny-moe")

    before = drafts()
    client = OpenAI(base_url=tiny_moe.url, api_key="unused")
    reply = client.completions.create(model="tiny-moe", prompt="The model reads the prompt and",
                                      max_tokens=64, temperature=0, extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 64
    assert drafts() > before


def test_the_final_usage_chunk_carries_the_servers_own_timing_of_that_request(tiny_moe):
    """The test bed runs with --enable-per-request-metrics: vLLM's own clock for one request, exact under load."""
    body = {"model": "tiny-moe", "prompt": "The model reads the prompt and", "max_tokens": 16, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    last = None
    with httpx.stream("POST", f"{tiny_moe.url}/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                last = json.loads(line.removeprefix("data: "))
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 16  # the final usage chunk
    metrics = last["metrics"]
    assert metrics["time_to_first_token_ms"] > 0 and metrics["generation_time_ms"] > 0


def test_start_on_taken_port_is_refused_before_starting(tiny_moe, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(PortInUseError, match=f"port {tiny_moe.port} .* already in use"):
        testbed.start("tiny-moe", tiny_moe.port, log_path=tmp_path / "never.log")
    assert time.monotonic() - t0 < 5
    assert not (tmp_path / "never.log").exists()
    assert _get(f"{tiny_moe.url}/models")[0] == 200  # the running one was left alone


def test_failed_start_reports_log_and_leaves_no_process(tmp_path):
    log = tmp_path / "bad.log"
    with pytest.raises(ServerError) as caught:
        testbed.start("tiny-dense", free_port(), log_path=log, timeout=300,
                      extra_args=["--no-such-option-xyz"])
    message = str(caught.value)
    assert "exited with code" in message
    assert "--no-such-option-xyz" in message  # from the log tail, not from our own text
    assert str(log) in message
    _assert_gone(caught.value.pid)


def test_stop_while_starting_leaves_no_process(tmp_path):
    server = testbed.launch("tiny-dense", free_port(), log_path=tmp_path / "starting.log")
    deadline = time.monotonic() + 300
    while len(group_members(server.pid)) < 3 and time.monotonic() < deadline:
        assert server.running, server.log_tail()
        time.sleep(0.5)
    assert len(group_members(server.pid)) >= 3, "vLLM never forked its engine"
    t0 = time.monotonic()
    gone = server.stop()
    assert time.monotonic() - t0 < 20
    _assert_gone(server.pid)
    assert server.stop() is gone  # idempotent: a second stop returns the first one's account and signals nothing
