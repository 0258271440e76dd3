"""An answer that loops: cut at max_tokens while repeating itself, so a larger max_tokens would not finish it.

On the real SmolLM2-135M, 27 of 33 MMLU-Pro answers cut at max_tokens already held their answer line, one of
them 66 times, and all 25 cut HumanEval answers held code that repeated: "raise max_tokens" was the wrong
advice. A loop is told by its tail: the last 3p characters have period p (exact repetition, as greedy
decoding repeats), for some p from MIN_PERIOD to MAX_PERIOD characters.
"""

from __future__ import annotations

MIN_PERIOD, MAX_PERIOD, REPEATS = 4, 600, 3


def period(text: str | None) -> int | None:
    """The shortest period (in characters) the answer's end repeats with at least REPEATS times, or None."""
    tail = (text or "")[-REPEATS * MAX_PERIOD:]
    for p in range(MIN_PERIOD, min(MAX_PERIOD, len(tail) // REPEATS) + 1):
        if tail[-REPEATS * p:-p] == tail[-(REPEATS - 1) * p:]:
            return p
    return None


def loops(text: str | None) -> bool:
    return period(text) is not None
