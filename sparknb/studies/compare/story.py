"""The verdict in a few short sentences, first: one per study that decides, then what cannot be told apart and
what would tell it, then what was shown but could not decide. The detail is in the table."""

from __future__ import annotations

from ...verdicts.sequential import told
from ...verdicts.verdict import Decision
from .. import registry
from .headline import Headline


def _name(study: str) -> str:
    contract = registry.find(study)
    return contract.heading if contract else study[0].upper() + study[1:]


def _figures(ds: list[Decision], limit: int = 4) -> str:
    shown = [f"{d.row.figure} ({d.shown})" for d in ds[:limit]]
    return "; ".join(shown) + (f"; and {len(ds) - limit} more" if len(ds) > limit else "")


def _margin(d: Decision) -> str:
    return f"{100 * d.row.sequences[d.subject]['design']['margin']:.0f}"


def sentences(h: Headline, missing: list[str] = ()) -> list[str]:
    if len(h.subjects) < 2:
        return [f"Only {h.subjects[0] if h.subjects else 'one subject'} is in these runs: there is nothing to compare. "
                "Give runs of a second model, or a campaign."]
    out = []
    verdicts = h.verdicts()
    for v in verdicts:
        won = v.of("wins")
        if v.winner:
            out.append(f"**{_name(v.study)}: {v.winner} is ahead** of {v.base if v.winner == v.subject else v.subject} "
                       f"on {_figures(won)} (ratios are {v.subject} over {v.base}, 95% intervals), and behind on none.")
        elif v.split:
            ahead = {w: [d for d in won if d.winner == w] for w in (v.subject, v.base)}
            out.append(f"**{_name(v.study)}: split.** {v.subject} is ahead on {_figures(ahead[v.subject])}, {v.base} on "
                       f"{_figures(ahead[v.base])}: neither wins the study.")
    if not any(v.winner for v in verdicts):
        out.append("**No study names a winner** on the figures that can decide.")
    for v in verdicts:
        for d in v.of("equivalent"):
            out.append(f"**{_name(v.study)}: {v.subject} and {v.base} are equivalent** within the "
                       f"{_margin(d)}-point margin on {d.row.figure} ({d.shown}, a confidence sequence).")
    out += [f"{_name(v.study)}, {v.subject} against {v.base}: {told(d.row.sequences[v.subject])}."
            for v in verdicts for d in v.decisions if v.subject in d.row.sequences]
    for v in verdicts:
        cannot = v.of("cannot tell")
        if cannot:
            needed = next((d.row.needed.get(v.subject) for d in cannot if d.row.needed.get(v.subject)), "")
            out.append(f"{_name(v.study)}, {v.subject} against {v.base}: cannot tell apart on {_figures(cannot)}"
                       + (f"; {needed} would tell" if needed and needed.startswith("about") else
                          f"; {needed}" if needed else "") + ".")
    for v in verdicts:
        trap = v.of("trap")
        if trap:
            out.append(f"{_name(v.study)}: {_figures(trap, 2)} would be a short-prompt test's verdict; those lengths "
                       "measure mostly the fixed cost of a request, so they are shown as the trap and do not decide.")
    held = [(v, d) for v in verdicts for d in v.of("caveated") + v.of("not comparable")]
    if held:
        where = sorted({f"{_name(v.study)}" for v, _ in held})
        out.append(f"{len(held)} figure(s) are shown but do not decide, for the caveats named in the table "
                   f"({', '.join(where)}).")
    for m in missing:
        out.append(f"Missing: {m}.")
    return out


def story(h: Headline, missing: list[str] = ()) -> str:
    """The sentences as one markdown block, each on its own line."""
    return "\n\n".join(sentences(h, missing))
