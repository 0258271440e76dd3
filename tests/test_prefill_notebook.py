"""Real papermill runs of notebooks/prefill.ipynb against the real tiny vLLM servers, alone and compared,
and the refusals that must come before any request."""

import json
import math
import statistics

import pytest
from support import outputs_text, run_notebook
from test_prefill_plan import sealed_run

from sparknb.cli import main
from sparknb.endpoint.prompts import PromptMaker
from sparknb.errors import CacheHitError
from sparknb.runs.run import read_records, verify
from sparknb.runs.study import start
from sparknb.studies import prefill

# Short prompts: prefill on this CPU is slow and superlinear. 300 is past vLLM's CPU block of 128
# tokens, so a repeated prompt there really can hit the prefix cache.
SMALL = {"prompt_lengths": [100, 300, 600], "warmup": 1, "repetitions": 3}


def prefill_run(tmp_path, srv, model, **params):
    return run_notebook("prefill", tmp_path, {"model": model, "endpoint": srv.url, **SMALL, **params})


@pytest.fixture(scope="module")
def dense_run(tmp_path_factory, tiny_dense):
    return prefill_run(tmp_path_factory.mktemp("prefill"), tiny_dense, "tiny-dense")


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory, tiny_moe):
    return prefill_run(tmp_path_factory.mktemp("prefill"), tiny_moe, "tiny-moe")


def measured(records, length):
    return [r for r in records if r["prompt_length"] == length and not r["warmup"]]


def check_plain_run(nb, folder, model):
    records = read_records(folder)
    assert len(records) == 3 * (1 + 3)
    assert all(r["prompt_tokens"] == r["prompt_length"] and r["completion_tokens"] == 1 for r in records)
    assert all(r["interference"] is None and r["cache_hits_allowed"] is False for r in records)
    # Unique prompts: the server looked every prompt up in its cache and found nothing.
    assert all(r["server"]["prefix_cache_queries"] > 0 and r["server"]["prefix_cache_hits"] == 0 for r in records)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["prompt_lengths"] == [100, 300, 600] and summary["cache"]["hits"] == 0
    assert summary["cache"]["exposed"] and summary["cache"]["queries"] >= sum(r["prompt_tokens"] for r in records)
    rows = {row["prompt tokens"]: row for row in summary["table"]}
    assert list(rows) == [100, 300, 600]
    for length, row in rows.items():
        ttfts = [r["ttft_s"] for r in measured(records, length)]
        server = [r["server"] for r in measured(records, length)]
        assert row["n"] == 3 and row["TTFT ms (median)"] == pytest.approx(1000 * statistics.median(ttfts))
        assert row["min"] == pytest.approx(1000 * min(ttfts)) and row["max"] == pytest.approx(1000 * max(ttfts))
        assert row["prefill tok/s"] == pytest.approx(length / statistics.median(ttfts))
        assert row["server prefill ms"] == pytest.approx(1000 * statistics.median(s["prefill_s"] for s in server))
        assert row["server queue ms"] is not None and row["cache hit %"] == 0
    for r in records:  # the client cannot see a token before the server made it
        assert r["ttft_s"] >= r["server"]["ttft_s"] - 0.002
    check_fit(summary, records)
    assert "A single short-prompt test (100 tokens)" in summary["story"] and model in summary["story"]
    assert not [f for f in summary["findings"] if "could not be checked" in f["text"]]  # vLLM counts cache hits
    shared = {row["test"]: row for row in json.loads((folder / "benchy.json").read_text())}  # pp rows, as posted
    for n in (100, 300, 600):
        ttfts = [r["ttft_s"] for r in records if r["prompt_length"] == n and not r["warmup"]]
        assert shared[f"pp{n}"]["tokens_per_s"] == pytest.approx(sum(n / s for s in ttfts) / len(ttfts))
    assert verify(folder) == []
    text = outputs_text(nb)
    assert "server prefill ms" in text and "fixed overhead per request" in text and "image/png" in text
    assert "No compare_with runs given" in text and "tqdm" not in text and "%|" not in text


