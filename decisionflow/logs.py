"""Structured JSON logs: one object per line with the event and its operation context."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

CONTEXT_FIELDS = ("operation_id", "case_id", "principal", "outcome", "rpc", "code", "service", "setting")


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object: time, level, logger, message and context fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as a single JSON line."""
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str = "info") -> None:
    """Send JSON logs to stderr at level."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
