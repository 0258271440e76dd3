"""sparknb's prompt-mode decoder (endpoint.prompt_calls) against BFCL's own (default_decode_ast_prompting, loaded
from the pinned wheel by tests/bfcl_reference.py): the same texts to both, the same calls out, value types included
(a tuple is not a list), or both fail. The texts: crafted answers, one for each way BFCL reads or refuses one, and
BFCL's own ground truth written out as prompt-mode answers (every AST item, every multi_turn_base turn)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from sparknb.endpoint.prompt_calls import decode, executed
from sparknb.endpoint.tools import prompted
from sparknb.runs import strict_json
from sparknb.studies.batch import bfcl
from sparknb.studies.batch.calls import WRONG_TYPE
from sparknb.studies.bfcl import rule_sets, scores
from sparknb.studies.bfcl.findings import problems

from bfcl_reference import decoded, execution, graded, replayed

AST = ("simple_python", "multiple", "parallel", "parallel_multiple")
CRAFTED = [
    # the wrapping: fences, brackets added, quotes, prose, blank
    "[f(a=1)]", "f(a=1)", "```\n[f(a=1)]\n```", "```json\n[f(a=1)]\n```", "```python\n[f(a=1)]\n```", "'[f(a=1)]'",
    '"[f(a=1)]"', "", "  ", "[]", "I will call f.", "f(a=1), g(b=2)", "f(a=1)\ng(b=2)", "\t[f(a=1)]", "{f(a=1)}",
    "(f(a=1), g(b=2))", "[f(a=1)]]", "[[f(a=1)]", "[[f(a=1)]]", "[f(a=1)][0]", "[1, 2]", "[f(a=1), 2]",
    "[f(a=1, b=2), ]", "[f (a = 1)]", "[fünf(a=1)]",
    # names
    "[math.factorial(number=5)]", "[a.b.c(x=1)]", "[f()(x=1)]", "[x[0](a=1)]", "[f][0](a=1)",
    # arguments without keywords, spread
    "[f(1, 2)]", "[f(1, b=2)]", "[f(*args)]", "[f(**d)]", "[f(a=1, **d)]",
    # literals
    "[f(a=None, b=True, c=False)]", "[f(a=...)]", "[f(a='')]", "[f(a='it' 's')]", "[f(a=1e999)]", "[f(a=0x10)]",
    "[f(a=b'x')]", "[f(a=-0.0)]", "[f(a=(1))]", "[f(a=())]", "[f(a=[])]", "[f(a={})]",
    # tuples, lists, dicts
    "[f(a=(1, 2))]", "[f(a=[1, (2, 3)])]", "[f(a={'k': (1,)})]", "[f(a={(1, 2): 'x'})]",
    "[f(a={'a': 1, 'b': [1, 2]})]", "[f(a=[{'x': 1}, {'y': (2,)}])]", "[f(a={**d})]", "[f(a={[1]: 2})]",
    # unary operators: BFCL negates the literal whatever the operator
    "[f(a=-5)]", "[f(a=-5.5)]", "[f(a=+5)]", "[f(a=--5)]", "[f(a=-x)]", "[f(a=-True)]", "[f(a=not True)]",
    "[f(a=~3)]", "[f(a=-'x')]", "[f(a=-(2))]",
    # binary operations: computed on numbers, else failed
    "[f(a=2*3)]", "[f(a=2**10)]", "[f(a=1/4)]", "[f(a=-2*3)]", "[f(a=7//2 % 3)]", "[f(a=1+2j)]", "[f(a=1/0)]",
    "[f(a=x*2)]", "[f(a=None+1)]", "[f(a=True+1)]", "[f(a=2.5e3*2)]", "[f(a=2**-1)]", "[f(a=(-8)**0.5)]",
    "[f(a=1<<3)]", "[f(a=5 % 0)]", "[f(a=2.0**5000)]", "[f(a=(1+2))]", "[f(a=3-True)]", "[f(a=1.5//0.5)]",
    "[f(a=2 @ 3)]", "[f(a=1 | 2)]", "[f(a=0b101 ^ 3)]", "[f(a=2*-(3))]", "[f(a=-2**2)]", "[f(a=2.5 ~ 1)]",
    # names, nested calls, subscripts, and what BFCL does not read
    "[f(a=x)]", "[f(a=math.pi)]", "[f(a=g(b=1))]", "[f(a=g())]", "[f(a=g(1, 2))]", "[f(a=g(1, b=2))]",
    "[f(a={'k': g(b=1)})]", "[f(a={g(b=1): 2})]", "[f(a=x[0])]", "[f(a=x[1:2])]", "[f(a=d['k'])]",
    "[f(a=x.y[0])]", "[f(a=x[0][1])]", "[f(a=x[a:b, c])]", "[f(a=[1,2][0])]", "[f(a=lambda: 1)]", "[f(a={1, 2})]",
    "[f(a=f'{x}')]", "[f(a=[i for i in y])]", "[f(a=1 if b else 2)]", "[f(a=x == 1)]", "[f(a=x and y)]",
    "[f(a=" + "[" * 300 + "]" * 300 + ")]",
]
# BFCL's eval runs these; sparknb computes arithmetic on numbers only and refuses the rest
DIVERGENT = ["[f(a='ab'*2)]", "[f(a=len('ab')*2)]", "[f(a=[1]+[2])]"]


def _exact(value) -> object:
    """A value with every type spelled out, so that 1, 1.0 and True, or a list and a tuple, differ."""
    if isinstance(value, dict):
        return "dict", [(_exact(k), _exact(v)) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_exact(v) for v in value]
    return type(value).__name__, value


def _ours(text: str) -> list | None:
    try:
        return decode(text)
    except ValueError:
        return None


def _agree(text: str) -> bool:
    """Both decoders give the same calls, or both fail; True where they gave calls."""
    theirs, ours = decoded({"format": "prompt", "text": text}), _ours(text)
    assert _exact(ours) == _exact(theirs), (text, theirs, ours)
    return ours is not None


def test_crafted_answers_decode_as_bfcls_decoder_decodes_them():
    outcome = Counter(_agree(text) for text in CRAFTED)
    assert outcome[True] >= 60 and outcome[False] >= 30, outcome  # both kinds well covered


def test_sparknb_refuses_the_code_bfcls_eval_would_run():
    for text in DIVERGENT:
        assert decoded({"format": "prompt", "text": text}) is not None, text
        with pytest.raises(ValueError, match="runs no model-written code"):
            decode(text)


def test_an_arithmetic_bomb_is_refused():
    """BFCL's eval would compute the first two without end (this test would hang); sparknb refuses a power or a
    shift before computing it, and any integer too long for JSON text after."""
    for text in ("[f(a=10**10**10)]", "[f(a=1 << 10**9)]", "[f(a=9**99999)]",
                 "[f(a=" + " * ".join(["9" * 4000] * 2) + ")]"):
        with pytest.raises(ValueError, match="too large|bits"):
            decode(text)


def _written(calls: list) -> str:
    """Calls in BFCL's decoded form written out as a prompt-mode answer."""
    return "[" + ", ".join(f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
                           for call in calls for name, args in call.items()) + "]"