def check_fit(summary, records):
    """The fit against the run's own requests: it exists, its intervals are finite and say something, and
    at each length its TTFT lies within the fastest to slowest request measured there, or a warning says
    it does not."""
    fit = summary["fit"]
    assert fit is not None and fit["lengths"] == [100, 300, 600] and fit["n"] == 9
    for name in ("overhead_s", "per_token_s"):
        est = fit[name]
        assert all(math.isfinite(est[k]) for k in ("value", "low", "high")), (name, est)
        assert est["low"] < est["value"] < est["high"], (name, est)
    outside = " ".join(f["text"] for f in summary["findings"]
                       if f["level"] == "warning" and "falls outside the spread measured" in f["text"])
    for length in (100, 300, 600):
        ttfts = [r["ttft_s"] for r in measured(records, length)]
        predicted = fitted(fit, length)
        assert min(ttfts) <= predicted <= max(ttfts) or f"at {length:,} tokens" in outside, (length, predicted, ttfts)


def fitted(fit: dict, length: int) -> float:
    """The fit's TTFT at a length from summary.json: a bent fit's per-token cost is its slope at the shortest
    length measured (100 tokens), so its linear term is that slope less twice the bend there."""
    curvature = fit["curvature_s"]["value"] if fit["curvature_s"] else 0.0
    slope_at_zero = fit["per_token_s"]["value"] - 2 * curvature * 100
    return fit["overhead_s"]["value"] + slope_at_zero * length + curvature * length ** 2


@pytest.mark.server
def test_plain_run_on_the_dense_model(dense_run):
    check_plain_run(*dense_run, "tiny-dense")
    fit = json.loads((dense_run[1] / "summary.json").read_text())["fit"]
    assert fitted(fit, 100) < fitted(fit, 600)  # on this CPU a longer prompt costs more


@pytest.mark.server
def test_plain_run_on_the_moe_model(moe_run):
    # tiny-moe's short prompts sometimes wait ~0.4 s inside the engine, which can tilt its line down, so
    # no sign is required of its slope; its fit is held to its own measured spread instead.
    check_plain_run(*moe_run, "tiny-moe")


@pytest.mark.server
def test_the_comparison_is_read_from_the_sealed_records_of_the_other_run(tmp_path, tiny_moe, dense_run, moe_run):
    _, dense_folder = dense_run
    nb, folder = prefill_run(tmp_path, tiny_moe, "tiny-moe", compare_with=[str(dense_folder)])
    summary = json.loads((folder / "summary.json").read_text())
    cmp = summary["comparison"]
    assert cmp["base"] == "tiny-moe" and cmp["others"] == [{"label": "tiny-dense", "run_id": dense_folder.name}]
    assert cmp["warnings"] == []  # same box, same server build, sealed and intact
    mine = {row["prompt tokens"]: row["TTFT ms (median)"] for row in summary["table"]}
    dense_records = read_records(dense_folder)
    for row in cmp["table"]:
        n = row["prompt tokens"]
        theirs = 1000 * statistics.median(r["ttft_s"] for r in measured(dense_records, n))
        assert row["tiny-dense TTFT ms"] == pytest.approx(theirs)
        assert row["tiny-dense / tiny-moe"] == pytest.approx(theirs / mine[n])
        assert row["tiny-dense / tiny-moe low"] <= row["tiny-dense / tiny-moe"] <= row["tiny-dense / tiny-moe high"]
        assert row["tiny-dense / tiny-moe (server)"] > 0
    assert json.loads((folder / "params.json").read_text())["settings"]["compare_with"] == [str(dense_folder)]
    assert "Against tiny-dense: the 100-token test would have said" in summary["story"]
    text = outputs_text(nb)
    assert "tiny-dense / tiny-moe" in text and "same box, driver and server build" in text
    assert dense_folder.name in text  # the other run's fingerprint table is shown
    assert text.count("image/png") == 2
    assert verify(folder) == [] and verify(dense_folder) == []


