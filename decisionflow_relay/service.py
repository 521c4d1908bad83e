"""The relay: the orchestrator's event feed into a JetStream stream, every event at least once, in log
order per case, the cursor never ahead of what JetStream acknowledged.

One watch (``EventService.WatchEvents`` from the stored cursor, every event, with heartbeats) feeds a
window of at most ``max_in_flight`` publishes. Publishes run concurrently, except that an event waits
for the acknowledgement of the previous event of its case before it is first sent, so the stream
holds each case's events in log order even when a publish has to be retried. A publish that is not
acknowledged is retried with back-off (0.1 s doubling to 5 s) until it is, never skipped: while the
broker is down the window fills, the watch stops reading, and the orchestrator closes the stream
after its stall time (WATCH_FELL_BEHIND); the relay watches again from its position once it can read. The
relay only reads: it never holds anything in the orchestrator but its one stream.

The cursor (``domain.Progress``) is written to the cursor file at most every ``cursor_write_seconds``
and once more on a clean stop. A crash loses at most the acknowledgements above it: the next start
sends those events again with the same Nats-Msg-Id, and JetStream drops them within its duplicate
window (acknowledging each as a duplicate).

    what happens                      what the relay does
    broker down or no stream leader   retries each publish with back-off; logs once when it starts
                                      and once when it ends; the cursor stays
    the orchestrator unavailable      watches again from its position with back-off (0.1 s doubling
                                      to 5 s); logs once when it starts and once when it ends
    the watch refused for good        (credentials, role, request) WatchRefused: the process exits 2
    the cursor file cannot be written CursorFileError: the process exits 1 with the last cursor kept
    SIGTERM or SIGINT                 stops reading, lets publishes in flight finish within the
                                      shutdown grace, stores the cursor, exits 0
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Protocol

import grpc

from decisionflow.client.errors import DecisionflowError
from decisionflow.client.events import EventView, Heartbeat
from decisionflow_relay.backoff import Backoff
from decisionflow_relay.cursor import CursorFile
from decisionflow_relay.domain import Outgoing, Progress, outgoing
from decisionflow_relay.errors import PublishFailed, WatchRefused
from decisionflow_relay.metrics import RelayMetrics

logger = logging.getLogger("decisionflow.relay")

# Refusals of the watch that no retry changes: the relay's configuration must.
REFUSED_FOR_GOOD = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)

Watch = Callable[[int], AsyncIterator[EventView | Heartbeat]]
"""The feed from an index on: every event, and heartbeats (``AsyncEventsClient.watch``)."""


class Publisher(Protocol):
    """JetStream as the relay sees it (``jetstream.JetStreamPublisher``)."""

    async def publish(self, message: Outgoing) -> bool:
        """Publish message; True when JetStream acknowledged it as a duplicate; PublishFailed when not acknowledged."""
        ...


@dataclass(frozen=True, slots=True)
class RelaySettings:
    """What the relay publishes and how fast it moves."""

    prefix: str
    """The subjects' first token(s)."""
    origin: str
    """The audit log's origin: the events' source and the first part of their ids."""
    max_in_flight: int = 256
    """Publishes sent and not yet acknowledged, at most."""
    progress_seconds: float = 60.0
    """How often a progress line is logged."""
    shutdown_grace_seconds: float = 10.0
    """On a stop, how long publishes in flight may still be acknowledged."""
    cursor_write_seconds: float = 0.1
    """The least time between two writes of the cursor file (each is an fsync)."""


class _Outage:
    """Whether JetStream is refusing publishes; logs the start and the end of an outage once each."""

    def __init__(self, metrics: RelayMetrics, cursor: Callable[[], int]) -> None:
        self._metrics = metrics
        self._cursor = cursor
        self._since: float | None = None
        self._failures = 0

    def failed(self, failure: PublishFailed) -> None:
        self._failures += 1
        if self._since is None:
            self._since = time.monotonic()
            self._metrics.broker_up.set(0)
            logger.error(
                "JetStream is not acknowledging publishes (%s); retrying with back-off, cursor kept at %d",
                failure,
                self._cursor(),
            )

    def recovered(self) -> None:
        if self._since is None:
            return
        logger.warning(
            "JetStream acknowledges publishes again after %.1f s (%d attempts failed)",
            time.monotonic() - self._since,
            self._failures,
        )
        self._since, self._failures = None, 0
        self._metrics.broker_up.set(1)


