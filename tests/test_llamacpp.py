"""The llama.cpp test bed must be real: llama-server serving the tiny GGUFs on 127.0.0.1, answering as sparknb
will read it (the streamed `timings`, /tokenize, the `llamacpp:` counters, draft-model speculation), computing
the same model as the checkpoint, and starting and stopping as the rest of sparknb assumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparknb.errors import ServerError
from sparknb.runs.params import load_model, project_root
from sparknb.serving import gguf_models, startup_log, testbed, tiny_models
from sparknb.serving.processes import group_members, port_in_use
from support import free_port

API_KEY_ENV = "SPARKNB_API_KEY"  # set by the tiny_dense_llama fixture, as params/models/tiny-dense-llamacpp.yaml names it
PROMPT = "The model reads the prompt and"
# Texts where byte-level BPE tokenizers tend to disagree: spaces, newlines, digits, contractions, non-ASCII,
# code, JSON and the special tokens of the chat template.
TEXTS = (
    "Hello world", "  two  spaces,\n\n\nthree newlines and a tab\there", "digits 12345 and 3.14159, 2026-12-02",
    "it's we'll they'd I'M", "naïve café – ☃ 日本語 🙂", "def measure_speed(batch):\n    return batch + 42\n",
    '{"name": "kari", "ok": true, "speed": 10.5}', "<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n",
    "trailing spaces   ", "\n",
)

pytestmark = [pytest.mark.server, pytest.mark.llamacpp, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _base(server: testbed.Server) -> str:
    return server.url.removesuffix("/v1")


def _http(server: testbed.Server) -> httpx.Client:
    key = server.api_key
    return httpx.Client(base_url=_base(server), timeout=60, headers={"Authorization": f"Bearer {key}"} if key else {})


def _metrics(server: testbed.Server) -> dict[str, float]:
    with _http(server) as http:
        response = http.get("/metrics")
    assert response.status_code == 200, response.text
    return {sample.name: sample.value for family in text_string_to_metric_families(response.text)
            for sample in family.samples if not sample.labels}


def _complete(server: testbed.Server, prompt, tokens: int = 16, **extra) -> dict:
    with _http(server) as http:
        response = http.post("/v1/completions", json={"model": server.name, "prompt": prompt, "max_tokens": tokens,
                                                      "temperature": 0, "ignore_eos": True, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def test_both_models_are_served_under_their_names_with_the_test_beds_context(tiny_dense_llama, tiny_moe_llama):
    for server, params in ((tiny_dense_llama, "tiny-dense-llamacpp"), (tiny_moe_llama, "tiny-moe-llamacpp")):
        with _http(server) as http:
            assert httpx.get(f"{_base(server)}/health", timeout=10).json() == {"status": "ok"}  # no key needed
            (model,) = http.get("/v1/models").json()["data"]
            props = http.get("/props").json()
        assert model["id"] == server.name == load_model(params).served_model_name
        assert model["meta"]["n_ctx"] == tiny_models.MAX_MODEL_LEN  # per request, as the vLLM test bed's max-model-len
        assert model["meta"]["n_vocab"] == 4096 and model["meta"]["ftype"] == "BF16"
        assert props["total_slots"] == gguf_models.PARALLEL
        assert props["default_generation_settings"]["n_ctx"] == tiny_models.MAX_MODEL_LEN
        assert Path(props["model_path"]) == gguf_models.gguf_file(server.name)
        assert props["eos_token"] == "<|im_end|>"


def test_the_dense_server_requires_the_key_which_is_neither_on_its_command_line_nor_in_its_log(tiny_dense_llama):
    key = os.environ[API_KEY_ENV]
    assert httpx.get(f"{tiny_dense_llama.url}/models", timeout=10).status_code == 401
    assert httpx.get(f"{tiny_dense_llama.url}/models", headers={"Authorization": "Bearer sk-wrong"},
                     timeout=10).status_code == 401
    assert _complete(tiny_dense_llama, PROMPT, 8)["usage"]["completion_tokens"] == 8  # with the key
    cmdline = Path(f"/proc/{tiny_dense_llama.pid}/cmdline").read_bytes().decode(errors="replace")
    assert "--alias" in cmdline and key not in cmdline
    assert key not in tiny_dense_llama.log_path.read_text(errors="replace")


def test_tokenize_counts_as_the_checkpoints_tokenizer_and_detokenize_gives_the_text_back(tiny_moe_llama):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tiny_models.checkpoint("tiny-moe"))
    with _http(tiny_moe_llama) as http:
        for text in TEXTS:
            tokens = http.post("/tokenize", json={"content": text}).json()["tokens"]
            assert tokens == hf.encode(text, add_special_tokens=False), text
            assert http.post("/detokenize", json={"tokens": tokens}).json() == {"content": text}
        # vLLM's body is not an error here: an empty list, which a client must not take for a count
        assert http.post("/tokenize", json={"model": "tiny-moe", "prompt": "Hello world"}).json() == {"tokens": []}


def test_a_streamed_completion_ends_with_usage_and_the_servers_own_timings(tiny_moe_llama):
    with _http(tiny_moe_llama) as http:
        prompt_tokens = len(http.post("/tokenize", json={"content": PROMPT}).json()["tokens"])
        events = []
        body = {"model": "tiny-moe", "prompt": PROMPT, "max_tokens": 16, "temperature": 0, "ignore_eos": True,
                "stream": True, "cache_prompt": False}
        with http.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(line.removeprefix("data: "))
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "length" and last["choices"][0]["text"] == ""
    assert last["usage"]["completion_tokens"] == 16 and last["usage"]["prompt_tokens"] == prompt_tokens
    timings = last["timings"]
    assert timings["predicted_n"] == 16 and timings["prompt_n"] == prompt_tokens and timings["cache_n"] == 0
    assert timings["predicted_ms"] > 0 and timings["prompt_ms"] > 0
    assert timings["draft_n"] >= timings["draft_n_accepted"] >= 0  # tiny-moe speculates
    assert all("timings" not in c and "usage" not in c for c in chunks[:-1])  # only the last event has them
    assert len([c for c in chunks if c["choices"][0]["text"]]) == 16  # one token per text event, no token ids
    assert not any("token_ids" in c["choices"][0] or "tokens" in c for c in chunks)


def test_a_prompt_of_token_ids_is_read_as_those_tokens(tiny_dense_llama):
    ids = list(range(300, 340))
    reply = _complete(tiny_dense_llama, ids, 4, cache_prompt=False)
    assert reply["usage"]["prompt_tokens"] == 40 and reply["timings"]["prompt_n"] == 40


def test_a_repeated_prompt_is_served_from_the_slots_cache_unless_the_request_says_not_to(tiny_dense_llama):
    """--cache-ram 0 removes the host-memory prompt cache, not the slot's own reuse of a common prefix."""
    prompt = "Prefix caching check: " + " ".join(["river"] * 60)
    _complete(tiny_dense_llama, prompt, 4)
    again = _complete(tiny_dense_llama, prompt, 4)["timings"]
    assert again["cache_n"] > 50 and again["prompt_n"] < 10
    fresh = _complete(tiny_dense_llama, prompt, 4, cache_prompt=False)["timings"]
    assert fresh["cache_n"] == 0 and fresh["prompt_n"] > 60


