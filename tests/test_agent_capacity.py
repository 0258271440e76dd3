"""Sessions in flight and the box's capacity (the agent study): the same replayed sessions at each level on the real
model (SmolLM2 on llama-server, the shared `smollm2_tools` server), the client checked against the server's own
per-request timings, the capacity search deciding against an SLO no server misses and one no server meets, and the
search's own logic on its own."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support import outputs_text, run_notebook

from sparknb.errors import DataError, ParamsError
from sparknb.runs import report
from sparknb.runs.run import read_past, read_records, verify
from sparknb.runs.study import start
from sparknb.studies.agent import capacity, findings, headline_rows, measure
from sparknb.studies.agent import plan as agent_plan
from sparknb.studies.batch import bfcl
from sparknb.verdicts.verdict import Runs

LIVE = {"model": "smollm2-tools-llamacpp", "max_steps": 1, "max_tokens": 6}  # short answers: fast levels
SESSIONS = 2  # the real model's server has two slots (real_models): levels 1 and 2


@pytest.fixture(scope="module")
def live(smollm2_tools, tmp_path_factory):
    """A sealed live run (in this process) of two sessions of BFCL's shape (MessageAPI's tools, two turns of one step
    each, six tokens an answer), both in flight so that both slots of the server hold the tools' prefix: what every
    level replays."""
    entry = next(e for e in bfcl.entries("multi_turn_base") if "MessageAPI" in e["involved_classes"])
    tmp = tmp_path_factory.mktemp("capacity")
    path = tmp / "sessions.jsonl"
    path.write_text("".join(json.dumps({"id": f"s{i}", "question": [[{"role": "user", "content": f"Say {i}."}],
                                                                     [{"role": "user", "content": "Say it again."}]],
                                        "initial_config": entry["initial_config"], "involved_classes": ["MessageAPI"]})
                            + "\n" for i in range(SESSIONS)))
    folder, _ = in_process(tmp, smollm2_tools.url, {**LIVE, "sessions_file": str(path), "in_flight": SESSIONS})
    return tmp, folder, read_records(folder)


def in_process(tmp, url: str, given: dict):
    """A run as the notebook makes it, in this process (a kernel's start costs half a minute on a loaded box): its
    sealed folder and its findings' text."""
    plan = agent_plan.Plan.build(**{k: v for k, v in given.items() if k != "model"}, outputs=str(tmp / "outputs"))
    study = start("agent", model=given["model"], endpoint=url, outputs=str(tmp / "outputs"),
                  settings=plan.settings() | {"model": given["model"]})
    notes = findings(measure(study, plan))
    study.finish({"findings": report.as_records(notes)})
    return study.run.path, report.markdown(notes)


def search(live, url: str, slo_ms: float, notebook: bool = True) -> tuple:
    """A capacity search replaying the live run against a step TTFT p95 SLO, by the notebook or in this process: its
    findings' text, records, capacity record, each level's verdict, and the sealed run as the comparison reads it."""
    tmp, folder, _ = live
    given = {**LIVE, "replay_from": str(folder), "slo_ttft_p95_ms": slo_ms, "max_in_flight": SESSIONS}
    if notebook:
        nb, run = run_notebook("agent", tmp, {**given, "endpoint": url})
        said = outputs_text(nb)
    else:
        run, said = in_process(tmp, url, given)
    assert verify(run) == []
    records = read_records(run)
    (c,) = [r for r in records if r.get("kind") == "capacity"]
    verdicts = {str(r["level"]): r["verdict"] for r in records if r.get("kind") == "level"}
    assert c["levels"] == verdicts and c["cap"] == SESSIONS
    clients = [int(n) for n, v in verdicts.items() if v == "client"]
    assert c["capacity"] < min(clients, default=SESSIONS + 1)  # a level the client lost is never the server's
    return said, records, c, verdicts, read_past(str(run), "agent")[0]


@pytest.fixture(scope="module")
def easy(live, smollm2_tools):
    return search(live, smollm2_tools.url, 600_000.0)  # ten minutes: no step of this server misses it


def _steps(records: list[dict]) -> dict:
    return {(r.get("level"), r["session"], r["turn"], r["step"]): r for r in records if r.get("kind") == "step"}


def test_each_level_replays_the_same_steps_checked_against_the_server_and_passes_an_slo_all_meet(live, easy):
    said, records, c, verdicts, _ = easy
    levels = {r["level"]: r for r in records if r.get("kind") == "level"}
    assert sorted(levels) == [1, 2]  # doubling from 1 to the cap (the replayed run's two sessions)
    steps, first = _steps(records), _steps(live[2])
    for n in (1, 2):  # every live step sent again at each level, the same prompt by the server's own count
        mine = {k[1:]: r for k, r in steps.items() if k[0] == n}
        assert {k: r["prompt_tokens"] for k, r in mine.items()} == {k[1:]: r["prompt_tokens"] for k, r in first.items()}
        assert max(r["running"] for r in mine.values()) == n
        checks = levels[n]["checks"]  # the client's decode time against llama-server's own predicted_ms
        assert checks["server truth"] == "per-request timings" and checks["decode vs server %"] is not None
        assert levels[n]["client"]["lags_s"]["n"] > 0 and levels[n]["verdict"] in ("pass", "client")
    table = capacity.level_table(records)
    assert list(table.index) == [1, 2] and (table["steps"] == 2 * SESSIONS).all()
    assert table.loc[1, "cached share, steps 2+"] > 0.5  # the second turn found the first in the slot's cache
    assert "Sessions in flight: 1: TTFT p95" in said
    # The live run had just filled the server's two slots: level 1's first step found its prompt there.
    assert "WARM FROM BEFORE THIS RUN: 1 step(s) sent before any request of this run was answered" in said
    if "client" not in verdicts.values():
        assert c["decided"] and c["capacity"] == 2 and c["said"].startswith("at least 2")


def test_an_slo_none_meets_ends_the_search_at_one_and_two_slos_are_never_compared(live, easy, smollm2_tools):
    said, _, hard, verdicts, run = search(live, smollm2_tools.url, 0.001, notebook=False)  # no TTFT is 1 µs
    assert list(verdicts) == ["1"] and hard["capacity"] == 0 and hard["decided"] == (verdicts["1"] == "fail")
    assert "CAPACITY within the SLO (step TTFT p95 at most 0.001 ms): 0 session(s)" in said \
        or verdicts["1"] == "client"
    rows = headline_rows(Runs({"agent": {"easy": easy[4], "impossible": run}}, ["easy", "impossible"]))
    (row,) = [r for r in rows if "capacity" in r.figure]
    assert row.values == {"easy": easy[2]["capacity"], "impossible": 0}
    assert "slo_ttft_p95_ms" in row.not_comparable  # two SLOs are never compared
    # Two replays of one live run send the same steps: TTFT is paired by step, each ratio over the same step's.
    (later,) = [r for r in rows if r.figure.startswith("TTFT ms, steps 2+")]
    ttft = [{(r["session"], r["turn"], r["step"]): r["ttft_s"] for r in past.records
             if r.get("kind") == "step" and r["level"] == 1 and (r["turn"], r["step"]) != (0, 0)}
            for past in (easy[4], run)]
    assert later.figure == "TTFT ms, steps 2+ (paired by step)" and later.n == {"easy": SESSIONS, "impossible": SESSIONS}
    assert later.ratios["impossible"].estimate == pytest.approx(
        float(np.median([ttft[1][k] / ttft[0][k] for k in ttft[0]])))


def test_a_sweep_without_an_slo_measures_the_levels_named_and_judges_none(live, smollm2_tools):
    run, said = in_process(live[0], smollm2_tools.url, {**LIVE, "replay_from": str(live[1]), "in_flight": [2]})
    records = read_records(run)
    (level,) = [r for r in records if r.get("kind") == "level"]
    assert level["level"] == 2 and level["verdict"] in (None, "client") and "capacity" not in {
        r.get("kind") for r in records}
    steps = [r for r in records if r.get("kind") == "step"]
    assert len(steps) == 2 * SESSIONS and {r["level"] for r in steps} == {2} and max(r["running"] for r in steps) == 2
    assert "Sessions in flight: 2: TTFT p95" in said and "CAPACITY" not in said


def test_a_sweep_beyond_the_replayed_sessions_is_refused_before_the_run_starts(live):
    with pytest.raises(ParamsError, match="replay_from"):
        agent_plan.Plan.build(in_flight=[1, 2])
    with pytest.raises(ParamsError, match="picks its own levels"):
        agent_plan.Plan.build(in_flight=[1, 2], slo_ttft_p95_ms=500, replay_from=str(live[1]))
    with pytest.raises(DataError, match="needs as many sessions"):
        agent_plan.Plan.build(in_flight=[1, SESSIONS + 1], replay_from=str(live[1]))


def test_the_search_doubles_then_bisects_and_stops_when_decided():
    def search(truth, cap: int) -> dict:
        tried = {}
        while (n := capacity.next_level(tried, cap)) is not None:
            tried[n] = truth(n)
        return capacity.boundary(tried, cap) | {"order": list(tried)}

    five = search(lambda n: "pass" if n <= 5 else "fail", 8)
    assert five["order"] == [1, 2, 4, 8, 6, 5] and five["capacity"] == 5 and five["decided"]
    seven = search(lambda n: "undecided" if n == 6 else "pass" if n < 6 else "fail", 16)
    assert not seven["decided"] and (seven["low"], seven["high"]) == (5, 6) and seven["undecided_levels"] == [6]
    lost = search(lambda n: "client" if n >= 4 else "pass", 8)  # the client's limit bounds nothing of the server's
    assert lost["capacity"] == 3 and not lost["decided"] and lost["high"] is None
    assert search(lambda n: "pass", 8)["said"].startswith("at least 8")
