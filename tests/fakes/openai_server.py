"""A small OpenAI-compatible upstream on a loopback port that injects the faults real upstreams have.

Real HTTP, real sockets: the gateway's ``ChatOpenAI`` (and the OpenAI SDK and httpx under it) meet
each fault exactly as they would in production, so what is tested is the whole adapter stack, not a
mock of the client. Each chat request takes the next scripted :data:`Behaviour` (then ``default``):

- :class:`Answer`: a normal completion (JSON, or server-sent events when the request streams);
- :class:`Status`: an error answer, e.g. 429 with ``Retry-After`` or a 500/503;
- :class:`Hang`: headers never come (until ``seconds`` pass or the server closes);
- :class:`Cut`: a streamed answer whose connection drops after ``chunks`` content chunks (a plain
  answer drops mid-body);
- :class:`Echo`: answers with the last message it was sent (what a guardrail let through comes back).

A request for structured output (``response_format``) is answered from ``structured`` (JSON per schema name),
when given, without taking a scripted behaviour: graders and planners agree while the answer is what is scripted.
Streamed tokens are logged with the time each was written (:attr:`FakeOpenAI.written`).

Every request's messages are recorded (:attr:`FakeOpenAI.seen`): what the upstream was told.

:meth:`FakeOpenAI.refuse` closes the listener, so connections are refused, until :meth:`restore`.
Every response says ``Connection: close``, so no pooled connection outlives a refusal.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.ports import free_port


@dataclass(frozen=True)
class Answer:
    """``token_delay_s``: when streamed, the pause before each word-sized token (a model generating)."""

    text: str = "Hello from the upstream."
    delay_s: float = 0.0
    token_delay_s: float = 0.0


@dataclass(frozen=True)
class Status:
    code: int
    retry_after: str | None = None


@dataclass(frozen=True)
class Hang:
    seconds: float = 30.0


@dataclass(frozen=True)
class Cut:
    chunks: int = 2


@dataclass(frozen=True)
class Echo:
    prefix: str = "You said: "


Behaviour = Answer | Status | Hang | Cut | Echo


@dataclass(frozen=True)
class Seen:
    """One chat request as the upstream received it."""

    model: str
    stream: bool
    at: float
    messages: tuple[str, ...] = ()


class FakeOpenAI:
    """``with FakeOpenAI() as upstream:``; ``upstream.script(Status(503), Answer())``; ``upstream.base_url``."""

    def __init__(
        self,
        default: Behaviour | None = None,
        *,
        name: str = "fake",
        structured: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.port = free_port()
        self.structured = structured
        self.written: list[tuple[float, str]] = []  # (time.monotonic(), text) of each streamed token
        self.default: Behaviour = default or Answer()
        self.name = name
        self.seen: list[Seen] = []
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def calls(self) -> int:
        return len(self.seen)

    def script(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._script.extend(behaviours)

    @property
    def received(self) -> str:
        """Every message text every request carried, joined: what this upstream was told, all of it."""
        return "\n".join(text for seen in self.seen for text in seen.messages)

    def next_behaviour(self, model: str, stream: bool, messages: tuple[str, ...] = ()) -> Behaviour:
        with self._lock:
            self.seen.append(Seen(model=model, stream=stream, at=time.monotonic(), messages=messages))
            return self._script.popleft() if self._script else self.default

    def start(self) -> FakeOpenAI:
        self._closing.clear()
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def refuse(self) -> None:
        """Close the listener: new connections are refused until :meth:`restore`."""
        self._closing.set()  # hanging handlers give up too
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def restore(self) -> None:
        self.start()

    def close(self) -> None:
        self.refuse()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
    payload: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    if usage:
        payload["usage"] = usage
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _completion(model: str, text: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": 12,
                "completion_tokens": len(text.split()),
                "total_tokens": 12 + len(text.split()),
            },
        }
    ).encode()


def _handler(upstream: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "fake"}]})
            else:
                self._json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = json.loads(self.rfile.read(length) or b"{}")
            model, stream = str(request.get("model", "")), bool(request.get("stream"))
            messages = tuple(str(m.get("content", "")) for m in request.get("messages", []) if isinstance(m, dict))
            schema = (request.get("response_format") or {}).get("json_schema", {}).get("name")
            if upstream.structured is not None and schema in upstream.structured:
                self._json(200, json.loads(_completion(model, json.dumps(upstream.structured[schema]))))
                return
            behaviour = upstream.next_behaviour(model, stream, messages)
            if isinstance(behaviour, Echo):
                behaviour = Answer(behaviour.prefix + (messages[-1] if messages else ""))
            # The gateway may give up on a request (its timeout) before the answer is written: nothing to do.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._behave(behaviour, model, stream)

        def _behave(self, behaviour: Behaviour, model: str, stream: bool) -> None:
            if isinstance(behaviour, Status):
                headers = {"Retry-After": behaviour.retry_after} if behaviour.retry_after is not None else {}
                body = {"error": {"message": f"injected HTTP {behaviour.code}", "type": "server_error"}}
                self._json(behaviour.code, body, headers)
            elif isinstance(behaviour, Hang):
                upstream._closing.wait(behaviour.seconds)
                self.close_connection = True
            elif isinstance(behaviour, Cut):
                self._cut(model, stream, behaviour.chunks)
            else:
                if behaviour.delay_s:
                    time.sleep(behaviour.delay_s)
                if stream:
                    self._stream(model, behaviour.text, token_delay_s=behaviour.token_delay_s)
                else:
                    # Generated at the same pace as a stream, sent whole at the end.
                    for index, word in enumerate(behaviour.text.split(" ") if behaviour.token_delay_s else []):
                        time.sleep(behaviour.token_delay_s)
                        upstream.written.append((time.monotonic(), word if index == 0 else " " + word))
                    body = _completion(model, behaviour.text)
                    self._send(200, "application/json", {"Content-Length": str(len(body))})
                    self.wfile.write(body)

        def _stream(self, model: str, text: str, cut_after: int | None = None, token_delay_s: float = 0.0) -> None:
            self._send(200, "text/event-stream", {"Transfer-Encoding": "chunked"})
            self._write_chunk(_chunk(model, {"role": "assistant", "content": ""}))
            for sent, word in enumerate(text.split(" ")):
                if cut_after is not None and sent >= cut_after:
                    self.wfile.flush()
                    self.close_connection = True
                    return  # no terminating chunk: the reader sees an incomplete chunked body
                if token_delay_s:
                    time.sleep(token_delay_s)
                token = word if sent == 0 else " " + word
                self._write_chunk(_chunk(model, {"content": token}))
                upstream.written.append((time.monotonic(), token))
            self._write_chunk(_chunk(model, {}, "stop"))
            self._write_chunk(
                _chunk(model, {}, usage={"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17})
            )
            self._write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")

        def _cut(self, model: str, stream: bool, chunks: int) -> None:
            if stream:
                self._stream(model, "this answer will break off before it ends, mid way through", cut_after=chunks)
                return
            body = _completion(model, "this answer will break off")
            self._send(200, "application/json", {"Content-Length": str(len(body))})
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True

        def _write_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self._send(status, "application/json", {"Content-Length": str(len(data)), **(headers or {})})
            self.wfile.write(data)

        def _send(self, status: int, content_type: str, headers: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Connection", "close")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.close_connection = True

    return Handler
