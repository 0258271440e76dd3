"""`sparknb model add` as a newcomer uses it: against the test bed's real servers (llama-server and vLLM's CPU
build), the file it writes carries the census of the checkpoint the server names, and runs a decode study with
no edit, whose table sets each length against the limit with the KV part named."""

from __future__ import annotations

import json

import pytest
import yaml
from support import run_notebook

from sparknb import cli
from sparknb.errors import ParamsError
from sparknb.roofline import census, checkpoint
from sparknb.runs.params import load_model
from sparknb.runs.run import verify
from sparknb.serving import gguf_models, tiny_models

KEY_ENV = "SPARKNB_API_KEY"  # the test bed's dense servers are behind a key


def _add_and_decode(tmp_path, monkeypatch, url: str, source, engine: str):
    """The command a newcomer types, into a project of its own (SPARKNB_HOME), then decode with that file."""
    monkeypatch.setenv("SPARKNB_HOME", str(tmp_path / "home"))
    argv = ["model", "add", "newcomer", "--endpoint", url, "--api-key-env", KEY_ENV, "--hardware", "cpu-host"]
    assert cli.main(argv) == 0
    written = tmp_path / "home" / "params" / "models" / "newcomer.yaml"
    before = written.read_text()
    assert cli.main(argv) == 2 and written.read_text() == before  # never overwritten
    monkeypatch.delenv("SPARKNB_HOME")
    params = yaml.safe_load(before)
    model = load_model(str(written))
    assert model.weights is None and model.engine == engine and model.architecture == "dense"
    assert model.census["bytes_per_token"] == census.count(checkpoint.read(source)).bytes_per_token
    assert params["checkpoint"] == str(source.resolve()) and "read per token" in before
    _, folder = run_notebook("decode", tmp_path, {"model": str(written), "prompt_lengths": [64, 512],
                                                  "output_tokens": 16, "repetitions": 2, "warmup": 1,
                                                  "engine_alone": engine == "llama.cpp"})
    assert verify(folder) == []
    drafts = json.loads((folder / "fingerprint.json").read_text())["server"]["speculative"]["server_counts_drafts"]
    assert "speculative" not in params and drafts is False  # the params and the run's fingerprint agree
    sealed = json.loads((folder / "census.json").read_text())["census"]
    assert sealed["bytes_per_token"] == model.census["bytes_per_token"] and sealed["kv_bytes_per_token"] == 2048
    table = json.loads((folder / "summary.json").read_text())["table"]
    for row in table:  # the KV part at the mean context: the prompt and half the answer
        assert row["KV MB/step"] == pytest.approx(2048 * (row["prompt tokens"] + 8) / 1e6)
        # llama-bench beside the pinned llama-server measured the engine alone at each length; vLLM has none
        assert (row.get("engine ms") or 0) > 0 if engine == "llama.cpp" else "engine ms" not in row
    return model


def test_model_add_against_llama_server_reads_the_gguf_it_serves(tiny_dense_llama, tmp_path, monkeypatch):
    model = _add_and_decode(tmp_path, monkeypatch, tiny_dense_llama.url, gguf_models.gguf_file("tiny-dense"),
                            "llama.cpp")
    assert model.census["kv"]["cache_dtype"] == "f16"


def test_model_add_against_vllm_reads_the_folder_it_serves(tiny_dense, tmp_path, monkeypatch):
    model = _add_and_decode(tmp_path, monkeypatch, tiny_dense.url, tiny_models.checkpoint("tiny-dense"), "vllm")
    assert model.census["kv"]["cache_dtype"] == "bfloat16" and "cache_config_info" in model.census["kv"]["source"]


def test_a_checkpoint_this_box_cannot_read_is_an_error_naming_what_to_pass(tiny_dense_llama, tmp_path):
    from sparknb.model_add import add

    with pytest.raises(ParamsError, match="pass --checkpoint PATH"):
        add("elsewhere", tiny_dense_llama.url, api_key_env=KEY_ENV, folder=tmp_path,
            checkpoint_path=str(tmp_path / "not-here.gguf"), hardware="cpu-host")
    assert not (tmp_path / "elsewhere.yaml").exists()


@pytest.mark.server
@pytest.mark.llamacpp
def test_decode_names_llama_servers_prompt_cache_stall_as_prefill_does(tmp_path):
    """On the H200, decode's TTFT read 253-575 ms against llama-server's own 11-143 ms of prompt time with no word:
    on its default host prompt cache (one slot, so each request saves the last), decode now names the stall."""
    from support import free_port

    from sparknb.serving import testbed

    with testbed.start("tiny-dense", free_port(), engine="llama.cpp", log_path=tmp_path / "server.log", timeout=120,
                       prompt_cache=True, extra_args=["--parallel", "1"]) as server:
        _, folder = run_notebook("decode", tmp_path, {"model": "tiny-dense-llamacpp", "endpoint": server.url,
                                                      "prompt_lengths": [512, 8192], "output_tokens": 8,
                                                      "repetitions": 3, "warmup": 1})
    findings = [f["text"] for f in json.loads((folder / "summary.json").read_text())["findings"]]
    (stall,) = [t for t in findings if "STALL" in t]
    assert stall.startswith("TTFT here: LLAMA-SERVER'S OWN STALL") and "--cache-ram 0" in stall


@pytest.mark.parametrize("nvml_name, file", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", "h200-nvl"), ("NVIDIA B200", "b200"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"), ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"), ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("NVIDIA GeForce RTX 5090", "rtx-5090"),
    ("NVIDIA GB10", "gb10"), ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000")])
def test_the_hardware_params_are_chosen_from_nvmls_name(nvml_name, file):
    """The names as NVML gives them (an H100 without a file stopped `model add` on the lent GPU)."""
    from sparknb.model_add import hardware_for
    from sparknb.runs.params import load_hardware

    assert hardware_for(nvml_name) == file
    hw = load_hardware(file)  # every nameplate cites the vendor's own figure
    assert hw.memory_bandwidth_gbs and hw.source.startswith("NVIDIA") and "B/s" in hw.source


def test_a_gpu_no_hardware_file_names_is_an_error_naming_the_fix():
    from sparknb.model_add import hardware_for

    with pytest.raises(ParamsError, match="pass --hardware NAME"):
        hardware_for("NVIDIA Tesla V100-SXM2-16GB")

@pytest.mark.server
def test_a_url_with_a_password_is_refused_before_any_request_naming_api_key_env(tiny_dense_llama, tmp_path, monkeypatch,
                                                                                 capsys, caplog):
    """A real server, so that a request sent would log its URL (httpx's INFO line) and be answered."""
    monkeypatch.setenv("SPARKNB_HOME", str(tmp_path / "home"))
    url = tiny_dense_llama.url.replace("http://", "http://me:canary-pw-38@")
    with caplog.at_level("INFO"):
        assert cli.main(["model", "add", "x", "--endpoint", url, "--api-key-env", KEY_ENV]) == 2
    said = capsys.readouterr().err
    assert "holds a user:password" in said and "--api-key-env NAME" in said
    assert "canary-pw-38" not in said + caplog.text and "HTTP Request" not in caplog.text
    assert not (tmp_path / "home" / "params" / "models" / "x.yaml").exists()
