"""The load sweep against the real tiny test bed (vLLM CPU, started with --enable-per-request-metrics).

Levels stay small (1 to 4 in flight) on this 2-core machine: the server, its API process and the
client share two cores, and a level larger than that measures the machine's scheduler.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time

import pytest

from sparknb.errors import ParamsError
from sparknb.runs.study import start
from sparknb.studies import load
from support import folder_text, outputs_text, run_notebook

pytestmark = pytest.mark.server

SMALL = {"prompt_tokens": 128, "output_tokens": 512, "requests_per_level": 8}
STRAY = ("Task was destroyed", "coroutine ignored", "Task exception was never retrieved")


def _summary(folder) -> dict:
    return json.loads((folder / "summary.json").read_text())


@contextlib.contextmanager
def _kernel_stderr():
    """What the notebook's kernel writes to its stderr (it inherits this process's), as a list of one text:
    asyncio reports a task destroyed with its loop there when it happens outside a cell."""
    seen: list[str] = []
    with tempfile.TemporaryFile() as file:
        saved = os.dup(2)
        os.dup2(file.fileno(), 2)
        try:
            yield seen
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            file.seek(0)
            seen.append(file.read().decode(errors="replace"))


def _notebook(tmp, parameters: dict):
    with _kernel_stderr() as stderr:
        nb, folder = run_notebook("load", tmp, parameters)
    return nb, folder, stderr[0]


@pytest.fixture(scope="module")
def moe_run(tiny_moe, tmp_path_factory):
    """tiny-moe swept through the notebook: the run the dense sweep compares with."""
    tmp = tmp_path_factory.mktemp("load-moe")
    nb, folder, stderr = _notebook(tmp, {"model": "tiny-moe", "endpoint": tiny_moe.url, "concurrency": [1, 2, 4],
                                         **SMALL})
    return tmp, folder, nb, stderr


@pytest.fixture(scope="module")
def dense_run(tiny_dense, moe_run):
    """tiny-dense, a count per level and chosen percentiles, set beside the tiny-moe run."""
    tmp, moe_folder, _, _ = moe_run
    nb, folder, stderr = _notebook(tmp, {"model": "tiny-dense", "endpoint": tiny_dense.url, "concurrency": [1, 2, 4],
                                         "compare_with": [str(moe_folder)], **SMALL, "requests_per_level": [6, 8, 8],
                                         "percentiles": [50, 95]})
    return nb, folder, stderr


def test_no_background_task_is_left_to_be_destroyed(dense_run, moe_run):
    """The sampler and the lag probe of every level are awaited before the next: nothing of asyncio's
    complaints about a task destroyed while pending reaches a report, nor the kernel's stderr."""
    for nb, stderr in ((dense_run[0], dense_run[2]), (moe_run[2], moe_run[3])):
        shown = outputs_text(nb)
        assert not [s for s in STRAY if s in shown or s in stderr], (shown[-3000:], stderr[-3000:])


def test_every_level_really_runs_its_concurrency_on_the_server(dense_run):
    levels = {row["level name"]: row for row in _summary(dense_run[1])["levels"]}
    assert list(levels) == ["1 in flight", "2 in flight", "4 in flight"]
    for row in levels.values():
        assert row["running max"] == row["level"], row  # the server's own gauge, sampled during the level
        assert row["failed"] == 0
    assert [row["requests"] for row in levels.values()] == [6, 8, 8]  # a count per level, as given
    assert levels["1 in flight"]["count rule"] == "6 requests"


def test_every_aggregate_figure_names_its_window_and_agrees_with_the_servers_count(dense_run):
    nb, folder, _ = dense_run
    levels = _summary(folder)["levels"]
    text = outputs_text(nb)
    assert "steady window (warmup wave left out" in text and "all requests (" in text
    for row in levels:
        assert row["window s (all)"] > row["window s (steady)"] > 0  # the warmup wave comes first
        assert row["TTFT p95 ms"] >= row["TTFT p50 ms"] > 0 and row["TTFT mean ms"] > 0  # the chosen percentiles
        assert "TTFT p99 ms" not in row
        if not row["saturated"]:  # the server's own count of generated tokens over the same windows
            assert abs(row["tok/s vs server % (all)"]) <= 2, row
            assert abs(row["tok/s vs server % (steady)"]) <= max(2, row["server count ± % (steady)"]), row


def test_the_clients_clock_agrees_with_the_servers_where_it_kept_up(dense_run):
    levels = _summary(dense_run[1])["levels"]
    kept_up = [row for row in levels if not row["saturated"]]
    assert kept_up, "the client kept up at no level on an idle machine"
    for row in kept_up:
        assert row["server truth"] == "per-request metrics + histograms"
        assert abs(row["decode vs server %"]) <= 2 and abs(row["E2E vs server %"]) <= 2, row


def test_throughput_grows_with_the_level_and_the_knee_is_named(dense_run):
    summary = _summary(dense_run[1])
    aggregate = [row["aggregate tok/s (steady)"] for row in summary["levels"]]
    assert aggregate[-1] > 1.5 * aggregate[0]  # four users get more done than one, even on two cores
    assert summary["knee"] in [row["level name"] for row in summary["levels"]]


def test_the_batch_ratio_is_set_against_the_single_stream_one(dense_run, moe_run):
    nb, folder, _ = dense_run
    (c,) = _summary(folder)["comparisons"]
    assert c["label"] == "tiny-moe" and c["single_stream"][0] == "1 in flight"
    assert [r["level name"] for r in c["ratios"]] == ["1 in flight", "2 in flight", "4 in flight"]
    text = outputs_text(nb)
    assert "image/png" in text and "Against tiny-moe" in text


