"""gRPC core's own log lines, routed into the service's log as JSON lines.

gRPC's C core writes its own lines straight to file descriptor 2 in Abseil's format, beside the
service's JSON lines: ``I1203 10:15:02.123456   4242 chttp2_transport.cc:1403] ipv4:127.0.0.1:50622:
Got goaway [2] err=...``. What grpcio 1.85 does, measured:

- with ``GRPC_VERBOSITY`` unset it logs at INFO and above, so a peer that ends its connection with
  an HTTP/2 error code (a client going away mid-call, a proxy) writes one INFO line per connection;
- ``GRPC_VERBOSITY`` (``NONE``, ``ERROR``, ``INFO``, ``DEBUG``) and ``GRPC_TRACE`` are read once, when
  ``grpc`` is imported: set later they change nothing, and grpcio exposes no setter for the level.

So a service cannot quiet the core after its start-up has imported gRPC; it routes descriptor 2
instead. Each serving process (each worker, after the fork) points descriptor 2 at a pipe, and one
thread reads it: every line in Abseil's format becomes a record on the logger ``grpc`` at its own
level (``I`` info, ``W`` warning, ``E`` error, ``F`` critical), with the core's file and line in
``source``, written as every other line; a line without that prefix continues the record before it
(at its level), or, first, is a ``warning`` of its own. Lines below ``--grpc-log-level`` are read and
dropped (``off`` drops all). Python's own writes (the log handlers, ``sys.stderr``) move to a copy
of the real descriptor 2 first, so the service's lines never pass through the pipe.

What it cannot keep: a line the core writes just before it aborts the process (a failed check) may
die unread with the process; its exit status (134, SIGABRT) still says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from decisionflow_server.foundation.settings import grpc_log_level

LOGGER = "grpc"
_THRESHOLDS = {"off": None, "error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO}
_SEVERITIES = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}
# Abseil's prefix: severity, MMDD, time, thread id, file:line, "] ".
_ABSL_LINE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ ([^ \]]+:\d+)\] ?(.*)$")
# How long a stop waits for the reader to log what the pipe still holds.
_DRAIN_SECONDS = 2.0

logger = logging.getLogger(LOGGER)


@dataclass(frozen=True, slots=True)
class CoreLine:
    """One line the core wrote, as it will be logged: its level, where in the core, and its text."""

    level: int
    source: str | None
    message: str


def parse_line(line: str, previous: CoreLine | None) -> CoreLine:
    """Return line as a record: Abseil's prefix gives its level and source; without one, the line
    continues previous (same level and source), or is a warning of its own."""
    match = _ABSL_LINE.match(line)
    if match is not None:
        return CoreLine(_SEVERITIES[match.group(1)], match.group(2), match.group(3))
    if previous is not None:
        return CoreLine(previous.level, previous.source, line)
    return CoreLine(logging.WARNING, None, line)


class CoreLogRelay:
    """Descriptor 2 of this process routed through a pipe into the ``grpc`` logger, until stop."""

    def __init__(self, level: str) -> None:
        self._threshold = _THRESHOLDS[grpc_log_level(level)]
        self._read, write = os.pipe()
        self._real_stderr = os.dup(2)
        self._moved: tuple[TextIO, TextIO] | None = None
        self._stopping = threading.Event()
        self._move_python_writes()
        os.dup2(write, 2)
        os.close(write)
        self._thread = threading.Thread(target=self._relay, name="grpc-core-logs", daemon=True)
        self._thread.start()

    def _move_python_writes(self) -> None:
        # Python's stderr and the handlers writing to it move to the real descriptor; a stderr that
        # does not write to descriptor 2 (a test's capture) is left as it is.
        current = sys.stderr
        try:
            on_fd_2 = current.fileno() == 2
        except (AttributeError, OSError, ValueError):
            on_fd_2 = False
        if not on_fd_2:
            return
        current.flush()
        moved = open(  # noqa: SIM115 - closed by stop
            os.dup(self._real_stderr),
            "w",
            encoding=current.encoding,
            errors=current.errors,
            buffering=1,
        )
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is current:
                handler.setStream(moved)
        sys.stderr = moved
        self._moved = (current, moved)

    def _relay(self) -> None:
        pending = b""
        previous: CoreLine | None = None
        while True:
            readable, _, _ = select.select([self._read], [], [], 0.1)
            if not readable:
                if self._stopping.is_set():
                    break
                continue
            chunk = os.read(self._read, 65536)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                previous = self._log(raw, previous)
        if pending:
            self._log(pending, previous)

    def _log(self, raw: bytes, previous: CoreLine | None) -> CoreLine | None:
        text = raw.decode("utf-8", errors="backslashreplace").rstrip("\r")
        if not text.strip():
            return previous
        line = parse_line(text, previous)
        if self._threshold is not None and line.level >= self._threshold:
            fields = {} if line.source is None else {"source": line.source}
            logger.log(line.level, "%s", line.message, extra=fields)
        return line

    def stop(self) -> None:
        """Put the real descriptor 2 back, log what the pipe still holds, and move Python's writes back."""
        sys.stderr.flush()
        os.dup2(self._real_stderr, 2)  # the pipe's last write end closes here: the reader sees its end
        self._stopping.set()
        self._thread.join(_DRAIN_SECONDS)
        os.close(self._real_stderr)
        if not self._thread.is_alive():
            os.close(self._read)
        if self._moved is not None:
            original, moved = self._moved
            for handler in logging.getLogger().handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream is moved:
                    handler.setStream(original)
            sys.stderr = original
            moved.close()


@contextlib.contextmanager
def routed(level: str) -> Iterator[CoreLogRelay]:
    """Route gRPC core's lines into the log at level (see the module docstring) for the block's duration."""
    relay = CoreLogRelay(level)
    try:
        yield relay
    finally:
        relay.stop()
