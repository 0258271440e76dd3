"""The batch's figures of this run beside the compared run's, one column per run."""

from __future__ import annotations

import pandas as pd

from ...runs.run import PastRun
from .ask import Batch


def batch_table(batch: Batch, other: PastRun | None = None, label: str = "this run") -> pd.DataFrame:
    """One column per run, so counts stay whole numbers beside the rates."""
    runs = {label: _batch_row(batch.as_dict())}
    if other is not None and other.summary and other.summary.get("batch"):
        runs[f"{other.label} ({other.id})"] = _batch_row(other.summary["batch"])
    return pd.DataFrame(runs, dtype=object)


def _batch_row(b: dict) -> dict:
    share = b.get("client_cpu_share")
    outside = b.get("outside_server_share")
    return {"asked": b["asked"], "reused": b["reused"], "concurrency": b["concurrency"],
            "wall time min": b["wall_s"] / 60, "generated tokens": b["completion_tokens"],
            "batch tok/s": b.get("tokens_per_s"),
            "longest prompt tokens": b.get("longest_prompt_tokens"),
            "client CPU % of wall": None if share is None else 100 * share,
            "request time outside the server %": None if outside is None else 100 * outside}