def test_speculative_chunks_carry_several_tokens_so_itl_exceeds_tpot(moe_run):
    """tiny-moe drafts with n-grams: a chunk can hold several tokens; TPOT counts tokens, ITL the gaps
    between chunks, as vllm bench serve counts them."""
    rows = _summary(moe_run[1])["levels"]
    assert any(row["tokens/chunk"] > 1.05 for row in rows)
    for row in rows:
        assert row["ITL mean ms"] >= row["TPOT mean ms"] * 0.95


def test_no_key_reaches_the_run_folder(dense_run, dense_key):
    assert dense_key not in folder_text(dense_run[1])


def test_a_starved_client_is_marked_and_never_read_as_the_servers_limit(tiny_dense, tmp_path):
    """A hook spends 12 ms of the client's event loop on every chunk: more than the chunks leave it. 4 ms left a
    slower 2-core box's loop 40% busy (limit 50%) at 1.1 tokens a chunk: its server's chunks came further apart."""
    plan = load.Plan.build(concurrency=[2], prompt_tokens=64, output_tokens=32, requests_per_level=4, warmup=0)
    study = start("load", model="tiny-dense", endpoint=tiny_dense.url, outputs=str(tmp_path), seal=False,
                  validate=plan.check_server, settings=plan.settings())

    def starve() -> None:
        until = time.perf_counter() + 0.012
        while time.perf_counter() < until:
            pass

    records, note = load.sweep(study, plan, on_chunk=starve)
    table = load.summarize(records, plan.slo_ttft_s, plan.slo_tpot_s, plan.percentiles)
    notes = load.findings(table, records, plan, note, [])
    study.finish(load.summary(table, plan, notes, []))
    row = table.loc["2 in flight"]
    assert row["saturated"] and "busy" in row["why"], (  # the server may pack tokens into fewer chunks
        f"loop CPU {row['client loop CPU %']:.0f}%, {row['tokens/chunk']:.2f} tokens/chunk, why: {row['why']}")
    marked = [f.text for f in notes if f.level == "marked"]
    assert any("could not keep up" in t and "not the server's" in t for t in marked)
    assert load.knee(table) is None


def test_arrivals_at_a_rate_are_sent_on_their_seeded_schedule(tiny_dense, tmp_path):
    plan = load.Plan.build(request_rates=[5.0], prompt_tokens=64, output_tokens=16, requests_per_level=10, seed=4)
    study = start("load", model="tiny-dense", endpoint=tiny_dense.url, outputs=str(tmp_path), seal=False,
                  validate=plan.check_server, settings=plan.settings())
    records, _ = load.sweep(study, plan)
    study.finish({})
    sent = sorted(r["sent_s"] for r in records if r.get("kind") == "request")
    due = load.arrivals(plan.wanted()[0], plan.seed)
    assert len(sent) == len(due) == 15  # a warmup of one second's worth, then ten
    assert max(abs(s - d) for s, d in zip(sent, due)) < 0.02


def test_a_prompt_set_sends_its_texts_as_chats_of_their_own_lengths(tiny_dense, tmp_path):
    plan = load.Plan.build(concurrency=[1], prompts="reference", output_tokens=8, requests_per_level=6, warmup=0)
    study = start("load", model="tiny-dense", endpoint=tiny_dense.url, outputs=str(tmp_path), seal=False,
                  validate=plan.check_server, settings=plan.settings())
    records, _ = load.sweep(study, plan)
    study.finish({})
    lengths = {r["prompt_tokens"] for r in records if r.get("kind") == "request"}
    assert len(lengths) > 1 and max(lengths) <= plan.source.longest


def test_a_compare_with_run_of_other_levels_is_refused_before_anything_runs(tiny_dense, moe_run):
    plan = load.Plan.build(concurrency=[8], compare_with=[str(moe_run[1])], **SMALL)
    with pytest.raises(ParamsError, match="share no level"):
        start("load", model="tiny-dense", endpoint=tiny_dense.url, outputs=str(moe_run[0]),
              validate=plan.check_server, settings=plan.settings())


def test_the_comparison_sets_two_load_runs_side_by_side_level_by_level(dense_run, moe_run):
    from sparknb.studies import compare
    from sparknb.verdicts.verdict import decide

    plan = compare.Plan.build(runs=[str(moe_run[1]), str(dense_run[1])])
    h = compare.headline(plan.compared())
    figures = [r.figure for r in h.rows if r.study == "load"]
    for level in ("1 in flight", "2 in flight", "4 in flight"):
        assert {f"per-user tok/s at {level}", f"TTFT ms at {level}",
                f"aggregate tok/s (steady window) at {level}"} <= set(figures)
    per_user = next(r for r in h.rows if r.figure == "per-user tok/s at 2 in flight")
    assert per_user.n == {"tiny-moe": 8, "tiny-dense": 8}  # every measured request of the level, a side
    aggregate = next(r for r in h.rows if r.figure == "aggregate tok/s (steady window) at 2 in flight")
    assert decide(aggregate, "tiny-dense", "tiny-moe").outcome == "context"  # one window: never decides alone
    moe_levels = {row["level name"]: row for row in _summary(moe_run[1])["levels"]}
    assert aggregate.values["tiny-moe"] == pytest.approx(moe_levels["2 in flight"]["aggregate tok/s (steady)"])
