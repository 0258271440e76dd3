"""Redaction: no API key, token or password in a URL may reach a file, a report, a log or the screen.

Every write and print of a run goes through `redact`. It masks the values it is given, every
secret-looking environment variable, URL passwords and secret query parameters, and the text of fields whose
names say they hold a secret (a figure under such a name is a figure, and kept).
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Iterable
from typing import Any

MASK = "***"


# Whole words, so that max_tokens, prompt_tokens and tokenizer stay readable; "key" and "token" only as
# the last word (HF_TOKEN, api_key, X-Api-Key), so that first_token_s stays readable too, and never after
# "per" (j_per_generated_token is a figure, not a token).
_SECRET_WORDS = {"apikey", "secret", "password", "passwd", "pwd", "auth", "authorization", "credentials", "cookie"}
_SECRET_LAST_WORDS = {"key", "token"}
_SHELL_VARIABLES = {"PWD", "OLDPWD"}  # the working directory, not a password
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")  # a table heading such as "vLLM ms/token" is no field name
# Values people put in a key variable for a server that checks none; masking them would mask "none" everywhere.
_PLACEHOLDERS = {"empty", "none", "null", "dummy", "test", "true", "false", "unused"}
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_QUERY_PAIR = re.compile(r"([?&#;])([^=&#;]+)=([^&#;]*)")  # in the query and in an OAuth-style fragment
_CLI_SECRET = re.compile(r"(--[A-Za-z0-9-]*(?:api-key|token|secret|password)[= ])(\S+)", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def looks_secret(name: str) -> bool:
    """True for api_key, HF_TOKEN, apiKey, X-Api-Key, PGPASSWORD; False for *_env, which holds a variable name.
    Kept per name: an agent step's record asked it of some 80 field names, half its redaction's 0.58 ms."""
    if not _NAME.match(name):
        return False
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    words = [w for w in words if w]
    if not words or words[-1] == "env":
        return False
    if "per" in words[:-1] and words[-1] in _SECRET_LAST_WORDS:  # a rate: j_per_generated_token, ms_per_token
        return False
    return words[-1] in _SECRET_LAST_WORDS or any(
        w in _SECRET_WORDS or w.endswith(("password", "secret", "apikey")) for w in words)


def _env_secrets() -> list[str]:
    """Secret-looking variables are masked even when the caller forgot to pass them."""
    return [value for name, value in os.environ.items()
            if looks_secret(name) and name not in _SHELL_VARIABLES
            and value.strip() and value.strip().lower() not in _PLACEHOLDERS]


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A deep copy with secret values, URL passwords, secret query parameters and secret-named fields masked."""
    values = {s for s in [*secrets, *_env_secrets()] if isinstance(s, str) and len(s) >= 4}
    ordered = sorted(values, key=len, reverse=True)  # a key that contains another is masked whole
    return _redact(obj, ordered)


def _redact(obj: Any, secrets: list[str]) -> Any:
    if isinstance(obj, str):
        return _redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {(_redact_text(k, secrets) if isinstance(k, str) else k):
                (MASK if _is_secret_field(k, v) else _redact(v, secrets)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return type(obj)(_redact(item, secrets) for item in obj)
    if obj is None or isinstance(obj, (int, float)):
        return obj
    return copy.deepcopy(obj)


def _is_secret_field(key: Any, value: Any) -> bool:
    """A secret is text (or a block holding some) under a secret's name. A number never is: the census's
    `every_token` (bytes read every token) was sealed as "***" in every run while the name alone decided. None, ""
    and booleans say whether a key was set, which is worth keeping."""
    return (isinstance(key, str) and looks_secret(key) and value is not None and value != ""
            and not isinstance(value, (bool, int, float)))


def _redact_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    if "--" in text:
        text = _CLI_SECRET.sub(lambda m: m.group(1) + MASK, text)
    return _URL.sub(lambda m: _redact_url(m.group(0)), text) if "://" in text else text


def _redact_url(url: str) -> str:
    """http://user:pass@host/?token=t#access_token=t keeps its shape, loses the pass and the tokens."""
    scheme, rest = url.split("://", 1)
    authority, tail = re.match(r"([^/?#]*)(.*)", rest, re.DOTALL).groups()
    if "@" in authority:
        userinfo, host = authority.rsplit("@", 1)
        if ":" in userinfo:
            authority = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    return f"{scheme}://{authority}{_QUERY_PAIR.sub(_redact_pair, tail)}"


def _redact_pair(match: re.Match) -> str:
    sep, name, value = match.groups()
    return f"{sep}{name}={MASK if value and looks_secret(name) else value}"
