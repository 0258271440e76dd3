"""Swap's rows of the comparison: what a client waits for each model to be served after a swap, with the
compile cache cold and warm. Usually single measurements: then they are shown, and too few to decide."""

from __future__ import annotations

import pandas as pd

from ...verdicts.verdict import Row, Runs, caveats, median_row
from .tables import frame


def headline_rows(runs: Runs) -> list[Row]:
    swaps = list(runs.by_study.get("swap", {}).values())
    frames = [(r, frame(r.records)) for r in swaps]
    frames = [(r, f[f["status"] == "ok"]) for r, f in frames if len(f)]
    if not frames:
        return []
    waits = pd.concat([f.assign(run=r.id) for r, f in frames])
    doubts = tuple(c for r, _ in frames for c in caveats(r))
    rows = []
    for cache in ("cold", "warm"):
        chosen = waits[waits["compile cache"].astype(str).str.startswith(cache)]
        samples = {s: chosen[chosen["to"] == s]["client wait s"].dropna().tolist() for s in runs.subjects}
        if not any(samples.values()):
            continue
        rows.append(median_row("swap", f"client wait s, compile cache {cache}", samples, runs.base, better="lower",
                               caveats={s: doubts for s in samples},
                               note="single measurements unless the swap run repeated them"))
    return rows
