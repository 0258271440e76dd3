"""The test bed must be real: built checkpoints with the promised shapes, and vLLM servers that
start, guard, speculate and stop as the rest of sparknb (and its swap-cost study) assumes."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families
from safetensors import safe_open

from sparknb import testbed

API_KEY_ENV = "SPARKNB_API_KEY"  # set by the tiny_dense fixture, as params/models/tiny-dense.yaml names it

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _tensors(path: Path) -> dict[str, tuple[int, str]]:
    """name -> (numel, dtype) straight from the safetensors file, independent of transformers."""
    out = {}
    with safe_open(str(path / "model.safetensors"), "pt") as fh:
        for key in fh.keys():
            tensor = fh.get_tensor(key)
            out[key] = (tensor.numel(), str(tensor.dtype))
    return out


def _get(url: str, key: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if key is not None:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in the group, read from /proc, not via the code under test."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat[0] != "Z" and int(stat[2]) == pgid:
            members.append(int(entry))
    return members


def _assert_gone(pid: int) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert _group_members(pid) == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _counter(metrics_text: str, sample_name: str, model: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        for sample in family.samples
        if sample.name == sample_name and sample.labels.get("model_name") == model
    )


# --- checkpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", testbed.NAMES)
def test_checkpoint_is_cached_not_rebuilt(name, monkeypatch):
    first = testbed.checkpoint(name)
    monkeypatch.setattr(testbed, "_build", lambda *a: pytest.fail("rebuilt a cached checkpoint"))
    t0 = time.monotonic()
    assert testbed.checkpoint(name) == first
    assert time.monotonic() - t0 < 2.0
    assert first.parent == testbed.cache_root()
    assert first.name == f"{name}-{testbed.recipe_key(name)}"


def test_changed_recipe_gets_a_new_key(monkeypatch):
    before = testbed.recipe_key("tiny-dense")
    assert before != testbed.recipe_key("tiny-moe")
    changed = {**testbed.RECIPES["tiny-dense"], "seed": 12345}
    monkeypatch.setitem(testbed.RECIPES, "tiny-dense", changed)
    assert testbed.recipe_key("tiny-dense") != before


def test_failed_build_leaves_no_half_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def crash(model, out):
        (out / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("simulated crash while saving")

    monkeypatch.setattr(testbed, "_save_model", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        testbed.checkpoint("tiny-dense")
    assert list(testbed.cache_root().iterdir()) == []


def test_unknown_name_is_refused():
    with pytest.raises(ValueError, match="tiny-dense"):
        testbed.checkpoint("tiny-huge")


@pytest.mark.parametrize("name", testbed.NAMES)
def test_checkpoint_matches_recipe(name):
    path = testbed.checkpoint(name)
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == [testbed.RECIPES[name]["architecture"]]
    assert config["hidden_size"] == 256
    assert config["num_hidden_layers"] == 4
    assert config["vocab_size"] == 4096
    assert config["max_position_embeddings"] >= 16384
    assert config["dtype"] == "bfloat16"
    if name == "tiny-moe":
        assert config.get("num_experts", config.get("num_local_experts")) == 16
        assert config["num_experts_per_tok"] == 2
    assert {dtype for _, dtype in _tensors(path).values()} == {"torch.bfloat16"}
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size < 32 * 2**20


@pytest.mark.parametrize("name", testbed.NAMES)
def test_parameter_counts_add_up(name):
    counts = testbed.parameter_counts(name)
    tensors = _tensors(testbed.checkpoint(name))
    experts = sum(n for key, (n, _) in tensors.items() if ".mlp.experts." in key)
    assert counts["total"] == sum(n for n, _ in tensors.values())
    assert counts["dense"] + experts == counts["total"]
    assert counts["dense"] > 0
    if name == "tiny-moe":
        assert experts > counts["dense"]
        assert counts["active_experts"] * 16 == experts * 2
    else:
        assert experts == 0 and counts["active_experts"] == 0


def test_tokenizer_has_no_bos_and_encodes():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(testbed.checkpoint("tiny-dense"))
    assert len(tok) == 4096
    assert tok.bos_token is None
    assert tok.eos_token == "<|im_end|>"
    sample = 'The model reads {"prompt": 42} and writes def run(x): return x'
    ids = tok(sample).input_ids
    assert tok.decode(ids) == sample
    assert not set(ids) & set(tok.all_special_ids)
    assert len(ids) < len(sample) / 2  # the BPE learned real merges
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


# --- servers ----------------------------------------------------------------------------------


@pytest.mark.server
def test_models_endpoint_lists_served_names(tiny_dense, tiny_moe):
    for server, key in ((tiny_dense, os.environ[API_KEY_ENV]), (tiny_moe, None)):
        status, body = _get(f"{server.url}/models", key)
        assert status == 200
        (model,) = json.loads(body)["data"]
        assert model["id"] == server.name
        assert model["max_model_len"] == 16384
        assert server.url == f"http://127.0.0.1:{server.port}/v1"


@pytest.mark.server
def test_dense_server_requires_the_key(tiny_dense):
    assert os.environ[API_KEY_ENV].startswith("sk-sparknb-test-")
    assert _get(f"{tiny_dense.url}/models")[0] == 401
    assert _get(f"{tiny_dense.url}/models", "sk-wrong")[0] == 401
    client = OpenAI(base_url=tiny_dense.url, api_key=os.environ[API_KEY_ENV])
    reply = client.completions.create(model="tiny-dense", prompt="The model", max_tokens=8,
                                      temperature=0, extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 8


@pytest.mark.server
def test_key_is_neither_on_command_line_nor_in_log(tiny_dense):
    cmdline = Path(f"/proc/{tiny_dense.pid}/cmdline").read_bytes().decode(errors="replace")
    assert "--served-model-name" in cmdline
    key = os.environ[API_KEY_ENV]
    assert key not in cmdline
    assert key not in tiny_dense.log_path.read_text(errors="replace")


@pytest.mark.server
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


@pytest.mark.server
def test_start_on_taken_port_is_refused_before_starting(tiny_moe, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(testbed.PortInUseError, match=f"port {tiny_moe.port} .* already in use"):
        testbed.start("tiny-moe", tiny_moe.port, log_path=tmp_path / "never.log")
    assert time.monotonic() - t0 < 5
    assert not (tmp_path / "never.log").exists()
    assert _get(f"{tiny_moe.url}/models")[0] == 200  # the running one was left alone


@pytest.mark.server
def test_failed_start_reports_log_and_leaves_no_process(tmp_path):
    log = tmp_path / "bad.log"
    with pytest.raises(testbed.ServerError) as caught:
        testbed.start("tiny-dense", _free_port(), log_path=log, timeout=300,
                      extra_args=["--no-such-option-xyz"])
    message = str(caught.value)
    assert "exited with code" in message
    assert "--no-such-option-xyz" in message  # from the log tail, not from our own text
    assert str(log) in message
    _assert_gone(caught.value.pid)


@pytest.mark.server
def test_stop_of_a_ready_server_leaves_no_process(tmp_path):
    with testbed.start("tiny-dense", _free_port(), log_path=tmp_path / "ready.log") as server:
        assert _get(f"{server.url}/models")[0] == 200
        assert len(_group_members(server.pid)) >= 3  # API server, engine core, worker
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 15  # a clean SIGTERM shutdown, not the SIGKILL fallback
    _assert_gone(server.pid)
    assert not testbed.port_in_use(server.port)
    server.stop()  # idempotent


@pytest.mark.server
def test_stop_while_starting_leaves_no_process(tmp_path):
    server = testbed.launch("tiny-dense", _free_port(), log_path=tmp_path / "starting.log")
    deadline = time.monotonic() + 300
    while len(_group_members(server.pid)) < 3 and time.monotonic() < deadline:
        assert server.running, server.log_tail()
        time.sleep(0.5)
    assert len(_group_members(server.pid)) >= 3, "vLLM never forked its engine"
    t0 = time.monotonic()
    server.stop()
    assert time.monotonic() - t0 < 20
    _assert_gone(server.pid)
