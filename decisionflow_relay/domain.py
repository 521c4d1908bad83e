"""What the relay publishes for one event, and where its cursor stands: pure rules, no I/O.

An event of the orchestrator's feed (``decisionflow.client.events.EventView``) becomes one JetStream
message:

    subject       <prefix>.<origin token>.<kind>.<action token>
    Nats-Msg-Id   <origin>/<index>            JetStream drops a second message with the same id
                                              within the stream's duplicate window
    payload       a CloudEvents 1.0 structured JSON document (``cloud_event``)

A token is a subject's part between dots: '.', '*', '>', whitespace and control characters are each
written '_' (an empty part as '_'), so every subject names exactly four parts after the prefix and
never a wildcard. The document keeps the exact origin and action.

``Progress`` is the cursor: the index of the first event JetStream has not acknowledged, below which
every event has been. Events are published in index order and acknowledged in any order; the cursor is
the lowest index still in flight, or, with none in flight, the position the watch reached. A crash
loses at most the acknowledgements above the cursor: a restart sends those events again (JetStream
drops them as duplicates) and skips none.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from decisionflow.client.events import EventView
from decisionflow.vocabulary import Decision

# The audit log's origin when the orchestrator is given none (its --audit-origin default); a test keeps
# the two equal, since the relay imports nothing of the orchestrator.
DEFAULT_ORIGIN = "decisionflow.local/audit"
DEFAULT_PREFIX = "decisionflow"
CLOUDEVENTS_VERSION = "1.0"
TYPE_PREFIX = "dev.decisionflow."
CONTENT_TYPE = "application/json"
MSG_ID_HEADER = "Nats-Msg-Id"
_JSON = JSONFormat()

# What cannot appear inside a subject token: the separator, the wildcards, whitespace, control characters.
_UNSAFE = re.compile(r"[.*>\s\x00-\x1f\x7f]")


def subject_token(text: str) -> str:
    """text as one subject token: each '.', '*', '>', whitespace or control character written '_'."""
    return _UNSAFE.sub("_", text) or "_"


def check_prefix(prefix: str) -> str:
    """prefix when it is a subject of literal tokens (``decisionflow``, ``acme.audit``); ValueError otherwise."""
    tokens = prefix.split(".")
    if any(not token or _UNSAFE.search(token) for token in tokens):
        raise ValueError(
            f"{prefix!r} is not a subject prefix: dot-separated tokens, none empty, without '*', '>' or whitespace"
        )
    return prefix


def subject(prefix: str, origin: str, event: EventView) -> str:
    """The subject event is published on: <prefix>.<origin>.<kind>.<action>, each part made a token."""
    return ".".join((prefix, subject_token(origin), subject_token(event.kind), subject_token(event.action)))


def stream_subjects(prefix: str) -> str:
    """The subjects a stream for prefix captures: every subject under it."""
    return f"{prefix}.>"


def message_id(origin: str, index: int) -> str:
    """The event's id, in the CloudEvents document and the Nats-Msg-Id header: <origin>/<index>."""
    return f"{origin}/{index}"


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def event_data(event: EventView) -> dict[str, object]:
    """The CloudEvents data of event: its decoded fields, the leaf as base64 and its index."""
    return {
        "index": event.index,
        "leaf": base64.b64encode(event.leaf).decode("ascii"),
        "kind": event.kind,
        "case_id": event.case_id,
        "operation_id": event.operation_id,
        "action": event.action,
        "state": event.state.value,
        "principal": event.principal or None,
        "occurred_at": None if event.occurred_at is None else _rfc3339(event.occurred_at),
        "decision": None if event.decision is Decision.UNSPECIFIED else event.decision.value,
    }


def cloud_event(origin: str, event: EventView) -> CloudEvent:
    """The CloudEvents 1.0 event of event: id <origin>/<index>, source the origin, type
    dev.decisionflow.<kind>, subject the operation id, time occurred_at, data ``event_data``."""
    attributes: dict[str, Any] = {
        "specversion": CLOUDEVENTS_VERSION,
        "id": message_id(origin, event.index),
        "source": origin,
        "type": TYPE_PREFIX + event.kind,
        "datacontenttype": CONTENT_TYPE,
    }
    if event.operation_id:
        attributes["subject"] = event.operation_id
    if event.occurred_at is not None:
        attributes["time"] = event.occurred_at.astimezone(UTC)
    return CloudEvent(attributes, event_data(event))


def encode(event: CloudEvent) -> bytes:
    """The message payload: the event in structured mode, JSON format (the SDK checks every attribute)."""
    return _JSON.write(event)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One event ready to publish."""

    index: int
    case_id: str
    subject: str
    message_id: str
    payload: bytes
    occurred_at: datetime | None


def outgoing(prefix: str, origin: str, event: EventView) -> Outgoing:
    """The message of event (see the module docstring)."""
    return Outgoing(
        index=event.index,
        case_id=event.case_id,
        subject=subject(prefix, origin, event),
        message_id=message_id(origin, event.index),
        payload=encode(cloud_event(origin, event)),
        occurred_at=event.occurred_at,
    )


class Progress:
    """Where the relay stands: the events in flight, the watch's position, the newest position heard of."""

    def __init__(self, cursor: int) -> None:
        self._position = cursor
        self._head = cursor
        # In index order: events are sent in index order and a dict keeps insertion order through deletions.
        self._in_flight: dict[int, datetime | None] = {}

    def sent(self, index: int, occurred_at: datetime | None) -> None:
        """Note that the event at index (the watch's next) is being published."""
        if index < self._position:
            raise ValueError(f"event {index} is below the watch's position {self._position}")
        self._in_flight[index] = occurred_at
        self._position = index + 1
        self._head = max(self._head, self._position)

    def heard(self, next_index: int) -> None:
        """Note a heartbeat: every event below next_index has been sent by the stream."""
        self._position = max(self._position, next_index)
        self._head = max(self._head, next_index)

    def acknowledged(self, index: int) -> None:
        """Note that JetStream acknowledged the event at index."""
        del self._in_flight[index]

    @property
    def cursor(self) -> int:
        """The first index not acknowledged: every event below it has been."""
        return next(iter(self._in_flight), self._position)

    @property
    def position(self) -> int:
        """The index the watch resumes from."""
        return self._position

    @property
    def in_flight(self) -> int:
        """Events sent and not acknowledged yet."""
        return len(self._in_flight)

    @property
    def lag_events(self) -> int:
        """The newest position heard of, less the cursor."""
        return self._head - self.cursor

    def lag_seconds(self, now: datetime) -> float:
        """now less the occurred_at of the oldest event not acknowledged; 0 with none in flight."""
        oldest = next(iter(self._in_flight.values()), None)
        if oldest is None:
            return 0.0
        return max(0.0, (now - oldest).total_seconds())
