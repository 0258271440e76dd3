"""The step split of the latest decode and prefill run of each model under OUTPUTS, as tables to quote.

    python bench/step_split_show.py outputs

Per decode length: the median step, the bytes' time at the box's bandwidth (read), the rest with its 95% interval,
and where the run measured the engine alone (engine_alone: llama-bench on the same GGUF) its ms per token and the
server's own part (the step less the engine's). Then prefill's floors and the comparison's predicted-ratio rows in
its own words.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OWN = "server's own ms"


def latest(outputs: Path, notebook: str) -> dict[str, Path]:
    """The newest sealed run folder of each model for one notebook."""
    runs: dict[str, Path] = {}
    for folder in sorted((outputs / notebook).glob("*/")):
        params = json.loads((folder / "params.json").read_text()) if (folder / "params.json").exists() else {}
        name = (params.get("model") or {}).get("name")
        if name and (folder / "summary.json").exists():
            runs[name] = folder
    return runs


def decode_table(folder: Path) -> None:
    census = json.loads((folder / "census.json").read_text()).get("census") or {}
    print(f"\n{folder.name}: {census.get('bytes_per_token', 0):,.0f} B a token (census)")
    print("| prompt tokens | tok/s | step ms | read ms | rest ms (95%) | % of limit | engine alone ms | "
          "server's own ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in json.loads((folder / "summary.json").read_text())["table"]:
        print(f"| {r['prompt tokens']:,} | {_f(r.get('decode tok/s (median)'), 1)} | {_f(r.get('step ms'))} | "
              f"{_f(r.get('read ms'))} | {_f(r.get('rest ms'))} ({_f(r.get('rest 95% low'))}-"
              f"{_f(r.get('rest 95% high'))}) | {_f(r.get('% of limit'), 1)} | {_f(r.get('engine ms'))} | "
              f"{_f(r.get(OWN))} |")


def prefill_table(folder: Path) -> None:
    print(f"\n{folder.name}")
    print("| prompt tokens | TTFT ms | floor GB read | bandwidth floor ms | % of floor |")
    print("| --- | --- | --- | --- | --- |")
    for r in json.loads((folder / "summary.json").read_text())["table"]:
        print(f"| {r['prompt tokens']:,} | {_f(r.get('TTFT ms (median)'), 2)} | {_f(r.get('floor GB read'), 2)} | "
              f"{_f(r.get('bandwidth floor ms'), 2)} | {_f(r.get('% of floor'), 1)} |")


def comparison(outputs: Path) -> None:
    folders = sorted((outputs / "compare").glob("*/"))
    if not folders:
        return print("\nno comparison")
    head = json.loads((folders[-1] / "summary.json").read_text())["headline"]
    print(f"\ncomparison {folders[-1].name}: subjects {head['subjects']}")
    for row in head["rows"]:
        if "predicted" in row["figure"] or "bandwidth limit" in row["figure"]:
            values = ", ".join(f"{s} {_f(v)}" for s, v in row["values"].items())
            print(f"- {row['figure']}: {values}\n  {row.get('note') or ''}")


def _f(v, places: int = 3) -> str:
    return "-" if v is None else f"{v:,.{places}f}"


def main(outputs: Path) -> None:
    for folder in latest(outputs, "decode").values():
        decode_table(folder)
    for folder in latest(outputs, "prefill").values():
        prefill_table(folder)
    comparison(outputs)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
