"""Restore the figures an old secret filter sealed as "***" in these example runs, from the figures beside them.

Until the filter learnt that a secret is text and never a number, a field name ending in "token" was masked: every
census's `every_token` (the bytes every token reads) and, earlier, the energy's `j_per_generated_token` and
`j_per_prompt_token`. Each is fixed by the figures kept beside it, and is restored only where two independent
counts agree:

- `every_token` = `bytes_per_token` - `in_part` (what a token reads, less what it reads in part), and equally
  `tensor_bytes` - the experts', embedding's and untied head's bytes - what is not read (the census's classes cover
  every tensor once);
- `j_per_generated_token` = `joules` / `generated_tokens` (1 / `generated_tokens_per_j`, kept), and
  `j_per_prompt_token` = `joules` / `prompt_tokens`.

The files restored no longer match their manifests' sha256 (as the `$REPO` paths already made of some): the seal
is of what the run wrote, masks included. Run from the repository root: `python docs/examples/restore_masked.py`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
MASK = "***"


def every_token(c: dict) -> int:
    by_parts = c["bytes_per_token"] - c["in_part"]
    head = 0 if c["embedding"]["tied"] else c["head"]["bytes"]
    by_classes = c["tensor_bytes"] - c["experts"]["bytes"] - c["embedding"]["bytes"] - head - c["not_read"]
    if by_parts != by_classes:
        raise ValueError(f"{c['checkpoint']}: the two counts of every_token differ ({by_parts} and {by_classes})")
    return int(by_classes)


def energy(e: dict) -> dict:
    restored = dict(e)
    if e.get("j_per_generated_token") == MASK:
        restored["j_per_generated_token"] = e["joules"] / e["generated_tokens"]
        if not math.isclose(restored["j_per_generated_token"], 1 / e["generated_tokens_per_j"], rel_tol=1e-12):
            raise ValueError(f"{e['name']}: joules over generated tokens disagrees with generated_tokens_per_j")
    if e.get("j_per_prompt_token") == MASK:
        restored["j_per_prompt_token"] = e["joules"] / e["prompt_tokens"]
    return restored


def restore(node):
    if isinstance(node, list):
        return [restore(x) for x in node]
    if not isinstance(node, dict):
        return node
    node = {k: restore(v) for k, v in node.items()}
    if node.get("every_token") == MASK and "bytes_per_token" in node:
        node["every_token"] = every_token(node)
    if "joules" in node and MASK in (node.get("j_per_generated_token"), node.get("j_per_prompt_token")):
        node = energy(node)
    return node


def main() -> None:
    for path in sorted(HERE.glob("*/2026*/*.json")):
        text = path.read_text()
        if f'"{MASK}"' not in text:
            continue
        restored = json.dumps(restore(json.loads(text)), indent=2, sort_keys=True) + "\n"
        if restored != text:
            path.chmod(0o644)
            path.write_text(restored)
            print(f"restored {path.relative_to(HERE)}")


if __name__ == "__main__":
    main()
