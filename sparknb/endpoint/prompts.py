"""Prompts of exactly N tokens, unique from their first token.

A prompt that shares its first block of tokens with an earlier one is served from the prefix cache,
and prefill then looks many times faster than it is. Every prompt here opens with its own nonce, and
its length is counted by the server's own tokenizer, so N means N.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable

from ..errors import EndpointError

MAX_TRIES = 4  # filler texts of n, 2n, 4n and 8n words: any tokenizer of words gives n tokens by then

WORDS = (
    "the of and to in is was for on that with as by at from it an be this which or are were has had "
    "not but their its one all been more can than other some time would into also new two after first "
    "over most only these then made such where many through may before between because each under "
    "during being those both without while until memory model token speed board engine field "
    "river market number system report water light house table paper music story garden window stone "
    "winter summer morning evening question answer result reason measure figure letter signal program "
    "simple careful quiet bright heavy narrow gentle rapid steady common single latest famous hidden"
).split()


def filler(n_words: int, seed: int = 0) -> str:
    """Plain random words: the filler most speed benchmarks use, and all a length sweep needs."""
    rng = random.Random(seed)
    sentences, words = [], 0
    while words < n_words:
        length = rng.randint(6, 16)
        sentence = " ".join(rng.choice(WORDS) for _ in range(length))
        sentences.append(sentence.capitalize() + ".")
        words += length
    return " ".join(sentences)


class PromptMaker:
    """Makes exact-length, never-repeated token prompts through a server's tokenizer."""

    def __init__(self, tokenize: Callable[[str, bool], list[int]], seed: int = 0):
        self._tokenize = tokenize
        self._seed = seed
        self._filler: list[int] = []

    def _filler_tokens(self, n: int, prompt: int) -> list[int]:
        """At least n tokens of filler. Bounded: a tokenizer that gives far fewer tokens than words (none, or a
        cut-off count) is an error that says so, never a loop over ever longer texts."""
        words = max(64, n)
        for _ in range(MAX_TRIES):
            if len(self._filler) >= n:
                return self._filler
            self._filler = self._tokenize(" " + filler(words, self._seed), False)
            words *= 2
        if len(self._filler) >= n:
            return self._filler
        raise EndpointError(
            f"Cannot make a prompt of {prompt:,} tokens: {words // 2:,} words of filler came back as only "
            f"{len(self._filler):,} tokens from the tokenizer. It is not counting this text (a /tokenize that "
            "reads another body, or one that cuts its answer short): name the server's engine, or a local "
            "`tokenizer:`, in the model's params.")

    def make(self, n_tokens: int) -> list[int]:
        """N token ids: a random opening, well inside the first cache block, then filler."""
        if n_tokens < 1:
            raise ValueError(f"a prompt needs at least one token, not {n_tokens}")
        head = self._tokenize(f"{secrets.token_hex(6)}:", True)
        if len(head) >= n_tokens:
            raise ValueError(f"{n_tokens} tokens is too short to hold a unique opening of {len(head)} tokens; "
                             f"use {len(head) + 1} or more")
        return head + self._filler_tokens(n_tokens - len(head), n_tokens)[: n_tokens - len(head)]
