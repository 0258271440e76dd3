"""The asyncio streaming client: the same record as the synchronous client, its failures, its batches.

What a real vLLM does (chunks, token ids, usage, per-request metrics, chat's role-only chunk) is tested
against the tiny test bed. A fake server serves only what a real one cannot do on purpose: drop a
stream halfway, send an error event after good chunks, split its bytes at awkward places, or count
exactly how many requests are open at once.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import threading
import time

import pytest

from sparknb import engines
from sparknb.endpoint import stream
from sparknb.endpoint.client import Endpoint
from sparknb.endpoint.completion import Completion
from sparknb.errors import EndpointError
from support import FakeHandler, free_port, serve


def _chunk(i: int, finish: str | None = None) -> dict:
    return {"id": "c", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "text": f" t{i}", "finish_reason": finish, "token_ids": [10 + i]}]}


USAGE = {"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": [],
         "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}


class _Fake(FakeHandler):
    """By model name: `drop` streams three chunks and hangs up; `error` sends an error event after two;
    `split` sends a whole answer one byte at a time; `slow` holds each answer open a while, counting
    how many are open at once; `key` wants a bearer key; `plain` refuses vLLM's own request fields with
    422, as transformers serve refuses any field it does not know."""

    open_now = 0
    most_open = 0
    lock = threading.Lock()

    def do_POST(self):
        try:
            self._answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        except (BrokenPipeError, ConnectionResetError):  # the client hung up, as a cancelled one does
            pass

    def _answer(self, body: dict) -> None:
        model = body["model"]
        if model == "key" and self.headers.get("Authorization") != "Bearer right":
            return self.send_body(401, json.dumps({"error": {"message": "bad key"}}))
        vllm_only = sorted({"return_token_ids", "ignore_eos"} & body.keys())
        if model == "plain" and vllm_only:
            return self.send_body(422, json.dumps({"detail": f"Unexpected fields in the request: {vllm_only}"}))
        self.start_stream()
        if model == "drop":
            for i in range(3):
                self.event(_chunk(i))
            return self.connection.shutdown(socket.SHUT_RDWR)
        if model == "error":
            for i in range(2):
                self.event(_chunk(i))
            return self.event({"error": {"message": "engine died halfway", "code": 500}})
        if model == "slow":
            with _Fake.lock:
                _Fake.open_now += 1
                _Fake.most_open = max(_Fake.most_open, _Fake.open_now)
            time.sleep(0.1)
            with _Fake.lock:
                _Fake.open_now -= 1
        events = [_chunk(0), _chunk(1), _chunk(2), _chunk(3, "length"), USAGE]
        data = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
        for i in range(len(data)) if model == "split" else [None]:
            self.wfile.write(data if i is None else data[i:i + 1])
            self.wfile.flush()


@pytest.fixture
def fake():
    with serve(_Fake) as url:
        yield url


def _complete(url: str, model: str, **kw) -> Completion:
    endpoint = stream.AsyncEndpoint(url, model, **kw)
    return stream.run(lambda: endpoint.complete([1, 2, 3], max_tokens=4))


def test_a_stream_dropped_halfway_is_an_error_not_a_short_answer(fake):
    with pytest.raises(EndpointError) as e:
        _complete(fake, "drop")
    assert "without a finish reason" in str(e.value) and "3 chunks" in str(e.value)


def test_an_error_event_after_good_chunks_fails_the_request_with_the_servers_message(fake):
    with pytest.raises(EndpointError) as e:
        _complete(fake, "error")
    assert "engine died halfway" in str(e.value) and "after 2 chunks" in str(e.value)


def test_bytes_split_anywhere_make_the_same_answer(fake):
    whole, split = _complete(fake, "whole"), _complete(fake, "split")
    assert split.text == whole.text == " t0 t1 t2 t3"
    assert split.chunk_tokens == whole.chunk_tokens == [1, 1, 1, 1]
    assert (split.completion_tokens, split.finish_reason) == (4, "length")


def test_a_refused_key_says_where_the_key_comes_from(fake):
    with pytest.raises(EndpointError) as e:
        _complete(fake, "key", api_key="wrong")
    assert "401" in str(e.value) and "api_key_env" in str(e.value)
    assert _complete(fake, "key", api_key="right").finish_reason == "length"


def test_an_unreachable_server_is_an_endpoint_error_without_the_password():
    with pytest.raises(EndpointError) as e:
        _complete(f"http://me:canary-pw-77@127.0.0.1:{free_port()}/v1", "m")
    assert "Cannot reach" in str(e.value) and "canary-pw-77" not in str(e.value)


def test_a_server_that_is_not_vllm_gets_none_of_vllms_request_fields(fake):
    chat = [{"role": "user", "content": "hi"}]
    with pytest.raises(EndpointError, match="422.*Unexpected fields.*ignore_eos"):
        stream.run(lambda: stream.AsyncEndpoint(fake, "plain").chat(chat, max_tokens=4))
    plain = stream.AsyncEndpoint(fake, "plain", engine=engines.TRANSFORMERS)
    assert stream.run(lambda: plain.chat(chat, max_tokens=4)).completion_tokens == 4
    with pytest.raises(EndpointError, match="takes no token ids and no local tokenizer"):
        stream.run(lambda: plain.complete([1, 2, 3], max_tokens=4))


def test_a_batch_never_has_more_in_flight_than_its_concurrency(fake):
    _Fake.most_open = 0
    endpoint = stream.AsyncEndpoint(fake, "slow")
    outcomes = stream.batch(endpoint, [lambda ep: ep.complete([1], max_tokens=4)] * 9, 3)
    assert len(outcomes) == 9 and not [o.error for o in outcomes if o.error]
    assert _Fake.most_open == 3


def test_a_batch_that_stops_on_error_sends_nothing_new_but_keeps_what_ended(fake):
    good = lambda ep: ep.complete([1], max_tokens=4)  # noqa: E731
    bad = lambda ep: stream.AsyncEndpoint(fake, "drop").complete([1], max_tokens=4)  # noqa: E731
    seen = []
    outcomes = stream.batch(stream.AsyncEndpoint(fake, "whole"), [bad, good, good, good, good], 1, seen.append,
                            stop_on_error=True)
    assert [o.index for o in outcomes] == [0] and outcomes[0].error and seen == outcomes


def test_it_runs_from_code_that_already_runs_an_event_loop(fake):
    """A notebook kernel runs a loop in the main thread; the client's loop has a thread of its own."""
    async def inside_a_kernel():
        return _complete(fake, "whole")

    assert asyncio.run(inside_a_kernel()).finish_reason == "length"


