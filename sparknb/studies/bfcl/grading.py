"""BFCL's single-turn AST rules, written for sparknb from a reading of bfcl-eval 2026.3.23's
eval_checker/ast_eval/ast_checker.py (Python entries only), so that a user's run grades as the leaderboard does
without importing bfcl-eval (whose import pulls in six vendor SDKs). tests/test_bfcl_grading.py checks it item by
item against bfcl-eval's own checker.

A model's answer is graded in BFCL's decoded form: a list of calls, each `{name: {parameter: value}}`, or None where
the answer did not parse as calls. The rules, as BFCL has them:
- `simple_python` wants exactly one call, `multiple` as many calls as the answer (one) and checks the first;
  any category with `parallel` in its name matches calls to answers in any order, each answer taking the first
  unmatched call that passes; `irrelevance` passes exactly when no call was made (an answer that does not parse
  counts as none).
- a call passes when its name is the answer's (dots written as underscores where the tools were sent natively,
  since OpenAI-style servers refuse dots in tool names), every required parameter is there, every parameter given
  is both in the schema and in the answer, each value has the schema's type (an int passes for a float at the top
  level only; a value of the answer's own type passes as a "variable"), each value is among the answer's (strings
  compared case-insensitively without ` ,./-_*^`, in lists and dicts too), and every parameter left out is one the
  answer marks optional with "".
Each failure keeps BFCL's own error type (`simple_function_checker:missing_required`, `type_error:simple`, ...), so
a finding can be matched to the leaderboard's error report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..batch.calls import TYPES

NESTED = ("array", "tuple")
STRIPPED = re.compile(r"[ ,./\-_*^]")


@dataclass(frozen=True)
class Verdict:
    valid: bool
    error_type: str = ""
    error: str = ""


PASS = Verdict(True)


def check(category: str, functions: list[dict], calls: list | None, answer: list[dict],
          underscore_to_dot: bool = False, greedy: bool = True) -> Verdict:
    """One item of a single-turn category: the model's decoded calls against BFCL's possible answer. `greedy`:
    BFCL's matching of parallel calls; False finds any assignment of calls to answers that passes (rule set
    `robust`)."""
    if "irrelevance" in category:
        made = calls is not None and _well_formed(calls) and calls not in ([], [{}])
        return Verdict(False, "irrelevance_error:decoder_success", "a call where none was wanted") if made else PASS
    if calls is None:
        return Verdict(False, "ast_decoder:decoder_failed", "the answer did not parse as calls")
    if not _well_formed(calls):
        return Verdict(False, "ast_decoder:decoder_wrong_output_format", f"not calls: {calls!r}"[:200])
    return _by_category(category, functions, calls, answer, underscore_to_dot, greedy)


def _by_category(category, functions, calls, answer, dot, greedy=True) -> Verdict:
    if "parallel" in category:
        return _any_order(functions, calls, answer, dot) if greedy else _assigned(functions, calls, answer, dot)
    kind = "multiple_function_checker" if "multiple" in category else "simple_function_checker"
    if len(calls) != (len(answer) if "multiple" in category else 1):
        return Verdict(False, f"{kind}:wrong_count", f"{len(calls)} call(s) made, {len(answer)} wanted")
    return call(_schema(functions, answer[0]), calls[0], answer[0], dot)


def _well_formed(calls) -> bool:
    """BFCL's format check: a list of one-key dicts whose value is a dict of arguments."""
    return isinstance(calls, list) and all(
        type(c) is dict and len(c) == 1 and type(next(iter(c.values()))) is dict for c in calls)


def _schema(functions: list[dict], answer: dict) -> dict:
    name = next(iter(answer))
    return next((f for f in functions if f["name"] == name), None)


def _any_order(functions, calls, answers, dot) -> Verdict:
    """Each answer in turn takes the first call not yet taken that passes for it; one answer left without a call
    fails the item (BFCL's greedy matching, order free)."""
    if len(calls) != len(answers):
        return Verdict(False, "parallel_function_checker_no_order:wrong_count",
                       f"{len(calls)} call(s) made, {len(answers)} wanted")
    taken: set[int] = set()
    for answer in answers:
        schema = _schema(functions, answer)
        hit = next((i for i, c in enumerate(calls) if i not in taken and call(schema, c, answer, dot).valid), None)
        if hit is None:
            return Verdict(False, "parallel_function_checker_no_order:cannot_find_match",
                           f"no call matches {next(iter(answer))}")
        taken.add(hit)
    return PASS


def _assigned(functions, calls, answers, dot) -> Verdict:
    """Order free without BFCL's greediness: passes where some one-to-one assignment of calls to answers passes."""
    if len(calls) != len(answers):
        return _any_order(functions, calls, answers, dot)
    fits = [{i for i, c in enumerate(calls) if call(_schema(functions, a), c, a, dot).valid} for a in answers]
    return PASS if _match(fits, 0, frozenset()) else _any_order(functions, calls, answers, dot)


def _match(fits: list[set[int]], answer: int, taken: frozenset) -> bool:
    if answer == len(fits):
        return True
    return any(_match(fits, answer + 1, taken | {i}) for i in fits[answer] - taken)