def _cli_refusal(tmp_path, capsys, *params) -> str:
    code = main(["run", "prefill", "--outputs", str(tmp_path), *params])
    err = capsys.readouterr().err
    assert code == 2, err
    assert not (tmp_path / "prefill").exists() or not any((tmp_path / "prefill").iterdir()), "nothing is kept"
    return err


@pytest.mark.server
def test_bad_input_is_refused_before_any_request(tmp_path, tiny_dense, dense_run, capsys):
    _, dense_folder = dense_run
    decode_run = sealed_run(tmp_path / "elsewhere", "d1", notebook="decode")
    base = ["-p", "model", "tiny-dense", "-p", "endpoint", tiny_dense.url, "-p", "repetitions", "1"]
    assert "max_model_len of 16384" in _cli_refusal(tmp_path, capsys, *base, "-p", "prompt_lengths", "[64, 20000]")
    assert "no such run folder" in _cli_refusal(tmp_path, capsys, *base, "-p", "compare_with", "no-such-run")
    assert "not a prefill run" in _cli_refusal(tmp_path, capsys, *base, "-p", "compare_with", str(decode_run.path))
    assert "other prompt lengths" in _cli_refusal(tmp_path, capsys, *base, "-p", "prompt_lengths", "[100, 300]",
                                                  "-p", "compare_with", str(dense_folder))


@pytest.mark.server
def test_a_sweep_that_repeats_one_prompt_on_purpose_is_caught(tmp_path, tiny_dense):
    plan = prefill.Plan.build(prompt_lengths=[300, 400], warmup=0, repetitions=2, order="grouped")
    study = start("prefill", model="tiny-dense", settings=plan.settings(), endpoint=tiny_dense.url,
                  outputs=str(tmp_path))
    try:
        same = prefill.repeating(PromptMaker(study.endpoint.tokenize).make)
        with pytest.raises(CacheHitError, match=r"PREFIX-CACHE HIT: 1 request\(s\).*256 of 300 prompt tokens"):
            prefill.sweep(study, plan, (300, 400), prompts=same)
    finally:
        study.fail("the test ended")  # does nothing where the sweep already sealed the run
    records = read_records(study.run.path)
    assert len(records) == 2 and records[1]["server"]["prefix_cache_hits"] == 256  # kept, with the count
    failure = json.loads((study.run.path / "failure.json").read_text())
    assert failure["reason"].startswith("CacheHitError: PREFIX-CACHE HIT") and failure["records"] == 2
    assert verify(study.run.path) == []  # sealed with the reason


@pytest.mark.server
def test_cache_hits_allowed_on_purpose_are_shown_and_marked(tmp_path, tiny_dense):
    nb, folder = prefill_run(tmp_path, tiny_dense, "tiny-dense", prompt_lengths=[100, 300], repetitions=2,
                             allow_cache_hits=True)
    records = read_records(folder)
    assert all(r["cache_hits_allowed"] for r in records)
    assert [r["server"]["prefix_cache_hits"] for r in records if r["prompt_length"] == 300] == [0, 256, 256]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["cache_hits_allowed"] is True and summary["cache"]["hits"] == 512
    assert {row["prompt tokens"]: row["cache hit %"] for row in summary["table"]} == {100: 0, 300: pytest.approx(100 * 256 / 300)}
    first = summary["findings"][0]
    assert first["level"] == "marked" and first["text"].startswith("this run allowed prefix-cache hits on purpose")
    assert "allowed prefix-cache hits on purpose" in summary["story"]
    text = outputs_text(nb)
    assert "CACHE HIT 256 tokens" in text and "**MARKED:** this run allowed prefix-cache hits" in text