def test_the_llamacpp_counters_count_a_request(tiny_dense_llama):
    before = _metrics(tiny_dense_llama)
    reply = _complete(tiny_dense_llama, PROMPT + " counts", 24, cache_prompt=False)
    after = _metrics(tiny_dense_llama)
    moved = {name: after[name] - before[name] for name in after if name.endswith("_total")}
    assert moved["llamacpp:tokens_predicted_total"] == 24
    assert moved["llamacpp:prompt_tokens_total"] == reply["usage"]["prompt_tokens"]
    assert moved["llamacpp:n_decode_total"] == 24  # one prompt batch plus 23 single-token steps
    assert 0 < moved["llamacpp:tokens_predicted_seconds_total"] < 60
    assert after["llamacpp:requests_processing"] == 0 and after["llamacpp:requests_deferred"] == 0
    assert moved["llamacpp:spec_decode_num_drafts_total"] == 0  # tiny-dense does not speculate


def test_the_draft_model_speculates_and_the_counters_and_timings_agree(tiny_moe_llama):
    before = _metrics(tiny_moe_llama)
    timings = _complete(tiny_moe_llama, PROMPT, 64, cache_prompt=False)["timings"]
    after = _metrics(tiny_moe_llama)
    drafted = after["llamacpp:spec_decode_num_draft_tokens_total"] - before["llamacpp:spec_decode_num_draft_tokens_total"]
    accepted = (after["llamacpp:spec_decode_num_accepted_tokens_total"]
                - before["llamacpp:spec_decode_num_accepted_tokens_total"])
    assert drafted == timings["draft_n"] > 0
    assert accepted == timings["draft_n_accepted"]
    assert 0 < accepted < drafted  # the Q4_0 copy guesses often, not always
    steps = after["llamacpp:spec_decode_num_drafts_total"] - before["llamacpp:spec_decode_num_drafts_total"]
    assert drafted <= gguf_models.DRAFT_TOKENS * steps


