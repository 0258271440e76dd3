"""The endpoint client's failures, each with a message a user can act on.

Two tests use a fake HTTP server, because a real vLLM cannot be made to drop a stream halfway or
answer 500 on purpose. Everything the real server can do is tested against it in test_decode.py.
"""

import json
import socket

import pytest

from sparknb.client import Endpoint
from sparknb.errors import EndpointError
from support import FakeHandler, free_port, serve


def test_unreachable_endpoint_says_how_to_start_one():
    ep = Endpoint(f"http://127.0.0.1:{free_port()}/v1", "tiny-dense")
    with pytest.raises(EndpointError) as e:
        ep.info()
    assert "Cannot reach" in str(e.value) and "sparknb serve" in str(e.value)


class _Faulty(FakeHandler):
    """Streams three chunks and drops the connection, or answers 500, as the model name asks."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["model"] == "broken":
            return self.send_body(500, json.dumps({"error": {"message": "engine died"}}))
        self.start_stream()
        for i in range(3):
            self.event({"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "text": f"tok{i} ", "finish_reason": None}]})
        self.connection.shutdown(socket.SHUT_RDWR)  # gone before [DONE]: a dropped stream


@pytest.fixture
def faulty():
    with serve(_Faulty) as url:
        yield url


def test_a_password_in_the_url_never_reaches_an_error_message():
    ep = Endpoint(f"http://me:canary-pw-41@127.0.0.1:{free_port()}/v1", "tiny-dense")
    with pytest.raises(EndpointError) as e:
        ep.info()
    assert "canary-pw-41" not in str(e.value) and "me:***@127.0.0.1" in str(e.value)


def test_a_stream_dropped_halfway_is_an_error_not_a_short_answer(faulty):
    with pytest.raises(EndpointError) as e:
        Endpoint(faulty, "tiny").complete("hello", max_tokens=10)
    assert "Lost the connection" in str(e.value) and "3 chunks" in str(e.value)


def test_a_server_error_carries_the_servers_message(faulty):
    with pytest.raises(EndpointError) as e:
        Endpoint(faulty, "broken").complete("hello", max_tokens=10)
    assert "500" in str(e.value) and "engine died" in str(e.value)
