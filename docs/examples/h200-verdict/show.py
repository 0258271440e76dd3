"""Print a sealed comparison's verdict and every headline row (ratio, 95% interval, outcome, reasons).

    python docs/examples/h200-verdict/show.py outputs/compare/RUN_ID
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folder: Path) -> None:
    summary = json.loads((folder / "summary.json").read_text())
    print(summary["story"].strip(), "\n")
    head = summary["headline"]
    outcomes = {(d["figure"], d["subject"]): d for d in head["decisions"]}
    for row in head["rows"]:
        for subject in head["subjects"][1:]:
            d = outcomes[(row["figure"], subject)]
            r = row["ratios"].get(subject) or {}
            values = " / ".join("-" if row["values"].get(s) is None else f"{row['values'][s]:.3g}"
                                for s in head["subjects"])
            shown = (f"{r['estimate']:.2f}x [{r['low']:.2f}, {r['high']:.2f}]" if r.get("low") is not None
                     else f"({values})")
            who = f" -> {d['winner']}" if d["winner"] else ""
            print(f"{row['study']:8} {row['role']:8} {row['figure']:45} {shown:22} {d['outcome']}{who}")
            for why in d["reasons"]:
                print(f"{'':18}because: {why}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
