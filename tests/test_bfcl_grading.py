"""sparknb's BFCL grading against bfcl-eval's own checkers (tests/bfcl_reference.py), item by item: BFCL's ground
truth (every item passes), the same with known faults injected (each fails, or passes, exactly as BFCL says), in
both of BFCL's formats (names with dots in prompt mode, with underscores where tools are sent natively)."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from sparknb.studies.batch import bfcl, bfcl_turns
from sparknb.studies.bfcl import grading, rule_sets

from bfcl_reference import MODES, ast_check, multi_turn_check, replayed

AST = ("simple_python", "multiple", "parallel", "parallel_multiple")


@pytest.fixture(scope="module")
def items() -> dict[str, list[tuple[dict, list]]]:
    """Every item of the AST categories with its possible answer (irrelevance has none)."""
    out = {}
    for category in AST + ("irrelevance",):
        answers = bfcl.answers(category) if category != "irrelevance" else {}
        out[category] = [(e, answers.get(e["id"], {}).get("ground_truth", [])) for e in bfcl.entries(category)]
    return out


def _wrong_argument(calls: list) -> list:
    calls = copy.deepcopy(calls)
    args = next(iter(calls[0].values()))
    for key, value in args.items():
        args[key] = value + "x" if isinstance(value, str) else "wrong"
        break
    return calls


FAULTS = {
    "wrong argument": _wrong_argument,
    "missing call": lambda calls: calls[:-1],
    "extra call": lambda calls: calls + calls[:1],
    "wrong order": lambda calls: calls[::-1],
    "no call": lambda calls: [],
    "did not parse": lambda calls: None,
}


def _agree(category: str, entry: dict, answer: list, calls, mode: str) -> tuple[bool, bool]:
    ours = grading.check(category, entry["function"], calls, answer, MODES[mode])
    theirs = ast_check(category, entry["function"], calls, answer, mode)
    assert (ours.valid, ours.error_type if not ours.valid else "") == \
        (theirs["valid"], theirs.get("error_type", "") if not theirs["valid"] else ""), (entry["id"], calls)
    return ours.valid, theirs["valid"]


@pytest.mark.parametrize("mode", MODES)
def test_the_ground_truth_passes_every_ast_item_under_both_checkers(items, mode):
    for category in AST:
        for entry, answer in items[category]:
            right = replayed(answer, entry["function"], MODES[mode])
            assert _agree(category, entry, answer, right, mode) == (True, True), entry["id"]


def test_each_fault_is_graded_as_bfcl_grades_it_item_by_item(items):
    """Every fault on every AST item, in both modes; BFCL's parallel categories are order-free, so a reversed
    parallel answer passes there, save where BFCL's greedy matching gives a call to the wrong answer."""
    passed = Counter()
    for (category, pairs), (fault, inject), mode in (
            (c, f, m) for c in items.items() if c[0] in AST for f in FAULTS.items() for m in MODES):
        for entry, answer in pairs:
            calls = inject(replayed(answer, entry["function"], MODES[mode]))
            passed[category, fault] += _agree(category, entry, answer, calls, mode)[0]
    for category in AST:
        assert passed[category, "wrong argument"] == passed[category, "missing call"] == 0, category
        assert passed[category, "extra call"] == passed[category, "no call"] == 0, category
    # order-free, as BFCL; but its greedy matching fails parallel_178 reversed (rule set `robust` passes it)
    assert 2 * len(items["parallel"]) - 2 <= passed["parallel", "wrong order"] < 2 * len(items["parallel"])
    assert passed["simple_python", "wrong order"] == 2 * len(items["simple_python"])  # one call: nothing to order


def test_irrelevance_passes_without_a_call_and_fails_with_one(items):
    """A call where none was wanted fails; an answer in prose (does not parse) or an empty list passes."""
    for entry, _ in items["irrelevance"]:
        offered = entry["function"][0]
        call = [{offered["name"]: {p: 1 for p in offered["parameters"].get("required", [])}}]
        for calls, right in ((call, False), ([], True), (None, True), ([{}], True)):
            assert _agree("irrelevance", entry, [], calls, "prompt") == (right, right)


@pytest.fixture(scope="module")
def sessions() -> list[tuple[dict, list]]:
    """multi_turn_base's sessions that sparknb can run (MathAPI needs mpmath: refused by name), with answers."""
    answers = bfcl.answers("multi_turn_base")
    return [(e, answers[e["id"]]["ground_truth"]) for e in bfcl.entries("multi_turn_base")
            if not bfcl.refusal(e["involved_classes"])]


