"""BFCL's rule sets: one recorded answer graded as the leaderboard grades it, and as a user would accept it (the
mechanism, the harness effect and its words are batch.rule_sets').

- `bfcl`: exactly BFCL's AST checker (grading.py), the verdict's set: the leaderboard's number.
- `robust`, sparknb's own: BFCL's rules after three corrections, each where BFCL fails a call a user's code would
  run as meant:
  1. parallel calls matched by any one-to-one assignment: BFCL gives each expected call the first model call that
     fits it, so a right answer in another order can fail (parallel_178, its ground truth reversed: one call fits
     two expected ones and is taken by the wrong one);
  2. JSON numbers: an integral float (`5.0`) for an integer parameter, and an integer among a float list's items,
     count as the number they are: native calls arrive as JSON, which has one number type, and BFCL widens an
     int to a float only at the top level;
  3. a function name with underscores for its dots (or dots for its underscores) is the offered function: BFCL
     itself renames dotted names for models served through OpenAI-style `tools`, so whether `math_factorial`
     passes depends on which list the model is in, not on the call.
"""

from __future__ import annotations

from ...endpoint.prompt_calls import decode
from ...runs import strict_json
from ..batch.rule_sets import Graded, Harness, RuleSet
from . import grading

GREEDY = "BFCL's greedy matching of parallel calls"
NUMBERS = "a JSON number of another Python type (5.0 for 5, an int among floats)"
NAMES = "a function name spelled with underscores for dots, or dots for underscores"


def _native(record: dict) -> bool:
    return record.get("format") == "native"


def calls(record: dict) -> list | None:
    """The answer's calls as BFCL grades them: a prompt-mode answer decoded afresh from its text, as BFCL decodes
    at grading time (the record's `calls` went through JSON, which writes a tuple as a list: BFCL's type check
    fails a tuple given for an array), a native one as recorded."""
    if _native(record) or "text" not in record:
        return record.get("calls")
    try:
        return decode(record["text"])
    except ValueError:
        return None


def bfcl(record: dict) -> grading.Verdict:
    return grading.check(record["category"], record["functions"], calls(record), record["answer"], _native(record))


def robust(record: dict, rules: tuple[str, ...] = (GREEDY, NUMBERS, NAMES)) -> grading.Verdict:
    """BFCL's rules with the corrections named in `rules` (all three by default)."""
    made = calls(record)
    if made is not None and grading._well_formed(made):
        made = _renamed(made, record) if NAMES in rules else made
        made = _numbers(made, record["functions"], _native(record)) if NUMBERS in rules else made
    return grading.check(record["category"], record["functions"], made, record["answer"], _native(record),
                         greedy=GREEDY not in rules)


def _renamed(calls: list[dict], record: dict) -> list[dict]:
    """Each call under the offered function's name as this format spells it, where the two differ only by dots
    and underscores."""
    spelled = {f["name"].replace(".", "_"): f["name"].replace(".", "_") if _native(record) else f["name"]
               for f in record["functions"]}
    return [{spelled.get(name.replace(".", "_"), name): args for name, args in c.items()} for c in calls]


def _numbers(calls: list[dict], functions: list[dict], native: bool) -> list[dict]:
    props = {(f["name"].replace(".", "_") if native else f["name"]): f["parameters"].get("properties", {})
             for f in functions}
    return [{name: {p: _number(v, props.get(name, {}).get(p, {})) for p, v in args.items()}
             for name, args in c.items()} for c in calls]


def _number(value, spec: dict):
    kind, inner = spec.get("type"), (spec.get("items") or {}).get("type")
    if kind == "integer" and type(value) is float and value.is_integer():
        return int(value)
    if kind in grading.NESTED and inner == "float" and isinstance(value, list):
        return [float(v) if type(v) is int else v for v in value]
    return value


def _set(name: str, follows: str, check) -> RuleSet:
    def grade(record: dict) -> Graded:
        v = check(record)
        made = record.get("calls")
        return Graded(None if made is None else strict_json.dumps(made)[:300], v.error_type or "pass", v.valid)

    return RuleSet(name, follows, (), grade)


RULE_SETS = {
    "bfcl": _set("bfcl", "BFCL's AST checker (bfcl-eval 2026.3.23)", bfcl),
    "robust": _set("robust", "sparknb (BFCL's rules, any-order matching, JSON numbers, dots or underscores)",
                   robust),
}
LEAD = "bfcl"


def cause(record: dict, a: RuleSet, b: RuleSet) -> str:
    """Which of robust's corrections alone changes the verdict, given that the two sets differ."""
    plain = bfcl(record).valid
    for rule in (GREEDY, NUMBERS, NAMES):
        if robust(record, (rule,)).valid != plain:
            return rule
    return "the corrections together"


HARNESS = Harness(RULE_SETS, LEAD, cause)
