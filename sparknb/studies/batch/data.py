"""What every graded study's data shares: a JSONL file read line by line with a clear error for a bad line, and the
sha256 that goes into every run, so two runs can be checked to have asked the same questions."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from ...errors import DataError


def jsonl(path: Path, text: str, needs: str, key: str) -> Iterator[tuple[str, str, dict]]:
    """Each JSON object of a JSONL text as (where, id, object): `where` names its line, `id` is its `key` (the
    file's stem and the line's number where it has none). A line that is not one JSON object (with `needs` in
    it), or whose id repeats an earlier one, is refused by its line."""
    seen = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where} is not JSON ({e.msg}); each line must be one JSON object.") from None
        if not isinstance(item, dict):
            raise DataError(f"{where} must be a JSON object with {needs}.")
        name = str(item.get(key, f"{path.stem}:{number}"))
        if name in seen:
            raise DataError(f"{where}: {key} {name!r} is used twice; ids must be unique.")
        seen.add(name)
        yield where, name, item


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
