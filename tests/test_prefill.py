"""The prefill sweep: the fit, the ratio table and the cache check on their own, then real papermill
runs of the real notebook against the real tiny vLLM servers, alone and compared."""

import json
import os
import statistics

import nbformat
import numpy as np
import pandas as pd
import papermill
import pytest

from sparknb import prefill
from sparknb.cli import main
from sparknb.client import ServerInfo
from sparknb.params import project_root
from sparknb.prompts import PromptMaker
from sparknb.run import read_records, verify
from sparknb.study import start

NOTEBOOK = project_root() / "notebooks" / "prefill.ipynb"
# Short prompts: prefill on this CPU is slow and superlinear. 300 is past vLLM's CPU block of 128
# tokens, so a repeated prompt there really can hit the prefix cache.
SMALL = {"prompt_lengths": [100, 300, 600], "warmup": 1, "repetitions": 3}


def server(max_model_len=16384) -> ServerInfo:
    return ServerInfo("http://x/v1", "0.32.0", "m", None, max_model_len, ["m"])


def record(n, ttft, rep=0, hits=0, warmup=False, interference=None):
    return {"prompt_length": n, "rep": rep, "warmup": warmup, "prompt_tokens": n, "completion_tokens": 1,
            "ttft_s": ttft, "interference": interference,
            "server": {"ttft_s": ttft - 0.002, "prefill_s": ttft - 0.004, "queue_s": 0.0003,
                       "prefix_cache_queries": n, "prefix_cache_hits": hits}}


def synthetic(ttft, lengths=(111, 364, 1024, 2048, 5378), reps=5, noise=0.02, seed=0):
    rng = np.random.default_rng(seed)
    return [record(n, ttft(n) * (1 + noise * rng.standard_normal()), rep)
            for n in lengths for rep in range(reps)]


# --- unit: the fit --------------------------------------------------------------------------------------

def test_the_fit_splits_overhead_from_per_token_cost():
    df = prefill.frame(synthetic(lambda n: 0.050 + 100e-6 * n))
    fit = prefill.fit(df)
    assert fit.shape == "straight line" and fit.curvature_s is None
    assert fit.overhead_s.low < 0.050 < fit.overhead_s.high
    assert fit.per_token_s.low < 100e-6 < fit.per_token_s.high
    assert fit.overhead_s.value == pytest.approx(0.050, rel=0.05)
    # Tokens outweigh the overhead where 100 us * n = 50 ms: from 500 tokens.
    x = fit.crossover_tokens
    assert x.low < 500 < x.high and x.value == pytest.approx(500, rel=0.05)
    assert abs(fit.worst_misfit[1]) < 0.05
    pred = fit.predict([1000])
    assert pred["ttft_s"][0] == pytest.approx(0.150, rel=0.02) and pred["low"][0] < pred["ttft_s"][0] < pred["high"][0]
    assert "fixed overhead per request" in fit.table().index
    json.dumps(fit.as_dict())  # summary.json must be able to hold it


def test_the_fit_keeps_a_bend_only_where_the_data_bend():
    bent = prefill.fit(prefill.frame(synthetic(lambda n: 0.020 + 1e-3 * n + 1e-7 * n * n)))
    assert bent.shape == "quadratic"
    assert bent.curvature_s.low < 1e-7 < bent.curvature_s.high
    assert bent.per_token_at(5000) == pytest.approx(1e-3 + 2 * 1e-7 * 5000, rel=0.1)
    assert bent.crossover_tokens.value == pytest.approx(20, rel=0.2)  # 1 ms a token passes 20 ms fast
    straight = prefill.fit(prefill.frame(synthetic(lambda n: 0.020 + 1e-3 * n, seed=1)))
    assert straight.shape == "straight line"


