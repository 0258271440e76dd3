"""The reference harness's chain-of-thought prompt, in one of two formats (the plan's `prompt_format`):

- `sparknb`: the instruction, the worked examples and the question as one user message, the "N/A" options that
  pad a question to ten left out;
- `lm-eval`: lm-evaluation-harness's `mmlu_pro` under `--apply_chat_template` (few-shot as multi-turn, its default
  there), byte for byte: the instruction as the system turn, each worked example a user turn (its question) and an
  assistant turn (its reasoning), every option listed, "N/A" included.

The two ask differently (measured on the real test-bed model, 70 questions: the same letter extracted on 24), so the
`lm-eval` rule set's score is what lm-eval itself would print only on answers asked in the `lm-eval` format.
"""

from __future__ import annotations

from collections.abc import Sequence

from .data import LETTERS, Question, draw, load

HEADER = ('The following are multiple choice questions (with answers) about {subject}. Think step by step and '
          'then finish your answer with "the answer is (X)" where X is the correct letter choice.')
STEP = "Let's think step by step."
FORMATS = ("sparknb", "lm-eval")


def _block(q: Question, options: Sequence[str], worked: bool = False) -> str:
    text = f"Question:\n{q.question}\nOptions:\n" + "".join(f"{L}. {o}\n" for L, o in zip(LETTERS, options))
    if worked:
        return text + q.cot.replace(f"A: {STEP}", f"Answer: {STEP}") + "\n\n"
    return text + f"Answer: {STEP}"


def prompt(q: Question, examples: Sequence[Question] = ()) -> str:
    """sparknb's text: the instruction, the worked examples, then the question, ending where the model reasons."""
    return (HEADER.format(subject=q.category) + "\n" + "".join(_block(e, e.options, True) for e in examples)
            + _block(q, q.options))


def lm_eval(q: Question, examples: Sequence[Question] = ()) -> list[dict]:
    """lm-eval's turns: its task's description as the system turn, then each example's question and reasoning (its
    cot_content without the leading "A: Let's think step by step. "), then the question; all options listed."""
    turns = [{"role": "system", "content": HEADER.format(subject=q.category) + "\n"}]
    for e in examples:
        turns += [{"role": "user", "content": _block(e, e.listed or e.options)},
                  {"role": "assistant", "content": e.cot.replace(f"A: {STEP} ", "")}]
    return turns + [{"role": "user", "content": _block(q, q.listed or q.options)}]


def messages(q: Question, examples: Sequence[Question] = (), form: str = "sparknb") -> list[dict]:
    """The chat request's messages in the format named: lm-eval's turns, or sparknb's one user turn."""
    if form not in FORMATS:
        raise ValueError(f"prompt format {form!r}: use one of {', '.join(FORMATS)}")
    return lm_eval(q, examples) if form == "lm-eval" else [{"role": "user", "content": prompt(q, examples)}]


def said(form: str) -> str:
    """Which prompt made the answers, and what that means for the lm-eval rule set's score."""
    if form == "lm-eval":
        return ("The questions were asked in lm-evaluation-harness's own format (its mmlu_pro task under "
                "--apply_chat_template: instruction as the system turn, each worked example its own turns, every "
                "option listed), so the lm-eval rule set's score is what lm-eval would print for these answers.")
    return ("The questions were asked in sparknb's own format (one user turn, the \"N/A\" options left out), not "
            "lm-evaluation-harness's: the lm-eval rule set's score is its rules applied to these answers, not what "
            "lm-eval would print. Set prompt_format: lm-eval to ask exactly as lm-eval asks.")


def lent(source: str, seed: int, per_category: int = 20) -> tuple[list[str], str]:
    """MMLU-Pro's questions as another study's prompts (a load test's `prompts: mmlu_pro:SOURCE`): an even seeded
    draw, each in the reference 5-shot prompt, and what they are."""
    dataset = load(source)
    texts = [prompt(q, dataset.examples(q.category, 5)) for q in draw(dataset, per_category, seed)]
    return texts, f"MMLU-Pro ({source}, {len(texts)} questions, 5-shot)"
