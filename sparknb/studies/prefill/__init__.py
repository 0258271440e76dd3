"""Prefill scaling: time to first token against prompt length, cache-proof, and between models.

One short prompt measures mostly the fixed cost of a request, which no architecture changes, so
two models look alike; only long prompts show what prefill really costs. So the sweep spans short
to long (measure), a fit splits the fixed overhead from the per-token cost (fit), and runs of
other models are set beside this one from their sealed records at the same lengths (compare).
"""

from ...errors import CacheHitError, FitError
from .compare import Comparison, compare, ratio_table
from .findings import findings, story, summary
from .fit import LEVEL, Estimate, Fit, fit
from .headline import headline_rows
from .measure import CacheCount, check_no_cache_hits, repeating, sweep
from .plan import DEFAULT_LENGTHS, NOTEBOOK, Plan
from ..registry import Contract
from .plots import plot, plot_comparison
from .tables import frame, measured_lengths, share, summarize

STUDY = Contract(NOTEBOOK, Plan, sweep, summarize, findings, headline_rows, order=20)

__all__ = [
    "STUDY",
    "headline_rows",
    "DEFAULT_LENGTHS", "LEVEL", "NOTEBOOK", "CacheCount", "CacheHitError", "Comparison", "Estimate", "Fit",
    "FitError", "Plan", "check_no_cache_hits", "compare", "findings", "fit", "frame",
    "measured_lengths", "plot", "plot_comparison", "ratio_table", "repeating", "share", "story", "summarize", "summary",
    "sweep",
]
