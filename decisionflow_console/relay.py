"""The relay's position as its own metrics say it: the console reads ``decisionflow-relay``'s Prometheus
endpoint (``--relay-metrics-url``) with a short timeout, parses it with prometheus_client's text parser and
keeps the seven samples an operator reads (docs/events.md, "Metrics and logs"). It asks the orchestrator
nothing: what the relay has published is the relay's to say.

A read that fails raises one of these, each carrying the URL tried and what happened in words, never a
traceback (the page shows both):

    RelayUnreadable        the relay's metrics could not be read                  HTTP
    ├── RelayNotAnswering  no connection, no answer within the timeout (the whole
    │                      read), or an answer that is not HTTP                   503
    └── NotRelayMetrics    an answer, but not the relay's metrics (a status other
                           than 200, too large, not the text format, a sample
                           missing)                                               502
"""

from __future__ import annotations

import asyncio
import math
import os
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx2
from prometheus_client.parser import text_string_to_metric_families

# A page waits on this read. The relay answers a scrape from memory (a few kilobytes), so two seconds is
# ample on a working network, and an operator is told promptly when it is not.
READ_TIMEOUT_SECONDS = 2.0
# The relay's scrape is a few kilobytes; anything far larger is not its endpoint, and is not read whole.
MAX_METRICS_BYTES = 1024 * 1024

CURSOR = "decisionflow_relay_cursor_index"
LAG_EVENTS = "decisionflow_relay_lag_events"
LAG_SECONDS = "decisionflow_relay_lag_seconds"
BROKER_UP = "decisionflow_relay_broker_up"
PUBLISHED = "decisionflow_relay_published_total"
DUPLICATES = "decisionflow_relay_duplicates_total"
PUBLISH_ERRORS = "decisionflow_relay_publish_errors_total"
# The relay's process start, which its counters count from (they start again at 0 with each process).
STARTED = "process_start_time_seconds"
REQUIRED = (CURSOR, LAG_EVENTS, LAG_SECONDS, BROKER_UP, PUBLISHED, DUPLICATES, PUBLISH_ERRORS)


class RelayUnreadable(Exception):
    """The relay's metrics at url could not be read; words says what happened."""

    status = 502

    def __init__(self, url: str, words: str) -> None:
        super().__init__(f"{url}: {words}")
        self.url = url
        self.words = words


class RelayNotAnswering(RelayUnreadable):
    """Nothing answered at url: no connection, or no answer within READ_TIMEOUT_SECONDS."""

    status = 503


class NotRelayMetrics(RelayUnreadable):
    """Something answered at url, but not with the relay's metrics."""


@dataclass(frozen=True, slots=True)
class RelayPosition:
    """Where the relay stands, as its metrics said it at read_at."""

    cursor: int
    """The index of the first event JetStream has not acknowledged: every event below it is in the stream."""
    lag_events: int
    """The newest position the relay has seen on the event feed, less the cursor."""
    lag_seconds: float
    """How long ago the oldest event not yet acknowledged occurred; 0 when caught up."""
    broker_up: bool
    """Whether JetStream acknowledges publishes (false from a failed publish until one succeeds)."""
    published: int
    """Events JetStream acknowledged since the relay process started, duplicates included."""
    duplicates: int
    """Of those, re-sends JetStream acknowledged as duplicates (and so dropped)."""
    publish_errors: int
    """Publish attempts JetStream did not acknowledge since the relay process started (each retried)."""
    started_at: datetime | None
    """When the relay process started (its counters count from then); None when it does not say."""
    read_at: datetime
    """When the console read these metrics."""


