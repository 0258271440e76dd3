"""The decode sweep end to end: real papermill runs of the real notebook against real vLLM servers."""

import json
import threading
import time

import nbformat
import pandas as pd
import papermill
import pytest

from sparknb import bandwidth, decode
from sparknb.cli import main
from sparknb.client import Endpoint, EndpointError
from sparknb.guard import GuardError
from sparknb.params import load_hardware, load_model, project_root
from sparknb.prompts import PromptMaker
from sparknb.run import read_records, verify
from sparknb.study import start

NOTEBOOK = project_root() / "notebooks" / "decode.ipynb"
SMALL = {"prompt_lengths": [64, 256], "output_tokens": 48, "warmup": 1, "repetitions": 2}


def run_plain(tmp_path, server, model, **params):
    """The plain papermill command a user would type, through papermill's own API."""
    out = tmp_path / f"{model}-out.ipynb"
    papermill.execute_notebook(str(NOTEBOOK), str(out), parameters={"model": model, "endpoint": server.url,
                               "outputs": str(tmp_path / "outputs"), **SMALL, **params}, progress_bar=False)
    folders = sorted((tmp_path / "outputs" / "decode").iterdir())
    return nbformat.read(out, as_version=4), folders[-1]


def outputs_text(nb) -> str:
    return "\n".join(str(o.get("text", "")) + json.dumps(o.get("data", {})) for c in nb.cells for o in c.get("outputs", []))


@pytest.mark.server
def test_prompts_are_exactly_as_long_as_asked_and_never_repeat(tiny_dense, dense_key):
    ep = Endpoint(tiny_dense.url, "tiny-dense", api_key=dense_key)
    maker = PromptMaker(ep.tokenize)
    prompts = [maker.make(n) for n in (20, 111, 364, 111)]
    assert [len(p) for p in prompts] == [20, 111, 364, 111]
    assert len({tuple(p[:4]) for p in prompts}) == 4  # unique from the opening tokens
    done = ep.complete(prompts[1], max_tokens=8)
    assert done.prompt_tokens == 111 and done.completion_tokens == 8  # the server counts the same


@pytest.mark.server
def test_plain_papermill_run_on_the_dense_model(tmp_path, tiny_dense):
    nb, folder = run_plain(tmp_path, tiny_dense, "tiny-dense")
    records = read_records(folder)
    assert len(records) == 2 * (1 + 2)  # every request, warmups included, one line each
    assert [r["warmup"] for r in records].count(True) == 2
    assert all(r["prompt_tokens"] == r["prompt_length"] for r in records)
    assert all(r["completion_tokens"] == 48 for r in records)
    assert all(r["interference"] is None for r in records)
    assert all(r["server"]["prefix_cache_hits"] == 0 for r in records)
    summary = json.loads((folder / "summary.json").read_text())
    rows = {row["prompt tokens"]: row for row in summary["table"]}
    assert set(rows) == {64, 256} and all(row["n"] == 2 for row in rows.values())
    for length, row in rows.items():
        # vLLM's own request_decode_time over the same requests, per token, beside the client's.
        measured = [r for r in records if r["prompt_length"] == length and not r["warmup"]]
        tokens = sum(r["decode_tokens"] for r in measured)
        assert row["vLLM ms/token"] == pytest.approx(1000 * sum(r["server"]["decode_s"] for r in measured) / tokens)
        assert row["ms/token"] == pytest.approx(1000 * sum(r["decode_s"] for r in measured) / tokens)
        assert row["decode tok/s (median)"] > 0
    for r in records:  # the client cannot see a token before the server made it
        assert r["ttft_s"] >= r["server"]["ttft_s"] - 0.002 and r["total_s"] >= r["server"]["e2e_s"] - 0.002
    fp = json.loads((folder / "fingerprint.json").read_text())
    assert fp["server"]["max_model_len"] == 16384 and fp["server"]["model"] == "tiny-dense"
    assert fp["gpu"]["available"] is False
    assert verify(folder) == []
    text = outputs_text(nb)
    assert "vLLM ms/token" in text and "image/png" in text and "max_model_len" in text  # table, plot, fingerprint
    assert "tqdm" not in text and "%|" not in text  # no frozen progress bar


@pytest.mark.server
def test_moe_with_speculative_decoding_counts_tokens_per_step(tmp_path, tiny_moe):
    _, folder = run_plain(tmp_path, tiny_moe, "tiny-moe")
    records = [r for r in read_records(folder) if not r["warmup"]]
    spec = [r["server"]["spec_decode"] for r in records]
    assert all(s["drafts"] > 0 for s in spec), "n-gram speculation should draft on random-weight text"
    # More tokens than steps: a chunk holding several tokens must not be counted as one.
    assert all(s["tokens_per_step"] > 1 for s in spec)
    assert all(r["completion_tokens"] == 48 for r in records)
    summary = json.loads((folder / "summary.json").read_text())
    assert all(row["tokens/step"] > 1 for row in summary["table"])


@pytest.mark.server
def test_sparknb_run_seals_notebook_report_and_data(tmp_path, tiny_dense, dense_key, capsys):
    params = ["-p", "model", "tiny-dense", "-p", "endpoint", tiny_dense.url, "-p", "prompt_lengths", "[64]",
              "-p", "output_tokens", "16", "-p", "repetitions", "1"]
    assert main(["run", "decode", *params, "--outputs", str(tmp_path)]) == 0
    (folder,) = (tmp_path / "decode").iterdir()
    manifest = json.loads((folder / "manifest.json").read_text())["sha256"]
    assert {"notebook.ipynb", "report.html", "records.jsonl", "fingerprint.json", "params.json",
            "summary.json"} <= set(manifest)
    html = (folder / "report.html").read_text()
    assert "data:image/png;base64" in html and "decode tok/s" in html  # plot and table, offline
    assert "decode.sweep" not in html  # code hidden
    assert main(["verify", str(folder)]) == 0
    # Any file the run wrote, and the executed notebook, must not carry the server's key.
    for path in folder.iterdir():
        assert dense_key not in path.read_text(errors="replace"), path.name


