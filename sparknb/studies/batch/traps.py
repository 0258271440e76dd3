"""The traps of cut answers: what the raw answers say about whether a score can be believed.

A stop string fires inside a reasoning model's own thinking (the server applies stop strings to the
reasoning too), and an answer cut at max_tokens ends before its last line: either way a good model
scores as a bad one. Every raw answer is read for such cuts; above `share_limit` of them, the score is
marked SUSPECT, with raw examples of where the answers ended. A study says what its answers lack when
they are cut (`LACKS`), and adds what only it knows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .loops import period

CUT_BY_STOP = "cut by a stop string"
HIT_MAX_TOKENS = "hit max_tokens"
LOOPED = "looped until max_tokens"  # cut at max_tokens while repeating itself: more tokens would not finish it


@dataclass(frozen=True)
class Traps:
    """The verdict on the raw answers; a study's subclass words it for its own answers."""

    n: int
    counts: dict[str, int]
    share_limit: float
    stop: tuple[str, ...]
    examples: list[dict]

    NOTHING = "No answer was received, so nothing can be judged."
    SCORE = "scores below are"  # what the mark falls on
    LACKS = "lack the answer line"  # what a cut answer lacks, in the sound verdict
    ENDS_BEFORE = "the answer line"  # where an answer cut at max_tokens ends
    STOP_CUTS = "too, which cuts answers before their last line"  # what a stop string inside thinking does

    @property
    def suspect(self) -> int:
        return sum(self.counts.values())

    @property
    def tripped(self) -> bool:
        return self.n > 0 and self.suspect > self.share_limit * self.n

    @property
    def level(self) -> str:
        return "warning" if self.tripped else "info"

    def headline(self) -> str:
        """The verdict in words; `level` says whether it is a warning."""
        if not self.n:
            return self.NOTHING
        parts = ", ".join(f"{k}: {v}" for k, v in self.counts.items() if v)
        limit = f"{100 * self.share_limit:.0f}%"
        if self.tripped:
            return (f"{self.suspect} of {self.n} answers ({100 * self.suspect / self.n:.0f}%) cannot be taken at face "
                    f"value ({parts}); above {limit}, the {self.SCORE} marked SUSPECT." + self.more() + self.why()
                    + self.coda())
        text = (f"The raw answers look sound: {self.suspect} of {self.n} are cut or {self.LACKS}"
                + (f" ({parts})" if parts else "") + f", within the {limit} allowed." + self.more())
        if self.stop:
            text += f" Stop strings {list(self.stop)} are set: they also apply inside reasoning."
        return text + self.coda()

    def why(self) -> str:
        """The likeliest cause of the cuts, where the verdict is SUSPECT."""
        if self.counts.get(CUT_BY_STOP):
            return (f" Stop strings {list(self.stop)} were set: vLLM applies them inside a reasoning model's thinking "
                    f"{self.STOP_CUTS}. Run with stop=[] to check.")
        text = ""
        if self.counts.get(LOOPED):
            text += (f" {self.counts[LOOPED]} answer(s) cut at max_tokens were looping, repeating their own text to the "
                     "end (a loop, not a short answer): raising max_tokens will not finish them.")
        if self.counts.get(HIT_MAX_TOKENS):
            text += self.cut_advice()
        return text

    def cut_advice(self) -> str:
        """What to do about answers cut at max_tokens."""
        return f" Answers cut at max_tokens end before {self.ENDS_BEFORE}: raise max_tokens if the model allows."

    def more(self) -> str:
        """What the study counts beside the cuts, said after the count."""
        return ""

    def coda(self) -> str:
        """What the study says last."""
        return ""

    def title(self, example: dict) -> str:
        """An example's heading: which question it was."""
        return str(example.get("question_id"))

    def as_dict(self) -> dict:
        return asdict(self) | {"suspect": self.suspect, "tripped": self.tripped, "headline": self.headline()}


@dataclass
class Count:
    """The cut answers counted by kind, with the first few as raw examples."""

    counts: dict[str, int]
    n_examples: int = 3
    n: int = 0
    examples: list[dict] = field(default_factory=list)

    def add(self, record: dict, flag: str | None, **named) -> None:
        """One finished answer, `flag` saying why it cannot be taken at face value (None: it can); an answer cut at
        max_tokens that repeats itself to the end counts as LOOPED where the study counts loops."""
        self.n += 1
        loop = period(record.get("text") or record.get("reasoning")) if flag == HIT_MAX_TOKENS else None
        if loop and LOOPED in self.counts:
            flag, named = LOOPED, {**named, "loop_period_chars": loop}
        if flag not in self.counts:
            return
        self.counts[flag] += 1
        if len(self.examples) < self.n_examples:
            self.examples.append({**named, "why": flag, "finish_reason": record.get("finish_reason"),
                                  "completion_tokens": record.get("completion_tokens"),
                                  "reasoning_end": _tail(record.get("reasoning", "")),
                                  "content_end": _tail(record.get("text", ""))})


def _tail(text: str, n: int = 240) -> str:
    text = text or ""
    return text if len(text) <= n else "..." + text[-n:]


def verdict_markdown(t: Traps) -> str:
    """The verdict on the raw answers, shown at the top of the notebook and its report."""
    if t.tripped:
        counts = " | ".join(f"{k}: **{v}**" for k, v in t.counts.items())
        return f"### ⚠ WARNING: {t.headline()}\n\nOf {t.n} answers: {counts}."
    return f"**Raw answers checked.** {t.headline()}"


def examples_markdown(t: Traps) -> str:
    """The raw examples, as a reader should see them: where each answer ended."""
    out = []
    for e in t.examples:
        out.append(f"**{t.title(e)}**: {e['why']}, finish_reason `{e['finish_reason']}`, {e['completion_tokens']} tokens")
        for part in ("reasoning_end", "content_end"):
            body = e[part].replace("```", "'''") if e[part] else "(empty)"
            out.append(f"{part.replace('_', ' ')}:\n```\n{body}\n```")
    return "\n\n".join(out)
