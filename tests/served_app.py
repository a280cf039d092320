"""An app behind a real uvicorn server in the test's own event loop, for what the in-memory client cannot do: a
client that hangs up mid-stream, or a blocking HTTP client of its own (the folder sync)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from litestar import Litestar

from tests.ports import free_port


@asynccontextmanager
async def served_app(app: Litestar) -> AsyncIterator[str]:
    """Yields the server's base URL once uvicorn has started (its lifespan run); a start that fails raises why."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on"))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving
