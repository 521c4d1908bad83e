"""The process's event feed and the watch use case over it.

``EventFeed`` is the one reader of the log in a server process. While at least one stream is open it
runs a pass every ``poll_seconds``: it sequences the entries waiting (without signing: checkpoints stay
the sequencer job's, every ``--audit-interval-seconds``), reads the log's size, and keeps the newest
``CACHE`` events decoded in memory, so watchers that keep up share one read and one decoding of each
event. A watcher further behind reads its pages from the database itself. No stream holds a queue of
its own: a watcher that reads slowly only lags, and the servicer closes a stream whose caller takes
nothing for ``stall_seconds`` (``WatchFellBehind``), so a forgotten stream does not hold its slot.

Indices have no gap and an index is never given twice, so a watcher's cursor (the next index it wants)
says exactly what it has seen: resuming from it skips and repeats nothing. A pass sequences the
entries committed before it; an entry committed later gets a larger index than every one a watcher has
seen, so "from now" (the head after a pass) misses nothing committed after the call began.

    who watches                        sees
    an auditor or an operator          every event, filtered as asked
    an author (neither of those)       the events of a case they created a proposal in (case_id, or the
                                       case of operation_id, required); another case: NothingAuthored
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from decisionflow_server.foundation.errors import FieldViolation, InvalidRequest, Unavailable
from decisionflow_server.runtime.auth import Principal, Role
from orchestrator.audit_log.feed import Event, EventFilter, FeedSettings, decoded
from orchestrator.audit_log.progress import BATCH
from orchestrator.errors import NothingAuthored, TooManyStreams
from orchestrator.store import OrchestratorStore

logger = logging.getLogger("decisionflow.orchestrator")

# Events kept decoded in memory for the watchers that keep up (about 1 KB each, a proposal up to 370 KB).
CACHE = 4096
# Events a watcher behind the cache reads per query.
PAGE = 200
# An auditor or operator watches every case.
_SEE_ALL = frozenset({Role.AUDITOR, Role.OPERATOR})


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A stream's position while nothing matches: every matching event below next_index was sent."""

    next_index: int
    sent_at: datetime


class EventFeed:
    """The process's reader of the sequenced log, shared by every stream (see the module docstring)."""

    def __init__(
        self,
        store: OrchestratorStore,
        settings: FeedSettings,
        clock: Callable[[], datetime],
        *,
        on_streams: Callable[[int], None] = lambda count: None,
    ) -> None:
        self.settings = settings
        self._store = store
        self._clock = clock
        self._on_streams = on_streams
        self._head = 0
        self._cache: list[Event] = []
        self._cache_start = 0
        self._known = False
        self._open: dict[str, int] = {}
        self._advanced = asyncio.Event()
        self._pass_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def head(self) -> int:
        """The log's size at the last pass: the index the next event will have."""
        return self._head

    @property
    def streams(self) -> int:
        """Streams open in this process."""
        return sum(self._open.values())

    @contextlib.contextmanager
    def stream(self, principal: str) -> Iterator[None]:
        """Hold one of principal's stream slots (TooManyStreams when none is left) while the stream runs,
        and keep the feed's passes running while any stream is open."""
        if self._closing:
            raise Unavailable("the server is shutting down; reconnect to another replica or after the restart")
        held = self._open.get(principal, 0)
        if held >= self.settings.streams_per_principal:
            raise TooManyStreams(principal, self.settings.streams_per_principal)
        self._open[principal] = held + 1
        self._on_streams(self.streams)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="event-feed")
        try:
            yield
        finally:
            left = self._open[principal] - 1
            if left:
                self._open[principal] = left
            else:
                del self._open[principal]
            self._on_streams(self.streams)

    name = "event-feed"

    def start(self) -> None:
        """Nothing to start: passes run while a stream is open (the host's Job protocol)."""

    async def stop(self) -> None:
        """The server is stopping: end every stream now with Unavailable (each watcher reconnects, to
        another replica or after the restart, from its cursor) and stop the passes."""
        self._closing = True
        self._wake_all()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        failing = False
        try:
            while self._open:
                try:
                    await self.refresh()
                    if failing:
                        logger.warning("event feed: reading the audit log again", extra={"service": "orchestrator"})
                    failing = False
                except Exception as exc:  # a database that cannot answer now: the next pass tries again
                    if not failing:
                        logger.warning(
                            "event feed: reading the audit log failed (%s); trying again every %g s",
                            exc,
                            self.settings.poll_seconds,
                            extra={"service": "orchestrator"},
                        )
                    failing = True
                await asyncio.sleep(self.settings.poll_seconds)
        finally:
            self._task = None

    async def refresh(self) -> int:
        """Sequence the entries waiting, read the events since the last pass, wake the watchers they
        concern; return the head."""
        async with self._pass_lock:
            head = self._head if self._known else None
            size, start, events = await asyncio.to_thread(self._advance, head)
            self._publish(size, start, events)
            return self._head

    def _advance(self, head: int | None) -> tuple[int, int, list[Event]]:
        size, waiting = self._store.feed_position()
        while waiting:
            done = self._store.sequence_audit_log(BATCH, None, self._clock())
            size, waiting = done.size, done.sequenced == BATCH
        if head is None or size <= head:
            return size, size, []
        start = max(head, size - CACHE)
        events: list[Event] = []
        while start + len(events) < size:
            read = self._store.events(start + len(events), min(PAGE, size - start - len(events)))
            if not read:
                break
            events.extend(decoded(stored) for stored in read)
        return start + len(events), start, events

    def _publish(self, size: int, start: int, events: list[Event]) -> None:
        if not self._known:
            self._head, self._cache_start, self._known = size, size, True
            return
        if size <= self._head:
            return
        if start != self._cache_start + len(self._cache):
            self._cache, self._cache_start = [], start
        self._cache.extend(events)
        if len(self._cache) > CACHE:
            drop = len(self._cache) - CACHE
            del self._cache[:drop]
            self._cache_start += drop
        self._head = size
        self._wake_all()

    def _wake_all(self) -> None:
        advanced, self._advanced = self._advanced, asyncio.Event()
        advanced.set()

    async def read(self, cursor: int) -> tuple[list[Event], int]:
        """The events from cursor up to the head (a page at most), and the cursor after them."""
        head = self._head
        if cursor >= head:
            return [], cursor
        if self._cache_start <= cursor:
            end = min(head, cursor + PAGE)
            return self._cache[cursor - self._cache_start : end - self._cache_start], end
        stored = await asyncio.to_thread(self._store.events, cursor, min(PAGE, head - cursor))
        events = [decoded(one) for one in stored]
        return events, cursor + len(events) if events else head

    async def wait_beyond(self, cursor: int, timeout: float) -> bool:
        """Wait until the head passes cursor; False when timeout seconds went by first; Unavailable once the
        server is stopping."""
        if not self._closing and self._head > cursor:
            return True
        advanced = self._advanced
        try:
            if not self._closing:
                await asyncio.wait_for(advanced.wait(), timeout)
        except TimeoutError:
            return False
        if self._closing:
            raise Unavailable("the server is shutting down; reconnect from the stream's last next_index")
        return True