@pytest.mark.parametrize("name", tiny_models.NAMES)
def test_the_gguf_computes_the_checkpoints_model(name, tiny_dense_llama, tiny_moe_llama):
    """llama-server's next-token log-probabilities, over the whole vocabulary, against transformers' on the checkpoint.

    Random weights give a flat distribution, so the order of the top tokens proves little and a small part
    (tiny-moe's experts) moves few of them: the whole distribution is compared. Measured: the right GGUF is
    within 0.005 nats of transformers everywhere; with the experts stacked in reverse order, 0.23 off.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    server = {"tiny-dense": tiny_dense_llama, "tiny-moe": tiny_moe_llama}[name]
    tokenizer = AutoTokenizer.from_pretrained(tiny_models.checkpoint(name))
    model = AutoModelForCausalLM.from_pretrained(tiny_models.checkpoint(name), dtype=torch.float32)
    for prompt in ("The model reads the prompt and", 'def measure_speed(batch):\n    return {"ok": true'):
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        with torch.no_grad():
            ours = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1], -1)
        with _http(server) as http:
            reply = http.post("/completion", json={"prompt": ids, "n_predict": 1, "n_probs": len(tokenizer),
                                                   "temperature": 0, "cache_prompt": False}).json()
        theirs = reply["completion_probabilities"][0]["top_logprobs"]
        assert len(theirs) == len(tokenizer)
        gap = max(abs(t["logprob"] - float(ours[t["id"]])) for t in theirs)
        assert gap < 0.02, (prompt, gap)


def test_the_start_up_log_gives_llama_servers_stages(tiny_moe_llama):
    parsed = startup_log.parse(tiny_moe_llama.log_text(), launched_at=tiny_moe_llama.launched_at,
                               ready_s=tiny_moe_llama.ready_s, observed_s=tiny_moe_llama.elapsed())
    assert parsed.compile_cache == startup_log.NO_COMPILE
    assert parsed.engine["name"] == "llama.cpp"
    assert parsed.engine["model"] == str(gguf_models.gguf_file("tiny-moe"))
    assert parsed.engine["draft model"] == str(gguf_models.draft_file("tiny-moe"))
    assert set(parsed.stages) == set(startup_log.llama_log.STAGES)
    assert all(parsed.stages[s] is not None for s in startup_log.llama_log.STAGES), parsed.stages
    assert abs(sum(parsed.stages.values()) - tiny_moe_llama.ready_s) < 0.01  # the stages add up to the wait
    assert parsed.reported["slots"] == gguf_models.PARALLEL and parsed.errors == []


def test_the_default_prompt_cache_saves_the_last_prompt_before_each_new_one_and_cache_ram_0_does_not(tmp_path):
    """llama-server's own stall (the host-memory prompt cache), in its own words (-lv 4), with one slot so that
    every request after the first evicts the previous prompt; the test bed's --cache-ram 0 never does it."""
    words = "the a model token prompt answer question server request latency memory cache prefix".split()
    logs = {}
    for prompt_cache in (True, False):
        log = tmp_path / f"cache-{prompt_cache}.log"
        with testbed.start("tiny-dense", free_port(), engine="llama.cpp", log_path=log, timeout=120,
                           prompt_cache=prompt_cache, extra_args=["--parallel", "1", "--ctx-size", "4096", "-lv", "4"]) as s:
            for i in range(3):
                _complete(s, " ".join(words[(i + j) % len(words)] for j in range(300)), 2)
        logs[prompt_cache] = log.read_text()
    assert "prompt cache is enabled, size limit: 8192 MiB" in logs[True]
    assert logs[True].count("saving prompt with length") == 2  # before the second and the third request
    assert logs[True].count("prompt cache update took") == 3
    assert "prompt cache is disabled" in logs[False]
    assert "saving prompt with length" not in logs[False] and "prompt cache update took" not in logs[False]


def test_a_failed_start_reports_the_log_and_leaves_no_process(tmp_path):
    log = tmp_path / "bad.log"
    with pytest.raises(ServerError) as caught:
        testbed.start("tiny-dense", free_port(), engine="llama.cpp", log_path=log, timeout=60,
                      extra_args=["--no-such-option-xyz"])
    assert "exited with code" in str(caught.value) and "--no-such-option-xyz" in str(caught.value)
    with pytest.raises(ProcessLookupError):
        os.kill(caught.value.pid, 0)


def test_sparknb_serve_with_the_llamacpp_engine_serves_until_sigterm(tmp_path):
    port = 8112  # params/models/tiny-moe-llamacpp.yaml
    if port_in_use(port):
        pytest.skip(f"port {port} is taken by another process; `sparknb serve` uses the port its params name")
    env = {**os.environ, "PYTHONPATH": str(project_root())}
    process = subprocess.Popen([sys.executable, "-m", "sparknb", "serve", "tiny-moe", "--engine", "llama.cpp"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               start_new_session=True)
    try:
        line = process.stdout.readline()
        deadline = time.monotonic() + 120
        while "listens on" not in line and time.monotonic() < deadline and process.poll() is None:
            line = process.stdout.readline()
        assert f"tiny-moe (llama.cpp) listens on http://127.0.0.1:{port}/v1" in line
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60, json={
            "model": "tiny-moe", "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "ignore_eos": True})
        assert reply.json()["usage"]["completion_tokens"] == 4
        children = group_members(process.pid)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert all(not Path(f"/proc/{pid}").exists() for pid in children)
    assert not port_in_use(port)
