"""The rows DGX Spark owners share: llama-bench and llama-benchy's `pp2048`, `tg128 @ d4096`.

`ppN` is prompt processing of N tokens, `tgN` generation of N tokens, `@ dD` at a context depth of D
tokens already in the sequence; the figure is tokens per second, `mean ± std` over the repetitions.
sparknb's own tables stay the reference (medians, the server's view, the limit); these rows exist so
a number can be set beside one posted elsewhere, with the same words.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from ..runs.strict_json import dumps


@dataclass(frozen=True)
class Row:
    model: str
    test: str  # pp2048, tg128 @ d4096
    tokens_per_s: float
    std: float | None
    n: int
    how: str  # what the figure is, in sparknb's terms

    def as_dict(self) -> dict:
        return asdict(self)


def test_name(kind: str, tokens: int, depth: int = 0) -> str:
    return f"{kind}{tokens}" + (f" @ d{depth}" if depth else "")


def generation_rows(model: str, speeds: pd.DataFrame, output_tokens: int) -> list[Row]:
    """From per-request decode tok/s with a prompt_length column: tg at the prompt's depth."""
    rows = []
    for depth, g in speeds.groupby("prompt_length"):
        v = g["decode_tok_s"].dropna()
        if len(v):
            rows.append(Row(model, test_name("tg", output_tokens, int(depth)), float(v.mean()),
                            float(v.std(ddof=1)) if len(v) > 1 else None, len(v),
                            "decode tokens after the first over first-to-last token time, per request"))
    return rows


def processing_rows(model: str, ttfts: pd.DataFrame) -> list[Row]:
    """From per-request TTFT with a prompt_length column: pp of the whole prompt from an empty cache."""
    rows = []
    for n, g in ttfts.groupby("prompt_length"):
        v = (int(n) / g["ttft_s"].dropna())
        if len(v):
            rows.append(Row(model, test_name("pp", int(n)), float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else None,
                            len(v), "prompt tokens over the client's time to first token (one output token)"))
    return rows


def markdown(rows: list[Row]) -> str:
    lines = ["| model | test | t/s |", "| --- | --- | ---: |"]
    for r in rows:
        spread = f" ± {r.std:.2f}" if r.std is not None else ""
        lines.append(f"| {r.model} | {r.test} | {r.tokens_per_s:.2f}{spread} |")
    return "\n".join(lines)


def to_json(rows: list[Row]) -> str:
    return dumps([r.as_dict() for r in rows], indent=2)


def write(run, rows: list[Row]) -> str:
    """Into the run folder as benchy.md and benchy.json; returns the markdown for the notebook."""
    run.write_text("benchy.md", markdown(rows) + "\n")
    run.write_text("benchy.json", to_json(rows) + "\n")
    return markdown(rows)
