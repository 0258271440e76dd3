"""The real model on both servers: SmolLM2-135M on vLLM's CPU build, from a checkpoint that transformers' GGUF reader
wrote from the very GGUF llama-server serves (sparknb.serving.dequantized).

One vLLM start, the session's (minutes the first time: the checkpoint is written and torch.compile runs), and a few
short requests. vLLM serves `smollm2-tools` as `sparknb serve smollm2-tools` does: sparknb's tool template, its hermes
tool-call parser and --enable-prompt-tokens-details (real_models.VLLM_SERVINGS), so the same start serves an agent session and BFCL
items natively; its llama-server is the session's shared `smollm2_tools` (the same template), so both render a chat
prompt alike.
The two servers count a prompt alike but do not compute alike (float32 weights against llama.cpp's Q4_1 blocks
times 8-bit activations), so their greedy answers are not asserted equal: how far they agree is measured.
"""

from __future__ import annotations

import json
import re
import statistics

import httpx
import pytest
from bfcl_reference import decoded, graded
from gguf import GGUFReader
from support import run_notebook
from test_agent import LIVE, session_file  # noqa: F401  (session_file: the agent tests' repeat-a-call session)
from test_real_model import _have_model, _measured

from sparknb.cli import main
from sparknb.runs.run import read_records, verify
from sparknb.serving import dequantized, real_models, targets, testbed
from sparknb.serving.processes import free_port
from sparknb.studies.agent import figures

QUESTIONS = ("What is the capital of France?", "Write a Python function that adds two numbers.",
             "List three colors.", "Why is the sky blue?")


@pytest.fixture(scope="module")
def servers(smollm2_tools_vllm, smollm2_tools):
    """vLLM and llama-server, each serving the real model with sparknb's tool template: the session's two."""
    return smollm2_tools_vllm, smollm2_tools


def _chat(url: str, question: str) -> dict:
    body = {"model": real_models.SERVED, "messages": [{"role": "user", "content": question}], "max_tokens": 32,
            "temperature": 0}
    return httpx.post(f"{url}/chat/completions", json=body, timeout=120).json()


def test_the_checkpoint_carries_the_ggufs_own_chat_template_and_plain_float32_weights():
    why = _have_model()
    if why:
        pytest.skip(why)
    folder = dequantized.checkpoint()
    template = GGUFReader(real_models.gguf_file()).fields["tokenizer.chat_template"].contents()
    assert (folder / "chat_template.jinja").read_text() == template
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "float32"
    assert (config["architectures"], config["vocab_size"], config["num_hidden_layers"]) == (["LlamaForCausalLM"],
                                                                                              49152, 30)


def test_a_speculative_serving_asked_of_vllm_is_refused_naming_the_server_that_has_it(capsys):
    assert main(["serve", "smollm2-draft"]) == 2
    assert "smollm2-draft is served by llama-server only" in capsys.readouterr().err


@pytest.mark.demo  # the checkpoint is written by transformers
def test_smollm2_tools_on_vllm_is_served_with_the_tool_template_its_parser_and_the_cached_counts():
    """`sparknb serve smollm2-tools` on vLLM (its params and its command line, built without a start): the tool
    template, the hermes parser and --enable-prompt-tokens-details (without it the agent study's cached counts are
    unknown); the same command the server tests below start."""
    why = _have_model()
    if why:
        pytest.skip(why)
    assert testbed.params_name("smollm2-tools", "vllm") == "smollm2-tools-vllm"
    argv = list(targets.testbed_target("smollm2-tools", free_port(), engine="vllm").start)
    flags = " ".join(argv[argv.index("--chat-template"):])
    assert flags.startswith(f"--chat-template {real_models.TEMPLATE} --enable-auto-tool-choice --tool-call-parser "
                            "hermes --enable-prompt-tokens-details"), argv
    assert str(dequantized.checkpoint()) in argv and "--chat-template" not in targets.testbed_target(
        "smollm2", free_port(), engine="vllm").start  # the plain serving: the GGUF's own template


@pytest.mark.server
def test_a_greedy_prompt_counts_the_same_tokens_on_both_servers(servers):
    vllm, llama = servers
    for question in QUESTIONS:
        theirs, ours = _chat(vllm.url, question), _chat(llama.url, question)
        assert theirs["usage"]["prompt_tokens"] == ours["usage"]["prompt_tokens"], question


