"""The reference harness's chain-of-thought prompt, sent as one user message."""

from __future__ import annotations

from collections.abc import Sequence

from .data import LETTERS, Question

HEADER = ('The following are multiple choice questions (with answers) about {subject}. Think step by step and '
          'then finish your answer with "the answer is (X)" where X is the correct letter choice.')
STEP = "Let's think step by step."


def _block(q: Question, worked: bool) -> str:
    text = f"Question:\n{q.question}\nOptions:\n" + "".join(f"{L}. {o}\n" for L, o in zip(LETTERS, q.options))
    if worked:
        return text + q.cot.replace(f"A: {STEP}", f"Answer: {STEP}") + "\n\n"
    return text + f"Answer: {STEP}"


def prompt(q: Question, examples: Sequence[Question] = ()) -> str:
    """The instruction, the worked examples, then the question, ending where the model starts reasoning."""
    return HEADER.format(subject=q.category) + "\n" + "".join(_block(e, True) for e in examples) + _block(q, False)


def messages(text: str) -> list[dict]:
    """The chat request's messages: the whole prompt as one user turn, as the reference sends it."""
    return [{"role": "user", "content": text}]
