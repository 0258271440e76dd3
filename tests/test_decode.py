"""The decode sweep end to end: real papermill runs of the real notebook against real vLLM servers."""

import contextlib
import json
import types
from collections.abc import Iterator

import httpx
import pytest
from support import outputs_text, run_notebook

from sparknb.cli import main
from sparknb.endpoint.client import Endpoint, EndpointError
from sparknb.endpoint.prompts import PromptMaker
from sparknb.errors import DataError, GuardError, ParamsError
from sparknb.roofline import bandwidth
from sparknb.runs.params import load_hardware, load_model, project_root
from sparknb.runs.run import read_records, verify
from sparknb.runs.schedule import schedule
from sparknb.runs.study import start
from sparknb.studies import decode

SMALL = {"prompt_lengths": [64, 256], "output_tokens": 48, "warmup": 1, "repetitions": 2}


def run_plain(tmp_path, server, model, **params):
    return run_notebook("decode", tmp_path, {"model": model, "endpoint": server.url, **SMALL, **params})


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
    assert all(r["server"]["prefix_cache_hits"] == 0 and r["server"]["unchecked"] == [] for r in records)
    summary = json.loads((folder / "summary.json").read_text())
    rows = {row["prompt tokens"]: row for row in summary["table"]}
    assert set(rows) == {64, 256} and all(row["n"] == 2 for row in rows.values())
    def burst(r):  # the rule: the client's first-to-last token time more than 10% from the server's own
        return abs(r["decode_s"] - r["server"]["decode_s"]) > 0.1 * r["server"]["decode_s"]

    for length, row in rows.items():
        # The server's own request_decode_time over the same requests, per token, beside the client's (over
        # the requests the client timed itself; a burst is counted at the server's time).
        measured = [r for r in records if r["prompt_length"] == length and not r["warmup"]]
        tokens = sum(r["decode_tokens"] for r in measured)
        assert row["server ms/token"] == pytest.approx(1000 * sum(r["server"]["decode_s"] for r in measured) / tokens)
        mine = [r for r in measured if not burst(r)]
        if mine:
            assert row["ms/token"] == pytest.approx(1000 * sum(r["decode_s"] for r in mine)
                                                    / sum(r["decode_tokens"] for r in mine))
        assert row["server-timed"] == len(measured) - len(mine) and row["decode tok/s (median)"] > 0
    for r in records:  # the client cannot see a token before the server made it
        assert r["ttft_s"] >= r["server"]["ttft_s"] - 0.002 and r["total_s"] >= r["server"]["e2e_s"] - 0.002
    fp = json.loads((folder / "fingerprint.json").read_text())
    assert fp["server"]["max_model_len"] == 16384 and fp["server"]["model"] == "tiny-dense"
    assert fp["gpu"]["available"] is False
    assert all({"level", "text"} <= set(f) for f in summary["findings"])
    shared = json.loads((folder / "benchy.json").read_text())  # the rows Spark owners post, from the same requests
    for row in shared:
        depth = int(row["test"].split("@ d")[1])
        speeds = [r["decode_tokens"] / (r["server"]["decode_s"] if burst(r) else r["decode_s"])
                  for r in records if r["prompt_length"] == depth and not r["warmup"]]
        assert row["test"] == f"tg48 @ d{depth}" and row["tokens_per_s"] == pytest.approx(sum(speeds) / len(speeds))
    assert "| tiny-dense | tg48 @ d64 |" in (folder / "benchy.md").read_text()
    assert verify(folder) == []
    text = outputs_text(nb)
    assert "server ms/token" in text and "image/png" in text and "max_model_len" in text  # table, plot, fingerprint
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


CANARY_PASSWORD = "canary-pw-5b1e9d"


def _password_url(server) -> str:
    """The test bed's URL with a user and a password in it (tiny-moe checks no key, so the server accepts it)."""
    return server.url.replace("http://", f"http://someone:{CANARY_PASSWORD}@")


@pytest.mark.server
def test_no_password_or_key_reaches_any_file_of_a_sparknb_run(tmp_path, tiny_moe, monkeypatch, capsys):
    monkeypatch.setenv("SPARKNB_API_KEY", "sk-canary-key-7c44e0a1")  # a key in the environment, as params name it
    params = ["-p", "model", "tiny-moe", "-p", "endpoint", _password_url(tiny_moe), "-p", "prompt_lengths", "[64]",
              "-p", "output_tokens", "16", "-p", "repetitions", "1", "-p", "warmup", "0"]
    assert main(["run", "decode", *params, "--outputs", str(tmp_path)]) == 0
    (folder,) = (tmp_path / "decode").iterdir()
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert {"notebook.ipynb", "report.html"} <= {p.name for p in files}
    for path in files:
        text = path.read_text(errors="replace")
        assert CANARY_PASSWORD not in text and "sk-canary-key-7c44e0a1" not in text, path.name
    printed = capsys.readouterr()
    assert CANARY_PASSWORD not in printed.out + printed.err
    assert verify(folder) == []
    # The record keeps where it measured, the password alone masked.
    recorded = json.loads((folder / "params.json").read_text())["endpoint"]
    assert recorded == tiny_moe.url.replace("http://", "http://someone:***@")


