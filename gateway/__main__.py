"""``python -m gateway``: serve the app with uvicorn on the configured host and port."""

from __future__ import annotations

import logging

import uvicorn

from gateway.access.keys import OpenAccessError, check_exposure
from gateway.app import create_app
from gateway.observability.logs import configure_logging
from gateway.settings import Settings


def main() -> None:
    settings = Settings()
    server, observability = settings.server, settings.observability
    configure_logging(observability.log_format, logging.getLevelNamesMapping()[observability.log_level])
    try:
        # Before loading models: an open public gateway never starts.
        check_exposure(settings.access, server.host, quiet=True)
    except OpenAccessError as exc:
        raise SystemExit(f"gateway: {exc}") from exc
    uvicorn.run(
        create_app(settings),
        host=server.host,
        port=server.port,
        log_config=None,  # keep the root handler above: uvicorn's lines become JSON too
        log_level=observability.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=30,
    )


if __name__ == "__main__":
    main()
