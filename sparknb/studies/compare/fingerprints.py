"""The runs' fingerprints side by side, and every difference that matters, said before any number."""

from __future__ import annotations

import pandas as pd

from ... import fingerprint
from ...report import Finding, duration, warning
from ...run import PastRun
from ...study import drifts
from .. import decode, prefill

# Settings that differ between runs on purpose, or that do not change what is measured.
NOT_A_DIFFERENCE = {"model", "models", "endpoint", "run_id", "outputs", "seal", "force", "compare_with",
                    "resume_from", "questions", "prompts", "dataset_source"}


def _label(run: PastRun) -> str:
    return f"{run.notebook}: {run.label} ({run.id[-6:]})"


def fingerprint_table(past: list[PastRun]) -> pd.DataFrame:
    """One column per run, one row per fact of its fingerprint that a comparison depends on."""
    rows = {}
    for run in past:
        fp = run.fingerprint
        facts = {f"{facet}: {k}": v for facet, pick in fingerprint.FACETS.items() for k, v in pick(fp).items()}
        facts["taken at"] = fp.get("taken_at")
        facts["sparknb commit"] = (fp.get("project") or {}).get("commit")
        rows[_label(run)] = {k: "-" if v is None else str(v) for k, v in facts.items()}
    return pd.DataFrame(rows)


def warnings(past: list[PastRun]) -> list[Finding]:
    """Different boxes first and loudest, then drivers, server builds, model builds and study settings."""
    if not past:
        return []
    notes = []
    base = past[0]
    boxes = {r.id: fingerprint.differences(base.fingerprint, r.fingerprint, fingerprint.SAME_BOX) for r in past[1:]}
    other_boxes = {k: v for k, v in boxes.items() if v}
    if other_boxes:
        detail = "; ".join(f"{k}: {', '.join(d for ds in v.values() for d in ds)}" for k, v in other_boxes.items())
        notes.append(Finding("warning", f"DIFFERENT BOXES. These runs were not measured on the same machine as "
                                        f"{base.id} ({detail}). A ratio between them mixes the models with the "
                                        "machines; read every figure below as a comparison of setups, not of models."))
    served = [r for r in past if r.notebook != "swap"]  # a swap run starts its own servers: no one version
    for run in served[1:]:
        for facet, diffs in fingerprint.differences(served[0].fingerprint, run.fingerprint,
                                                    ("driver", "server version")).items():
            notes.append(warning(f"{run.id}: {facet} differs from {served[0].id}: {', '.join(diffs)}."))
    seen: dict[str, PastRun] = {}
    for run in past:
        first = seen.setdefault(run.notebook, run)
        if first is run:
            continue
        mine, theirs = first.settings, run.settings
        differ = sorted(k for k in set(mine) | set(theirs) if k not in NOT_A_DIFFERENCE and mine.get(k) != theirs.get(k))
        if differ:
            notes.append(warning(f"The {run.notebook} runs {first.id} and {run.id} were run with different settings: "
                                 + "; ".join(f"{k} {mine.get(k)!r} vs {theirs.get(k)!r}" for k in differ) + "."))
    notes += _drifts(past)
    builds = {}
    for run in past:
        server = run.fingerprint.get("server") or {}
        builds.setdefault(run.label, set()).add((server.get("dtype"), server.get("quantization")))
    for label, kinds in builds.items():
        if len(kinds) > 1:
            notes.append(warning(f"{label} was served as different builds across its runs: {sorted(map(str, kinds))}."))
    return notes


def _drifts(past: list[PastRun]) -> list[Finding]:
    """A run whose box warmed up or slowed down during its sweep: its first and last requests at the same
    length differ beyond the spread of the ones between (decode and prefill runs taken in order)."""
    notes = []
    for run in past:
        if run.notebook == "decode":
            found = drifts(decode.frame(run.records), "decode_tok_s", "decode tok/s")
        elif run.notebook == "prefill":
            found = drifts(prefill.frame(run.records), "ttft_s", "TTFT", duration)
        else:
            continue
        notes += [warning(f"{run.notebook} run {run.id} ({run.label}): {f.text}") for f in found]
    return notes