def _tupled(calls: list) -> list:
    """Every list argument written as a tuple (BFCL fails a tuple where the schema wants an array)."""
    return [{n: {k: tuple(v) if type(v) is list else v for k, v in a.items()} for n, a in c.items()} for c in calls]


def test_bfcls_ground_truth_written_out_decodes_and_grades_as_bfcl_does():
    """Every AST item's ground truth as a prompt-mode answer, as written and with its lists as tuples: the same calls
    from both decoders, and the same verdict from rule set `bfcl` on the record as stored (through JSON, where a
    tuple becomes a list) as from BFCL's decoder and checker on the text; the findings name the wrong type."""
    counts = Counter()
    for category in AST:
        answers = bfcl.answers(category)
        for entry in bfcl.entries(category):
            truth = replayed(answers[entry["id"]]["ground_truth"], entry["function"])
            for form, calls in (("as written", truth), ("tupled", _tupled(truth))):
                text = _written(calls)
                assert _agree(text) and _exact(decode(text)) == _exact(calls), text
                record = {"category": category, "functions": entry["function"], "format": "prompt",
                          "answer": answers[entry["id"]]["ground_truth"], "text": text, "calls": decode(text)}
                stored = json.loads(strict_json.dumps(record))
                ours, theirs = rule_sets.bfcl(stored), graded(record)
                said = theirs.get("error_type", "") if not theirs["valid"] else ""
                assert (ours.valid, ours.error_type) == (theirs["valid"], said), text
                found = problems(scores.graded([stored | {"correct": None}])[0])  # the findings see BFCL's calls
                assert theirs["valid"] or WRONG_TYPE in found, (text, found)
                counts[form, ours.valid] += 1
    assert counts["as written", False] == 0 and counts["as written", True] >= 1000, counts
    assert counts["tupled", False] >= 50, counts  # BFCL fails a tuple for an array; sparknb must fail it too


def test_the_multi_turn_ground_truth_decodes_as_bfcl_decodes_it():
    """Every turn of every multi_turn_base session, its calls written as one prompt-mode answer."""
    turns = _turns()
    for text in turns:
        assert _agree(text) and len(decode(text)) == len(prompted(text)), text
    assert len(turns) >= 700, len(turns)


def _turns() -> list[str]:
    return ["[" + ", ".join(t) + "]" for a in bfcl.answers("multi_turn_base").values() for t in a["ground_truth"] if t]


def test_a_sessions_calls_are_written_for_the_backends_as_bfcls_runner_writes_them():
    """BFCL's decode_execute on the same texts: the same call strings, or both fail (a session's step is then no
    call); through endpoint.tools.prompted, the path the agent study runs, wherever the arguments are JSON."""
    same = Counter()
    for text in CRAFTED + _turns():
        theirs = execution(text)
        try:
            ours = executed(decode(text))
        except ValueError:
            ours = None
        assert ours == theirs, (text, theirs, ours)
        same[ours is not None] += 1
        if ours is not None and all(_json(c) for c in decode(text)):
            assert [c.as_call() for c in prompted(text)] == theirs, text
    assert same[True] >= 780 and same[False] >= 40, same


def _json(call: dict) -> bool:
    try:
        json.dumps(call)
    except (TypeError, ValueError):
        return False
    return True


def test_what_bfcl_reads_but_json_cannot_hold_is_still_stored():
    """A tuple key and the None key of `**d` (both BFCL's): a record holding them is written as JSON text."""
    calls = decode("[f(a={(1, 2): 'x'}, **d)]")
    assert json.loads(strict_json.dumps({"calls": calls}, sort_keys=True)) == {
        "calls": [{"f": {"a": {"(1, 2)": "x"}, "None": "d"}}]}
    with pytest.raises(ValueError, match="not JSON"):
        prompted("[f(a=1j)]")