def position_from_metrics(text: str, read_at: datetime) -> RelayPosition:
    """Return the relay's position from its metrics in the Prometheus text format; ValueError saying what is
    wrong when the text is not that format or lacks one of the relay's samples."""
    samples: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.labels:
                    samples[sample.name] = sample.value
    except (ValueError, IndexError, TypeError) as exc:
        # The parser raises ValueError for most malformed lines, and IndexError or TypeError for a few.
        said = str(exc)[:120]  # the parser quotes the line it stopped at, which may be long
        raise ValueError(f"the answer is not in the Prometheus text format ({said})") from exc
    missing = [name for name in REQUIRED if name not in samples]
    if missing:
        raise ValueError(f"the answer has no {', '.join(missing)}: it is not decisionflow-relay's metrics endpoint")
    if not all(math.isfinite(samples[name]) for name in REQUIRED):
        raise ValueError("the answer has a relay sample that is not a finite number")
    started = samples.get(STARTED)
    return RelayPosition(
        cursor=int(samples[CURSOR]),
        lag_events=int(samples[LAG_EVENTS]),
        lag_seconds=max(0.0, samples[LAG_SECONDS]),
        broker_up=samples[BROKER_UP] >= 1,
        published=int(samples[PUBLISHED]),
        duplicates=int(samples[DUPLICATES]),
        publish_errors=int(samples[PUBLISH_ERRORS]),
        started_at=datetime.fromtimestamp(started, UTC) if started is not None and math.isfinite(started) else None,
        read_at=read_at,
    )


async def read_position(url: str, *, timeout_seconds: float = READ_TIMEOUT_SECONDS) -> RelayPosition:
    """Return the relay's position read from its metrics endpoint at url; raise RelayNotAnswering or
    NotRelayMetrics, with the URL and what happened, when it cannot be read."""
    try:
        # The whole read, not each step of it: an answer that trickles in is bounded too.
        async with asyncio.timeout(timeout_seconds):
            body = await _metrics_text(url, timeout_seconds)
    except (TimeoutError, httpx2.TimeoutException) as exc:
        raise RelayNotAnswering(url, f"it did not answer within {timeout_seconds:g} s") from exc
    except httpx2.ConnectError as exc:
        raise RelayNotAnswering(url, f"the console could not connect ({_reason(exc)})") from exc
    except httpx2.HTTPError as exc:
        # Connected, but what came back is not HTTP (another protocol's port), or the connection broke.
        raise RelayNotAnswering(url, f"it did not answer in HTTP ({_reason(exc)})") from exc
    try:
        return position_from_metrics(body.decode("utf-8"), datetime.now(UTC))
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotRelayMetrics(url, str(exc)) from exc


async def _metrics_text(url: str, timeout_seconds: float) -> bytes:
    """The body of a 200 answer at url, at most MAX_METRICS_BYTES; NotRelayMetrics for any other answer."""
    # No proxy or certificate settings from the environment: the relay's endpoint is an internal address,
    # and what is read must be what the setting names.
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(timeout_seconds), trust_env=False, follow_redirects=False) as client,
        client.stream("GET", url, headers={"Accept": "text/plain"}) as answer,
    ):
        if answer.status_code != 200:
            raise NotRelayMetrics(url, f"it answered HTTP {answer.status_code}, not 200 with the relay's metrics")
        body = bytearray()
        async for chunk in answer.aiter_bytes():
            body += chunk
            if len(body) > MAX_METRICS_BYTES:
                raise NotRelayMetrics(
                    url, f"it answered more than {MAX_METRICS_BYTES // 1024} KiB: not the relay's metrics"
                )
        return bytes(body)


def _reason(error: Exception) -> str:
    """What the innermost cause says: an OS error's own words ("Connection refused", "Name or service not
    known"), else its text, else the error's class name."""
    cause: BaseException = error
    for _ in range(8):  # a chain is short; a bound keeps a cycle of contexts from looping
        inner = cause.__cause__ or cause.__context__
        if inner is None:
            break
        cause = inner
    if isinstance(cause, OSError) and cause.errno is not None:
        # asyncio words a refused connection "Connect call failed (address)"; the errno's own words are plainer.
        said = os.strerror(cause.errno) if cause.errno > 0 else (cause.strerror or str(cause))
    else:
        said = str(cause) or type(error).__name__
    return said.rstrip(".")  # the page ends the sentence