def test_the_fit_says_when_no_overhead_is_measurable_or_too_little_was_measured():
    df = prefill.frame(synthetic(lambda n: 1e-3 * n, noise=0.01))
    none = prefill.fit(df)
    assert none.overhead_s.low < 0 < none.overhead_s.high
    assert "not distinguishable from zero" in prefill.story(prefill.summarize(df), none, "m")
    with pytest.raises(prefill.FitError, match="two prompt lengths"):
        prefill.fit(prefill.frame(synthetic(lambda n: 0.1, lengths=(111,))))
    # Requests another client disturbed do not count.
    disturbed = [record(111, 0.1), record(364, 0.2, interference="another client"), record(111, 0.1, rep=1)]
    with pytest.raises(prefill.FitError):
        prefill.fit(prefill.frame(disturbed))


def test_one_slow_request_does_not_tilt_the_fit_and_is_named():
    recs = synthetic(lambda n: 0.030 + 200e-6 * n, lengths=(100, 300, 600), reps=3)
    recs[2]["ttft_s"] = 0.5  # one 100-token request ten times slower: a neighbour on the CPU, say
    df = prefill.frame(recs)
    fit = prefill.fit(df)
    assert fit.overhead_s.low < 0.030 < fit.overhead_s.high and fit.per_token_s.low < 200e-6 < fit.per_token_s.high
    assert [(n, t) for n, t, _ in fit.outliers] == [(100, 0.5)]
    notes = prefill.findings(df, prefill.summarize(df), fit, prefill.Plan(), prefill.CacheCount(True, 1, 0))
    assert any("1 request(s) took over 1.5 times as long as the median of their length" in n
               and "500 ms at 100 tokens" in n for n in notes)
    assert any("little weight to 1 request(s) far from its curve (500 ms at 100 tokens)" in n for n in notes)
    assert not any("load average" in n or "held up" in n for n in notes)


def test_a_busy_client_machine_is_named():
    recs = synthetic(lambda n: 0.030 + 200e-6 * n, lengths=(100, 300, 600), reps=3)
    for r in recs:
        r["load_1m"] = 64.0 * (os.cpu_count() or 1)
        r["server"]["ttft_s"] = r["ttft_s"] - (0.002 if r["prompt_length"] == 100 else 0.05)  # the client lags
    df = prefill.frame(recs)
    notes = " ".join(prefill.findings(df, prefill.summarize(df), prefill.fit(df), prefill.Plan(),
                                      prefill.CacheCount(True, 1, 0)))
    assert "load average reached" in notes and "grows from 2.0 ms at 100 tokens to 50.0 ms" in notes
    assert "exposes no TTFT histogram" not in notes


# --- unit: the table and the ratio ----------------------------------------------------------------------

def test_the_table_has_the_spread_the_throughput_and_the_servers_times():
    df = prefill.frame([record(100, t, rep=i) for i, t in enumerate((0.10, 0.12, 0.11))]
                       + [record(100, 9.0, warmup=True, rep=-1)])
    row = prefill.summarize(df).loc[100]
    assert row["n"] == 3  # the warmup is left out
    assert row["TTFT ms (median)"] == pytest.approx(110) and row["min"] == pytest.approx(100)
    assert row["max"] == pytest.approx(120) and row["std"] == pytest.approx(10)
    assert row["prefill tok/s"] == pytest.approx(100 / 0.11)
    assert row["vLLM TTFT ms"] == pytest.approx(108) and row["vLLM prefill ms"] == pytest.approx(106)
    assert row["vLLM queue ms"] == pytest.approx(0.3) and row["outside vLLM ms"] == pytest.approx(2)
    assert row["cache hit %"] == 0


