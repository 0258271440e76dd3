"""Two ways to ask: the prompt as given, for the model to continue (as the original benchmark does), or an
instruction plus the prompt in a chat, for a model that answers with a fenced code block."""

from __future__ import annotations

from .data import Problem

STYLES = ("chat", "completion")
INSTRUCTION = ("Complete the following Python function. Reply with the complete function, its signature included, "
               "in one ```python code block.")


def chat(problem: Problem) -> list[dict]:
    """The chat request's messages: the instruction and the prompt as one user turn."""
    return [{"role": "user", "content": f"{INSTRUCTION}\n\n```python\n{problem.prompt.rstrip()}\n```"}]


def completion(problem: Problem) -> str:
    """The prompt as the benchmark gives it: the model's text continues it."""
    return problem.prompt
