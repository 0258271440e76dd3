"""The comparison: sealed runs of several models set side by side, and what they say about which to run.

Nothing here measures or re-implements a study: every figure comes from the runs' sealed records,
through each study's own code, with a 95% interval on every ratio.
"""

from .browser import browser, in_jupyter, show
from .fingerprints import Warned, fingerprint_table, fingerprint_view, run_warnings, warnings
from .headline import Headline, headline
from .plan import Plan
from ..registry import Contract
from .plots import plot, sequence_plots
from .record import finish, open_run
from .saved import saved
from .story import story

# The comparison reads runs and measures nothing: no measure, no rows of its own.
STUDY = Contract("compare", Plan, title="The comparison", order=90)

__all__ = ["STUDY", "Headline", "Plan", "browser", "finish", "fingerprint_table", "fingerprint_view", "headline", "in_jupyter",
           "open_run", "plot", "run_warnings", "saved", "sequence_plots", "show", "story", "warnings", "Warned"]
