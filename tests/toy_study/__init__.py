"""A toy study that lives only in the test suite: time to first token of a short chat, and all a study declares
to be run by `sparknb run`, by a campaign, and set side by side in a comparison (CONTRIBUTING.md, "Adding a study")."""

from pathlib import Path

from sparknb.studies.registry import Contract

from .measure import findings, headline_rows, measure, table
from .plan import Plan

STUDY = Contract("toy", Plan, measure, table, findings, headline_rows, notebook=Path(__file__).with_name("toy.ipynb"))