def call(schema: dict, made: dict, answer: dict, dot: bool = False) -> Verdict:
    """One call against one possible answer `{name: {parameter: [accepted values, "" if optional]}}`."""
    name, accepted = next(iter(answer.items()))
    wanted = name.replace(".", "_") if dot and "." in name else name
    if wanted not in made:
        return Verdict(False, "simple_function_checker:wrong_func_name", f"{wanted!r} not called")
    given, spec = made[wanted], schema["parameters"]
    missing = next((p for p in spec.get("required", []) if p not in given), None)
    if missing is not None:
        return Verdict(False, "simple_function_checker:missing_required", f"missing required {missing!r}")
    for param, value in given.items():
        verdict = _parameter(param, value, spec["properties"], accepted)
        if not verdict.valid:
            return verdict
    left = next((p for p, ok in accepted.items() if p not in given and "" not in ok), None)
    if left is not None:
        return Verdict(False, "simple_function_checker:missing_optional", f"{left!r} left out, not optional")
    return PASS


def _parameter(param: str, value, properties: dict, accepted: dict) -> Verdict:
    if param not in properties or param not in accepted:
        return Verdict(False, "simple_function_checker:unexpected_param", f"unexpected parameter {param!r}")
    kind, ok = properties[param]["type"], accepted[param]
    expected = TYPES[kind]
    inner = TYPES[properties[param]["items"]["type"]] if kind in NESTED else None
    value = list(value) if kind == "tuple" and type(value) is tuple else value
    value = float(value) if kind == "float" and type(value) is int else value
    typed = _typed(param, value, ok, expected, inner)
    if not typed.valid:
        return typed
    return _value(param, value, ok, expected, inner, _variable(ok, expected))


def _answer_type(ok: list):
    return next((type(a) for a in ok if a != ""), None)


def _variable(ok: list, expected) -> bool:
    """BFCL's "variable": the answer's values are not of the schema's type (a name standing for a value)."""
    return _answer_type(ok) not in (None, expected)


def _typed(param, value, ok, expected, inner) -> Verdict:
    """The schema's type; a list's items checked one level deep against each possible list in turn."""
    if type(value) is expected:
        if inner is None or any(not isinstance(item, list) or all(
                _typed(param, v, item, inner, None).valid for v in value) for item in ok):
            return PASS
        nested = type(value) is _answer_type(ok)
        kind = "type_error:nested" if nested else "type_error:simple"
        return Verdict(False, kind, f"{param!r}: items of {value!r} are not {inner.__name__}")
    if _answer_type(ok) is not None and type(value) is _answer_type(ok):
        return PASS
    return Verdict(False, "type_error:simple", f"{param!r}: {type(value).__name__} given, {expected.__name__} wanted")


def _value(param, value, ok, expected, inner, variable) -> Verdict:
    if not variable:
        if expected is dict:
            return _dicts(param, value, ok)
        if expected is list and inner is dict:
            return _list_of_dicts(param, value, ok)
        if expected is str:
            return _among(param, standard(value), [standard(a) for a in ok if type(a) is str], "value_error:string")
        if expected is list:
            return _among(param, _standard_all(value), [_standard_all(a) for a in ok], "value_error:list/tuple")
    return _among(param, value, ok, "value_error:others")


def _among(param, value, ok, kind) -> Verdict:
    return PASS if value in ok else Verdict(False, kind, f"{param!r}: {value!r} is not among {ok!r}"[:300])


def standard(text: str) -> str:
    """BFCL's string normalisation: no spaces or `,./-_*^`, lower case, single quotes as double."""
    return STRIPPED.sub("", text).lower().replace("'", '"')


def _standard_all(values) -> list:
    return [standard(v) if type(v) is str else v for v in values]


def _dicts(param, value: dict, ok: list) -> Verdict:
    """A dict against each possible dict: every key given is one it has, with a value among its own (strings
    normalised), and every key it does not mark optional is given."""
    verdict = Verdict(False, "dict_checker:unclear", f"{param!r}: no possible dict")
    for answer in (a for a in ok if a != ""):
        verdict = _dict(value, answer)
        if verdict.valid:
            return PASS
    return verdict


def _dict(value: dict, answer: dict) -> Verdict:
    """A key given that the answer lacks or a value not among its own; a key it wants that is missing names the
    failure even then, as BFCL's second loop overwrites the first's error type."""
    missing = next((k for k, ok in answer.items() if k not in value and "" not in ok), None)
    if missing is not None:
        return Verdict(False, "value_error:dict_key", f"missing dict key {missing!r}")
    for key, v in value.items():
        if key not in answer:
            return Verdict(False, "value_error:dict_key", f"unexpected dict key {key!r}")
        if (standard(v) if type(v) is str else v) not in _standard_all(answer[key]):
            return Verdict(False, "value_error:dict_value", f"{key!r}: {v!r} is not among {answer[key]!r}")
    return PASS


def _list_of_dicts(param, value: list, ok: list) -> Verdict:
    """A list of dicts against each possible list, dict by dict in order."""
    verdict = Verdict(False, "list_dict_checker:unclear", f"{param!r}: no possible list")
    for answer in ok:
        if len(value) != len(answer):
            verdict = Verdict(False, "value_error:list_dict_count", f"{param!r}: {len(value)} dicts given")
            continue
        verdicts = [_dicts(param, v, [a]) for v, a in zip(value, answer)]
        verdict = next((v for v in verdicts if not v.valid), PASS)
        if verdict.valid:
            return PASS
    return verdict
