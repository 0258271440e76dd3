"""Servers beyond vLLM: the real `transformers serve` on the tiny dense checkpoint, on this machine's CPU.

It has the OpenAI API but no /tokenize, /metrics or /version. Prompts must still be exactly N tokens
(counted by the local tokenizer the params name, and checked against the server's own usage), and
every server-side cross-check must read as not available, never as zero.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from sparknb import engines
from sparknb.endpoint import metrics
from sparknb.endpoint.client import NOT_AVAILABLE, Endpoint, EndpointError
from sparknb.endpoint.prompts import PromptMaker
from sparknb.machine.fingerprint import table as fingerprint_table
from sparknb.runs.params import load_model, project_root
from sparknb.runs.run import read_records, verify
from sparknb.runs.study import server_view, start
from sparknb.serving import hub_cache
from sparknb.serving import lifecycle, targets, testbed
from sparknb.studies import mmlu_pro as m
from support import free_port, outputs_text, run_notebook
from test_mmlu_pro_data import synthetic

REPO_ID = "sparknb/tiny-dense"
NEEDS = ("transformers", "fastapi", "uvicorn", "accelerate")  # what `transformers serve` imports
MISSING = [name for name in NEEDS if importlib.util.find_spec(name) is None]

pytestmark = pytest.mark.server


@contextmanager
def transformers_model(folder: Path, device: str, hardware: str = "cpu-host") -> Iterator[tuple[Path, object]]:
    """`transformers serve` on the tiny dense checkpoint, linked into a cache of its own under REPO_ID, and the
    params file that names it (tokenizer: the checkpoint folder); stopped, with every child, at the end."""
    if MISSING:
        if os.environ.get("SPARKNB_REQUIRE_SERVERS") == "1":
            pytest.fail(f"transformers serve needs {MISSING}: pip install -e '.[serve]'", pytrace=False)
        pytest.skip(f"transformers serve needs {MISSING}: pip install -e '.[serve]'")
    checkpoint = testbed.checkpoint("tiny-dense")
    hub_cache.place(checkpoint, REPO_ID, folder / "hub")
    tiny = yaml.safe_load((project_root() / "params" / "models" / "tiny-dense.yaml").read_text())
    params = {
        "name": "tiny-dense-transformers", "served_model_name": REPO_ID,
        "endpoint": f"http://127.0.0.1:{free_port()}/v1", "hardware": hardware, "architecture": "dense",
        "tokenizer": str(checkpoint), "weights": tiny["weights"],
        "lifecycle": {"start": "{python} -m transformers.cli.transformers serve " + REPO_ID
                               + f" --host {{host}} --port {{port}} --device {device}",
                      "ready_timeout_s": 300,
                      "env": {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(folder / "hub")}},
    }
    path = folder / "tiny-dense-transformers.yaml"
    path.write_text(yaml.safe_dump(params))
    server = lifecycle.launch(targets.resolve(load_model(str(path))), folder / "server.log")
    try:
        yield path, server.wait_ready()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Path, object]]:
    with transformers_model(tmp_path_factory.mktemp("transformers-serve"), "cpu") as found:
        yield found


def endpoint(served, tokenizer: bool = True) -> Endpoint:
    path, server = served
    return Endpoint(server.url, REPO_ID, tokenizer=load_model(str(path)).tokenizer if tokenizer else None)


def test_info_names_every_side_door_the_server_lacks(served):
    info = endpoint(served).info()
    assert info.version == f"version {NOT_AVAILABLE}"
    assert set(info.not_available) == {"/version", "/tokenize", "/metrics"}
    assert info.served == [REPO_ID]


def test_exact_length_prompts_are_as_long_by_the_servers_own_count(served):
    ep = endpoint(served)
    ep.info()
    maker = PromptMaker(ep.tokenize)
    for n in (20, 111, 300):
        done = ep.complete(maker.make(n), max_tokens=12, ignore_eos=True)
        assert done.prompt_tokens == n  # the server tokenized the text it was sent back to the same ids
        assert done.completion_tokens == 12 and done.finish_reason == "length"  # the fixed length held


def test_without_a_local_tokenizer_the_refusal_names_the_params_field(served):
    ep = endpoint(served, tokenizer=False)
    ep.info()
    with pytest.raises(EndpointError, match=f"/tokenize is {NOT_AVAILABLE}.*`tokenizer:`"):
        ep.tokenize("hello")


def test_the_servers_counters_read_as_unknown_never_zero(served):
    ep = endpoint(served)
    ep.info()
    before = ep.metrics()
    done = ep.complete("The quick brown fox", max_tokens=4)
    view = server_view(metrics.delta(before, ep.metrics()))
    assert done.completion_tokens == 4
    assert all(view[k] is None for k in ("requests", "generated_tokens", "prefix_cache_hits", "decode_s", "ttft_s"))
    assert view["spec_decode"]["tokens_per_step"] is None
    assert len(view["unchecked"]) == 4


def test_the_decode_notebook_runs_and_says_what_it_could_not_check(served, tmp_path):
    path, _ = served
    nb, folder = run_notebook("decode", tmp_path, {"model": str(path), "prompt_lengths": [32, 96],
                                                   "output_tokens": 16, "warmup": 1, "repetitions": 2})
    assert verify(folder) == []
    records = read_records(folder)
    assert len(records) == 2 * 3 and all(r["prompt_tokens"] == r["prompt_length"] for r in records)
    assert all(r["completion_tokens"] == 16 and r["server"]["decode_s"] is None for r in records)
    summary = json.loads((folder / "summary.json").read_text())
    warned = " ".join(f["text"] for f in summary["findings"] if f["level"] == "warning")
    assert "could not be read for" in warned and "the server's own decode time" in warned
    assert summary["telemetry"]["devices"] == [] and "NVML not usable" in summary["telemetry"]["reason"]
    assert [json.loads(line)["available"] for line in (folder / "telemetry.jsonl").read_text().splitlines()] == [False]
    assert "version not available from this server" in outputs_text(nb)
    fingerprint = json.loads((folder / "fingerprint.json").read_text())
    shown = fingerprint_table(fingerprint)["value"]
    assert "an OpenAI-API-only server (no /version, no /props)" in shown["server"]
    doors = shown["not available from this server"]
    assert "/version: the server's version" in doors and "/tokenize: the server's own token counts" in doors
    assert "/metrics: the server's own counters" in doors
    assert set(fingerprint["server"]["not_available"]) == {"/version", "/tokenize", "/metrics"}
    guard = json.loads((folder / "params.json").read_text())["guard"]
    assert any("not available from this server" in note for note in guard["notes"]) and not guard["forced"]


def test_mmlu_pro_asks_every_question_without_vllms_own_request_fields(served, tmp_path):
    # transformers serve refuses a request that carries fields it does not know (vLLM's return_token_ids,
    # ignore_eos): the batch client must send plain OpenAI requests to it, as client.Endpoint does.
    path, _ = served
    work = m.prepare(m.Plan.build(per_category=2, max_tokens=12, concurrency=3), str(path), synthetic(per=2))
    study = start(m.NOTEBOOK, model=str(path), settings=work.settings(), outputs=str(tmp_path),
                  validate=work.check_server)
    assert study.streaming().engine is engines.TRANSFORMERS
    batch = m.ask(study, work, log=lambda _: None)
    study.finish({})
    records = read_records(study.run.path)
    assert batch.asked == len(records) == len(work.questions) == 6
    assert not [r["error"] for r in records if "error" in r]
    assert all(0 < r["completion_tokens"] <= 12 and r["prompt_tokens"] > 0 for r in records)
    assert batch.server_e2e_s is None and batch.interference is None  # no /metrics: unknown, never zero
