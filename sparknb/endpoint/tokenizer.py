"""A local tokenizer, for servers without vLLM's /tokenize: exact-length prompts still mean N tokens.

Named in the model's params (`tokenizer:` a folder, a folder relative to the project, or a hub id
already in the Hugging Face cache) and loaded with transformers, so the chat template comes too.
It must be the tokenizer the server uses: the server's own prompt count (usage) shows any gap, and
the studies' findings report prompts that were not the length asked for.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

from ..errors import ParamsError
from ..runs.params import project_root


class LocalTokenizer:
    """Text to token ids and back, as the server's tokenizer does it."""

    def __init__(self, name: str, backend: Any) -> None:
        self.name = name
        self._backend = backend

    def encode(self, text: str, special_tokens: bool = True) -> list[int]:
        return list(self._backend.encode(text, add_special_tokens=special_tokens))

    def encode_chat(self, messages: list[dict]) -> list[int]:
        """The prompt tokens of a chat request, chat template and generation prompt included."""
        ids = self._backend.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def decode(self, ids: list[int]) -> str:
        """The text a server that takes only text is sent; it tokenizes that text back to the same ids."""
        return self._backend.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def locate(name: str) -> str:
    """A folder as given or under the project root; anything else is taken as a hub id."""
    for candidate in (Path(name).expanduser(), project_root() / name):
        if candidate.is_dir():
            return str(candidate)
    return name


_LOADING = threading.Lock()


def load(name: str) -> LocalTokenizer:
    """Loaded once per process, by one thread at a time: threads importing transformers at once (a batch
    measuring its prompts, eight at a time) see its lazy module half made, and all but one failed with
    "cannot import name 'AutoTokenizer'" (transformers 5.19). Offline lookups only (a hub id must already be
    in the cache)."""
    with _LOADING:
        return _load(name)


@functools.lru_cache(maxsize=8)
def _load(name: str) -> LocalTokenizer:
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise ParamsError(f"the local tokenizer {name!r} needs transformers ({e}); pip install -e '.[serve]'") from None
    where = locate(name)
    try:
        backend = AutoTokenizer.from_pretrained(where, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ParamsError(
            f"Cannot load the tokenizer {name!r} named in the model's params ({type(e).__name__}: {e}). Give a folder "
            "that holds tokenizer.json (absolute, or relative to the project), or a hub id already in the Hugging "
            "Face cache.") from None
    return LocalTokenizer(name, backend)