def test_the_ratio_table_divides_medians_at_each_length():
    dense = prefill.frame(synthetic(lambda n: 0.05 + 2e-4 * n, noise=0))
    moe = prefill.frame(synthetic(lambda n: 0.05 + 1e-4 * n, noise=0))
    t = prefill.ratio_table({"moe": moe, "dense": dense}, base="moe")
    assert list(t.columns) == ["moe TTFT ms", "dense TTFT ms", "dense / moe", "dense / moe low", "dense / moe high",
                               "dense / moe (vLLM)"]
    assert t.loc[111, "dense / moe"] == pytest.approx((0.05 + 0.0222) / (0.05 + 0.0111))
    assert t.loc[5378, "dense / moe"] == pytest.approx((0.05 + 1.0756) / (0.05 + 0.5378))
    assert t.loc[111, "dense / moe (vLLM)"] == pytest.approx((0.05 + 0.0222 - 0.002) / (0.05 + 0.0111 - 0.002))
    # No noise, no spread: the interval closes on the ratio. With noise it holds it.
    assert t.loc[5378, "dense / moe low"] == pytest.approx(t.loc[5378, "dense / moe high"])
    noisy = prefill.ratio_table({"moe": prefill.frame(synthetic(lambda n: 0.05 + 1e-4 * n, noise=0.1, seed=3)),
                                 "dense": prefill.frame(synthetic(lambda n: 0.05 + 2e-4 * n, noise=0.1, seed=4))}, "moe")
    assert (noisy["dense / moe low"] < noisy["dense / moe"]).all() and (noisy["dense / moe"] < noisy["dense / moe high"]).all()
    short = prefill.frame(synthetic(lambda n: 0.1, lengths=(111, 364)))
    with pytest.raises(ValueError, match="different prompt lengths"):
        prefill.ratio_table({"moe": moe, "dense": short}, base="moe")


def _comparison(moe_ttft, dense_ttft, noise=0.02):
    moe = prefill.frame(synthetic(moe_ttft, noise=noise, seed=5))
    dense = prefill.frame(synthetic(dense_ttft, noise=noise, seed=6))
    return moe, prefill.Comparison("moe", ("dense",), ("run-1",), prefill.ratio_table({"moe": moe, "dense": dense}, "moe"),
                                   None, ())


def test_the_paragraph_says_what_a_short_test_would_have_concluded():
    moe, cmp = _comparison(lambda n: 0.05 + 1e-4 * n, lambda n: 0.05 + 2.2e-4 * n)
    r0, r1 = cmp.table["dense / moe"].iloc[0], cmp.table["dense / moe"].iloc[-1]
    text = prefill.story(prefill.summarize(moe), prefill.fit(moe), "moe", cmp)
    assert "A single short-prompt test (111 tokens)" in text
    assert f"dense takes {r0:.2f} [" in text and f"at 5,378 tokens it is {r1:.2f} [" in text
    assert r0 == pytest.approx(1.22, abs=0.03) and r1 == pytest.approx(2.1, abs=0.1)
    assert "closer than they are" in text


def test_the_paragraph_claims_no_more_than_the_intervals_allow():
    _, alike = _comparison(lambda n: 0.05 + 1e-4 * n, lambda n: 0.05 + 1.02e-4 * n, noise=0.2)
    text = prefill.story(_table(alike), None, "moe", alike)
    assert "At 111 tokens the two cannot be told apart" in text and "intervals at the two ends overlap" in text
    _, flips = _comparison(lambda n: 0.05 + 1e-4 * n, lambda n: 0.02 + 1.5e-4 * n, noise=0.01)
    assert "The faster model changes with the prompt length" in prefill.story(_table(flips), None, "moe", flips)


def _table(cmp):
    """A stand-in table for story(): only its lengths and this run's medians are read."""
    t = cmp.table
    return pd.DataFrame({"TTFT ms (median)": t["moe TTFT ms"], "prefill tok/s": t.index / t["moe TTFT ms"] * 1000},
                        index=t.index)


def test_fingerprint_differences_name_hardware_driver_and_server_version():
    fp = {"host": {"hostname": "spark", "cpu_model": "Grace", "cpu_count": 20, "memory_total_bytes": 1},
          "gpu": {"devices": [{"name": "GB10", "memory_total_bytes": None}], "driver_version": "580",
                  "cuda_driver_version": 13000}, "server": {"version": "0.32.0"}}
    assert prefill.fingerprint_differences(fp, json.loads(json.dumps(fp))) == []
    other = json.loads(json.dumps(fp))
    other["gpu"]["driver_version"] = "575"
    other["server"]["version"] = "0.31.0"
    other["gpu"]["devices"][0]["name"] = "H200"
    found = " | ".join(prefill.fingerprint_differences(fp, other))
    assert "hardware differs" in found and "'GB10" in found and "H200" in found
    assert "driver differs: driver '580' vs '575'" in found and "server version differs" in found