# -- against the real server ------------------------------------------------------------------------------

@pytest.mark.server
def test_the_same_answer_as_the_synchronous_client_by_the_same_rules(tiny_moe):
    """tiny-moe drafts with n-grams, so chunks can hold several tokens: both clients count them alike."""
    sync = Endpoint(tiny_moe.url, "tiny-moe").complete([5] * 40, max_tokens=48)
    answer = stream.run(lambda: stream.AsyncEndpoint(tiny_moe.url, "tiny-moe").complete([5] * 40, max_tokens=48))
    assert answer.completion_tokens == sync.completion_tokens == 48 == sum(answer.chunk_tokens)
    # The same greedy text; how the server splits it into chunks depends on when each client reads.
    assert answer.text == sync.text and sum(answer.chunk_tokens) == sum(t or 0 for t in sync.chunk_tokens)
    assert 0 < answer.ttft_s <= answer.last_token_s <= answer.total_s
    assert answer.decode_tokens == 48 - answer.chunk_tokens[0]


@pytest.mark.server
def test_the_servers_own_timings_come_with_the_answer(tiny_dense, dense_key):
    """vLLM started with --enable-per-request-metrics: queue, TTFT and generation time of this request."""
    endpoint = stream.AsyncEndpoint(tiny_dense.url, "tiny-dense", dense_key)
    # Long enough that a few milliseconds of delivery jitter at either end stay well under 10%.
    answer = stream.run(lambda: endpoint.complete([7] * 64, max_tokens=256))
    server = answer.server
    assert server is not None and server["decode_s"] > 0 and server["ttft_s"] > 0 and server["queue_s"] >= 0
    assert server["queue_s"] + server["ttft_s"] <= answer.ttft_s  # the server's clock starts after ours
    gaps = [b - a for a, b in zip(answer.chunk_times, answer.chunk_times[1:])]
    # On failure, the largest gap between two chunks tells a stalled delivery (one long gap) from a slow client.
    assert abs(answer.decode_s / server["decode_s"] - 1) < 0.1, \
        f"client {answer.decode_s:.3f} s, server {server['decode_s']:.3f} s; largest gap between two chunks {max(gaps):.3f} s"


@pytest.mark.server
def test_a_chats_role_only_chunk_is_not_a_token(tiny_dense, dense_key):
    endpoint = stream.AsyncEndpoint(tiny_dense.url, "tiny-dense", dense_key)
    answer = stream.run(lambda: endpoint.chat([{"role": "user", "content": "hello"}], max_tokens=6, ignore_eos=True))
    assert answer.completion_tokens == 6 == sum(answer.chunk_tokens) and len(answer.chunk_times) <= 6
    assert answer.ttft_s == answer.chunk_times[0]


def test_a_task_left_running_is_cancelled_and_awaited_before_the_loop_closes(fake, capfd):
    """A background task its coroutine forgot (a sampler, a probe) must not outlive the loop: asyncio
    would report it destroyed while pending, later, in whatever output is open then."""
    ended = []

    async def forgetful():
        async def sampler():
            try:
                while True:
                    await stream.AsyncEndpoint(fake, "whole").complete([1], max_tokens=4)
            finally:
                ended.append("cleaned up")

        asyncio.ensure_future(sampler())
        await asyncio.sleep(0.05)
        return "done"

    assert stream.run(forgetful) == "done" and ended == ["cleaned up"]
    gc.collect()
    assert "Task was destroyed" not in capfd.readouterr().err
