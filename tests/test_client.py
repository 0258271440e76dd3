"""The endpoint client's failures, each with a message a user can act on.

Two tests use a fake HTTP server, because a real vLLM cannot be made to drop a stream halfway or
answer 500 on purpose. Everything the real server can do is tested against it in test_decode.py.
"""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparknb.client import Endpoint, EndpointError


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_endpoint_says_how_to_start_one():
    ep = Endpoint(f"http://127.0.0.1:{_closed_port()}/v1", "tiny-dense")
    with pytest.raises(EndpointError) as e:
        ep.info()
    assert "Cannot reach" in str(e.value) and "sparknb serve" in str(e.value)


class _Faulty(BaseHTTPRequestHandler):
    """Streams three chunks and drops the connection, or answers 500, as the path asks."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["model"] == "broken":
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"error": {"message": "engine died"}}).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(3):
            chunk = {"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "text": f"tok{i} ", "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)  # gone before [DONE]: a dropped stream


@pytest.fixture
def faulty():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Faulty)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_stream_dropped_halfway_is_an_error_not_a_short_answer(faulty):
    with pytest.raises(EndpointError) as e:
        Endpoint(faulty, "tiny").complete("hello", max_tokens=10)
    assert "Lost the connection" in str(e.value) and "3 chunks" in str(e.value)


def test_a_server_error_carries_the_servers_message(faulty):
    with pytest.raises(EndpointError) as e:
        Endpoint(faulty, "broken").complete("hello", max_tokens=10)
    assert "500" in str(e.value) and "engine died" in str(e.value)