class Relay:
    """One relay process's work (see the module docstring)."""

    def __init__(
        self,
        watch: Watch,
        publisher: Publisher,
        cursor_file: CursorFile,
        settings: RelaySettings,
        metrics: RelayMetrics,
        *,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._watch_from = watch
        self._publisher = publisher
        self._cursor_file = cursor_file
        self._settings = settings
        self._metrics = metrics
        self._wall_clock = wall_clock
        self._sleep = sleep
        self._progress = Progress(0)
        self._written = 0
        self._window = asyncio.Semaphore(settings.max_in_flight)
        self._changed = asyncio.Event()
        self._deliveries: set[asyncio.Task[None]] = set()
        self._last_of_case: dict[str, asyncio.Task[None]] = {}
        self._outage = _Outage(metrics, lambda: self._written)
        self._published = 0
        self._duplicates = 0
        metrics.follow(lambda: self._progress.lag_events, lambda: self._progress.lag_seconds(self._wall_clock()))

    @property
    def progress(self) -> Progress:
        """Where the relay stands."""
        return self._progress

    async def run(self, stop: asyncio.Event) -> None:
        """Relay from the stored cursor until stop is set (then store the cursor and return); raise
        WatchRefused or CursorFileError when the relay cannot go on."""
        start = await asyncio.to_thread(self._cursor_file.read)
        self._progress, self._written = Progress(start), start
        self._metrics.cursor.set(start)
        logger.info("relaying events from index %d (cursor file %s)", start, self._cursor_file.path)
        watch = asyncio.create_task(self._watch(), name="watch")
        keeper = asyncio.create_task(self._keep_cursor(), name="cursor")
        reporter = asyncio.create_task(self._report(), name="progress")
        stopped = asyncio.create_task(stop.wait(), name="stop")
        try:
            await asyncio.wait({watch, keeper, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (watch, stopped, reporter):
                task.cancel()
            await asyncio.gather(watch, stopped, reporter, return_exceptions=True)
            await self._drain()
            keeper.cancel()
            # A keeper that failed raises here: its cursor file cannot be written, so nothing more is stored.
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        await self._store_cursor()
        logger.info(
            "stopped: cursor %d stored, %d events published (%d duplicates)",
            self._written,
            self._published,
            self._duplicates,
        )
        # The watch ends by itself only on a refusal for good.
        if not watch.cancelled() and (refusal := watch.exception()) is not None:
            raise refusal

    async def _watch(self) -> None:
        backoff = Backoff()
        logged = False
        while True:
            try:
                async for item in self._watch_from(self._progress.position):
                    backoff.reset()
                    if logged:
                        logger.warning("the event feed answers again at index %d", self._progress.position)
                        logged = False
                    if isinstance(item, Heartbeat):
                        self._progress.heard(item.next_index)
                        self._changed.set()
                        continue
                    await self._window.acquire()
                    self._progress.sent(item.index, item.occurred_at)
                    self._dispatch(outgoing(self._settings.prefix, self._settings.origin, item))
                # The server ended the stream (it does not while serving): watch again after a pause.
                await self._sleep(backoff.pause())
            except DecisionflowError as error:
                if error.code in REFUSED_FOR_GOOD:
                    raise WatchRefused(error.code.name, error.reason, error.message) from error
                if not logged:
                    logger.error(
                        "the event feed failed (%s); watching again from index %d with back-off",
                        error,
                        self._progress.position,
                    )
                    logged = True
                await self._sleep(backoff.pause())

    def _dispatch(self, message: Outgoing) -> None:
        previous = self._last_of_case.get(message.case_id)
        task = asyncio.create_task(self._deliver(message, previous), name=f"publish {message.index}")
        self._last_of_case[message.case_id] = task
        self._deliveries.add(task)
        task.add_done_callback(partial(self._delivered, message.case_id))

    def _delivered(self, case_id: str, task: asyncio.Task[None]) -> None:
        self._deliveries.discard(task)
        if self._last_of_case.get(case_id) is task:
            del self._last_of_case[case_id]

    async def _deliver(self, message: Outgoing, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            # A case's events reach the stream in log order: the next is first sent once the previous is stored.
            await asyncio.wait({previous})
            if previous.cancelled():
                return
        backoff = Backoff()
        while True:
            try:
                duplicate = await self._publisher.publish(message)
            except PublishFailed as failure:
                self._metrics.publish_errors.inc()
                self._outage.failed(failure)
                await self._sleep(backoff.pause())
                continue
            break
        self._outage.recovered()
        self._metrics.published.inc()
        self._published += 1
        if duplicate:
            self._metrics.duplicates.inc()
            self._duplicates += 1
        self._progress.acknowledged(message.index)
        self._window.release()
        self._changed.set()

    async def _drain(self) -> None:
        pending = set(self._deliveries)
        if pending:
            _done, late = await asyncio.wait(pending, timeout=self._settings.shutdown_grace_seconds)
            for task in late:
                task.cancel()
            if late:
                await asyncio.gather(*late, return_exceptions=True)
                logger.warning(
                    "%d publishes were not acknowledged within the shutdown grace: the next start sends them again",
                    len(late),
                )

    async def _keep_cursor(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            await self._store_cursor()
            await self._sleep(self._settings.cursor_write_seconds)

    async def _store_cursor(self) -> None:
        cursor = self._progress.cursor
        if cursor != self._written:
            await asyncio.to_thread(self._cursor_file.write, cursor)
            self._written = cursor
            self._metrics.cursor.set(cursor)

    async def _report(self) -> None:
        published, duplicates = self._published, self._duplicates
        while True:
            await self._sleep(self._settings.progress_seconds)
            logger.info(
                "progress: published %d (duplicates %d) in the last %g s, %d in all; cursor %d; lag %d events, %.1f s",
                self._published - published,
                self._duplicates - duplicates,
                self._settings.progress_seconds,
                self._published,
                self._written,
                self._progress.lag_events,
                self._progress.lag_seconds(self._wall_clock()),
            )
            published, duplicates = self._published, self._duplicates