class Watching:
    """The WatchEvents use case: who may watch what, and the stream of one watcher."""

    def __init__(self, feed: EventFeed, store: OrchestratorStore, clock: Callable[[], datetime]) -> None:
        self._feed = feed
        self._store = store
        self._clock = clock

    async def authorized(self, principal: Principal, wanted: EventFilter) -> EventFilter:
        """The filter principal watches under: as asked for an auditor or operator; an author's narrowed to
        the case they proposed in (InvalidRequest without a case or operation, NothingAuthored for another's)."""
        if principal.has_any(_SEE_ALL):
            return wanted
        if wanted.case_id is None and wanted.operation_id is None:
            raise InvalidRequest(
                [
                    FieldViolation(
                        "case_id",
                        "an author watches the cases they proposed in: name one (or an operation of one); "
                        "the auditor and operator roles watch every case",
                    )
                ]
            )
        case_id = await asyncio.to_thread(
            self._store.case_of_author, principal.name, wanted.case_id, wanted.operation_id
        )
        if case_id is None:
            raise NothingAuthored(case_id=wanted.case_id, operation_id=wanted.operation_id)
        return dataclasses.replace(wanted, case_id=case_id)

    async def watch(
        self, principal: Principal, wanted: EventFilter, start_index: int, from_now: bool
    ) -> AsyncIterator[Event | Heartbeat]:
        """The stream: a heartbeat at its start index, then every matching event from it on in index
        order, with a heartbeat whenever nothing was sent for the heartbeat interval, until cancelled."""
        allowed = await self.authorized(principal, wanted)
        feed, every = self._feed, self._feed.settings.heartbeat_seconds
        with feed.stream(principal.name):
            head = await feed.refresh()
            cursor = head if from_now else start_index
            yield Heartbeat(cursor, self._clock())
            sent = time.monotonic()
            while True:
                if cursor < feed.head:
                    events, cursor = await feed.read(cursor)
                    for event in events:
                        if allowed.matches(event):
                            yield event
                            sent = time.monotonic()
                    if time.monotonic() - sent < every:
                        continue
                elif await feed.wait_beyond(cursor, max(0.0, every - (time.monotonic() - sent))):
                    continue
                yield Heartbeat(cursor, self._clock())
                sent = time.monotonic()
