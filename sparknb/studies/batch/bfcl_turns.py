"""BFCL's multi-turn check of one live session, written for sparknb from a reading of bfcl-eval 2026.3.23's
eval_checker/multi_turn_eval/multi_turn_checker.py, so that the `agent` study grades its sessions as the
leaderboard does (tests/test_bfcl_turns.py checks it session by session against bfcl-eval's own checker).

A session is graded from its records alone: for each user turn, the calls the model made at each step, as call
strings (`cd(folder='document')`; a step without a call is left out). They are run again on fresh backends, and
the ground truth's calls on other fresh backends, turn by turn, as BFCL does:
- a session whose number of turns is not the ground truth's (cut short by the step cap, say) fails;
- a turn whose ground truth has calls fails when the model made none;
- after such a turn every backend's public attributes must equal the ground truth's (the state check), and every
  result of the turn's ground-truth calls must be among the results of all the model's calls so far, each used
  once, in any order (the response check): a model may have done in an earlier turn what this one asks;
- a turn whose ground truth is empty (the request cannot be done) is not checked, but its calls still run, so the
  next turn's state is true.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from . import bfcl


@dataclass(frozen=True)
class Checked:
    valid: bool
    error_type: str = ""  # BFCL's own name of the failure (multi_turn:instance_state_mismatch, ...)
    turn: int | None = None  # the turn that failed
    detail: dict = field(default_factory=dict)


def check(entry: dict, ground_truth: Sequence[Sequence[str]], turns: Sequence[Sequence[Sequence[str]]]) -> Checked:
    """One session: `turns[t]` is the model's calls of turn t, step by step (each a list of call strings);
    `ground_truth` the answer's `ground_truth`, one list of call strings per turn."""
    if len(turns) != len(ground_truth):
        return Checked(False, "multi_turn:force_terminated", None,
                       {"turns": len(turns), "wanted": len(ground_truth)})
    model, truth = bfcl.backends(entry), bfcl.backends(entry)
    results: list[str] = []
    for index, (steps, wanted) in enumerate(zip(turns, ground_truth)):
        steps = [s for s in steps if s]
        results += [bfcl.execute(c, model) for step in steps for c in step]
        expected = [bfcl.execute(c, truth) for c in wanted]
        failed = _turn(index, steps, wanted, model, truth, results, expected)
        if failed:
            return failed
    return Checked(True)


def _turn(index, steps, wanted, model, truth, results, expected) -> Checked | None:
    if not wanted:
        return None
    if not steps:
        return Checked(False, "multi_turn:empty_turn_model_response", index)
    differences = state(model, truth)
    if differences:
        return Checked(False, "multi_turn:instance_state_mismatch", index, differences)
    missing = missing_results(expected, results)
    if missing:
        return Checked(False, "multi_turn:execution_response_mismatch", index, {"missing": missing})
    return None


def state(model: dict, truth: dict) -> dict:
    """Each backend's public attributes that differ from the ground truth's, by class: {attribute: (model, truth)}."""
    out = {}
    for name, right in truth.items():
        mine = model[name]
        diff = {a: (getattr(mine, a), v) for a, v in vars(right).items()
                if not a.startswith("_") and getattr(mine, a) != v}
        if diff:
            out[name] = diff
    return out


def missing_results(expected: Sequence[str], results: Sequence[str]) -> list[str]:
    """The expected results not found among the model's, each of the model's used once, in any order."""
    left, missing = list(results), []
    for item in expected:
        if item in left:
            left.remove(item)
        else:
            missing.append(item)
    return missing


def turns_of(records: Sequence[dict], session: str) -> list[list[list[str]]]:
    """A session's calls by turn and step, from the agent study's records (studies/agent/sessions.py): its `tools`
    records' call strings, one turn for each of its `turn` records. A step with a call whose arguments did not parse
    is left out whole, as BFCL's decoder drops a step it cannot decode; a session cut short has fewer turns."""
    mine = [r for r in records if r.get("session") == session]
    steps: dict[int, list[list[str]]] = {}
    for r in (r for r in mine if r.get("kind") == "tools" and r.get("calls") and None not in r["calls"]):
        steps.setdefault(r["turn"], []).append(list(r["calls"]))
    return [steps.get(t, []) for t in sorted(r["turn"] for r in mine if r.get("kind") == "turn")]
