"""What several test files need: notebook runs as a user types them, output text, ports, fake servers.

The fake HTTP servers exist only for what a real vLLM cannot do on purpose (drop a stream halfway,
answer 500, write a reasoning model's **Question:** heading); each test that uses one says why.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
import yaml

from sparknb.runs.params import project_root


def run_notebook(name: str, tmp_path: Path, parameters: dict) -> tuple[nbformat.NotebookNode, Path]:
    """The plain papermill command a user would type, through papermill's own API; returns the executed
    notebook and the one run folder it made under tmp_path/outputs."""
    import papermill

    outputs = tmp_path / "outputs"
    before = set((outputs / name).iterdir()) if (outputs / name).exists() else set()
    out = tmp_path / f"{name}-{len(before)}.ipynb"
    papermill.execute_notebook(str(project_root() / "notebooks" / f"{name}.ipynb"), str(out), progress_bar=False,
                               parameters={"outputs": str(outputs), **parameters})
    (folder,) = set((outputs / name).iterdir()) - before
    return nbformat.read(out, as_version=4), folder


def _refuse(constant: str):
    raise ValueError(f"{constant} is not JSON")


def strict(path: Path):
    """A JSON file read as a strict parser reads it (jq, JavaScript's JSON.parse): NaN and Infinity refused."""
    return json.loads(path.read_text(), parse_constant=_refuse)


def strict_lines(path: Path) -> list:
    return [json.loads(line, parse_constant=_refuse) for line in path.read_text().splitlines() if line.strip()]


def outputs_text(nb: nbformat.NotebookNode) -> str:
    """Every output of every cell, as text: what a reader of the notebook sees."""
    return "\n".join(str(o.get("text", "")) + json.dumps(o.get("data", {}))
                     for c in nb.cells for o in c.get("outputs", []))


def free_port() -> int:
    """A port nothing listens on right now (closed again before it is returned)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def folder_text(folder: Path) -> str:
    """Every file below a folder, read as text: for checking that no secret reached any of them."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*")) if p.is_file())


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A fake HTTP server on 127.0.0.1 for the duration of a test; yields its /v1 URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


class FakeHandler(BaseHTTPRequestHandler):
    """Quiet, with helpers to answer JSON and stream server-sent events."""

    def log_message(self, *args):
        pass

    def send_body(self, status: int, body: str, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(body.encode())

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

    def event(self, obj: dict) -> None:
        self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
        self.wfile.flush()


class FakeVllm(FakeHandler):
    """Answers GETs as a vLLM serving one model (`served`) does: the model (its context `max_model_len`), a version,
    and /metrics counting the requests a subclass `asked` and the tokens it `generated`."""

    lock = threading.Lock()
    asked = generated = 0
    max_model_len = 100_000
    served = "tiny-dense"

    def do_GET(self):
        cls = type(self)
        if self.path == "/v1/models":
            return self.send_body(200, json.dumps({"data": [{"id": cls.served, "root": "fake",
                                                             "max_model_len": cls.max_model_len}]}))
        if self.path == "/version":
            return self.send_body(200, '{"version": "fake"}')
        label = f'{{model_name="{cls.served}"}}'
        self.send_body(200, f"vllm:num_requests_running{label} 0\nvllm:num_requests_waiting{label} 0\n"
                            f"vllm:e2e_request_latency_seconds_count{label} {cls.asked}\n"
                            f"vllm:e2e_request_latency_seconds_sum{label} {cls.asked * 0.1}\n"
                            f"vllm:generation_tokens_total{label} {cls.generated}\n", "text/plain")

    def chunk(self, choices: list, usage: dict | None = None) -> None:
        self.event({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": type(self).served,
                    "choices": choices, "usage": usage})

    def done(self, n: int, details: dict | None = None) -> None:
        """The stream's end: the request counted before the usage chunk (vLLM counts a request once it is done),
        then its usage for a 50-token prompt and `n` tokens (`details`: its completion_tokens_details), then [DONE]."""
        cls = type(self)
        with cls.lock:
            cls.asked += 1
            cls.generated += n
        more = {"completion_tokens_details": details} if details else {}
        self.chunk([], {"prompt_tokens": 50, "completion_tokens": n, "total_tokens": 50 + n, **more})
        self.wfile.write(b"data: [DONE]\n\n")


def model_yaml(tmp_path: Path, name: str, block: dict, port: int = 18931, **extra) -> Path:
    """A model's params with the given lifecycle block (and any other fields), as a user would write them."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "served_model_name": name, "endpoint": f"http://127.0.0.1:{port}/v1",
        "hardware": "cpu-host", "architecture": "dense",
        "weights": {"dense_params": 1.0e6, "bytes_per_param": 2, "source": "test"},
        "lifecycle": block, **extra}))
    return path
