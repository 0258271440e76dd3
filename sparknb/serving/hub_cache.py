"""A local checkpoint placed in the Hugging Face cache under a repo id, so servers serve it by name.

`transformers serve` lists in /v1/models only what the Hugging Face cache holds, so a model loaded
from a plain folder is served but never listed, and a client cannot check it is talking to the
right model. A random-weight checkpoint (nothing can be downloaded where sparknb is tested) is
therefore linked into a cache under a repo id such as `sparknb/tiny-dense`: the server lists it,
loads it offline, and a params file names it without a machine path.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ParamsError

REVISION = "0" * 40  # a commit hash is only a folder name here; no hub was ever asked


def default_cache() -> Path:
    """Where the Hugging Face libraries look: $HF_HUB_CACHE, $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home) / "hub"


def repo(repo_id: str, cache: str | Path | None = None) -> Path:
    """A repo's folder in the cache (models--owner--name), under refs/main the revision its snapshots/ holds."""
    return Path(cache or default_cache()) / f"models--{repo_id.replace('/', '--')}"


def snapshot(repo_id: str) -> Path | None:
    """The snapshot of a repo's main revision in the cache, where it is there (nothing is downloaded)."""
    ref = repo(repo_id) / "refs" / "main"
    return repo(repo_id) / "snapshots" / ref.read_text().strip() if ref.is_file() else None


def place(checkpoint: str | Path, repo_id: str, cache: str | Path | None = None) -> Path:
    """Link every file of `checkpoint` into the cache as `repo_id`'s main revision; returns the snapshot folder.

    Files are linked, not copied (a checkpoint of a few billion parameters is many gigabytes);
    placing the same checkpoint again changes nothing.
    """
    source = Path(checkpoint).resolve()
    if not (source / "config.json").is_file():
        raise ParamsError(f"{source} holds no config.json, so it is not a checkpoint to serve.")
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ParamsError(f"repo id {repo_id!r} must read owner/name, e.g. sparknb/tiny-dense.")
    folder = repo(repo_id, cache)
    placed = folder / "snapshots" / REVISION
    placed.mkdir(parents=True, exist_ok=True)
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(REVISION)
    for file in source.iterdir():
        link = placed / file.name
        if file.is_file() and not (link.is_symlink() and link.resolve() == file):
            link.unlink(missing_ok=True)
            link.symlink_to(file)
    return placed