@pytest.mark.server
def test_decode_seals_on_vllm_with_exact_prompt_lengths_by_the_servers_own_count(servers, tmp_path):
    vllm, _ = servers
    _, folder = run_notebook("decode", tmp_path, {"model": "smollm2-vllm", "endpoint": vllm.url,
                                                  "prompt_lengths": [64, 256], "output_tokens": 32,
                                                  "repetitions": 2, "warmup": 1})
    assert verify(folder) == []
    records = _measured(folder)
    assert sorted({r["prompt_length"] for r in records}) == [64, 256]
    assert all(r["prompt_tokens"] == r["prompt_length"] for r in records)  # vLLM's own count, from its usage
    gaps = [abs(r["decode_s"] / r["server"]["per_request"]["decode_s"] - 1) for r in records]
    assert statistics.median(gaps) < 0.01, gaps  # the client's clock within 1% of the server's own


@pytest.mark.server
def test_a_live_agent_session_on_vllm_seals_with_its_own_cached_counts_and_its_counter_agrees(servers, session_file,
                                                                                              tmp_path):
    """The agent tests' session on vLLM: a tool call its hermes parser read, executed, and the answer to the result.
    Every step's cached tokens are vLLM's usage figure, and their sum is what vLLM's /metrics prefix-cache hits
    counter moved by around the sessions (the server's other count)."""
    vllm, _ = servers
    _, folder = run_notebook("agent", tmp_path, {**LIVE, "model": "smollm2-tools-vllm", "sessions_file": session_file,
                                                 "endpoint": vllm.url})
    assert verify(folder) == []
    records = read_records(folder)
    steps = [r for r in records if r.get("kind") == "step"]
    assert len(steps) == 2, [r.get("text") for r in steps]  # the call, then the answer to its result
    tools = next(r for r in records if r.get("kind") == "tools")
    assert tools["calls"] == ["list_users()"] and "Alice" in tools["results"][0]
    for r in steps:
        assert r["cached_tokens"] == r["usage_cached_tokens"] is not None
        assert (r["server"]["per_request"] or {}).get("cached_tokens") is None  # so the count is usage's alone
    (counters,) = [r for r in records if r.get("kind") == "counters"]
    assert counters["interference"] is None and counters["steps"] == 2
    assert counters["prefix_cache_hits"] == counters["cached_tokens"] == sum(r["cached_tokens"] for r in steps)
    # vLLM keeps whole blocks only (128 tokens on its CPU build): the second step was served 1,024 of the 1,074 sent
    # before (the probe with the tools had already cached the first step's 1,024)
    assert 0 < steps[1]["cached_tokens"] <= steps[0]["prompt_tokens"] < steps[1]["prompt_tokens"]
    gauge = next(line for line in httpx.get(f"{vllm.url.removesuffix('/v1')}/metrics", timeout=60).text.splitlines()
                 if line.startswith("vllm:cache_config_info{"))
    block = int(re.search(r'[{,]block_size="(\d+)"', gauge).group(1))
    assert next(r for r in records if r.get("kind") == "drawn")["cache_block"] == block == 128  # the CPU default
    sent, cached = steps[0]["prompt_tokens"], steps[1]["cached_tokens"]
    should = figures.step_table(records)["should_cache"].tolist()  # only the whole blocks of the prompt sent before
    assert cached % block == 0 and sent % block and should == [0, max(0, min(steps[1]["prompt_tokens"] - cached,
                                                                            sent // block * block - cached))]
    assert should[1] < sent - cached  # counted by the token, the cache would have been blamed for a part block


@pytest.mark.server
def test_bfcl_items_asked_natively_on_vllm_are_graded_as_bfcl_evals_own_checker_grades_them(servers, tmp_path):
    vllm, _ = servers
    _, folder = run_notebook("bfcl", tmp_path, {"model": "smollm2-tools-vllm", "endpoint": vllm.url, "format": "native",
                                                "categories": ["simple_python", "multiple", "irrelevance"],
                                                "per_category": 1, "max_tokens": 48})
    assert verify(folder) == []
    records = [r for r in read_records(folder) if "correct" in r]
    assert len(records) == 3 and {r["format"] for r in records} == {"native"}
    for r in records:  # BFCL's own decoder and checker on vLLM's raw answer
        assert (r["calls"], r["correct"]) == (decoded(r), graded(r)["valid"]), (r["item"], r["text"][:200])
