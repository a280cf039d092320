"""A live gateway for the browser tests: uvicorn in a thread of its own (its own event loop), on a free port."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from litestar import Litestar

from tests.ports import free_port

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def serving(app: Litestar) -> Iterator[str]:
    """The app's base URL while it is served."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    # Start-up trains the injection classifier and opens the stores: on a loaded 2-core machine that has taken
    # over 30 s, so wait up to 120 s (it returns as soon as the server is up).
    for _ in range(2400):
        if server.started or not thread.is_alive():
            break
        threading.Event().wait(0.05)
    assert server.started, "the gateway did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
