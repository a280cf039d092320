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
    configure_logging(settings.log_format, logging.getLevelNamesMapping()[settings.log_level])
    try:
        check_exposure(settings, quiet=True)  # before loading models: an open public gateway never starts
    except OpenAccessError as exc:
        raise SystemExit(f"gateway: {exc}") from exc
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,  # keep the root handler above: uvicorn's lines become JSON too
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=30,
    )


if __name__ == "__main__":
    main()
