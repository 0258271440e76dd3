"""The speed ratio two models' byte curves predict, beside the ratio measured, at every length both measured.

Where decode is bandwidth-bound, speed goes as bandwidth over the bytes one step reads, so two models on the
same box should differ by the inverse ratio of their byte curves (weights plus the KV cache at that context).
The reference study's "4.5x predicted, 2.9x observed" was this arithmetic by hand: the gap says one of the two
steps is held by something other than reading memory.
"""

from __future__ import annotations

from ...verdicts.verdict import Row, Runs

GAP = 0.15  # measured this far from the prediction: the step is held by something besides reading memory


def predicted(row: dict, base: dict) -> float | None:
    """The speed ratio (row over base) the limits predict, else the inverse ratio of the bytes a step reads."""
    if row.get("limit tok/s") and base.get("limit tok/s"):
        return row["limit tok/s"] / base["limit tok/s"]
    if row.get("MB read/step") and base.get("MB read/step"):
        return (base["MB read/step"] / row["MB read/step"]) * (row.get("tokens/step") or 1) / (
            base.get("tokens/step") or 1)
    return None


def rows(runs: Runs) -> list[Row]:
    """One context row per length both measured: each subject's predicted ratio to the base, the measured beside."""
    tables = {s: {int(r["prompt tokens"]): r for r in (run.summary or {}).get("table") or []}
              for s, run in runs.of("decode").items()}
    if runs.base not in tables or len(tables) < 2:
        return []
    out = []
    for n in sorted(set.intersection(*(set(t) for t in tables.values()))):
        base = tables[runs.base][n]
        values = {s: predicted(t[n], base) for s, t in tables.items()}
        if all(v is None for s, v in values.items() if s != runs.base):
            continue
        notes = [_said(s, values[s], _measured(t[n], base)) for s, t in tables.items() if s != runs.base]
        out.append(Row("decode", f"speed ratio at {n:,} tokens predicted by the byte curves", values,
                       role="context", better="none", note="; ".join(notes)))
    return out


def _measured(row: dict, base: dict) -> float | None:
    a, b = row.get("decode tok/s (median)"), base.get("decode tok/s (median)")
    return a / b if a and b else None


def _said(subject: str, p: float | None, m: float | None) -> str:
    if p is None or m is None:
        return f"{subject}: predicted {_x(p)}, measured {_x(m)}"
    gap = m / p - 1
    held = (f"; {abs(gap):.0%} {'short of' if gap < 0 else 'beyond'} it: "
            + ("its step is held by more than reading memory" if gap < 0 else "the base's step is")
            if abs(gap) > GAP else "")
    return f"{subject}: predicted {p:.2f}x, measured {m:.2f}x{held}"


def _x(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.2f}x"
