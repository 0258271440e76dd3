"""What is wrong with a model's tool calls, by the offered schemas alone (the value check is the grader's), and
each problem counted and named with an example: one classifier for BFCL's single-turn answers (studies.bfcl) and
the agent study's steps (studies.agent), so that both name a problem alike.

Calls are in BFCL's decoded form, `{name: {parameter: value}}`; `offered` maps each offered function's name (as the
format spells it) to its parameters' schema. Types are BFCL's own (its checker's map).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...runs.report import Finding, info

TYPES = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
         "dict": dict, "any": str}

UNPARSED = "an answer that does not parse as calls"
NOT_OFFERED = "a call to a function not offered"
WRONG_TYPE = "an argument of the wrong type"
MISSING = "a required argument missing"
EXTRA = "more calls than wanted"
FEWER = "fewer calls than wanted"
NO_CALL = "no call where one was wanted"
UNWANTED = "a call where none was wanted"
PROBLEMS = (UNPARSED, NOT_OFFERED, WRONG_TYPE, MISSING, EXTRA, FEWER, NO_CALL, UNWANTED)


def schema_problems(calls: Sequence[dict], offered: Mapping[str, dict]) -> list[str]:
    """Each well-formed call checked against the function offered under its name: not offered, a required argument
    missing, an argument of the wrong type."""
    found = []
    for name, args in (next(iter(c.items())) for c in calls if isinstance(c, dict) and len(c) == 1):
        spec = offered.get(name)
        found += [NOT_OFFERED] if spec is None else argument_problems(args, spec)
    return found


def argument_problems(args: dict, spec: dict) -> list[str]:
    found = [MISSING] if any(p not in args for p in spec.get("required", [])) else []
    props = spec.get("properties", {})
    for p, v in args.items():
        kind = (props.get(p) or {}).get("type")
        wanted = {"float": (int, float), "tuple": (list, tuple)}.get(kind, TYPES.get(kind))  # as BFCL widens them
        if wanted is not None and not isinstance(v, wanted):
            found.append(WRONG_TYPE)
    return found


def named(seen: Mapping[str, Sequence[tuple[str, str]]], total: int, unit: str) -> list[Finding]:
    """Each problem counted over `total` answers (`unit`), with its first example: `seen` maps a problem to the
    (where, what was answered) of every answer that shows it."""
    return [info(f"{len(hits)} of {total} {unit}: {p}; e.g. {hits[0][0]}: {hits[0][1]}")
            for p, hits in seen.items() if hits]
