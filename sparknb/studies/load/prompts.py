"""What each request sends: exact-length token prompts, a prompt set, or MMLU-Pro questions.

A load test that repeats a prompt measures the prefix cache, not the model, so every prompt is unique
from its first tokens. Exact-length prompts are one prompt made by the server's own tokenizer whose
opening tokens are replaced by random ones, fresh in every run (a rerun on a warm server must not hit
its cache either), so the length stays exact; a text gets a random opening word. Every answer is
`output_tokens` long (ignore_eos), so each level does the same work per request.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

from ...endpoint import stream
from ...endpoint.client import Endpoint
from ...endpoint.prompts import PromptMaker
from ...runs import params
from .. import registry

OPENING = 8  # random tokens at the start of an exact-length prompt: 4096 ** 8 ways, no two alike
OPENING_HEX_BYTES = 4  # a text's random opening word: 8 hex digits and ": ", 2 ** 32 ways
# Tokens that word may add at most: one per character, plus one where the space splits the text's first word.
OPENING_MARGIN = 2 * OPENING_HEX_BYTES + len(": ") + 1


@dataclass(frozen=True)
class Prompts:
    """The prompts of a run: `call(i)` makes the i-th request, unique, in a seeded order."""

    kind: str  # what a reader is told: "exact", "prompt set NAME", "MMLU-Pro (SOURCE)"
    tokens: tuple[int, ...]  # exact: the prompt's token ids; otherwise empty
    texts: tuple[str, ...]  # a prompt set's or MMLU-Pro's texts, sent as chats; otherwise empty
    lengths: tuple[int, ...]  # tokens of each prompt, by the server's own count (chat template included)
    specials: int  # tokens the tokenizer puts first on its own (a BOS), kept in place
    max_tokens: int
    temperature: float
    seed: int

    @property
    def longest(self) -> int:
        return max(self.lengths) + (OPENING_MARGIN if self.texts else 0)

    def call(self, index: int) -> stream.Call:
        rng = secrets.SystemRandom()
        if self.tokens:
            pool = self.tokens[self.specials + OPENING:] or self.tokens
            ids = list(self.tokens)
            ids[self.specials: self.specials + OPENING] = [rng.choice(pool) for _ in range(OPENING)]
            return lambda ep: ep.complete(ids, max_tokens=self.max_tokens, temperature=self.temperature,
                                          ignore_eos=True)
        order = random.Random(self.seed + index // len(self.texts)).sample(range(len(self.texts)), len(self.texts))
        text = f"{secrets.token_hex(OPENING_HEX_BYTES)}: {self.texts[order[index % len(self.texts)]]}"
        return lambda ep: ep.chat([{"role": "user", "content": text}], max_tokens=self.max_tokens,
                                  temperature=self.temperature, ignore_eos=True)


def make_prompts(plan, endpoint: Endpoint) -> Prompts:
    """The prompts of a load plan (its prompts, prompt_tokens, output_tokens, temperature and seed), measured by the
    server's tokenizer: the one reading of prompt files and questions. (The plan calls this: no import back.)"""
    common = {"max_tokens": plan.output_tokens, "temperature": plan.temperature, "seed": plan.seed}
    if not plan.prompts:
        tokens = PromptMaker(endpoint.tokenize, plan.seed).make(plan.prompt_tokens)
        specials = len(endpoint.tokenize("", True))
        return Prompts("exact", tuple(tokens), (), (len(tokens),), specials, **common)
    name, colon, source = plan.prompts.partition(":")
    lender = registry.find(name) if colon else None  # a study that lends its questions: mmlu_pro:hub
    if lender is not None and lender.prompts is not None:
        texts, kind = lender.prompts(source, plan.seed)
    else:
        prompt_set = params.load_prompts(plan.prompts)
        texts, kind = list(prompt_set.prompts.values()), f"prompt set {prompt_set.name}"
    lengths = [len(endpoint.tokenize_chat([{"role": "user", "content": t}])) for t in texts]
    return Prompts(kind, (), tuple(texts), tuple(lengths), 0, **common)
