"""A small OpenAI-compatible HTTP server for tests: embeddings and chat completions on 127.0.0.1.

Embeddings are `fake_vector(text, dim)`, so they are deterministic and match `FakeEmbedder`.
Faults are queued per request: `{"status": 429, "retry_after": 0.01}`, `{"status": 500}`,
`{"delay": 2.0}` (sleep before answering), `{"status": 401}`; each request consumes one entry.
The key "bad-key" is always rejected with 401.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from memory_pipelines.embeddings.fake import fake_vector
from memory_pipelines.text.tokens import count_tokens

BAD_KEY = "bad-key"
_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_exceeded"}


class _Reply(Exception):
    """Raised inside a handler to answer with an OpenAI-style error."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class FakeOpenAI:
    """The fake server. Tweak `faults`, `chat_responses`, `embed_dimension`, `max_inputs` between calls."""

    def __init__(self, embed_dimension: int = 384, max_inputs: int = 2048) -> None:
        self.embed_dimension = embed_dimension
        self.max_inputs = max_inputs
        self.max_input_tokens = 8192
        self.max_request_tokens = 300_000
        self.reverse_order = False  # return embeddings last-first (clients must sort by index)
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.faults: deque[dict[str, Any]] = deque()
        self.chat_responses: deque[str] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>/v1`."""
        if self._server is None:
            raise RuntimeError("FakeOpenAI is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        """Listen on a free port in a daemon thread."""
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.01,), name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; pending delays are cut short."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def paths(self) -> list[str]:
        """The path of every request received so far."""
        return [path for path, _, _ in self.requests]

    # -- request handling (called from handler threads) --

    def handle(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """Record the request, apply the next fault, check the key, and build the JSON reply."""
        with self._lock:
            self.requests.append((path, body, headers))
            fault = self.faults.popleft() if self.faults else {}
        if fault.get("delay"):
            self._stopping.wait(float(fault["delay"]))
        if fault.get("status"):
            retry = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {}
            raise _Reply(int(fault["status"]), f"injected fault {fault['status']}", retry)
        self._check_key(headers)
        if path == "/v1/embeddings":
            return self._embeddings(body, fault.get("vectors"))
        if path == "/v1/chat/completions":
            return self._chat(body)
        raise _Reply(404, f"Invalid URL (POST {path})")

    @staticmethod
    def _check_key(headers: dict[str, str]) -> None:
        auth = headers.get("authorization", "")
        if not auth.startswith("Bearer ") or not auth[7:].strip():
            raise _Reply(401, "You didn't provide an API key.")
        if auth[7:].strip() == BAD_KEY:
            raise _Reply(401, "Incorrect API key provided: bad-key.")

    def _embeddings(self, body: dict[str, Any], broken: str | None = None) -> dict[str, Any]:
        """`broken`: "nan" or "zeros" answers the first input with such a vector (a provider's bad day)."""
        inputs = _embedding_inputs(body)
        if len(inputs) > self.max_inputs:
            raise _Reply(400, f"'$.input' is invalid: at most {self.max_inputs} inputs are allowed.")
        tokens = [count_tokens(text) for text in inputs]
        if max(tokens) > self.max_input_tokens:
            raise _Reply(400, f"This model's maximum context length is {self.max_input_tokens} tokens.")
        if sum(tokens) > self.max_request_tokens:
            raise _Reply(400, f"Requested {sum(tokens)} tokens, max {self.max_request_tokens} per request.")
        dim = int(body.get("dimensions") or self.embed_dimension)
        as_base64 = body.get("encoding_format") == "base64"
        vectors = [fake_vector(text, dim) for text in inputs]
        if broken:
            vectors[0] = np.full(dim, np.nan if broken == "nan" else 0.0, dtype=np.float32)
        data = [
            {"object": "embedding", "index": i, "embedding": _encode(v, as_base64)} for i, v in enumerate(vectors)
        ]
        if self.reverse_order:
            data.reverse()
        usage = {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)}
        return {"object": "list", "data": data, "model": body["model"], "usage": usage}

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("model") or not body.get("messages"):
            raise _Reply(400, "'model' and 'messages' are required.")
        with self._lock:
            content = self.chat_responses.popleft() if self.chat_responses else "{}"
        prompt = sum(count_tokens(str(m.get("content") or "")) for m in body["messages"])
        completion = count_tokens(content)
        return {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }


def _embedding_inputs(body: dict[str, Any]) -> list[str]:
    """The request's inputs as a list of non-empty strings (400 otherwise)."""
    if not body.get("model"):
        raise _Reply(400, "you must provide a model parameter")
    raw = body.get("input")
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) and t for t in inputs):
        raise _Reply(400, "'$.input' is invalid: expected a non-empty string or list of non-empty strings.")
    return inputs


def _encode(vector: np.ndarray, as_base64: bool) -> list[float] | str:
    if as_base64:
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # do not wait for handlers stuck in an injected delay

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that time out close the socket under us; that is expected, stay quiet."""


def _handler_for(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            headers = {k.lower(): v for k, v in self.headers.items()}
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                self._send(200, fake.handle(self.path, body, headers))
            except _Reply as reply:
                self._send(reply.status, _error_body(reply), reply.headers)
            except json.JSONDecodeError:
                self._send(400, _error_body(_Reply(400, "We could not parse the JSON body.")))

        def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            """Silence per-request logging."""

    return Handler


def _error_body(reply: _Reply) -> dict[str, Any]:
    code = "invalid_api_key" if reply.status == 401 else None
    error_type = _ERROR_TYPES.get(
        reply.status, "server_error" if reply.status >= 500 else "invalid_request_error"
    )
    return {"error": {"message": reply.message, "type": error_type, "param": None, "code": code}}


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started FakeOpenAI, stopped after the test."""
    with FakeOpenAI() as server:
        yield server
