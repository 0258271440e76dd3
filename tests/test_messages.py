"""Messages that once misled (issue 38): each says what is wrong and the fix that applies to this server."""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from pathlib import Path

import pytest
from support import FakeHandler, serve

from sparknb.endpoint.client import Endpoint, ServerInfo
from sparknb.endpoint.stream import AsyncEndpoint
from sparknb.errors import EndpointError, ParamsError
from sparknb.roofline import checkpoint
from sparknb.runs.params import ModelParams
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