def test_an_unknown_or_mistyped_parameter_is_refused_before_any_kernel_starts(tmp_path, capsys):
    code = main(["run", "decode", "--outputs", str(tmp_path), "-p", "prompt_lenghts", "[111]",
                 "-p", "resume_form", "x", "-p", "warmup", "many"])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "decode").exists()
    assert "prompt_lenghts: not a parameter of decode.ipynb; its parameters: model, endpoint, prompt_lengths" in err
    assert "resume_form: not a parameter" in err and "warmup: Input should be a valid integer; got 'many'" in err
    assert main(["run", "decode", "--outputs", str(tmp_path), "-p", "run_id", "mine"]) == 2
    assert "run_id: set by sparknb itself" in capsys.readouterr().err


def test_a_bad_model_file_is_refused_before_any_kernel_starts(tmp_path, capsys):
    bad = tmp_path / "mine.yaml"
    bad.write_text((project_root() / "params/models/tiny-dense.yaml").read_text()
                   .replace("dense_params: 5245696", "dense_params: lots"))
    code = main(["run", "decode", "--outputs", str(tmp_path / "outputs"), "-p", "model", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "Bad parameters for decode, nothing was run" in err
    assert "weights.dense_params" in err and "'lots'" in err
    assert not (tmp_path / "outputs").exists()  # the folder is made just before the kernel starts: none was


@pytest.mark.server
def test_no_password_reaches_the_run_folder_or_the_printed_output_of_a_plain_papermill_run(tmp_path, tiny_moe):
    nb, folder = run_plain(tmp_path, tiny_moe, "tiny-moe", endpoint=_password_url(tiny_moe), prompt_lengths=[64],
                           repetitions=1, warmup=0, output_tokens=16)
    for path in folder.rglob("*"):
        assert CANARY_PASSWORD not in path.read_text(errors="replace"), path.name
    # papermill itself writes the injected parameters into its own output notebook; every output sparknb
    # printed or displayed there is clean.
    assert CANARY_PASSWORD not in outputs_text(nb)


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
    assert "repetitions" in _cli_refusal(tmp_path, capsys, "-p", "model", "tiny-dense", *url, "-p", "repetitions", "0")


@pytest.mark.server
def test_a_model_the_server_does_not_serve_lists_what_it_serves(tiny_dense, tmp_path):
    mine = load_model("tiny-dense").model_copy(update={"served_model_name": "other"})
    path = tmp_path / "other.yaml"
    path.write_text(json.dumps(mine.model_dump()))  # JSON is YAML
    with pytest.raises(EndpointError, match="'other' is not served.*It serves: tiny-dense"):
        start("decode", model=str(path), settings={}, endpoint=tiny_dense.url, outputs=str(tmp_path))


@contextlib.contextmanager
def _busy(http: httpx.Client, url: str, body: dict) -> Iterator[None]:
    """A request generating until the block ends (closed then: vLLM aborts it). One for each guard's check: the
    longest the context allows lasts only as long as the tiny model takes to decode it (it ended before a second
    start on a quiet box, and that start's guard found the server idle)."""
    with http.stream("POST", f"{url}/completions", json=body) as stream:
        lines = stream.iter_lines()  # kept: a reader dropped closes the response, and vLLM aborts the request
        next(line for line in lines if line.startswith("data:"))  # generating now
        yield


@pytest.mark.server
def test_the_guard_refuses_while_the_server_is_busy(tmp_path, tiny_dense, dense_key):
    busy = Endpoint(tiny_dense.url, "tiny-dense", api_key=dense_key)
    prompt = PromptMaker(busy.tokenize).make(32)
    body = {"model": "tiny-dense", "prompt": prompt, "max_tokens": 16384 - 64, "ignore_eos": True, "stream": True}
    with httpx.Client(headers={"Authorization": f"Bearer {dense_key}"}, timeout=60) as http:
        with _busy(http, tiny_dense.url, body), pytest.raises(GuardError, match="1 request running"):
            start("decode", model="tiny-dense", settings={}, endpoint=tiny_dense.url, outputs=str(tmp_path))
        assert not (tmp_path / "decode").exists()
        with _busy(http, tiny_dense.url, body):
            study = start("decode", model="tiny-dense", settings={}, endpoint=tiny_dense.url, outputs=str(tmp_path),
                          force=True)
    try:
        params = json.loads((study.run.path / "params.json").read_text())
        assert params["guard"]["forced"] is True and "1 request running" in params["guard"]["findings"][0]
    finally:
        study.finish({})


def test_nonsense_parameters_are_named():
    with pytest.raises(ParamsError) as e:
        decode.Plan.build(prompt_lengths=[], output_tokens=1, warmup=-1, repetitions=0, temperature=9.0)
    for word in ("prompt_lengths", "output_tokens", "repetitions", "warmup", "temperature"):
        assert f"  {word}:" in str(e.value)
    with pytest.raises(ParamsError, match=r"prompt_lengths\.1: .*greater than or equal to 16; got 8"):
        decode.Plan.build(prompt_lengths=[64, 8])


@pytest.mark.server
def test_a_failure_halfway_keeps_every_record_taken(tmp_path, tiny_dense):
    study = start("decode", model="tiny-dense", settings={}, endpoint=tiny_dense.url, outputs=str(tmp_path))
    maker = PromptMaker(study.endpoint.tokenize)
    good = maker.make(32)
    with pytest.raises(EndpointError, match="out of vocabulary"), study.measuring():  # a token id no vocabulary has
        study.request({"n": 1}, lambda ep: ep.complete(good, max_tokens=8))
        study.request({"n": 2}, lambda ep: ep.complete(good[:-1] + [10**8], max_tokens=8))
    records = read_records(study.run.path)
    assert [r["n"] for r in records] == [1, 2]
    assert records[0]["completion_tokens"] == 8 and "error" in records[1]
    failure = json.loads((study.run.path / "failure.json").read_text())
    assert failure["failed_halfway"] and "out of vocabulary" in failure["reason"] and failure["records"] == 2
    assert verify(study.run.path) == []  # sealed as it stood


def _measured(rows):
    """Records as the sweep writes them, through decode.frame (the burst rule included)."""
    return decode.frame([{"seq": k, "prompt_length": p, "prompt_tokens": p, "completion_tokens": 150,
                          "decode_tokens": 149, "ttft_s": 0.1, "decode_s": d, "decode_tokens_per_s": 149 / d,
                          "interference": i, "server": {"decode_s": s, "ttft_s": 0.09, "spec_decode": {},
                                                        "unchecked": []}}
                         for k, (p, d, s, i) in enumerate(rows)])


def test_the_table_sets_the_median_against_the_bandwidth_limit_and_the_findings_say_why_to_doubt():
    rows = [
        # prompt_length, decode_s, server_decode_s, interference
        (111, 149 / 8.4, 149 / 8.4, None),
        (111, 149 / 8.6, 149 / 8.6, None),
        (111, 149 / 8.0, 149 / 8.0, None),
        (111, 0.02, 0.50, None),  # the client saw all tokens at once: a burst
        (111, 0.30, 0.31, "the server finished 2 requests while this one ran"),
    ]
    df = _measured(rows)
    gb10 = load_hardware("gb10")
    model = load_model("qwen3.8-27b")
    study = types.SimpleNamespace(limit=bandwidth.limit(model, gb10), model=model)
    table = decode.summarize(df, study)
    row = table.loc[111]
    assert row["n"] == 4 and row["tokens/step"] == 1.0  # not speculative: one token per step is known
    assert row["decode tok/s (median)"] == pytest.approx((8.4 + 8.6) / 2)
    assert row["limit tok/s"] == pytest.approx(273e9 / 30.6e9, rel=0.01)
    assert row["% of limit"] == pytest.approx(100 * 8.5 / (273 / 30.6), rel=0.01)  # 95%
    assert row["server-timed"] == 1  # the burst counted at the server's 0.50 s, not the client's 0.02 s
    assert row["max"] == pytest.approx(149 / 0.50) and row["spread x"] == pytest.approx(298 / 8.0)
    notes = decode.findings(df, table, study.limit, gb10.name)
    text = "\n".join(map(str, notes))
    assert "WARNING: 1 request(s) were left out" in text
    assert "1 of 4 answers reached the client in bursts" in text and "counted at the server's time" in text
    spread = next(n for n in notes if "ranged from" in n.text)  # a 37x spread at one length: not a steady box
    assert spread.level == "warning" and spread.about == (111,)
    few = next(n for n in notes if "Too few clean requests" in n.text)
    assert few.about == (111,) and "111 tokens (4)" in few.text
    assert "No change with context is claimed" not in text  # one length only: no change to claim
    assert f"{row['% of limit']:.1f}% to {row['% of limit']:.1f}% of the bandwidth limit" in text and "30.6 GB" in text
    assert "KV cache NOT counted" in text and "counts the weights alone" in text  # hand-written weights, no census


def test_no_claim_about_intervals_where_the_table_shows_none():
    """Five requests a length (the notebook's default) give a median but no 95% interval (six are needed):
    the headline must not say that intervals overlap; with six a length it may, and then they do."""
    study = types.SimpleNamespace(limit=bandwidth.limit(load_model("qwen3.8-27b"), load_hardware("gb10")),
                                  model=load_model("qwen3.8-27b"))
    for per_length, says in ((5, "neither length has a 95% interval"), (6, "the intervals of the two medians overlap")):
        speeds = [8.0, 8.2, 8.4, 8.6, 8.8, 9.0][:per_length]
        df = _measured([(n, 149 / v, 149 / v, None) for n in (111, 5378) for v in speeds])
        table = decode.summarize(df, study)
        text = "\n".join(map(str, decode.findings(df, table, study.limit, "gb10")))
        assert table["95% low"].isna().all() == (per_length == 5)
        assert f"No change with context is claimed: {says}" in text
        assert ("Too few clean requests for a 95% interval" in text) == (per_length == 5)


def test_a_request_without_a_decode_speed_is_counted_and_named_not_dropped_silently():
    records = [{"seq": k, "prompt_length": 111, "rep": k, "prompt_tokens": 111, "completion_tokens": 150,
                "decode_tokens": 149, "ttft_s": 0.1, "decode_s": 149 / 8.5, "decode_tokens_per_s": 8.5,
                "server": {"decode_s": 149 / 8.5, "spec_decode": {}, "unchecked": []}} for k in range(4)]
    records[2] |= {"completion_tokens": 1, "decode_tokens": 0, "decode_s": 0.0, "decode_tokens_per_s": None,
                   "server": {"decode_s": None, "spec_decode": {}, "unchecked": []}}  # stopped after one token
    df = decode.frame(records)
    study = types.SimpleNamespace(limit=bandwidth.limit(load_model("qwen3.8-27b"), load_hardware("gb10")),
                                  model=load_model("qwen3.8-27b"))
    table = decode.summarize(df, study)
    assert table.loc[111, "n"] == 3
    (said,) = [f for f in decode.findings(df, table, study.limit, "gb10") if "no decode speed" in f.text]
    assert "1 request(s)" in said.text and "seq 2 (111 tokens, rep 2)" in said.text and said.about == (111,)


def test_a_speculative_model_without_counters_has_no_limit_and_says_so():
    model = load_model("flash-next")
    study = types.SimpleNamespace(limit=bandwidth.limit(model, load_hardware("gb10")), model=model)
    df = _measured([(111, 149 / 18, 149 / 18, None)])
    table = decode.summarize(df, study)
    assert table.loc[111, "limit tok/s"] is None and table.loc[111, "tokens/step"] is None
    text = "\n".join(map(str, decode.findings(df, table, study.limit, "gb10")))
    assert "tokens per step are unknown" in text


def test_the_order_is_grouped_as_before_or_shuffled_with_warmups_first_and_a_recorded_seed():
    assert schedule([64, 256], 1, 2, "grouped") == [(64, -1), (64, 0), (64, 1), (256, -1), (256, 0), (256, 1)]
    shuffled = schedule([64, 256, 1024], 1, 4, "shuffled", seed=3)
    assert shuffled[:3] == [(64, -1), (256, -1), (1024, -1)]  # every length warmed before any is measured
    assert sorted(shuffled[3:]) == sorted((n, r) for n in (64, 256, 1024) for r in range(4))
    assert shuffled == schedule([64, 256, 1024], 1, 4, "shuffled", seed=3)  # the seed reproduces it
    assert shuffled != schedule([64, 256, 1024], 1, 4, "shuffled", seed=4)
    assert [n for n, _ in shuffled[3:]] != sorted(n for n, _ in shuffled[3:])  # really mixed


def test_a_box_that_slows_down_during_the_sweep_is_named():
    steady = _measured([(111, 149 / v, 149 / v, None) for v in (8.4, 8.5, 8.3, 8.45)])
    assert decode.drifts(steady, "decode_tok_s", "decode tok/s") == []
    slowing = _measured([(111, 149 / v, 149 / v, None) for v in (8.4, 8.2, 8.3, 6.1)])
    (finding,) = decode.drifts(slowing, "decode_tok_s", "decode tok/s")
    assert finding.level == "warning" and "8.4 first, 6.1 last (-27%" in finding.text



def test_compare_with_sets_earlier_runs_beside_this_one_with_intervals(tmp_path):
    from test_compare import decode_run, fingerprint

    earlier = decode_run(tmp_path, "dense-27b", 8.9, fingerprint(host="box-b"), seed=2)
    plan = decode.Plan.build(prompt_lengths=[111, 5378], compare_with=earlier.id, outputs=str(tmp_path))
    assert [r.id for r in plan.past] == [earlier.id]
    mine = decode.frame(read_records(decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1).path))
    study = types.SimpleNamespace(model=types.SimpleNamespace(name="moe-35b"), fingerprint=fingerprint())
    table, notes = decode.compare(mine, study, plan.past)
    row = table[table["prompt tokens"] == 111].iloc[0]
    assert row["theirs / this"] == pytest.approx(8.9 / 26.0, rel=0.03) and row["95% high"] < 1
    assert any(n.level == "warning" and "ran elsewhere: host differs" in n.text for n in notes)
    with pytest.raises(DataError, match="no such run folder"):
        decode.Plan.build(prompt_lengths=[111], compare_with=["no-such-run"], outputs=str(tmp_path))


@pytest.mark.server
def test_repetitions_auto_stops_at_the_target_on_a_quiet_server_and_at_the_cap_on_a_noisy_one(tmp_path, tiny_dense):
    import subprocess
    import sys

    # A loose target a quiet tiny server reaches within a few rounds (tiny-dense: no speculation, whose
    # acceptance on random text would spread the speeds by itself).
    (tmp_path / "quiet").mkdir()
    (tmp_path / "noisy").mkdir()
    nb, folder = run_plain(tmp_path / "quiet", tiny_dense, "tiny-dense", prompt_lengths=[64, 128], output_tokens=32,
                           repetitions="auto", target_width=0.5, max_repetitions=12, warmup=1)
    summary = json.loads((folder / "summary.json").read_text())
    stopped = {r["prompt tokens"]: r["stopped"] for r in summary["table"]}
    assert all(why.startswith("reached +/-") and "target +/-50%" in why for why in stopped.values()), stopped
    assert all(r["n"] < 12 for r in summary["table"])
    assert "reached +/-" in outputs_text(nb)  # said in the report
    # A CPU hog switched on and off at random while the sweep runs: no median settles within +/-0.5%.
    hog = subprocess.Popen([sys.executable, "-c", "import random, time\nwhile True:\n"
                            "    end = time.monotonic() + random.uniform(0, 0.2)\n"
                            "    while time.monotonic() < end: pass\n"
                            "    time.sleep(random.uniform(0, 0.2))"])
    try:
        nb, folder = run_plain(tmp_path / "noisy", tiny_dense, "tiny-dense", prompt_lengths=[64], output_tokens=32,
                               repetitions="auto", target_width=0.005, max_repetitions=8, warmup=0)
    finally:
        hog.kill()
        hog.wait()
    summary = json.loads((folder / "summary.json").read_text())
    (row,) = summary["table"]
    assert row["stopped"].startswith("stopped at the cap of 8 requests") and row["n"] == 8
    text = outputs_text(nb)
    assert "stopped at the cap of 8 requests" in text and "spread wider than the target allows" in text
    assert "Where the decode time spread: 64 tokens: the " in text  # put where the server's own timings put it


def test_an_answer_the_client_saw_all_at_once_is_counted_at_the_servers_time_and_said_so():
    # Sixteen tokens in one read: no time between the first and the last at all, so no client speed to quote.
    df = decode.frame([{"seq": 1, "prompt_length": 64, "prompt_tokens": 64, "completion_tokens": 16,
                        "decode_tokens": 15, "ttft_s": 0.1, "decode_s": 0.0, "decode_tokens_per_s": None,
                        "interference": None, "server": {"decode_s": 0.2, "ttft_s": 0.09, "spec_decode": {},
                                                         "unchecked": []}}])
    assert bool(df.loc[0, "burst"]) and df.loc[0, "decode_tok_s"] == pytest.approx(15 / 0.2)
    model = load_model("tiny-dense")
    study = types.SimpleNamespace(limit=bandwidth.limit(model, load_hardware("gb10")), model=model)
    text = "\n".join(map(str, decode.findings(df, decode.summarize(df, study), study.limit, "gb10")))
    assert "every token at once seen by the client, 75.0 tok/s by the server" in text
