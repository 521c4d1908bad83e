"""A service's log as the tests read it: its JSON records, and apart from them any line that is not one.

A test that asks what a service logged reads the records and is not broken by a line it does not own;
a test that asks whether the log is JSON lines only says so (``assert_json_only``), and a failure
names the foreign lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REQUIRED_FIELDS = frozenset({"time", "level", "logger", "message"})


@dataclass(frozen=True, slots=True)
class ServiceLog:
    """The lines of a log: records (JSON objects, in order) and foreign lines (numbered from 1, as written)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    foreign: list[tuple[int, str]] = field(default_factory=list)

    def assert_json_only(self) -> None:
        """Fail, naming them, when any line is not a JSON object with time, level, logger and message."""
        incomplete = [record for record in self.records if not record.keys() >= REQUIRED_FIELDS]
        assert not self.foreign, f"{len(self.foreign)} log line(s) are not JSON: " + "; ".join(
            f"line {number}: {text[:200]!r}" for number, text in self.foreign[:5]
        )
        assert not incomplete, f"log records without {sorted(REQUIRED_FIELDS)}: {incomplete[:5]}"


def read_log(text: str) -> ServiceLog:
    """Split text (one log, JSON lines) into its records and its foreign lines; blank lines are skipped."""
    log = ServiceLog()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            log.records.append(record)
        else:
            log.foreign.append((number, line))
    return log


def read_log_file(path: Path) -> ServiceLog:
    """read_log of a log file."""
    return read_log(path.read_text(encoding="utf-8", errors="replace"))
