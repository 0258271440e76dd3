"""Sessions in flight and the box's capacity (the agent study): the same replayed sessions at each level on the real
model (SmolLM2 on llama-server, the shared `smollm2_tools` server), the client checked against the server's own
per-request timings, the capacity search deciding against an SLO no server misses and one no server meets, and the
search's own logic on its own."""

from __future__ import annotations

import json

import pytest
from support import outputs_text, run_notebook

from sparknb.errors import ParamsError
from sparknb.runs.run import read_past, read_records, verify
from sparknb.studies.agent import capacity, headline_rows
from sparknb.studies.agent import plan as agent_plan
from sparknb.studies.batch import bfcl
from sparknb.verdicts.verdict import Runs

LIVE = {"model": "smollm2-tools-llamacpp", "max_steps": 1, "max_tokens": 6}  # short answers: fast levels
SESSIONS = 4


@pytest.fixture(scope="module")
def live(smollm2_tools, tmp_path_factory):
    """A sealed live run of four sessions of BFCL's shape (MessageAPI's tools, two turns of one step each, six
    tokens an answer): what every level replays."""
    entry = next(e for e in bfcl.entries("multi_turn_base") if "MessageAPI" in e["involved_classes"])
    tmp = tmp_path_factory.mktemp("capacity")
    path = tmp / "sessions.jsonl"
    path.write_text("".join(json.dumps({"id": f"s{i}", "question": [[{"role": "user", "content": f"Say {i}."}],
                                                                     [{"role": "user", "content": "Now say it again."}]],
                                        "initial_config": entry["initial_config"], "involved_classes": ["MessageAPI"]})
                            + "\n" for i in range(SESSIONS)))
    _, folder = run_notebook("agent", tmp, {**LIVE, "sessions_file": str(path), "endpoint": smollm2_tools.url})
    return tmp, folder, read_records(folder)


def _steps(records: list[dict]) -> dict:
    return {(r.get("level"), r["session"], r["turn"], r["step"]): r for r in records if r.get("kind") == "step"}


def test_a_sweep_replays_the_same_steps_at_each_level_checked_against_the_server(live, smollm2_tools):
    tmp, folder, records = live
    nb, sweep = run_notebook("agent", tmp, {**LIVE, "endpoint": smollm2_tools.url, "replay_from": str(folder),
                                            "in_flight": [1, 2]})
    assert verify(sweep) == []
    again = read_records(sweep)
    levels = {r["level"]: r for r in again if r.get("kind") == "level"}
    assert sorted(levels) == [1, 2]
    steps, first = _steps(again), _steps(records)
    for n in (1, 2):  # every live step sent again at each level, the same prompt by the server's own count
        mine = {k[1:]: r for k, r in steps.items() if k[0] == n}
        assert {k: r["prompt_tokens"] for k, r in mine.items()} == {k[1:]: r["prompt_tokens"] for k, r in first.items()}
        assert max(r["running"] for r in mine.values()) == n
        checks = levels[n]["checks"]  # the client's decode time against llama-server's own predicted_ms
        assert checks["server truth"] == "per-request timings" and checks["decode vs server %"] is not None
        assert levels[n]["client"]["lags_s"]["n"] > 0 and levels[n]["verdict"] in (None, "client")
    table = capacity.level_table(again)
    assert list(table.index) == [1, 2] and (table["steps"] == 2 * SESSIONS).all()
    assert table.loc[1, "cached share, steps 2+"] > 0.5  # the second turn found the first in the slot's cache
    assert "Sessions in flight: 1: TTFT p95" in outputs_text(nb)


def test_the_capacity_search_decides_against_an_slo_all_meet_and_one_none_meets(live, smollm2_tools):
    tmp, folder, _ = live
    found = {}
    for name, slo in (("easy", 600_000.0), ("impossible", 0.001)):
        _, run = run_notebook("agent", tmp, {**LIVE, "endpoint": smollm2_tools.url, "replay_from": str(folder),
                                             "slo_ttft_p95_ms": slo, "max_in_flight": SESSIONS})
        records = read_records(run)
        (c,) = [r for r in records if r.get("kind") == "capacity"]
        verdicts = {str(r["level"]): r["verdict"] for r in records if r.get("kind") == "level"}
        assert c["levels"] == verdicts and c["cap"] == SESSIONS
        clients = [int(n) for n, v in verdicts.items() if v == "client"]
        assert c["capacity"] < min(clients, default=SESSIONS + 1)  # a level the client lost is never the server's
        found[name] = (c, verdicts, read_past(str(run), "agent")[0])
    easy, easy_levels, _ = found["easy"]
    if "client" not in easy_levels.values():  # every level passes: doubling to the cap, decided there
        assert easy_levels == {"1": "pass", "2": "pass", "4": "pass"} and easy["decided"] and easy["capacity"] == 4
    hard, hard_levels, _ = found["impossible"]
    assert list(hard_levels) == ["1"] and hard["capacity"] == 0  # no TTFT is 1 microsecond: the search ends at 1
    assert hard["decided"] == (hard_levels["1"] == "fail")
    rows = headline_rows(Runs({"agent": {"easy": found["easy"][2], "impossible": found["impossible"][2]}},
                              ["easy", "impossible"]))
    (row,) = [r for r in rows if "capacity" in r.figure]
    assert row.values == {"easy": easy["capacity"], "impossible": 0}
    assert "slo_ttft_p95_ms" in row.not_comparable  # two SLOs are never compared


def test_a_sweep_beyond_the_replayed_sessions_is_refused_before_any_request(live, smollm2_tools):
    tmp, folder, _ = live
    with pytest.raises(ParamsError, match="replay_from"):
        agent_plan.Plan.build(in_flight=[1, 2])
    import papermill

    with pytest.raises(papermill.PapermillExecutionError, match="needs as many sessions"):
        run_notebook("agent", tmp, {**LIVE, "endpoint": smollm2_tools.url, "replay_from": str(folder),
                                    "in_flight": [1, SESSIONS + 1]})


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
