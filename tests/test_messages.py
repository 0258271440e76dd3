"""Messages that once misled (issue 38): each says what is wrong and the fix that applies to this server."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
from pathlib import Path

import pandas as pd
import pytest
from support import FakeHandler, serve

from sparknb import engines
from sparknb.endpoint.client import Endpoint, ServerInfo
from sparknb.endpoint.stream import AsyncEndpoint
from sparknb.errors import EndpointError, LifecycleError, ParamsError
from sparknb.machine import fingerprint
from sparknb.roofline import checkpoint
from sparknb.runs.params import ModelParams
from sparknb.serving import real_models, testbed
from sparknb.studies import decode, prefill


@pytest.mark.parametrize("engine, fix, not_said", [("llama.cpp", "-c/--ctx-size", "--max-model-len"),
                                                   ("vllm", "--max-model-len", "--ctx-size")])
def test_a_prompt_too_long_for_the_context_names_the_option_of_the_engine_that_serves_it(engine, fix, not_said):
    server = ServerInfo("http://x/v1", "b1", "m", None, 2048, ["m"], engine=engine)
    for plan in (decode.Plan.build(prompt_lengths=[4096], output_tokens=8),
                 prefill.Plan.build(prompt_lengths=[111, 4096])):
        with pytest.raises(ParamsError) as e:
            plan.check_server(server)
        assert f"restart the server with a larger {fix}" in str(e.value) and not_said not in str(e.value)


class _Stalls(FakeHandler):
    """One token, then nothing until the test ends: a fake, because a real server cannot be made to stall on
    purpose (a stalled GPU, a hung proxy)."""

    released = threading.Event()

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.start_stream()
        self.event({"choices": [{"index": 0, "text": "a", "finish_reason": None}]})
        type(self).released.wait(60)


def test_a_stalled_stream_fails_after_stall_timeout_s_saying_so_in_either_client():
    try:
        with serve(_Stalls) as url:
            with pytest.raises(EndpointError) as blocking:
                Endpoint(url, "m", stall_s=0.5).complete("hello", max_tokens=8)
            with pytest.raises(EndpointError) as streamed:
                asyncio.run(AsyncEndpoint(url, "m", stall_s=0.5).complete("hello", max_tokens=8))
    finally:
        _Stalls.released.set()
    for said in (str(blocking.value), str(streamed.value)):
        assert "sent nothing for 0.5 s (stall_timeout_s in the model's params)" in said, said
        assert "the answer so far had 1 chunks" in said
    assert ModelParams.model_fields["stall_timeout_s"].default == 600  # the bound, a parameter of every model


def unprivileged(call) -> str:
    """What call() raised, as `Type: message`, run in a forked child that dropped root first (root reads any file)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            call()
            said = "no error"
        except BaseException as e:
            said = f"{type(e).__name__}: {e}"
        os.write(write, said.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        said = f.read()
    os.waitpid(pid, 0)
    return said


def test_a_checkpoint_this_user_may_not_read_is_a_clear_error_naming_the_fix_not_a_permission_traceback():
    folder = Path(tempfile.mkdtemp(prefix="sparknb-unreadable-"))
    try:
        folder.chmod(0o755)
        (folder / "m.gguf").write_bytes(b"GGUF")
        (folder / "m.gguf").chmod(0)
        said = unprivileged(lambda: checkpoint.read(folder / "m.gguf"))
    finally:
        (folder / "m.gguf").unlink()
        folder.rmdir()
    assert said.startswith(f"ParamsError: cannot read the checkpoint at {folder / 'm.gguf'}: Permission denied"), said
    assert "Let this user read it" in said and "--checkpoint PATH" in said


def test_sparknb_serve_takes_slots_and_the_prompt_cache_as_llama_servers_options_and_refuses_them_on_vllm():
    assert testbed.serving_args("smollm2", "llama.cpp", 2, False) == (
        "--parallel", "2", "--ctx-size", str(2 * real_models.SLOT_CONTEXT), "--no-cache-prompt")
    assert testbed.serving_args("smollm2", "llama.cpp") == ()
    with pytest.raises(LifecycleError, match="add --engine llama.cpp"):
        testbed.serving_args("tiny-dense", "vllm", prompt_cache=False)
    with pytest.raises(LifecycleError, match="--slots 0: give 1 or more"):
        testbed.serving_args("tiny-dense", "llama.cpp", 0)


def test_the_fingerprint_records_the_prompt_cache_and_says_could_not_read_behind_a_proxy():
    on = engines.LLAMACPP.settings(["llama-server", "--parallel", "4"])
    off = engines.LLAMACPP.settings(["llama-server", "--no-cache-prompt"])
    assert on["prompt cache"].startswith("on") and off["prompt cache"].startswith("off") and on["slots"] == "4"
    with socket.socket() as proxy:  # this test's own process holds the port, as a proxy in front would
        proxy.bind(("127.0.0.1", 0))
        proxy.listen()
        port = proxy.getsockname()[1]
        said = fingerprint._settings({"engine": "llama.cpp", "url": f"http://127.0.0.1:{port}/v1"})
    assert said["unknown"].startswith(f"could not read: port {port} is held by ")
    assert "not llama-server" in said["unknown"]


def test_humaneval_completions_are_not_told_of_max_tokens_a_chat_template_or_questions_and_all_failed_says_chat():
    from sparknb.studies import humaneval as h
    from sparknb.studies.batch.ask import Batch
    from sparknb.studies.batch.findings import batch_findings
    from sparknb.studies.humaneval.findings import _none_passed

    finished = {"problem": "HumanEval/0", "how": "completion", "finish_reason": "length", "flag": h.HIT_MAX_TOKENS,
                "reason": h.CUT, "passed": False,
                "text": "    return True\n\nThis function checks the list, and then the model talks on"}
    said = h.traps([finished]).headline()
    assert "more tokens would not help" in said and "raise max_tokens if the model allows" not in said
    assert "raise max_tokens if the model allows" in h.traps([finished | {"how": "fenced block"}]).headline()
    batch = Batch(1, 0, 0, 1, 1.0, 5, 5, 0.1, 1.0, None, None, None, None, None, 40, "HumanEval/0")
    said = " ".join(f.text for f in batch_findings(batch, unit="problem", template=False))
    assert "(problem HumanEval/0)" in said and "chat template" not in said and "question" not in said
    work = type("Work", (), {"plan": type("Plan", (), {"style": "completion"})()})()
    assert "try style: chat" in _none_passed(pd.DataFrame({"passed": [False, False]}), work)[0].text
    assert not _none_passed(pd.DataFrame({"passed": [False, True]}), work)