# --- unit: the cache check ------------------------------------------------------------------------------

def test_a_cache_hit_is_caught_with_its_counts():
    prefill.check_no_cache_hits([record(300, 0.3), record(300, 0.3, rep=1)])  # none: fine
    repeated = [record(300, 0.3), record(300, 0.01, rep=1, hits=256), record(300, 0.01, rep=2, hits=256)]
    with pytest.raises(prefill.CacheHitError) as e:
        prefill.check_no_cache_hits(repeated)
    assert "2 request(s)" in str(e.value) and "256 of 300 prompt tokens" in str(e.value)
    assert "rep 2" in str(e.value) and "allow_cache_hits" in str(e.value)
    # A hit the per-request deltas missed still shows in the counters read around the whole sweep.
    with pytest.raises(prefill.CacheHitError, match="128 hits in 900"):
        prefill.check_no_cache_hits([record(300, 0.3)], prefill.CacheCount(True, 900, 128))


def test_repeating_prompts_are_the_same_list_each_time():
    made = []
    prompts = prefill.repeating(lambda n: made.append(n) or list(range(n)))
    assert prompts(20) is prompts(20) and prompts(30) == list(range(30)) and made == [20, 30]


# --- unit: bad input ------------------------------------------------------------------------------------

def test_the_standard_lengths_are_capped_with_a_note_but_given_ones_are_not():
    assert prefill.Plan().lengths_for(server(16384)) == (prefill.DEFAULT_LENGTHS, None)
    lengths, note = prefill.Plan().lengths_for(server(4096))
    assert lengths == (111, 364, 1024, 2048) and "[5378, 10714] are left out" in note and "4096" in note
    with pytest.raises(ValueError, match=r"\[20000\] plus 1 output token\(s\) exceed the server's max_model_len of 16384"):
        prefill.Plan(prompt_lengths=(111, 20000)).check_server(server(16384))
    with pytest.raises(ValueError, match="a fit needs two"):
        prefill.Plan().lengths_for(server(200))
    assert prefill.Plan(prompt_lengths=[364, 111]).lengths_for(server(16384)) == ((111, 364), None)


def test_nonsense_parameters_are_named():
    with pytest.raises(ValueError) as e:
        prefill.Plan((5, 5), 0, -1, 0, "yes", ("",))
    for word in ("prompt_lengths must be whole numbers", "output_tokens", "repetitions", "warmup",
                 "allow_cache_hits", "compare_with"):
        assert word in str(e.value)
    with pytest.raises(ValueError, match="needs two lengths"):
        prefill.Plan((111,))
    assert prefill.Plan(compare_with="some-run").compare_with == ("some-run",)  # -p compare_with RUN


def _fake_run(folder, notebook="prefill", lengths=(100, 300), fingerprint=True):
    folder.mkdir(parents=True)
    (folder / "params.json").write_text(json.dumps({"notebook": notebook, "model": {"name": "other"},
                                                    "settings": {"allow_cache_hits": False}}))
    if fingerprint:
        (folder / "fingerprint.json").write_text("{}")
    (folder / "records.jsonl").write_text("".join(json.dumps(record(n, 0.1)) + "\n" for n in lengths))
    return folder


