"""Swap cost: what a client waits when the box switches models, and which start-up stage it waits for.

A box that holds one large model at a time switches models many times a day. For each transition
this measures the eviction of the resident model, the start of the next one until its first
answer, and the sum, which is what a client waits; the server's own log says where the start's
time went (see serving.startup_log). Whether the compile cache was cold or warm is recorded per
start, since it changes the answer. Every process started here is stopped, whatever fails, and
each finished step is on disk before the next one begins.
"""

from .findings import SINGLE_CAVEAT, findings, summary
from .headline import headline_rows
from .measure import run
from .memory import cache_state, clear_cache, memory
from .plan import Plan
from ..registry import Contract
from .plots import plot
from .tables import EMPTY, EVICT, FIRST_ANSWER, caption, fingerprint_table, frame, memory_table, reported, stage_names, stages

STUDY = Contract("swap", Plan, run, stages, findings, headline_rows, order=70, across_models=True)

__all__ = [
    "STUDY",
    "headline_rows","EMPTY", "EVICT", "FIRST_ANSWER", "Plan", "SINGLE_CAVEAT", "caption", "stage_names", "cache_state", "clear_cache", "findings",
           "fingerprint_table", "frame", "memory", "memory_table", "plot", "reported", "run", "stages", "summary"]
