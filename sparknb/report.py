"""The HTML report: the executed notebook without its code, readable offline.

Tables and plots are static (PNG embedded in the page), so nothing needs the network to be seen.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbconvert import HTMLExporter


def write_html(notebook: Path, target: Path) -> Path:
    """Render once; an existing report is never replaced."""
    body, _ = HTMLExporter(exclude_input=True, exclude_input_prompt=True,
                           exclude_output_prompt=True).from_notebook_node(nbformat.read(notebook, as_version=4))
    with open(target, "x", encoding="utf-8") as f:
        f.write(body)
    return target
