"""A tiny OpenAI-compatible upstream on loopback: ``GET /v1/models`` and non-streaming chat completions.

Enough for a gateway started as a separate process (or a container on the host network) to pass its
readiness probe and answer a ``direct`` query through the real ``openai`` client, and for the test to
see which requests arrived. Every answer is ``FakeOpenAI.answer``; usage counts are real word counts.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.serving import send_json, serving

MODEL = "fake-model"


@dataclass
class FakeOpenAI:
    """The fake's state; tests read ``requests`` (method, path) in arrival order."""

    answer: str = "Four."
    url: str = ""
    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, method: str, path: str) -> None:
        with self.lock:
            self.requests.append((method, path))

    def seen(self, method: str, path: str) -> int:
        with self.lock:
            return self.requests.count((method, path))

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt_words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
        answer_words = len(self.answer.split())
        return {
            "id": f"chatcmpl-fake-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", MODEL),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": self.answer}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_words,
                "completion_tokens": answer_words,
                "total_tokens": prompt_words + answer_words,
            },
        }


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            return

        def reply(self, status: int, payload: dict[str, Any]) -> None:
            send_json(self, status, payload)

        def do_GET(self) -> None:
            fake.record("GET", self.path)
            if self.path.rstrip("/") == "/v1/models":
                self.reply(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]})
            else:
                self.reply(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

        def do_POST(self) -> None:
            fake.record("POST", self.path)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path != "/v1/chat/completions":
                self.reply(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            elif body.get("stream"):
                self.reply(400, {"error": {"message": "this fake does not stream", "type": "invalid_request_error"}})
            else:
                self.reply(200, fake.completion(body))

    return Handler


@contextmanager
def running_fake_openai(answer: str = "Four.") -> Iterator[FakeOpenAI]:
    """Serve a fresh fake on a free loopback port; ``fake.url`` is its ``/v1`` base URL."""
    fake = FakeOpenAI(answer=answer)
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake)), "fake-openai") as url:
        fake.url = f"{url}/v1"
        yield fake
