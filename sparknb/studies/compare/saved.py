"""What a campaign's sequentially decided comparisons saved, said once the campaign is sealed (by the command
line, so that the campaign, which the comparison reads, never reads the comparison)."""

from __future__ import annotations

from pathlib import Path

from ...verdicts.sequential import told
from .headline import headline
from .plan import Plan


def saved(campaign_id: str, outputs: str | Path = "") -> list[str]:
    """What each sequentially decided comparison of the campaign saved: questions, and minutes of the server."""
    runs = Plan.build(campaign=campaign_id, outputs=str(outputs)).compared()
    rows = headline(runs).rows
    lines = [f"{r.study}, {s} against {runs.base}: {told(seq)}" for r in rows for s, seq in r.sequences.items()]
    return lines + (["swaps: none saved here, each model is started once either way"] if lines else [])