def _cli_refusal(tmp_path, capsys, *params) -> str:
    code = main(["run", "decode", "--outputs", str(tmp_path), *params])
    err = capsys.readouterr().err
    assert code == 2
    assert not (tmp_path / "decode").exists() or not any((tmp_path / "decode").iterdir()), "nothing is kept"
    return err


@pytest.mark.server
def test_bad_input_is_refused_before_any_request(tmp_path, tiny_dense, capsys):
    url = ["-p", "endpoint", tiny_dense.url]
    assert "no-such-model" in _cli_refusal(tmp_path, capsys, "-p", "model", "no-such-model")
    assert "Cannot reach" in _cli_refusal(tmp_path, capsys, "-p", "model", "tiny-dense", "-p", "endpoint",
                                          "http://127.0.0.1:9/v1")
    assert "max_model_len of 16384" in _cli_refusal(tmp_path, capsys, "-p", "model", "tiny-dense", *url,
                                                     "-p", "prompt_lengths", "[64, 20000]")
    assert "repetitions must be 1 or more" in _cli_refusal(tmp_path, capsys, "-p", "model", "tiny-dense", *url,
                                                           "-p", "repetitions", "0")


@pytest.mark.server
def test_a_model_the_server_does_not_serve_lists_what_it_serves(tiny_dense, tmp_path, monkeypatch):
    mine = load_model("tiny-dense").model_copy(update={"served_model_name": "other"})
    path = tmp_path / "other.yaml"
    path.write_text(json.dumps(mine.model_dump()))  # JSON is YAML
    with pytest.raises(Exception, match="'other' is not served.*It serves: tiny-dense"):
        start("decode", model=str(path), settings={}, endpoint=tiny_dense.url, outputs=str(tmp_path))


@pytest.mark.server
def test_the_guard_refuses_while_the_server_is_busy(tmp_path, tiny_dense, dense_key):
    busy = Endpoint(tiny_dense.url, "tiny-dense", api_key=dense_key)
    thread = threading.Thread(target=lambda: busy.complete("busy " * 20, max_tokens=3000), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while busy.metrics().load()["running"] < 1:
        assert time.monotonic() < deadline, "the background request never started"
        time.sleep(0.05)
    with pytest.raises(GuardError, match="1 request running"):
        start("decode", model="tiny-dense", settings={}, endpoint=tiny_dense.url, outputs=str(tmp_path))
    assert not (tmp_path / "decode").exists()
    study = start("decode", model="tiny-dense", settings={}, endpoint=tiny_dense.url, outputs=str(tmp_path),
                  force=True)
    try:
        params = json.loads((study.run.path / "params.json").read_text())
        assert params["guard"]["forced"] is True and "1 request running" in params["guard"]["findings"][0]
    finally:
        study.finish({}, seal=True)
        thread.join(timeout=120)


def test_nonsense_parameters_are_named():
    with pytest.raises(ValueError) as e:
        decode.Plan((), 1, -1, 0, 9.0)
    for word in ("prompt_lengths is empty", "output_tokens", "repetitions", "warmup", "temperature"):
        assert word in str(e.value)


@pytest.mark.server
def test_a_failure_halfway_keeps_every_record_taken(tmp_path, tiny_dense):
    study = start("decode", model="tiny-dense", settings={}, endpoint=tiny_dense.url, outputs=str(tmp_path))
    maker = PromptMaker(study.endpoint.tokenize)
    good = maker.make(32)
    study.request({"n": 1}, lambda ep: ep.complete(good, max_tokens=8))
    with pytest.raises(EndpointError, match="out of vocabulary"):  # a token id no vocabulary has
        study.request({"n": 2}, lambda ep: ep.complete(good[:-1] + [10**8], max_tokens=8))
    records = read_records(study.run.path)
    assert [r["n"] for r in records] == [1, 2]
    assert records[0]["completion_tokens"] == 8 and "error" in records[1]
    study.finish({}, seal=True)
    assert verify(study.run.path) == []


def test_findings_flag_bursts_interference_and_the_limit():
    rows = [
        # prompt_length, decode_s, server_decode_s, interference
        (111, 0.02, 0.50, None),  # the client saw all tokens at once: a burst
        (111, 0.51, 0.50, None),
        (111, 0.30, 0.31, "the server finished 2 requests while this one ran"),
    ]
    df = pd.DataFrame([{"prompt_length": p, "prompt_tokens": p, "completion_tokens": 150, "decode_tokens": 149,
                        "ttft_s": 0.1, "decode_s": d, "decode_tok_s": 149 / d, "server_decode_s": s,
                        "server_ttft_s": 0.09, "tokens_per_step": 1.0, "interference": i} for p, d, s, i in rows])
    gb10 = load_hardware("gb10")
    limit = bandwidth.limit(load_model("qwen3.8-27b"), gb10)
    table = pd.DataFrame([{"prompt tokens": 111, "decode tok/s (median)": 8.4, "client vs vLLM %": -1.0,
                           "% of limit": 94.0, "tokens/step": 1.0}]).set_index("prompt tokens")
    text = "\n".join(decode.findings(df, table, limit, gb10.name))
    assert "1 request(s) were left out" in text
    assert "1 of 2 answers reached the client in bursts" in text
    assert "94% to 94% of the bandwidth limit" in text and "30.6 GB" in text