def test_compare_with_runs_that_are_missing_not_prefill_or_of_other_lengths_are_refused(tmp_path):
    decode_run = _fake_run(tmp_path / "decode" / "d1", notebook="decode")
    bare = _fake_run(tmp_path / "prefill" / "p0", fingerprint=False)
    with pytest.raises(ValueError) as e:
        prefill.read_runs(["no-such-run", str(decode_run), str(bare)], outputs=tmp_path)
    text = str(e.value)
    assert "'no-such-run': no such run folder" in text
    assert "is a 'decode' run, not a prefill run" in text
    assert "no fingerprint.json" in text
    good = _fake_run(tmp_path / "prefill" / "p1")
    (run,) = prefill.read_runs(["p1"], outputs=tmp_path)  # by run id under outputs/prefill/
    assert run.path == good and run.lengths() == (100, 300) and run.problems  # never sealed: said so
    prefill.Plan(prompt_lengths=(100, 300)).check_server(server(), [run])
    with pytest.raises(ValueError, match=r"compare_with runs of other prompt lengths.*measured \[100, 300\]"):
        prefill.Plan(prompt_lengths=(100, 300, 600)).check_server(server(), [run])


# --- the notebook against the real servers -------------------------------------------------------------

def run_notebook(tmp_path, srv, model, **params):
    """The plain papermill command a user would type, through papermill's own API."""
    outputs = tmp_path / "outputs"
    before = set((outputs / "prefill").iterdir()) if (outputs / "prefill").exists() else set()
    out = tmp_path / f"{model}-{len(before)}.ipynb"
    papermill.execute_notebook(str(NOTEBOOK), str(out), parameters={"model": model, "endpoint": srv.url,
                               "outputs": str(outputs), **SMALL, **params}, progress_bar=False)
    (folder,) = set((outputs / "prefill").iterdir()) - before
    return nbformat.read(out, as_version=4), folder


def outputs_text(nb) -> str:
    return "\n".join(str(o.get("text", "")) + json.dumps(o.get("data", {}))
                     for c in nb.cells for o in c.get("outputs", []))


@pytest.fixture(scope="module")
def dense_run(tmp_path_factory, tiny_dense):
    return run_notebook(tmp_path_factory.mktemp("prefill"), tiny_dense, "tiny-dense")


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory, tiny_moe):
    return run_notebook(tmp_path_factory.mktemp("prefill"), tiny_moe, "tiny-moe")


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
    for length, row in rows.items():
        ttfts = [r["ttft_s"] for r in records if r["prompt_length"] == length and not r["warmup"]]
        server = [r["server"] for r in records if r["prompt_length"] == length and not r["warmup"]]
        assert row["n"] == 3 and row["TTFT ms (median)"] == pytest.approx(1000 * statistics.median(ttfts))
        assert row["min"] == pytest.approx(1000 * min(ttfts)) and row["max"] == pytest.approx(1000 * max(ttfts))
        assert row["prefill tok/s"] == pytest.approx(length / statistics.median(ttfts))
        assert row["vLLM prefill ms"] == pytest.approx(1000 * statistics.median(s["prefill_s"] for s in server))
        assert row["vLLM queue ms"] is not None and row["cache hit %"] == 0
    for r in records:  # the client cannot see a token before the server made it
        assert r["ttft_s"] >= r["server"]["ttft_s"] - 0.002
    fit = summary["fit"]
    per_token = fit["per_token_s"]
    assert per_token["low"] <= per_token["value"] <= per_token["high"]
    if model == "tiny-dense":  # tiny-moe's short prompts sometimes wait ~0.4 s inside the engine, which can
        assert per_token["value"] > 0  # tilt its line down: a measured oddity, not a fit error
    assert fit["lengths"] == [100, 300, 600] and fit["n"] == 9
    assert "A single short-prompt test (100 tokens)" in summary["story"] and model in summary["story"]
    assert verify(folder) == []
    text = outputs_text(nb)
    assert "vLLM prefill ms" in text and "fixed overhead per request" in text and "image/png" in text
    assert "No compare_with runs given" in text and "tqdm" not in text and "%|" not in text


@pytest.mark.server
def test_plain_run_on_the_dense_model(dense_run):
    check_plain_run(*dense_run, "tiny-dense")


@pytest.mark.server
def test_plain_run_on_the_moe_model(moe_run):
    check_plain_run(*moe_run, "tiny-moe")


