"""Decode sweep: single-stream decode speed against context length, set against the bandwidth limit.

Each prompt is unique and exactly as long as asked; each answer has a fixed length (max_tokens with
ignore_eos), so every repetition does the same work. Warmup requests are recorded but left out. Where
the server times each request itself, an answer that reached the client in a burst is counted at the
server's time (tables), so a burst is never read as speed.
"""

from ...runs.study import BURST, drifts
from ..registry import Contract
from .compare import compare
from .engine_alone import measure as engine_alone
from .findings import findings
from .headline import headline_rows, speeds
from .measure import reusable, sweep
from .plan import Plan
from .plots import plot
from .tables import SPREAD, frame, share, summarize

STUDY = Contract("decode", Plan, sweep, summarize, findings, headline_rows, order=10, speeds=speeds)

__all__ = ["BURST", "SPREAD", "STUDY", "Plan", "compare", "drifts", "engine_alone", "findings", "frame",
           "headline_rows", "plot", "reusable", "share", "summarize", "sweep"]
