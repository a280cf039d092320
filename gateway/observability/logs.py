"""JSON-lines logs that carry the current trace and span ids, so a log line leads to its trace."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

# LogRecord attributes that are not user-supplied ``extra=`` fields.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_DROPPED = frozenset({"color_message"})  # uvicorn's ANSI-coloured copy of the message


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, trace_id/span_id when in a span, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            entry["trace_id"] = format(context.trace_id, "032x")
            entry["span_id"] = format(context.span_id, "016x")
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in _DROPPED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(fmt: str = "json", level: int = logging.INFO) -> None:
    """Root handler for ``python -m gateway``; uvicorn's own loggers propagate to it."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
