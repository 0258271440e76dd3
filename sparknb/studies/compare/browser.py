"""A run browser for JupyterLab: pick sealed runs by study, model and date, and the comparison redraws.

Widgets live only in a live kernel; under papermill (`interactive` false) nothing here is drawn, so a
headless run and its HTML report hold plain tables and static images.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ...runs import manifest, signing
from ...runs.run import MANIFEST, outputs_dir
from .. import registry
from .plan import Plan


def in_jupyter() -> bool:
    """True in a kernel that a Jupyter server started (it names the session); papermill's kernels have no session."""
    return "JPY_SESSION_NAME" in os.environ


def sealed_runs(outputs: str | Path = "") -> list[tuple[str, str]]:
    """(label, run id) of every sealed run of a study that measures (studies.registry) under outputs/, newest
    first: a campaign's record or an earlier comparison is no run to compare. A run no reader takes says so
    in its label, in the verdict's words (picked, the comparison refuses it with the command that trusts it)."""
    base = Path(outputs or outputs_dir())
    found = [(f"{study}: {m.parent.name}{_doubt(m.parent)}", m.parent.name) for study in registry.known()
             for m in (base / study).glob(f"*/{MANIFEST}")]
    return sorted(found, key=lambda x: x[1], reverse=True)


def _doubt(folder: Path) -> str:
    seal = manifest.check(folder)
    if not seal.trusted:
        return f" (REFUSED: {seal.verdict})"
    return "" if seal.signature.public == signing.own_key() else f" (signed by {seal.signature.signer})"


def browser(show: Callable[[Plan], None], outputs: str | Path = "", selected: tuple[str, ...] = ()):
    """A multiple-choice list of sealed runs and a Compare button; the button calls `show(plan)`."""
    import ipywidgets as widgets
    from IPython.display import display

    options = sealed_runs(outputs)
    picker = widgets.SelectMultiple(options=options, value=[v for _, v in options if v in selected],
                                    rows=min(12, max(4, len(options))), description="runs",
                                    layout=widgets.Layout(width="90%"))
    button = widgets.Button(description="Compare", button_style="primary")
    out = widgets.Output()

    def compare(_=None) -> None:
        out.clear_output()
        with out:
            try:
                picked = list(picker.value)  # the list's order is newest first: keep the notebook's base model
                runs = [v for v in selected if v in picked] + [v for v in picked if v not in selected]
                show(Plan.build(runs=runs, outputs=str(outputs or "")))
            except Exception as e:  # shown to the reader, who picks again
                print(f"Cannot compare these runs: {e}")

    button.on_click(compare)
    box = widgets.VBox([picker, button, out])
    display(box)
    return box


def show(plan: Plan) -> None:
    """What the Compare button draws: the warnings, the headline table, the chart and the paragraph."""
    from IPython.display import Markdown, display

    from ...runs.report import markdown, picture
    from .fingerprints import run_warnings, warnings
    from .headline import headline
    from .plots import plot
    from .story import story

    headlines = [(title, headline(runs)) for title, runs in plan.comparisons()]
    for title, h in headlines:
        display(Markdown((f"### {title}\n\n" if title else "") + story(h, plan.missing())))
    display(Markdown(markdown(warnings(plan.past, plan.mode())) or "Same box, driver and server version."))
    found = run_warnings(plan.past)
    display(Markdown(found.markdown()))
    for title, h in headlines:
        display(h.table(found.cite).style.hide(axis="index"))
        display(picture(plot(h, title)))  # a Figure outside pyplot: see plot