@pytest.mark.server
def test_the_comparison_is_read_from_the_sealed_records_of_the_other_run(tmp_path, tiny_moe, dense_run, moe_run):
    _, dense_folder = dense_run
    nb, folder = run_notebook(tmp_path, tiny_moe, "tiny-moe", compare_with=[str(dense_folder)])
    summary = json.loads((folder / "summary.json").read_text())
    cmp = summary["comparison"]
    assert cmp["base"] == "tiny-moe" and cmp["others"] == [{"label": "tiny-dense", "run_id": dense_folder.name}]
    assert cmp["warnings"] == []  # same box, same server build, sealed and intact
    dense_records = [r for r in read_records(dense_folder) if not r["warmup"]]
    mine = {row["prompt tokens"]: row["TTFT ms (median)"] for row in summary["table"]}
    for row in cmp["table"]:
        n = row["prompt tokens"]
        theirs = 1000 * statistics.median(r["ttft_s"] for r in dense_records if r["prompt_length"] == n)
        assert row["tiny-dense TTFT ms"] == pytest.approx(theirs)
        assert row["tiny-dense / tiny-moe"] == pytest.approx(theirs / mine[n])
        assert row["tiny-dense / tiny-moe (vLLM)"] > 0
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
    decode_run = _fake_run(tmp_path / "elsewhere" / "d1", notebook="decode")
    base = ["-p", "model", "tiny-dense", "-p", "endpoint", tiny_dense.url, "-p", "repetitions", "1"]
    assert "max_model_len of 16384" in _cli_refusal(tmp_path, capsys, *base, "-p", "prompt_lengths", "[64, 20000]")
    assert "no such run folder" in _cli_refusal(tmp_path, capsys, *base, "-p", "compare_with", "no-such-run")
    assert "not a prefill run" in _cli_refusal(tmp_path, capsys, *base, "-p", "compare_with", str(decode_run))
    assert "other prompt lengths" in _cli_refusal(tmp_path, capsys, *base, "-p", "prompt_lengths", "[100, 300]",
                                                  "-p", "compare_with", str(dense_folder))


@pytest.mark.server
def test_a_sweep_that_repeats_one_prompt_on_purpose_is_caught(tmp_path, tiny_dense):
    plan = prefill.Plan(prompt_lengths=(300, 400), warmup=0, repetitions=2)
    study = start("prefill", model="tiny-dense", settings=plan.settings(), endpoint=tiny_dense.url,
                  outputs=str(tmp_path))
    try:
        same = prefill.repeating(PromptMaker(study.endpoint.tokenize).make)
        with pytest.raises(prefill.CacheHitError, match=r"PREFIX-CACHE HIT: 1 request\(s\).*256 of 300 prompt tokens"):
            prefill.sweep(study, plan, (300, 400), prompts=same)
        records = read_records(study.run.path)
        assert len(records) == 2 and records[1]["server"]["prefix_cache_hits"] == 256  # kept, with the count
    finally:
        study.finish({}, seal=True)


@pytest.mark.server
def test_cache_hits_allowed_on_purpose_are_shown_and_marked(tmp_path, tiny_dense):
    nb, folder = run_notebook(tmp_path, tiny_dense, "tiny-dense", prompt_lengths=[100, 300], repetitions=2,
                              allow_cache_hits=True)
    records = read_records(folder)
    assert all(r["cache_hits_allowed"] for r in records)
    assert [r["server"]["prefix_cache_hits"] for r in records if r["prompt_length"] == 300] == [0, 256, 256]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["cache_hits_allowed"] is True and summary["cache"]["hits"] == 512
    assert {row["prompt tokens"]: row["cache hit %"] for row in summary["table"]} == {100: 0, 300: pytest.approx(100 * 256 / 300)}
    assert summary["findings"][0].startswith("MARKED: this run allowed prefix-cache hits on purpose")
    assert "allowed prefix-cache hits on purpose" in summary["story"]
    text = outputs_text(nb)
    assert "CACHE HIT 256 tokens" in text and "MARKED: this run allowed prefix-cache hits" in text
