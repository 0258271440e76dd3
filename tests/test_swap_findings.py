"""What the swap study concludes from its records: every reason to doubt a figure is said, at its level."""

from __future__ import annotations

from sparknb.serving.startup_log import STAGES
from sparknb.studies import swap

GIB = 2**30


def start(step: int, model: str, ready_s: float, *, compilation: float | None = 5.0, load: float = 0.1,
          used: int | None = 4 * GIB, came_from: str = swap.EMPTY) -> dict:
    """A finished start as measure.py records it: stages from the log, memory around it, the client's wait."""
    stages = dict.fromkeys(STAGES, 1.0) | {"compilation": compilation, "graph capture": None}
    return {"kind": "start", "step": step, "rep": 0, "model": model, "from": came_from, "ok": True,
            "evict_s": 0.0, "ready_s": ready_s, "first_answer_s": ready_s + 0.5, "client_wait_s": ready_s + 0.5,
            "compile_cache": "cold", "startup": {"stages": stages, "notes": [], "events": []},
            "memory_before": {"load_average_1m": load, "cpus": 2, "used_bytes": 3 * GIB},
            "memory_after": {"used_bytes": used, "server_bytes": GIB, "source": "system"}}


def final(left: list[int] | None = None) -> dict:
    return {"kind": "final", "models": {}, "processes_left": left or []}


def levels(records: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in swap.findings(records):
        out.setdefault(f.level, []).append(f.text)
    return out


def test_a_failed_start_is_a_failed_finding_and_no_figure_is_claimed():
    failed = start(1, "m", 10.0) | {"ok": False, "error": "m exited with code 3 before it was ready.\nlog tail"}
    found = levels([failed, final()])
    assert found["failed"] == ["step 1 ((empty) -> m): m exited with code 3 before it was ready."]
    assert found["warning"] == ["No transition finished, so there is no figure to report."] and "info" not in found


def test_processes_that_outlived_the_study_are_a_failed_finding():
    found = levels([start(1, "m", 10.0), final(left=[4242])])
    assert any("4242" in text and "kill -- -PID" in text for text in found["failed"])


def test_a_busy_machine_makes_the_figures_upper_bounds_said_as_a_warning():
    quiet, busy = levels([start(1, "m", 10.0), final()]), levels([start(1, "m", 10.0, load=1.9), final()])
    assert not any("busy" in text for text in quiet.get("warning", []))
    assert any("busy before 1 start(s)" in text and "upper bounds" in text for text in busy["warning"])


def test_memory_that_could_not_be_read_is_unknown_not_zero():
    records = [start(1, "m", 10.0, used=None), final()]
    assert any("could not be read after step(s) [1]" in text for text in levels(records)["warning"])
    assert swap.memory_table(records)["after GiB"].tolist() == [None]


def test_the_stage_that_makes_one_model_slower_is_named():
    records = [start(1, "fast", 10.0), start(2, "slow", 40.0, compilation=30.0, came_from="fast"), final()]
    named = [t for t in levels(records)["info"] if "slow took 30.0 s longer than fast" in t]
    assert len(named) == 1 and "compilation (+25.0 s)" in named[0]


def test_two_starts_whose_logs_share_no_stage_are_not_compared_as_if_unknown_were_zero():
    blind = start(2, "slow", 40.0, came_from="fast")
    blind["startup"]["stages"] = dict.fromkeys(STAGES)
    records = [start(1, "fast", 10.0), blind, final()]
    assert any("share no stage to compare" in text for text in levels(records)["warning"])


def test_a_stage_the_log_does_not_show_is_null_in_the_summary_not_zero():
    records = [start(1, "m", 10.0, compilation=None), final()]
    row = swap.summary(records, swap.findings(records))["stages"]["1: m (cold)"]
    assert row["compilation"] is None and row["graph capture"] is None and row["weight loading"] == 1.0
