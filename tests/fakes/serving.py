"""The plumbing every fake HTTP server shares: a background serving thread and JSON replies."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def serving(server: ThreadingHTTPServer, name: str) -> Iterator[str]:
    """Yield the server's ``http://host:port``; on exit stop it, close its socket and join the thread."""
    host, port = server.server_address[:2]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name=name, daemon=True)
    thread.start()
    try:
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    """Answer the request being handled with ``payload`` as JSON (with a Content-Length, for keep-alive)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
