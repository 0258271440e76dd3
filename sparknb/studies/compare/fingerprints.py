"""The runs' fingerprints side by side, every difference that matters, and every warning of every run,
all said before any number."""

from __future__ import annotations

import html
from dataclasses import dataclass

import pandas as pd

from ...machine import fingerprint
from ...runs.plan import Plan
from ...runs.report import Finding, info, warning
from ...runs.run import PastRun
from ...verdicts.verdict import short, warnings_of
from .. import registry
from .plan import across_models

GIB = 2 ** 30


def _label(run: PastRun) -> str:
    return f"{run.notebook}: {run.label} ({run.id[-6:]})"


def _shown(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > GIB:
        return f"{v / GIB:.1f} GiB"
    return str(v)


def fingerprint_table(past: list[PastRun]) -> pd.DataFrame:
    """One column per run, one row per fact of its fingerprint that a comparison depends on; the rows that
    differ between runs first (marked), sizes in GiB."""
    rows = {}
    for run in past:
        fp = run.fingerprint
        facts = {f"{facet}: {k}": v for facet, pick in fingerprint.FACETS.items() for k, v in pick(fp).items()}
        facts["taken at"] = fp.get("taken_at")
        facts["sparknb commit"] = (fp.get("project") or {}).get("commit")
        rows[_label(run)] = {k: _shown(v) for k, v in facts.items()}
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    differ = table.nunique(axis=1) > 1
    table.insert(0, "differs", differ.map({True: "DIFFERS", False: ""}))
    return pd.concat([table[differ], table[~differ]])


def fingerprint_view(past: list[PastRun]):
    """For the notebook: the facts that differ, one row per run and one column per fact (a few columns, so the
    table does not run off the page however many runs there are), then the facts every run shares, folded
    under them as one list (plain HTML, no script)."""
    from IPython.display import HTML

    table = fingerprint_table(past)
    if table.empty:
        return HTML("<p>No fingerprints.</p>")
    differ = table[table["differs"] != ""].drop(columns="differs")
    same = table[table["differs"] == ""].drop(columns="differs")
    top = (f"<p><b>{len(differ)} fact(s) differ between the runs:</b></p>" + differ.T.to_html(escape=True)
           if len(differ) else "<p>Every fact below is the same in every run.</p>")
    shared = same.iloc[:, :1].set_axis(["the same in every run"], axis=1)
    folded = (f"<details><summary>{len(same)} fact(s) the same in every run (click to show)</summary>"
              f"{shared.to_html(escape=True)}</details>")
    return HTML(top + folded)


def warnings(past: list[PastRun], mode: str = "models") -> list[Finding]:
    """Different boxes first and loudest (unless the boxes are the question), then drivers, server builds,
    speculative set-ups, model builds and study settings. `mode`: what the comparison sets side by side
    (compare.Plan.mode)."""
    if not past:
        return []
    notes = []
    base = past[0]
    boxes = {r.id: fingerprint.differences(base.fingerprint, r.fingerprint, fingerprint.SAME_BOX) for r in past[1:]}
    other_boxes = {k: v for k, v in boxes.items() if v}
    detail = "; ".join(f"{k}: {', '.join(d for ds in v.values() for d in ds)}" for k, v in other_boxes.items())
    if mode == "boxes":
        notes.append(info(f"These runs compare boxes: one model, measured on each ({detail}). The machines are the "
                          "question here, so every ratio below is one box against the first."))
    elif mode == "models per box":
        notes.append(info(f"These runs come from several boxes ({detail}). Each box's models are compared on that box "
                          "alone, in a headline of its own: no ratio crosses boxes."))
    elif other_boxes:
        notes.append(Finding("warning", f"DIFFERENT BOXES. These runs were not measured on the same machine as "
                                        f"{base.id} ({detail}). A ratio between them mixes the models with the "
                                        "machines; read every figure below as a comparison of setups, not of models."))
    served = [r for r in past if not across_models(r.notebook)]  # such a run starts its own servers: no one version
    for run in served[1:]:
        for facet, diffs in fingerprint.differences(served[0].fingerprint, run.fingerprint,
                                                    ("driver", "server version")).items():
            notes.append(warning(f"{run.id}: {facet} differs from {served[0].id}: {', '.join(diffs)}."))
    notes += _speculation(served)
    seen: dict[str, PastRun] = {}
    for run in past:
        first = seen.setdefault(run.notebook, run)
        if first is run:
            continue
        contract = registry.find(run.notebook)
        differ = (contract.Plan if contract else Plan).differences(first.settings, run.settings)
        if differ:
            notes.append(warning(f"The {run.notebook} runs {first.id} and {run.id} were run with different settings: "
                                 + "; ".join(f"{k} {v['a']!r} vs {v['b']!r}" for k, v in differ.items()) + "."))
    builds = {}
    for run in past:
        server = run.fingerprint.get("server") or {}
        builds.setdefault(run.label, set()).add((server.get("dtype"), server.get("quantization")))
    for label, kinds in builds.items():
        if len(kinds) > 1:
            notes.append(warning(f"{label} was served as different builds across its runs: {sorted(map(str, kinds))}."))
    return notes + [info(f"{r.id}: {r.signer}.") for r in past if r.signer]


def _speculation(served: list[PastRun]) -> list[Finding]:
    """One server speculating while another does not: every speed between them depends on the text."""
    by_model = {}
    for run in served:
        spec = (run.fingerprint.get("server") or {}).get("speculative")
        declared = spec.get("declared") if isinstance(spec, dict) else (run.params.get("model") or {}).get("speculative")
        by_model.setdefault(run.label, declared)
    if len({bool(v) for v in by_model.values()}) < 2:
        return []
    shown = "; ".join(f"{m}: {v or 'none'}" for m, v in by_model.items())
    return [warning(f"The servers do not speculate alike ({shown}): a speed of one against the other depends on how "
                    "predictable the text is, so decode's rows (measured on one kind of prompt) are caveated; "
                    "speculative decoding's rows name their kind of text and are not.")]


@dataclass(frozen=True)
class Warned:
    """Every warning each run compared states about itself, by run, numbered W1, W2, ... so the headline's rows
    can cite the ones they carry instead of repeating them."""

    by_run: dict[str, list[tuple[str, str, str]]]  # run -> (id, level, text)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.by_run.values())

    def cite(self, reason: str) -> str:
        """A row's reason ("subject: first sentence") with the sentence replaced by its warning's id, where one says it."""
        subject, sep, text = reason.partition(": ")
        ids = self._ids()
        if sep and text in ids:
            return f"{subject}: {ids[text]}"
        return ids.get(reason, reason)

    def _ids(self) -> dict[str, str]:
        return {short(text): wid for ws in self.by_run.values() for wid, _, text in ws}

    def as_dict(self) -> dict:
        return {run: [{"id": i, "level": level, "text": text} for i, level, text in ws] for run, ws in self.by_run.items()}

    def markdown(self) -> str:
        if not self.by_run:
            return "No run compared here states a warning about itself."
        lines = [f"**{self.count} warning(s) from the {len(self.by_run)} run(s) below**, each as its own report states it "
                 "(the headline's `why` column cites them by number):"]
        for run, ws in self.by_run.items():
            lines.append(f"- **{html.escape(run)}**")
            lines += [f"    - **{wid}** {level.upper()}: {text}" for wid, level, text in ws]
        return "\n".join(lines)


def run_warnings(past: list[PastRun]) -> Warned:
    """Every warning each run states about itself (and its failure), by run: nothing of them is dropped."""
    by_run, n = {}, 0
    for run in past:
        found = warnings_of(run)
        if found:
            by_run[f"{run.notebook} run {run.id} ({run.label})"] = [(f"W{n + i + 1}", level, text)
                                                                   for i, (level, text) in enumerate(found)]
            n += len(found)
    return Warned(by_run)
