"""What a study tells its reader: findings, the shared number formats, and the HTML report.

Tables and plots are static (PNG embedded in the page), so nothing needs the network to be seen.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

# A report shows a table's cells whole: a fingerprint row or a guard note cut at 50 characters hides the point.
pd.set_option("display.max_colwidth", None)


def _plain_markdown() -> None:
    """In a kernel, a Markdown display's plain text is its markdown: `sparknb run` prints each output's plain text,
    and the findings came out as `<IPython.core.display.Markdown object>`. A notebook's front end and the HTML
    report show the markdown itself, as before."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/plain"].for_type(Markdown, lambda md, p, cycle: p.text(md.data))


_plain_markdown()

Level = Literal["info", "warning", "marked", "suspect", "failed"]


@dataclass(frozen=True)
class Finding:
    """One sentence a study concludes; anything but `info` is a reason to doubt a number, said loud."""

    level: Level
    text: str
    # What the finding is about, where it is not the whole run: the prompt lengths, kinds or levels it names.
    # A headline row at one of these (or any row, where this is empty) carries the finding as its caveat.
    about: tuple = ()

    def __str__(self) -> str:
        return self.text if self.level == "info" else f"{self.level.upper()}: {self.text}"

    def as_dict(self) -> dict:
        return asdict(self) | {"about": list(self.about)}


def info(text: str, about: tuple = ()) -> Finding:
    return Finding("info", text, tuple(about))


def warning(text: str, about: tuple = ()) -> Finding:
    return Finding("warning", text, tuple(about))


def markdown(findings: Iterable[Finding | str]) -> str:
    """A bullet list, with every level but info in bold, so a warning cannot be read past."""
    lines = []
    for f in findings:
        if isinstance(f, Finding) and f.level != "info":
            lines.append(f"- **{f.level.upper()}:** {f.text}")
        else:
            lines.append(f"- {f}")
    return "\n".join(lines)


def as_records(findings: Iterable[Finding | str]) -> list[dict]:
    """Findings as summary.json keeps them."""
    return [f.as_dict() if isinstance(f, Finding) else {"level": "info", "text": str(f)} for f in findings]


def first_line(text: str, limit: int = 300) -> str:
    """A reason's first line, at most `limit` characters, cut after a whole word with an ellipsis where longer:
    never mid-word."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else textwrap.shorten(line, limit, placeholder=" …")


def duration(seconds: float | None) -> str:
    """A time at a scale a reader takes in: 2.5 min, 2.31 s, 41.2 ms, 870 us; n/a where unknown."""
    if seconds is None:
        return "n/a"
    a = abs(seconds)
    if a >= 120:
        return f"{seconds / 60:.1f} min"
    if a >= 1:
        return f"{seconds:.2f} s"
    if a >= 1e-3:
        return f"{1000 * seconds:.3g} ms"
    return f"{1e6 * seconds:.3g} us"


# nbconvert's lab template loads require.js, MathJax, mermaid and the widget manager from CDNs. A report
# is tables, text and embedded PNGs: none of them needs a script, and a report must open offline.
_OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def length_axis(ax, lengths) -> None:
    """A log axis labelled at the lengths measured, in plain numbers."""
    from matplotlib.ticker import FixedLocator, NullLocator

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(list(lengths)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{int(n):,}" for n in lengths])
    ax.set_xlabel("prompt length (tokens)")


def picture(fig):
    """A Figure made outside pyplot, as the PNG a notebook shows (bbox tight, as the inline backend draws
    a cell's figures): drawn here, once, by the thread that made it."""
    import io

    from IPython.display import Image

    png = io.BytesIO()
    fig.savefig(png, format="png", bbox_inches="tight")
    return Image(png.getvalue())


RECORD_COLUMNS = ("seq", "prompt_length", "kind", "question_id", "task_id", "level", "rep", "warmup", "ttft_s",
                  "decode_tokens_per_s", "completion_tokens", "interference", "error")


PAPERMILL_BANNER = "papermill-error-cell-tag"  # the tag of the cells papermill adds around a failed cell


def failed_halfway(nb, reason: str, records: list[dict]):
    """The executed notebook of a run that failed halfway, as its report shows it: what it measured up to the
    failure (cells before it, and the failing cell's own progress lines), the failure in one plain sentence,
    and a table of every record kept. The traceback stays in notebook.ipynb; the empty sections after it go."""
    import nbformat

    cells, failed_at = [], None
    for cell in nb.cells:
        if PAPERMILL_BANNER in cell.get("metadata", {}).get("tags", []):
            continue  # papermill's red "An Exception was encountered" banners: the sentence below says it plainly
        outputs = cell.get("outputs", [])
        if any(o.get("output_type") == "error" for o in outputs):
            cell = nbformat.from_dict(dict(cell))
            cell["outputs"] = [o for o in outputs if o.get("output_type") != "error"]
            cells.append(cell)
            failed_at = cell
            break
        cells.append(cell)
    shown = [r for r in records if isinstance(r, dict)]
    errors = sum("error" in r for r in shown)
    sentence = (f"**This run failed halfway**: {reason.strip().splitlines()[0] if reason.strip() else 'no reason recorded'}. "
                f"It kept {len(shown)} record(s) ({errors} of them the failed request's), tabulated below; every "
                "figure above was measured before it stopped. The traceback is in notebook.ipynb in this folder.")
    table = pd.DataFrame([{k: r.get(k) for k in RECORD_COLUMNS if any(k in x for x in shown)} for r in shown])
    out = nbformat.v4.new_notebook(metadata=nb.metadata)
    out.cells = cells + [nbformat.v4.new_markdown_cell(sentence)]
    if len(table):
        out.cells.append(nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output(
            "display_data", data={"text/html": table.to_html(index=False, na_rep="-"), "text/plain": table.to_string()})]))
    if failed_at is None:
        out.cells.insert(0, nbformat.v4.new_markdown_cell(sentence))
    return out


def write_html(notebook: Path, target: Path, failure: str | None = None, records: list[dict] | None = None,
               note: str = "") -> Path:
    """Render once, code hidden, no script from another host; an existing report is never replaced. A run
    that failed halfway (`failure`) is shown as failed_halfway() says; a `note` (markdown) opens the report."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True,
                            extra_loaders=[jinja2.DictLoader({"sparknb-offline.html.j2": _OFFLINE_TEMPLATE})],
                            template_file="sparknb-offline.html.j2")
    nb = nbformat.read(notebook, as_version=4)
    if failure is not None:
        nb = failed_halfway(nb, failure, records or [])
    if note:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(note))
    body, _ = exporter.from_notebook_node(nb)
    with open(target, "x", encoding="utf-8") as f:
        try:
            f.write(body)
            f.flush()
        except OSError:  # a full disk: no half report
            target.unlink()
            raise
    return target
