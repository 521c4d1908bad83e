"""Structured JSON logs: one object per line with the event, its operation context and, inside a
traced call, the call's ``trace_id`` and ``span_id`` (docs/observability.md lists the fields)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from opentelemetry import trace

CONTEXT_FIELDS = (
    "operation_id",
    "case_id",
    "checkpoint_id",
    "principal",
    "outcome",
    "rpc",
    "code",
    "reason",
    "detail",
    "duration_ms",
    "attempt",
    "service",
    "setting",
    "worker",
    "pid",
    "event",
    "port",
    "source",
)


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
        # The span current where the record was made: the formatter runs in the logging call itself.
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            entry["trace_id"] = trace.format_trace_id(span.trace_id)
            entry["span_id"] = trace.format_span_id(span.span_id)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def json_line(logger: str, level: int, message: str, **fields: object) -> str:
    """Return one log line formatted as every other (time, level, logger, message, fields), for a line
    that must be written whatever the log level, such as the ``listening`` line on stdout."""
    record = logging.makeLogRecord({"name": logger, "levelno": level, "levelname": logging.getLevelName(level)})
    record.msg = message
    record.__dict__.update(fields)
    return JsonFormatter().format(record)


def configure(level: str = "info") -> None:
    """Send JSON logs to stderr at level."""
    # A record would otherwise look up its caller's frame, thread, process id and process name on
    # every call (the logging HOWTO's "Optimization" switches); no line shows them, and on a served
    # call they were a third of the access line's cost (the pid alone is a system call).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Alembic is imported only when a schema is migrated (decisionflow_server.storage.migrating), after this: its
    # registration of its own plugins on import, logged at info, says nothing about the service.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
