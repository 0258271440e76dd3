"""Load sweep: throughput against concurrency (or request rate), measured by a client that keeps up.

One user at a time shows what a model does alone; a server earns its keep with many. Each level keeps
a number of requests in flight (or sends them at a seeded Poisson rate) for a count or a duration,
after a warmup (measure), on the asyncio client of sparknb.endpoint.stream. Per level: aggregate tok/s and
goodput over two named windows (steady, without the warmup wave, and all requests), each checked
against the server's own count of generated tokens (windows); per-user tok/s; TTFT, TPOT, ITL and E2E
as vllm bench serve defines them, means and chosen percentiles; and the server's own gauges over
time (tables). Every level checks the client itself: its loop's CPU share and lag, and its timings
against the server's own for the same requests; a level whose client could not keep up is marked,
never reported as the server's limit (findings). Earlier runs of other models are set beside this
one: per-user against aggregate tok/s, and the batch ratio against the single-stream one (compare).
"""

from .compare import Comparison, compare
from .findings import findings, summary
from .headline import headline_rows
from .measure import arrivals, request_record, reusable, sweep
from .plan import DEFAULT_CONCURRENCY, NOTEBOOK, Level, Plan, kv_capacity
from ..registry import Contract
from .plots import plot_levels, plot_tradeoff
from .prompts import Prompts, make_prompts
from .tables import CHECKS, PERCENTILES, SERVER, knee, level_row, ratios, saturation, summarize, throughput_columns

STUDY = Contract(NOTEBOOK, Plan, sweep, summarize, findings, headline_rows, order=40)

__all__ = [
    "STUDY",
    "headline_rows",
    "CHECKS", "PERCENTILES", "SERVER", "DEFAULT_CONCURRENCY", "NOTEBOOK", "Comparison", "Level", "Plan", "Prompts",
    "arrivals", "compare", "findings",
    "knee", "kv_capacity", "level_row", "make_prompts", "plot_levels", "plot_tradeoff", "ratios", "request_record",
    "reusable",
    "saturation", "summarize", "summary", "sweep", "throughput_columns",
]