def _session_agree(entry: dict, truth: list, turns: list) -> bool:
    ours, theirs = bfcl_turns.check(entry, truth, turns), multi_turn_check(entry, truth, turns)
    assert (ours.valid, ours.error_type) == (theirs["valid"], theirs.get("error_type", "")), (entry["id"], turns)
    return ours.valid


def _one_step_per_call(truth: list) -> list:
    return [[[c] for c in turn] for turn in truth]


SESSION_FAULTS = {
    "ground truth, one call a step": (_one_step_per_call, True),
    "ground truth, all calls in one step": (lambda t: [[turn] for turn in t], True),
    "last turn's calls left out": (lambda t: [[[c] for c in turn] for turn in t[:-1]] + [[]], False),
    "turn missing": (lambda t: _one_step_per_call(t[:-1]), False),
}


@pytest.mark.parametrize("fault", SESSION_FAULTS)
def test_multi_turn_sessions_are_graded_as_bfcl_grades_them(sessions, fault):
    inject, right = SESSION_FAULTS[fault]
    graded = Counter(_session_agree(e, t, inject(t)) for e, t in sessions if t[-1] or right)
    assert set(graded) == {right} and sum(graded.values()) >= 170


def test_a_wrong_argument_or_order_in_a_session_fails_where_bfcl_says(sessions):
    """The first call of the session with its first argument changed, or each turn's calls in reverse: BFCL's
    state and response checks decide (a reversed pair of reads still passes), and sparknb must decide the same."""
    failed = Counter()
    for entry, truth in sessions:
        calls = [list(turn) for turn in truth]
        first = next(t for t in calls if t)
        first[0] = first[0].replace("='", "='x", 1) if "='" in first[0] else first[0]
        failed["argument"] += not _session_agree(entry, truth, [[[c] for c in t] for t in calls])
        failed["order"] += not _session_agree(entry, truth, [[[c] for c in reversed(t)] for t in truth])
    assert failed["argument"] > 100 and failed["order"] > 10, failed


def _floats(calls: list) -> list:
    """Every integer argument written as JSON writes a float that holds one (5 -> 5.0)."""
    return [{n: {k: float(v) if type(v) is int else v for k, v in a.items()} for n, a in c.items()} for c in calls]


def _underscored(calls: list) -> list:
    return [{n.replace(".", "_"): a for n, a in c.items()} for c in calls]


def test_robust_passes_what_bfcl_fails_only_for_its_strictness_and_names_why(items):
    """Each of robust's corrections on every item it applies to: BFCL fails the answer, robust passes it, and the
    harness effect names the correction; the faults BFCL fails robust fails too."""
    why = Counter()
    for category in AST:
        for entry, answer in items[category]:
            truth = replayed(answer, entry["function"])
            record = {"category": category, "functions": entry["function"], "answer": answer, "format": "prompt"}
            for changed in (truth[::-1], _floats(truth), _underscored(truth)):
                r = record | {"calls": changed}
                if not rule_sets.bfcl(r).valid:
                    assert rule_sets.robust(r).valid, (entry["id"], changed)
                    why[rule_sets.cause(r, None, None)] += 1
            for inject in (FAULTS["wrong argument"], FAULTS["missing call"], FAULTS["extra call"]):
                assert not rule_sets.robust(record | {"calls": inject(truth)}).valid, entry["id"]
    assert why[rule_sets.GREEDY] >= 1 and why[rule_sets.NUMBERS] > 100 and why[rule_sets.NAMES] > 100, why


def test_a_session_is_read_from_the_agent_studys_records_as_bfcl_decodes_it(sessions):
    """Records of the agent study's shape (a `tools` record a step, a `turn` record a turn) carrying the ground
    truth, with a step whose arguments did not parse (dropped whole, as BFCL's decoder drops it), and one session cut
    short after its first turn: graded as BFCL grades the same calls."""
    for entry, truth in sessions[:40]:
        records = [{"kind": "tools", "session": entry["id"], "turn": 0, "step": 0, "calls": ["cd(folder='x')", None]}]
        for turn, calls in enumerate(truth):
            records += [{"kind": "tools", "session": entry["id"], "turn": turn, "step": 1 + s, "calls": [c]}
                        for s, c in enumerate(calls)]
            records.append({"kind": "turn", "session": entry["id"], "turn": turn})
        turns = bfcl_turns.turns_of(records, entry["id"])
        assert turns == _one_step_per_call(truth) and _session_agree(entry, truth, turns)
        cut = [r for r in records if r["turn"] == 0]
        assert not _session_agree(entry, truth, bfcl_turns.turns_of(cut, entry["id"])) or len(truth) == 1
